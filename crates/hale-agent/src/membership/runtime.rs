//! The driver: one task owns the membership core and its sockets.
//!
//! UDP carries probes and gossip; TCP carries full-state syncs and the
//! fallback ping, one length-prefixed sealed frame per connection. Every
//! buffer is bounded: inbound and outbound connections by semaphores, the
//! inbound frame queue by its capacity, the event history by a ring.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{broadcast, mpsc, oneshot, Semaphore};
use tokio::time::Instant;

use hale_core::wire::MAX_DATAGRAM;
use hale_core::{Channel, Event, Node, NodeId, Stats, Time};

use crate::view::{
    event_view, evidence_view, member_view, AgentEvent, EventView, EvidenceView, MemberState,
    MemberView,
};
use hale_keyring::{SharedKeyring, OVERHEAD};

mod counters;
mod seeds;
mod streams;
mod wire;
pub use counters::{Counter, RuntimeCounters};
use streams::{accept_streams, Frame};

/// Events kept for `/v1/events` history.
const EVENT_HISTORY: usize = 2048;
/// Concurrent outbound stream connections.
const MAX_OUT_STREAMS: usize = 32;
/// Concurrent inbound stream connections.
const MAX_IN_STREAMS: usize = 64;
/// Most stream connections read at once from one address.
pub const MAX_IN_PER_SOURCE: usize = 16;
/// Most bytes of stream frames being read or waiting for the driver.
pub const STREAM_BUDGET: usize = 48 * 1024 * 1024;
/// Largest first frame of a connection read before anything on it has
/// authenticated (with a keyring). A larger frame (a full-state sync of a
/// big cluster) follows a small sealed preamble frame on its connection.
pub const FIRST_FRAME_MAX: usize = 64 * 1024;
/// Associated data of the preamble's seal: it never opens as gossip.
pub const PREAMBLE_AAD: &[u8] = b"hale stream preamble v1";
/// Inbound stream frames waiting for the core.
const STREAM_QUEUE: usize = 256;
/// How long a stream connection may take to connect, or to deliver its frame.
const STREAM_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest a graceful leave waits for its announcement to spread.
pub const LEAVE_DRAIN: Duration = Duration::from_secs(2);
/// Probe pings sent at once from their own connected UDP socket (beyond
/// it, pings go out of the main socket, without closed-port evidence).
const MAX_PROBE_SOCKETS: usize = 64;
/// How long a probe socket waits for an ICMP port unreachable (on a LAN it
/// comes back within a round trip; the probe itself times out at 500 ms).
const PROBE_SOCKET_WAIT: Duration = Duration::from_secs(1);
/// Closed-port reports waiting for the driver.
const MAX_REFUSED: usize = 256;

/// Everything the API needs, taken at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// This node first, then every member.
    pub members: Vec<MemberView>,
    /// Core counters.
    pub stats: Stats,
    /// This node's local health score.
    pub local_health: u8,
    /// This node's incarnation.
    pub incarnation: u32,
    /// News waiting to be gossiped.
    pub pending_broadcasts: usize,
    /// Whether this node has left.
    pub left: bool,
    /// The wire versions this node speaks and writes, and its packets by
    /// version.
    pub wire: WireSnapshot,
}

/// The wire versions of a node, for `/metrics` and `/v1/health`.
#[derive(Debug, Clone, Default)]
pub struct WireSnapshot {
    /// The versions it decodes.
    pub speaks: Option<hale_core::Versions>,
    /// The version it writes (to every member not in a new run of an
    /// older one).
    pub writes: u8,
    /// Packets received by version (dropped ones included).
    pub received: std::collections::BTreeMap<u8, u64>,
    /// Packets sent by version.
    pub sent: std::collections::BTreeMap<u8, u64>,
}

