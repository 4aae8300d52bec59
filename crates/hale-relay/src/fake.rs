//! A fake Sentry for tests, benchmarks and drills (not for production): a
//! minimal HTTP/1.1 server on loopback whose behaviour can be switched at
//! run time between the ways a real sink fails.
//!
//! It records what it accepted: envelopes, their event ids and item types,
//! and the client reports inside them.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::dsn::Dsn;
use crate::envelope::line;
use crate::pipeline::lock;

/// How the fake behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Answers 200 at once.
    Up,
    /// Closes every connection at once, before reading (like a closed port
    /// behind a load balancer: the request fails fast).
    Refusing,
    /// Accepts connections and never answers (the incident).
    HalfDead,
    /// Answers 200 after this long.
    Slow(Duration),
    /// Answers 429 with `Retry-After` of this many seconds.
    RateLimiting(u64),
}

/// An envelope the fake accepted.
#[derive(Debug, Clone)]
pub struct Received {
    /// The envelope header's `event_id`.
    pub event_id: Option<String>,
    /// The item types, in order.
    pub item_types: Vec<String>,
    /// The raw envelope.
    pub body: Vec<u8>,
}

#[derive(Debug)]
struct State {
    mode: Mutex<Mode>,
    received: Mutex<Vec<Received>>,
    requests: AtomicU64,
}

/// A running fake Sentry. Stops when dropped.
#[derive(Debug)]
pub struct FakeSentry {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

impl Drop for FakeSentry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeSentry {
    /// Starts on an ephemeral loopback port.
    pub async fn start(mode: Mode) -> std::io::Result<FakeSentry> {
        FakeSentry::start_on("127.0.0.1:0".parse().expect("a valid address"), mode).await
    }

    /// Starts on `addr`.
    pub async fn start_on(addr: SocketAddr, mode: Mode) -> std::io::Result<FakeSentry> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            mode: Mutex::new(mode),
            received: Mutex::new(Vec::new()),
            requests: AtomicU64::new(0),
        });
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    r = listener.accept() => {
                        let Ok((sock, _)) = r else { continue };
                        if st.mode() == Mode::Refusing {
                            drop(sock);
                            continue;
                        }
                        conns.spawn(serve(sock, st.clone()));
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
        });
        Ok(FakeSentry { addr, state, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A DSN for it (key `public`, project 1).
    pub fn dsn(&self) -> Dsn {
        format!("http://public@{}/1", self.addr)
            .parse()
            .expect("a well-formed DSN")
    }

    /// Switches behaviour (connections already hung stay hung).
    pub fn set_mode(&self, mode: Mode) {
        *lock(&self.state.mode) = mode;
    }

    /// Requests seen (answered or not).
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }

    /// Every envelope accepted so far.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.state.received).clone()
    }

    /// Envelopes accepted that carry an `event` or `transaction`.
    pub fn events(&self) -> usize {
        lock(&self.state.received)
            .iter()
            .filter(|r| {
                r.item_types
                    .iter()
                    .any(|t| t == "event" || t == "transaction")
            })
            .count()
    }

    /// Distinct event ids accepted.
    pub fn event_ids(&self) -> HashSet<String> {
        self.received()
            .into_iter()
            .filter_map(|r| r.event_id)
            .collect()
    }

    /// Client reports accepted (their JSON payloads).
    pub fn client_reports(&self) -> Vec<serde_json::Value> {
        let received = self.received();
        received
            .iter()
            .flat_map(|r| items(&r.body))
            .filter(|(ty, _)| ty == "client_report")
            .filter_map(|(_, payload)| serde_json::from_slice(payload).ok())
            .collect()
    }
}

impl State {
    fn mode(&self) -> Mode {
        *lock(&self.mode)
    }
}

/// `(type, payload)` of each item of an envelope (best effort).
pub fn items(body: &[u8]) -> Vec<(String, &[u8])> {
    let mut out = Vec::new();
    let mut rest = line(body).1;
    while !rest.is_empty() {
        let (h, after) = line(rest);
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(h) else {
            break;
        };
        let ty = v["type"].as_str().unwrap_or("").to_owned();
        let (payload, next) = match v["length"].as_u64() {
            Some(n) if (n as usize) <= after.len() => {
                let (payload, next) = after.split_at(n as usize);
                (payload, next.strip_prefix(b"\n").unwrap_or(next))
            }
            _ => line(after),
        };
        out.push((ty, payload));
        rest = next;
    }
    out
}

fn parse_received(body: Vec<u8>) -> Received {
    let head = line(&body).0;
    let event_id = serde_json::from_slice::<serde_json::Value>(head)
        .ok()
        .and_then(|v| v["event_id"].as_str().map(str::to_owned));
    let item_types = items(&body).into_iter().map(|(t, _)| t).collect();
    Received {
        event_id,
        item_types,
        body,
    }
}

/// Serves one connection: HTTP/1.1 with `Content-Length` bodies, keep-alive.
async fn serve(mut sock: TcpStream, st: Arc<State>) {
    let mut buf = Vec::with_capacity(8192);
    loop {
        // Read the head.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if buf.len() > 64 << 10 {
                return;
            }
            if !matches!(sock.read_buf(&mut buf).await, Ok(n) if n > 0) {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + len {
            if !matches!(sock.read_buf(&mut buf).await, Ok(n) if n > 0) {
                return;
            }
        }
        let body = buf[head_end..head_end + len].to_vec();
        buf.drain(..head_end + len);
        st.requests.fetch_add(1, Ordering::Relaxed);
        let reply = match st.mode() {
            Mode::Refusing => return,
            // Hold the connection, answer nothing, ever.
            Mode::HalfDead => std::future::pending().await,
            Mode::RateLimiting(secs) => format!(
                "HTTP/1.1 429 Too Many Requests\r\nretry-after: {secs}\r\ncontent-length: 0\r\n\r\n"
            ),
            Mode::Slow(d) => {
                tokio::time::sleep(d).await;
                accept(&st, body)
            }
            Mode::Up => accept(&st, body),
        };
        if sock.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

fn accept(st: &State, body: Vec<u8>) -> String {
    let r = parse_received(body);
    let answer = format!("{{\"id\":\"{}\"}}", r.event_id.clone().unwrap_or_default());
    lock(&st.received).push(r);
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
        answer.len()
    )
}
