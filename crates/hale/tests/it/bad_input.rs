//! Hostile input on an agent's gossip port: the agent stays up, its memory
//! stays bounded and every dropped packet is counted.

use hale_agent::view::MemberState;
use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use hale_agent::runtime::PREAMBLE_AAD;
use hale_agent::{Key, Keyring};
use hale_core::wire::{cluster_id, Header, Message, Packet, PingTarget};
use hale_core::NodeId;
use rand::{Rng, RngCore, SeedableRng};

use crate::support::{call, metric, view, wait_for_every, wait_until, AgentProc, Cluster};

/// Bytes sealing adds (version, nonce, tag).
const SEAL_OVERHEAD: usize = 29;
/// Largest sealed datagram an agent accepts.
const MAX_SEALED: usize = hale_core::wire::MAX_DATAGRAM + SEAL_OVERHEAD;

/// Every drop the agent counts, whatever the reason.
fn dropped(a: &AgentProc) -> f64 {
    metric(&a.metrics().unwrap(), "hale_dropped_packets_total", &[])
}

/// Datagrams the kernel dropped on the socket bound to `port` (receive
/// buffer full), from `/proc/net/udp`.
fn kernel_drops(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let want = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.ends_with(&want))
        })
        .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
        .sum()
}

fn plain_packet(cluster: &str, from: &NodeId, msg: Message<NodeId>) -> Vec<u8> {
    Packet {
        header: Header {
            version: hale_core::wire::OLDEST,
            speaks: None,
            cluster: cluster_id(cluster),
            sender: from.clone(),
            incarnation: 0,
            health: 0,
            generation: 1,
            sent_ms: 0,
        },
        messages: vec![msg],
    }
    .encode()
}

/// One hostile datagram of each kind, cycling; `None` marks a replay, which is
/// valid and not dropped.
struct Garbage {
    rng: rand_xoshiro::Xoshiro256PlusPlus,
    keyring: Keyring,
    valid_ping: Vec<u8>,
    valid_plain: Vec<u8>,
    foreign: Vec<u8>,
    n: u64,
}

impl Garbage {
    /// The next datagram, and whether the agent should drop it.
    fn next(&mut self) -> (Vec<u8>, bool) {
        self.n += 1;
        let r = &mut self.rng;
        match self.n % 7 {
            // Random bytes of a plausible length.
            0 => {
                let mut b = vec![0u8; r.random_range(1..=MAX_SEALED)];
                r.fill_bytes(&mut b);
                (b, true)
            }
            // Random bytes that look sealed (version 1).
            1 => {
                let mut b = vec![0u8; r.random_range(SEAL_OVERHEAD..=MAX_SEALED)];
                r.fill_bytes(&mut b);
                b[0] = 1;
                (b, true)
            }
            // A genuine sealed packet, truncated.
            2 => {
                let cut = r.random_range(0..self.valid_ping.len());
                (self.valid_ping[..cut].to_vec(), true)
            }
            // Oversize: larger than any hale datagram (and than 1300 bytes).
            3 => {
                let mut b = vec![0u8; r.random_range(1301.max(MAX_SEALED + 1)..=9_000)];
                r.fill_bytes(&mut b);
                b[0] = 1;
                (b, true)
            }
            // Sealed with the right key, but the plaintext is garbage or a
            // truncated packet.
            4 => {
                let b = if self.n.is_multiple_of(2) {
                    let mut b = vec![0u8; r.random_range(0..hale_core::wire::MAX_DATAGRAM)];
                    r.fill_bytes(&mut b);
                    b
                } else {
                    let cut = r.random_range(0..self.valid_plain.len());
                    self.valid_plain[..cut].to_vec()
                };
                (self.keyring.seal(&b), true)
            }
            // Sealed with the right key, for another cluster.
            5 => (self.foreign.clone(), true),
            // The same valid sealed ping again: a replay.
            _ => (self.valid_ping.clone(), false),
        }
    }
}