/// Requests to the driver task.
#[derive(Debug)]
pub enum Command {
    /// Take a snapshot.
    Snapshot(oneshot::Sender<Snapshot>),
    /// Application traffic from a member (by name).
    NoteTraffic(String),
    /// Join through these addresses.
    Join(Vec<SocketAddr>, oneshot::Sender<()>),
    /// Leave gracefully and stop.
    Leave(oneshot::Sender<()>),
    /// Take new values of the knobs the core changes live (a reload); the
    /// core's refusal changes nothing.
    Retune(
        hale_core::Tuning,
        oneshot::Sender<Result<(), hale_core::ConfigError>>,
    ),
}

/// Shared between the driver and the API.
#[derive(Debug)]
pub struct Shared {
    /// This node.
    id: NodeId,
    /// Runtime counters.
    counters: RuntimeCounters,
    /// Live events.
    events: broadcast::Sender<EventView>,
    /// Recent events.
    history: std::sync::Mutex<VecDeque<EventView>>,
    /// Event sequence numbers (membership and role events share them).
    seq: AtomicU64,
    /// Drill faults in force (freeze drops cluster traffic, quiet ignores
    /// application traffic signals).
    drill: crate::membership::faults::Faults,
    /// Addresses whose port was found closed, for the driver
    /// ([`hale_core::Node::handle_unreachable`]), and its wake-up.
    refused: std::sync::Mutex<Vec<SocketAddr>>,
    refused_wake: tokio::sync::Notify,
    /// Probe sockets open at once.
    probe_sockets: Arc<Semaphore>,
    /// The metadata this member publishes, latest wins: the driver applies
    /// whatever is newest, and no update is lost to a full queue.
    meta: tokio::sync::watch::Sender<Vec<u8>>,
}

impl Shared {
    /// This node.
    pub fn id(&self) -> &NodeId {
        &self.id
    }

    /// The runtime's counters.
    pub fn counters(&self) -> &RuntimeCounters {
        &self.counters
    }

    /// The drill faults in force.
    pub fn drill(&self) -> &crate::membership::faults::Faults {
        &self.drill
    }

    /// Publishes `meta` as this member's metadata (the driver applies the
    /// newest it has been given; never waits).
    pub(crate) fn publish_meta(&self, meta: Vec<u8>) {
        self.meta.send_replace(meta);
    }

    /// A new subscription to live events.
    pub fn subscribe(&self) -> broadcast::Receiver<EventView> {
        self.events.subscribe()
    }

    /// Subscribers to live events now.
    pub fn subscribers(&self) -> usize {
        self.events.receiver_count()
    }

    /// The recent events after sequence number `since`, oldest first.
    pub fn history_since(&self, since: u64) -> Vec<EventView> {
        let h = self.history.lock().expect("history lock");
        h.iter().filter(|e| e.seq > since).cloned().collect()
    }

    /// Records an event in the history and sends it to subscribers.
    pub fn publish(&self, v: EventView) {
        let mut h = self.history.lock().expect("history lock");
        if h.len() >= EVENT_HISTORY {
            h.pop_front();
        }
        h.push_back(v.clone());
        drop(h);
        let _ = self.events.send(v);
    }

    /// The next event sequence number.
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Publishes `event`, observed here, about `member` (None: about this
    /// agent itself).
    pub fn emit(&self, event: crate::view::AgentEvent, member: Option<String>) {
        self.publish(event.stamped(self.next_seq(), self.id.name(), member, None));
    }

    /// A packet to `to` met a closed port: tell the driver.
    fn note_refused(&self, to: SocketAddr) {
        self.counters.bump(Counter::ClosedPorts);
        let mut q = self.refused.lock().expect("refused lock");
        if q.len() < MAX_REFUSED {
            q.push(to);
        }
        drop(q);
        self.refused_wake.notify_one();
    }
}

/// Sends the driver behind `cmds` the request `make(reply)` and waits for
/// its reply (None: the driver has stopped).
pub(crate) async fn ask<T>(
    cmds: &mpsc::Sender<Command>,
    make: impl FnOnce(oneshot::Sender<T>) -> Command,
) -> Option<T> {
    let (tx, rx) = oneshot::channel();
    cmds.send(make(tx)).await.ok()?;
    rx.await.ok()
}

/// Counts one more of what `c` counts.
/// A seed known only by its address: the core addresses it by a placeholder
/// identity; only the address is used to reach it, and the real member
/// replaces it once it answers.
pub fn seed_id(addr: SocketAddr) -> NodeId {
    let name = format!("seed-{}-{}", addr.ip(), addr.port()).replace(':', ".");
    NodeId::new(name, addr).expect("seed placeholder names are valid")
}

/// The task that owns the core: it feeds it time, datagrams, frames and
/// commands, and carries out what it asks.
struct Driver {
    node: Node<NodeId>,
    origin: Instant,
    udp: Arc<UdpSocket>,
    keyring: Option<SharedKeyring>,
    shared: Arc<Shared>,
    out_streams: Arc<Semaphore>,
    /// The evidence of each member the core holds dead.
    evidence: HashMap<String, EvidenceView>,
    /// What the cluster speaks (`runtime/wire.rs`).
    wire: wire::Negotiation,
    /// The seeds, synced with again while missing (`runtime/seeds.rs`).
    seeds: seeds::Seeds,
}

impl Driver {
    fn now(&self) -> Time {
        Time::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }

