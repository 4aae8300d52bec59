//! An attacker on the network records a member's sealed packets, and once
//! the member has died (frozen, so that only silence can convict it),
//! replays them to everyone, again and again. Replays are dropped and counted, and the death is still
//! declared on time.

use hale_agent::view::MemberState;
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::{metric, view, Cluster};

/// A datagram seen on the host: who sent it, to whom, and its payload.
struct Captured {
    to: SocketAddr,
    payload: Vec<u8>,
}

/// Records every UDP datagram sent from `from_port` on this host (a raw
/// socket sees a copy of each; needs root) until `stop` is set.
fn capture(from_port: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Captured>> {
    // SOCK_RAW (3): socket2 only names it with its "all" feature.
    let mut sock = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::from(3),
        Some(socket2::Protocol::UDP),
    )
    .expect("a raw socket (the test runs as root)");
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::Relaxed) {
            let Ok(n) = sock.read(&mut buf) else {
                continue;
            };
            let ip = &buf[..n];
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            if n < ihl + 8 {
                continue;
            }
            let udp = &ip[ihl..];
            let src = u16::from_be_bytes([udp[0], udp[1]]);
            let dst = u16::from_be_bytes([udp[2], udp[3]]);
            if src != from_port {
                continue;
            }
            let dst_ip = [ip[16], ip[17], ip[18], ip[19]];
            out.push(Captured {
                to: SocketAddr::from((dst_ip, dst)),
                payload: udp[8..].to_vec(),
            });
        }
        out
    })
}

fn dropped_as_replays(m: &str) -> f64 {
    metric(m, "hale_dropped_packets_total", &["reason=\"stale\""])
        + metric(m, "hale_dropped_packets_total", &["reason=\"replayed\""])
}

#[test]
fn a_dead_members_replayed_packets_are_dropped_and_its_death_is_declared_on_time() {
    let c = Cluster::start("replay", 5);
    let victim = &c.agents[4];
    let (name, gossip) = (victim.name.clone(), victim.gossip);
    // Record 4 s of its traffic: pings, acks, gossip to every member.
    let stop = Arc::new(AtomicBool::new(false));
    let recorder = capture(gossip.port(), stop.clone());
    std::thread::sleep(Duration::from_secs(4)); // the recording's length, not a wait for a condition
    stop.store(true, Ordering::Relaxed);
    let captured = recorder.join().unwrap();
    assert!(
        captured.len() > 10,
        "captured only {} datagrams",
        captured.len()
    );
    let before: f64 = c.agents[..4]
        .iter()
        .map(|a| dropped_as_replays(&a.metrics().unwrap()))
        .sum();
    // It dies without a trace: frozen (SIGSTOP), its port still bound, so no
    // probe meets a closed port and only silence can convict. The attacker,
    // from an address of its own (the seal says who sent a packet, not the
    // source address), replays everything it recorded to everyone every
    // 100 ms, its last packets, sent moments before the freeze, first.
    victim.signal(Signal::SIGSTOP);
    let attacker = UdpSocket::bind("127.0.0.1:0").unwrap();
    let killed = Instant::now();
    let replaying = Arc::new(AtomicBool::new(true));
    let replayer = {
        let replaying = replaying.clone();
        let targets: Vec<SocketAddr> = c.agents[..4].iter().map(|a| a.gossip).collect();
        std::thread::spawn(move || {
            let mut sent = 0u64;
            while replaying.load(Ordering::Relaxed) {
                for p in captured.iter().rev() {
                    let _ = attacker.send_to(&p.payload, p.to);
                    // And to the members it was not meant for.
                    for t in &targets {
                        let _ = attacker.send_to(&p.payload, t);
                    }
                    sent += 1 + targets.len() as u64;
                }
                std::thread::sleep(Duration::from_millis(100)); // the replay's pace
            }
            sent
        })
    };
    // Without replay protection every member keeps hearing from it and never
    // probes it. With it: declared dead by every observer, within the
    // silence path's usual time (under 5 s here) plus the probe timeout a
    // replay can buy; 12 s is the bound, well short of "never".
    let observers = &c.agents[..4];
    // What each observer holds of the victim, and its own Lifeguard health
    // (an observer whose health is poor has its accusations discounted, and
    // the verdict waits), said when the bound is missed.
    let state_of_observers = || {
        observers
            .iter()
            .map(|a| {
                let seen = view(a).and_then(|v| v.get(&name).copied());
                let health = a.metrics().map(|m| metric(&m, "hale_local_health", &[]));
                format!("{}: {name} {seen:?}, local health {health:?}", a.name)
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let bound = Duration::from_secs(12);
    let declared = loop {
        let all_dead = observers.iter().all(|a| {
            view(a).is_some_and(|v| v.get(&name).is_some_and(|s| *s == MemberState::Dead))
        });
        if all_dead {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < bound,
            "not every observer declared the replayed member dead within {bound:?}: {}",
            state_of_observers()
        );
        std::thread::sleep(Duration::from_millis(50)); // the poll interval
    };
    // Replay for at least 3 s in all, so that the count below means something.
    if let Some(rest) = Duration::from_secs(3).checked_sub(killed.elapsed()) {
        std::thread::sleep(rest); // the replay's minimum length, not a wait for a condition
    }
    replaying.store(false, Ordering::Relaxed);
    let sent = replayer.join().unwrap();
    let after: f64 = observers
        .iter()
        .map(|a| dropped_as_replays(&a.metrics().unwrap()))
        .sum();
    eprintln!(
        "declared dead by all 4 observers {declared:?} after the kill; \
         {sent} replays sent, {} dropped as replays",
        after - before
    );
    assert!(
        after - before > 100.0,
        "replays dropped: {}",
        after - before
    );
    // Nobody healthy was taken down with it.
    for a in observers {
        let v = view(a).unwrap();
        for other in observers {
            assert_eq!(
                v[&other.name],
                MemberState::Alive,
                "{} sees {}",
                a.name,
                other.name
            );
        }
    }
}
