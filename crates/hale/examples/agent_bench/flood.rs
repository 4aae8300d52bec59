//! `agent_bench flood`: probe round trips of an agent, unflooded then under
//! a junk flood from several source addresses, in one run; its memory and
//! what the flood sent.

use hale_agent::view::MemberState;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hale_agent::keyring::{Key, Keyring};
use hale_core::wire::{cluster_id, Header, Message, Packet, PingTarget};
use hale_core::{Channel, NodeId};

use crate::junk_flood::{start_flood, Sent, SOURCES};
use crate::{percentile, Bench};

/// Sealed pings to `target` every 20 ms for `secs`; the round trips in µs
/// and how many pings went unanswered (within 1 s).
fn probe_rtts(b: &Bench, target: &NodeId, secs: u64) -> (Vec<u64>, u64) {
    let ring = Keyring::new(Key::from_base64(&b.key).unwrap(), Vec::new());
    let sock = UdpSocket::bind("127.0.0.9:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    let me = NodeId::new("rtt-probe", sock.local_addr().unwrap()).unwrap();
    let cluster = cluster_id(&b.cluster);
    let start = Instant::now();
    let mut pending: Vec<(u32, Instant)> = Vec::new();
    let (mut rtts, mut lost, mut seq) = (Vec::new(), 0u64, 0u32);
    let mut buf = [0u8; 2048];
    while start.elapsed() < Duration::from_secs(secs) {
        seq += 1;
        let ping = Packet {
            header: Header {
                version: hale_core::wire::OLDEST,
                speaks: None,
                cluster,
                sender: me.clone(),
                incarnation: 0,
                health: 0,
                generation: 1,
                sent_ms: start.elapsed().as_millis() as u64,
            },
            messages: vec![Message::Ping {
                seq,
                target: PingTarget::Id(target.clone()),
                suspected: None,
            }],
        };
        sock.send_to(&ring.seal(&ping.encode()), target.addr())
            .unwrap();
        pending.push((seq, Instant::now()));
        let until = Instant::now() + Duration::from_millis(20);
        while Instant::now() < until {
            let Ok((n, _)) = sock.recv_from(&mut buf) else {
                continue;
            };
            let Ok(plain) = ring.open(&buf[..n]) else {
                continue;
            };
            let Ok(p) = Packet::<NodeId>::decode(&plain, Channel::Datagram, cluster) else {
                continue;
            };
            for m in p.messages {
                if let Message::Ack { seq: s } = m {
                    if let Some(i) = pending.iter().position(|(q, _)| *q == s) {
                        rtts.push(pending.swap_remove(i).1.elapsed().as_micros() as u64);
                    }
                }
            }
        }
        let before = pending.len();
        pending.retain(|(_, t)| t.elapsed() < Duration::from_secs(1));
        lost += (before - pending.len()) as u64;
    }
    (rtts, lost + pending.len() as u64)
}

fn rtt_line(label: &str, rtts: &mut [u64], lost: u64) {
    rtts.sort_unstable();
    if rtts.is_empty() {
        println!("RESULT   {label}: no answer ({lost} lost)");
        return;
    }
    println!(
        "RESULT   {label}: {} answered, {lost} lost; RTT p50 {} µs, p99 {} µs, max {} µs",
        rtts.len(),
        percentile(rtts, 50.0),
        percentile(rtts, 99.0),
        rtts[rtts.len() - 1]
    );
}

pub fn flood(b: &Bench, secs: u64) {
    b.wait_formed();
    std::thread::sleep(Duration::from_secs(5)); // let joins settle
    let t = &b.agents[0];
    let target = NodeId::new(t.name.clone(), t.gossip).unwrap();
    let rss_before = t.rss_kib();
    let (mut calm, calm_lost) = probe_rtts(b, &target, secs);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Sent::default());
    let flood_start = Instant::now();
    let threads = start_flood(t.gossip, &stop, &sent);
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (s, p, pid) = (stop.clone(), peak.clone(), t.pid());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .unwrap_or_default()
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
                    .unwrap_or(0);
                p.fetch_max(rss, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let (mut flooded, flooded_lost) = probe_rtts(b, &target, secs);
    stop.store(true, Ordering::Relaxed);
    let el = flood_start.elapsed().as_secs_f64();
    for th in threads {
        let _ = th.join();
    }
    let _ = sampler.join();
    let per_s = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / el;
    println!(
        "RESULT flood nodes={} secs={secs} (each phase)",
        b.agents.len()
    );
    rtt_line("unflooded", &mut calm, calm_lost);
    rtt_line("flooded", &mut flooded, flooded_lost);
    println!(
        "RESULT   flood sent: {:.0} junk datagrams/s ({:.1} MB/s), {:.1} 32-MiB frames announced/s, \
         {:.1} MB/s of stream junk, {:.1} trickling streams opened/s, from {} sources",
        per_s(&sent.datagrams),
        per_s(&sent.datagram_bytes) / 1e6,
        per_s(&sent.big_frames),
        per_s(&sent.stream_bytes) / 1e6,
        per_s(&sent.trickles),
        SOURCES.len()
    );
    println!(
        "RESULT   flooded agent RSS: {:.1} MiB before, {:.1} MiB peak",
        rss_before as f64 / 1024.0,
        peak.load(Ordering::Relaxed) as f64 / 1024.0
    );
    let not_alive = b.agents.iter().any(|a| {
        a.members()
            .unwrap_or_default()
            .iter()
            .any(|m| m.state != MemberState::Alive)
    });
    println!("RESULT   any member seen not alive afterwards: {not_alive}");
}