    fn instant(&self, t: Time) -> Instant {
        self.origin + Duration::from_nanos(t.as_nanos())
    }

    /// Runs until `stop` fires or a leave command completes.
    async fn run(
        mut self,
        mut cmds: mpsc::Receiver<Command>,
        mut frames: mpsc::Receiver<Frame>,
        mut meta: tokio::sync::watch::Receiver<Vec<u8>>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut buf = vec![0u8; 65_536];
        let udp = self.udp.clone();
        loop {
            let deadline = self
                .node
                .poll_timeout()
                .map_or_else(
                    || Instant::now() + Duration::from_secs(3600),
                    |t| self.instant(t),
                )
                .min(self.seeds.deadline());
            tokio::select! {
                _ = stop.changed() => {
                    self.leave_and_drain(&mut frames, &udp, &mut buf).await;
                    return;
                }
                r = udp.recv_from(&mut buf) => {
                    if let Ok((n, _from)) = r {
                        self.on_datagram(&buf[..n]);
                    }
                }
                Some(frame) = frames.recv() => self.on_frame(&frame),
                _ = self.shared.refused_wake.notified() => self.on_refused(),
                Ok(()) = meta.changed() => {
                    let newest = meta.borrow_and_update().clone();
                    let now = self.now();
                    let _ = self.node.set_metadata(now, newest);
                }
                cmd = cmds.recv() => match cmd {
                    Some(Command::Leave(done)) => {
                        self.leave_and_drain(&mut frames, &udp, &mut buf).await;
                        let _ = done.send(());
                        return;
                    }
                    Some(c) => self.on_command(c),
                    None => return,
                },
                _ = tokio::time::sleep_until(deadline) => {
                    let now = self.now();
                    self.node.handle_timeout(now);
                    self.sync_missing_seeds();
                }
            }
            self.flush();
        }
    }

    /// Syncs with each seed missing from the view, when it is time to.
    fn sync_missing_seeds(&mut self) {
        if self.shared.drill.frozen() {
            return;
        }
        for addr in self.seeds.missing(&self.node) {
            tracing::debug!(%addr, "a seed is not a live member: syncing with it");
            self.node.sync_with(seed_id(addr));
        }
    }

    async fn leave_and_drain(
        &mut self,
        frames: &mut mpsc::Receiver<Frame>,
        udp: &UdpSocket,
        buf: &mut [u8],
    ) {
        let now = self.now();
        if self.node.leave(now).is_err() {
            return;
        }
        self.flush();
        let until = Instant::now() + LEAVE_DRAIN;
        while self.node.pending_broadcasts() > 0 && Instant::now() < until {
            let next = self
                .node
                .poll_timeout()
                .map_or(until, |t| self.instant(t).min(until));
            tokio::select! {
                r = udp.recv_from(buf) => { if let Ok((n, _)) = r { self.on_datagram(&buf[..n]); } }
                Some(f) = frames.recv() => self.on_frame(&f),
                _ = tokio::time::sleep_until(next) => { let now = self.now(); self.node.handle_timeout(now); }
            }
            self.flush();
        }
    }