#[test]
fn an_agent_flooded_with_garbage_datagrams_stays_up_with_bounded_memory_and_counts_every_drop() {
    let c = Cluster::start("baddgram", 3);
    let target = &c.agents[0];
    let keyring = Keyring::new(Key::from_base64(&c.key).unwrap(), Vec::new());
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let me = NodeId::new("garbage-sender", sock.local_addr().unwrap()).unwrap();
    let their_id = NodeId::new(target.name.clone(), target.gossip).unwrap();
    let ping = Message::Ping {
        seq: 7,
        target: PingTarget::Id(their_id),
        suspected: None,
    };
    let mut g = Garbage {
        rng: rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0x4a1e),
        valid_ping: keyring.seal(&plain_packet(&c.cluster, &me, ping.clone())),
        valid_plain: plain_packet(&c.cluster, &me, ping.clone()),
        foreign: keyring.seal(&plain_packet("someone-else", &me, ping)),
        keyring,
        n: 0,
    };
    // Warm up, then measure memory.
    let rss_before = target.rss_kib();
    let drops_before = dropped(target);
    let kernel_before = kernel_drops(target.gossip.port());
    let (mut expected, mut sent) = (0u64, 0u64);
    const TOTAL: u64 = 20_000;
    const BATCH: u64 = 40;
    while sent < TOTAL {
        for _ in 0..BATCH {
            let (bytes, drop) = g.next();
            sock.send_to(&bytes, target.gossip).unwrap();
            sent += 1;
            expected += u64::from(drop);
        }
        // Pace on the agent: wait until it has counted the batch (or the
        // kernel dropped what did not fit in the socket buffer).
        let port = target.gossip.port();
        wait_for_every(
            Duration::from_millis(2),
            Duration::from_secs(20),
            "the agent to count the batch",
            || {
                let seen = dropped(target) - drops_before;
                let lost = kernel_drops(port) - kernel_before;
                (seen as u64 + lost >= expected).then_some(())
            },
        );
    }
    // Every bad datagram was counted by the agent, unless the kernel dropped
    // it first (socket buffer full; the kernel may also have dropped some of
    // the valid replays, hence the inequalities).
    let counted = (dropped(target) - drops_before) as u64;
    let lost = kernel_drops(target.gossip.port()) - kernel_before;
    let what = format!("the agent counted {counted} drops and the kernel {lost}, of {expected} bad datagrams in {sent}");
    assert!(counted <= expected, "{what}");
    assert!(counted + lost >= expected, "{what}");
    assert!(
        lost * 10 < sent,
        "{what}: too many lost to measure anything"
    );
    let m = target.metrics().unwrap();
    for reason in [
        "auth_failed",
        "seal_malformed",
        "oversize_datagram",
        "bad_magic",
        "malformed",
        "foreign_cluster",
    ] {
        let v = metric(
            &m,
            "hale_dropped_packets_total",
            &[&format!("reason=\"{reason}\"")],
        );
        assert!(v > 0.0, "no drops counted as {reason}:\n{m}");
    }
    // The replayed pings were valid, so it answered them.
    let mut buf = [0u8; 2048];
    assert!(
        sock.recv_from(&mut buf).is_ok(),
        "no answer to the replayed pings"
    );
    let rss_after = assert_unharmed(&c, rss_before);
    println!("{what}; RSS {rss_before} -> {rss_after} KiB");
}

/// The first agent is still up, with less than 10 MiB more resident
/// memory than `rss_before`, and every other still sees it alive: its RSS.
fn assert_unharmed(c: &Cluster, rss_before: u64) -> u64 {
    let target = &c.agents[0];
    assert!(call(target.api().health()).is_ok());
    let rss_after = target.rss_kib();
    assert!(
        rss_after < rss_before + 10 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    for a in &c.agents[1..] {
        assert_eq!(
            view(a).unwrap()[&target.name],
            MemberState::Alive,
            "{} lost the target",
            a.name
        );
    }
    rss_after
}

/// Writes `parts` on a new TCP connection to `to`, then closes it.
fn send_raw(to: SocketAddr, parts: &[&[u8]]) {
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).unwrap();
    for p in parts {
        let _ = s.write_all(p);
    }
}

