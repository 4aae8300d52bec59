//! A stranger floods an agent's gossip port from several addresses: junk
//! datagrams, streams that announce huge frames, streams that trickle. The
//! agent's memory stays bounded, nobody suspects it, and `/metrics` counts
//! every refusal by reason.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hale_agent::AgentEvent;

use crate::support::{metric, Cluster};

/// Source addresses of the flood (all of 127/8 is this host's loopback).
const SOURCES: [[u8; 4]; 3] = [[127, 0, 0, 2], [127, 0, 0, 3], [127, 0, 0, 4]];

fn bind_tcp(src: [u8; 4], to: SocketAddr) -> Option<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    sock.bind(&SocketAddr::from((src, 0)).into()).ok()?;
    sock.connect_timeout(&to.into(), Duration::from_millis(500))
        .ok()?;
    Some(sock.into())
}

#[test]
fn a_flood_of_junk_from_several_sources_leaves_memory_bounded_and_suspects_no_one() {
    let c = Cluster::start("flood", 3);
    c.wait_formed(Duration::from_secs(30));
    let target = &c.agents[0];
    let (gossip, name) = (target.gossip, target.name.clone());
    let rss_before = target.rss_kib();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for src in SOURCES {
        // Junk datagrams, as fast as a thread sends them.
        let s = stop.clone();
        threads.push(std::thread::spawn(move || {
            let udp = UdpSocket::bind(SocketAddr::from((src, 0))).unwrap();
            let junk = [0x5au8; 1200];
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                let _ = udp.send_to(&junk, gossip);
                n += 1;
                if n % 256 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            n
        }));
        // Streams announcing a 32 MiB frame, then sending it as junk.
        let s = stop.clone();
        threads.push(std::thread::spawn(move || {
            let chunk = vec![0xa5u8; 1 << 20];
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                if let Some(mut t) = bind_tcp(src, gossip) {
                    let _ = t.write_all(&(32u32 << 20).to_be_bytes());
                    for _ in 0..32 {
                        if t.write_all(&chunk).is_err() || s.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    n += 1;
                }
            }
            n
        }));
        // Streams that announce a frame and trickle: they try to hold slots.
        let s = stop.clone();
        threads.push(std::thread::spawn(move || {
            let mut held = Vec::new();
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                if let Some(mut t) = bind_tcp(src, gossip) {
                    let _ = t.write_all(&(60_000u32).to_be_bytes());
                    held.push(t);
                    n += 1;
                }
                if held.len() > 40 {
                    held.remove(0);
                }
                for t in &mut held {
                    let _ = t.write_all(&[0]);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            n
        }));
    }
    // Twenty seconds of flood: the others keep seeing the target alive.
    let start = Instant::now();
    let mut peak = rss_before;
    while start.elapsed() < Duration::from_secs(20) {
        peak = peak.max(target.rss_kib());
        for a in &c.agents[1..] {
            if let Some(s) = a.state_of(&name) {
                assert_eq!(s, "alive", "{} sees the flooded agent as {s}", a.name);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    let sent: Vec<u64> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let m = target.metrics().unwrap();
    let refused = |kind: &str| {
        metric(
            &m,
            "hale_stream_errors_total",
            &[&format!("kind=\"{kind}\"")],
        )
    };
    let dropped = |r: &str| {
        metric(
            &m,
            "hale_dropped_packets_total",
            &[&format!("reason=\"{r}\"")],
        )
    };
    eprintln!(
        "sent (udp, big, trickle per source): {sent:?}; rss before {rss_before} KiB, peak {peak} KiB; \
         auth_failed {} seal_malformed {} per_source {} budget {} slots {} errors {}",
        dropped("auth_failed"),
        dropped("seal_malformed"),
        refused("in_refused_per_source"),
        refused("in_refused_budget"),
        refused("in_refused"),
        refused("error"),
    );
    // Memory: the stream budget (48 MiB) plus slack, not the 32 MiB × N announced.
    assert!(
        peak < rss_before + 120 * 1024,
        "RSS grew from {rss_before} KiB to {peak} KiB"
    );
    assert!(dropped("auth_failed") + dropped("seal_malformed") > 1000.0);
    assert!(
        refused("in_refused_per_source") > 0.0,
        "no per-source refusal"
    );
    assert!(
        refused("in_refused_budget") + refused("error") > 0.0,
        "no refused or failed big frame"
    );
    // Nobody suspected anyone.
    for a in &c.agents {
        let bad: Vec<_> = a
            .events()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| matches!(e.event, AgentEvent::Suspected { .. } | AgentEvent::Dead(_)))
            .collect();
        assert!(bad.is_empty(), "{}: {bad:?}", a.name);
    }
}