    fn open(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        let Some(k) = &self.keyring else {
            return Some(sealed.to_vec());
        };
        let opened = k.current().open(sealed);
        opened
            .map_err(|e| self.shared.counters.bump(unopened(e)))
            .ok()
    }

    fn on_datagram(&mut self, bytes: &[u8]) {
        if self.shared.drill.frozen() {
            return; // A drill's freeze: deaf to the cluster.
        }
        if bytes.len() > MAX_DATAGRAM + OVERHEAD {
            self.shared.counters.bump(Counter::Oversize);
            return;
        }
        if let Some(plain) = self.open(bytes) {
            let now = self.now();
            let _ = self.node.handle_datagram(now, &plain);
        }
    }

    /// A stream frame, already authenticated and opened by its connection's task.
    fn on_frame(&mut self, frame: &Frame) {
        if self.shared.drill.frozen() {
            return;
        }
        let now = self.now();
        let _ = self.node.handle_stream(now, &frame.plain);
    }

    /// Closed ports found since the last call: evidence for the core.
    fn on_refused(&mut self) {
        let addrs = std::mem::take(&mut *self.shared.refused.lock().expect("refused lock"));
        if addrs.is_empty() || self.shared.drill.frozen() {
            return;
        }
        let now = self.now();
        for addr in addrs {
            if let Some(p) = self.member(|id| id.addr() == addr) {
                tracing::info!(member = %p.name(), "port closed");
                self.node.handle_unreachable(now, &p);
            }
        }
    }

    /// The identity of the first member `which` picks.
    fn member(&self, which: impl Fn(&NodeId) -> bool) -> Option<NodeId> {
        let m = self.node.members().find(|m| which(m.id()))?;
        Some(m.id().clone())
    }

    fn on_command(&mut self, c: Command) {
        let now = self.now();
        match c {
            Command::Snapshot(reply) => {
                let _ = reply.send(self.snapshot(now));
            }
            Command::NoteTraffic(_) if self.shared.drill.ignore_traffic() => {}
            Command::NoteTraffic(name) => {
                if let Some(p) = self.member(|id| id.name() == name) {
                    self.node.note_traffic(now, &p);
                }
            }
            Command::Join(addrs, done) => {
                self.seeds.joined(&addrs);
                self.node.join(now, addrs.into_iter().map(seed_id));
                let _ = done.send(());
            }
            Command::Retune(t, done) => {
                let _ = done.send(self.node.retune(t));
            }
            Command::Leave(_) => {}
        }
    }

    fn snapshot(&self, now: Time) -> Snapshot {
        let me = &self.shared.id;
        let mut members = vec![MemberView {
            name: me.name().to_owned(),
            addr: me.addr().to_string(),
            state: if self.node.has_left() {
                MemberState::Left
            } else {
                MemberState::Alive
            },
            incarnation: self.node.incarnation(),
            health: self.node.local_health(),
            last_heard_ms_ago: Some(0),
            state_for_ms: now.saturating_since(Time::ZERO).as_millis() as u64,
            meta: String::from_utf8_lossy(self.node.metadata()).into_owned(),
            is_self: true,
            evidence: None,
        }];
        let mut others: Vec<MemberView> = self
            .node
            .members()
            .map(|m| {
                let ev = (m.state() == hale_core::MemberState::Dead)
                    .then(|| self.evidence.get(m.id().name()).cloned())
                    .flatten();
                member_view(&m, now, ev)
            })
            .collect();
        others.sort_by(|a, b| a.name.cmp(&b.name));
        members.extend(others);
        Snapshot {
            members,
            stats: self.node.stats().clone(),
            local_health: self.node.local_health(),
            incarnation: self.node.incarnation(),
            pending_broadcasts: self.node.pending_broadcasts(),
            left: self.node.has_left(),
            wire: {
                let (received, sent) = self.node.packets_by_version();
                WireSnapshot {
                    speaks: Some(self.node.wire_versions()),
                    writes: self.node.wire_version(),
                    received,
                    sent,
                }
            },
        }
    }