/// `body` as a stream frame: its length (u32, big-endian), then itself.
fn framed(body: &[u8]) -> Vec<u8> {
    [&(body.len() as u32).to_be_bytes()[..], body].concat()
}

fn stream_errors(a: &AgentProc) -> f64 {
    metric(&a.metrics().unwrap(), "hale_stream_errors_total", &[])
}

#[test]
fn an_agent_fed_garbage_stream_frames_stays_up_and_counts_them() {
    let c = Cluster::start("badstream", 3);
    let target = &c.agents[0];
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0x5eed);
    let rss_before = target.rss_kib();
    let (errors_before, drops_before) = (stream_errors(target), dropped(target));
    const ROUNDS: u64 = 100;
    for i in 0..ROUNDS {
        // A length prefix of 4 GiB.
        send_raw(target.gossip, &[&[0xFF; 4], &[0u8; 64]]);
        // A short read: the prefix promises more than is sent.
        send_raw(target.gossip, &[&1000u32.to_be_bytes(), &[1u8; 10]]);
        // Half a length prefix.
        send_raw(target.gossip, &[&[0, 0]]);
        // A random body of the announced length: fails authentication or
        // is not even a sealed frame.
        let mut body = vec![0u8; rng.random_range(1..4096)];
        rng.fill_bytes(&mut body);
        if i % 2 == 0 {
            body[0] = 1;
        }
        send_raw(target.gossip, &[&framed(&body)]);
        // Slow down every few rounds so the inbound limit is not what rejects them.
        if i % 10 == 9 {
            wait_until(Duration::from_secs(20), "the agent to catch up", || {
                stream_errors(target) - errors_before >= 3.0 * (i + 1) as f64
                    && dropped(target) - drops_before >= (i + 1) as f64
            });
        }
    }
    let errors = stream_errors(target) - errors_before;
    let drops = dropped(target) - drops_before;
    assert_eq!(errors as u64, 3 * ROUNDS, "stream errors counted");
    assert_eq!(drops as u64, ROUNDS, "bad frames counted as dropped");
    assert_unharmed(&c, rss_before);
}

#[test]
fn a_first_stream_frame_over_64_kib_is_refused_unless_a_sealed_preamble_opens_the_connection() {
    let c = Cluster::start("preamble", 2);
    let target = &c.agents[0];
    let ring = Keyring::new(Key::from_base64(&c.key).unwrap(), Vec::new());
    let stranger = Keyring::new(Key::generate(), Vec::new());
    let count = |name: &str, label: &str| metric(&target.metrics().unwrap(), name, &[label]);
    let refused = || count("hale_stream_errors_total", "kind=\"in_refused_oversize\"");
    let forged = || count("hale_dropped_packets_total", "reason=\"auth_failed\"");
    let streams_in = || count("hale_streams_in_total", "");
    let ten = Duration::from_secs(10);
    // 200 KiB sealed with the cluster key, its plaintext junk for the core.
    let big = framed(&ring.seal(&vec![0x42u8; 200 * 1024]));
    let preamble = |ring: &Keyring| framed(&ring.seal_with(PREAMBLE_AAD, b""));
    // Alone, as the first frame: refused before it is read.
    let before = refused();
    send_raw(target.gossip, &[&big]);
    wait_until(ten, "the oversize first frame to be refused", || {
        refused() > before
    });
    // After a preamble sealed by a stranger: refused, unread.
    let before = forged();
    send_raw(target.gossip, &[&preamble(&stranger), &big]);
    wait_until(ten, "the forged preamble to be refused", || {
        forged() > before
    });
    // After the cluster's preamble: read, opened and handed to the core.
    let before = streams_in();
    send_raw(target.gossip, &[&preamble(&ring), &big]);
    wait_until(ten, "the large frame to reach the core", || {
        streams_in() > before
    });
    assert_eq!(
        view(&c.agents[1]).unwrap()[&target.name],
        MemberState::Alive
    );
}
