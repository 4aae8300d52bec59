//! A stranger's flood of an agent's gossip port from several loopback
//! addresses: junk datagrams, streams that announce huge frames, streams
//! that trickle. Shared by the flood test and `agent_bench flood`.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Source addresses of the flood (all of 127/8 is this host's loopback).
pub const SOURCES: [[u8; 4]; 3] = [[127, 0, 0, 2], [127, 0, 0, 3], [127, 0, 0, 4]];

/// A TCP connection to `to` from `src`, if it connects within 500 ms.
fn tcp_from(src: [u8; 4], to: SocketAddr) -> Option<TcpStream> {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    sock.bind(&SocketAddr::from((src, 0)).into()).ok()?;
    sock.connect_timeout(&to.into(), Duration::from_millis(500))
        .ok()?;
    Some(sock.into())
}

/// Counters of what the flood sent.
#[derive(Debug, Default)]
pub struct Sent {
    /// Junk datagrams.
    pub datagrams: AtomicU64,
    /// Their bytes.
    pub datagram_bytes: AtomicU64,
    /// Streams that announced a 32 MiB frame.
    pub big_frames: AtomicU64,
    /// Junk bytes sent on those streams.
    pub stream_bytes: AtomicU64,
    /// Trickling streams opened.
    pub trickles: AtomicU64,
}

/// Starts the flood of `to`, three threads per source address, counting
/// into `sent` until `stop` is set.
pub fn start_flood(
    to: SocketAddr,
    stop: &Arc<AtomicBool>,
    sent: &Arc<Sent>,
) -> Vec<JoinHandle<()>> {
    let mut threads = Vec::new();
    for src in SOURCES {
        // Junk datagrams, as fast as a thread sends them.
        let (s, c) = (stop.clone(), sent.clone());
        threads.push(std::thread::spawn(move || {
            let udp = UdpSocket::bind(SocketAddr::from((src, 0))).unwrap();
            let junk = [0x5au8; 1200];
            let mut n = 0u64;
            while !s.load(Ordering::Relaxed) {
                if udp.send_to(&junk, to).is_ok() {
                    c.datagrams.fetch_add(1, Ordering::Relaxed);
                    c.datagram_bytes.fetch_add(1200, Ordering::Relaxed);
                }
                n += 1;
                if n.is_multiple_of(256) {
                    std::thread::sleep(Duration::from_millis(1)); // pacing
                }
            }
        }));
        // Streams announcing a 32 MiB frame, then sending it as junk.
        let (s, c) = (stop.clone(), sent.clone());
        threads.push(std::thread::spawn(move || {
            let chunk = vec![0xa5u8; 1 << 20];
            while !s.load(Ordering::Relaxed) {
                if let Some(mut t) = tcp_from(src, to) {
                    let _ = t.write_all(&(32u32 << 20).to_be_bytes());
                    c.big_frames.fetch_add(1, Ordering::Relaxed);
                    for _ in 0..32 {
                        if t.write_all(&chunk).is_err() || s.load(Ordering::Relaxed) {
                            break;
                        }
                        c.stream_bytes.fetch_add(1 << 20, Ordering::Relaxed);
                    }
                }
            }
        }));
        // Streams that announce a frame and trickle: they try to hold slots.
        let (s, c) = (stop.clone(), sent.clone());
        threads.push(std::thread::spawn(move || {
            let mut held = Vec::new();
            while !s.load(Ordering::Relaxed) {
                if let Some(mut t) = tcp_from(src, to) {
                    let _ = t.write_all(&(60_000u32).to_be_bytes());
                    held.push(t);
                    c.trickles.fetch_add(1, Ordering::Relaxed);
                }
                if held.len() > 40 {
                    held.remove(0);
                }
                for t in &mut held {
                    let _ = t.write_all(&[0]);
                }
                std::thread::sleep(Duration::from_millis(20)); // the trickle's pace
            }
        }));
    }
    threads
}