    /// Sends what the core produced and publishes its events.
    fn flush(&mut self) {
        let frozen = self.shared.drill.frozen();
        while let Some(t) = self.node.poll_transmit() {
            if frozen {
                continue; // A drill's freeze: mute towards the cluster.
            }
            let bytes = match &self.keyring {
                Some(k) => k.current().seal(&t.bytes),
                None => t.bytes,
            };
            let to = t.to.addr();
            match t.channel {
                Channel::Datagram if t.probe && self.send_probe(to, &bytes) => {}
                Channel::Datagram => {
                    if self.udp.try_send_to(&bytes, to).is_err() {
                        self.shared.counters.bump(Counter::SendErrors);
                    }
                }
                Channel::Stream => self.send_stream(to, bytes),
            }
        }
        while let Some(e) = self.node.poll_event() {
            self.keep_evidence(&e);
            self.wire.note(&e);
            if let Some(v) = event_view(self.shared.next_seq(), &self.shared.id, &e) {
                if let AgentEvent::UnsupportedWireVersion {
                    version,
                    speaks,
                    ours,
                } = &v.event
                {
                    tracing::warn!(
                        member = ?v.member, version, speaks = ?speaks, ours = %ours,
                        "dropped a packet in a wire version this agent does not speak: upgrade the older side"
                    );
                } else {
                    tracing::info!(kind = v.event.kind(), member = ?v.member, "membership event");
                }
                self.shared.publish(v);
            }
        }
        let shared = self.shared.clone();
        let reports = self.wire.renegotiate(&mut self.node, |event, member| {
            event.stamped(shared.next_seq(), shared.id.name(), Some(member), None)
        });
        for v in reports {
            self.shared.publish(v);
        }
    }

    /// Keeps the evidence of death verdicts for members the core still
    /// holds dead, and no other: bounded by the core's own forgetting.
    fn keep_evidence(&mut self, e: &Event<NodeId>) {
        match e {
            Event::Dead {
                member, evidence, ..
            } => {
                self.evidence
                    .insert(member.name().to_owned(), evidence_view(evidence));
                let dead: std::collections::HashSet<String> = self
                    .node
                    .members()
                    .filter(|m| m.state() == hale_core::MemberState::Dead)
                    .map(|m| m.id().name().to_owned())
                    .collect();
                self.evidence.retain(|name, _| dead.contains(name.as_str()));
            }
            Event::Joined { member, .. }
            | Event::Recovered { member, .. }
            | Event::Left { member, .. } => {
                self.evidence.remove(member.name());
            }
            _ => {}
        }
    }

    /// Sends a probe's ping from its own UDP socket connected to `to`, so
    /// that an ICMP port unreachable (the process is gone, its host is up)
    /// comes back as ECONNREFUSED; a stalled or frozen process keeps its
    /// port open and never causes one. The ack still comes to the main
    /// socket (members answer the address in the header). False when no
    /// socket could be used: the caller sends it the ordinary way.
    fn send_probe(&self, to: SocketAddr, bytes: &[u8]) -> bool {
        let Ok(permit) = self.shared.probe_sockets.clone().try_acquire_owned() else {
            return false;
        };
        let local = match self.udp.local_addr() {
            Ok(a) if a.is_ipv4() == to.is_ipv4() => SocketAddr::new(a.ip(), 0),
            _ => return false,
        };
        // Sent from the std socket: tokio's `try_send` on a socket the
        // reactor has not yet seen writable refuses without trying. An
        // ICMP error that comes back before the registration is reported
        // by it (epoll reports a pending error on registration).
        let sock = std::net::UdpSocket::bind(local).and_then(|s| {
            s.connect(to)?;
            s.set_nonblocking(true)?;
            s.send(bytes)?;
            UdpSocket::from_std(s)
        });
        let Ok(sock) = sock else {
            return false;
        };
        let shared = self.shared.clone();
        tokio::spawn(async move {
            // An ICMP error sets the socket's pending error (EPOLLERR, not
            // EPOLLIN): wait for error readiness, then take the error.
            let r = tokio::time::timeout(
                PROBE_SOCKET_WAIT,
                sock.ready(tokio::io::Interest::ERROR | tokio::io::Interest::READABLE),
            )
            .await;
            if r.is_ok() {
                if let Ok(Some(e)) = sock.take_error() {
                    if e.kind() == std::io::ErrorKind::ConnectionRefused {
                        shared.note_refused(to);
                    }
                }
            }
            drop(permit);
        });
        true
    }

    fn send_stream(&self, to: SocketAddr, bytes: Vec<u8>) {
        let Ok(permit) = self.out_streams.clone().try_acquire_owned() else {
            self.shared.counters.bump(Counter::StreamsOutDropped);
            return;
        };
        let shared = self.shared.clone();
        // A frame too large to be read before authentication goes after a
        // sealed preamble that authenticates the connection.
        let preamble = self
            .keyring
            .as_ref()
            .filter(|_| bytes.len() > FIRST_FRAME_MAX)
            .map(|k| k.current().seal_with(PREAMBLE_AAD, b""));
        tokio::spawn(async move {
            let r = tokio::time::timeout(STREAM_TIMEOUT, async {
                let mut s = TcpStream::connect(to).await.inspect_err(|e| {
                    if e.kind() == std::io::ErrorKind::ConnectionRefused {
                        // A reset to our connection: the port is closed.
                        shared.note_refused(to);
                    }
                })?;
                if let Some(p) = preamble {
                    s.write_all(&(p.len() as u32).to_be_bytes()).await?;
                    s.write_all(&p).await?;
                }
                s.write_all(&(bytes.len() as u32).to_be_bytes()).await?;
                s.write_all(&bytes).await?;
                s.shutdown().await
            })
            .await;
            if !matches!(r, Ok(Ok(()))) {
                shared.counters.bump(Counter::StreamErrors);
            }
            drop(permit);
        });
    }
}

/// What a seal that does not open counts as.
fn unopened(e: hale_keyring::OpenError) -> Counter {
    match e {
        hale_keyring::OpenError::Auth => Counter::AuthFailed,
        hale_keyring::OpenError::Malformed => Counter::SealMalformed,
    }
}

/// Starts the membership runtime for `node` on its sockets: the driver
/// (the core's clock, datagrams, commands) and the stream acceptor, as
/// tasks of `tasks` that end on `stop` (the acceptor when aborted). Returns
/// where to send commands, and what the driver shares.
pub(crate) fn spawn(
    node: Node<NodeId>,
    udp: UdpSocket,
    tcp: TcpListener,
    keyring: Option<SharedKeyring>,
    tasks: &mut tokio::task::JoinSet<()>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (mpsc::Sender<Command>, Arc<Shared>) {
    let shared = Arc::new(Shared {
        id: node.id().clone(),
        counters: RuntimeCounters::default(),
        events: broadcast::channel(1024).0,
        history: std::sync::Mutex::new(VecDeque::new()),
        seq: AtomicU64::new(0),
        drill: Default::default(),
        refused: Default::default(),
        refused_wake: Default::default(),
        probe_sockets: Arc::new(Semaphore::new(MAX_PROBE_SOCKETS)),
        meta: tokio::sync::watch::channel(Vec::new()).0,
    });
    let (cmd_tx, cmd_rx) = mpsc::channel(256);
    let (frame_tx, frame_rx) = mpsc::channel(STREAM_QUEUE);
    let driver = Driver {
        node,
        origin: Instant::now(),
        udp: Arc::new(udp),
        keyring: keyring.clone(),
        shared: shared.clone(),
        out_streams: Arc::new(Semaphore::new(MAX_OUT_STREAMS)),
        evidence: HashMap::new(),
        wire: wire::Negotiation::default(),
        seeds: seeds::Seeds::new(),
    };
    let meta = shared.meta.subscribe();
    tasks.spawn(driver.run(cmd_rx, frame_rx, meta, stop));
    tasks.spawn(accept_streams(tcp, frame_tx, shared.clone(), keyring));
    (cmd_tx, shared)
}
