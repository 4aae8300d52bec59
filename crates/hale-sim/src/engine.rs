//! The simulation engine: N `hale-core` nodes on one virtual clock.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use hale_core::wire::MemberRecord;
use hale_core::wire::WireState;
use hale_core::{Channel, Config, Node, Time};

use crate::id::SimId;
use crate::net::Network;
use crate::observe::Observer;
use crate::timers::Timers;
use payload::{Payload, Sent};

mod faults;
mod payload;
mod warm;
mod window;

/// How the simulated cluster starts.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Nodes at the start.
    pub nodes: u32,
    /// The one seed everything derives from.
    pub seed: u64,
    /// Node configuration; each node gets its own RNG seed derived from `seed`.
    pub node: Config,
    /// Start with every node knowing every other (true), or have them join
    /// through node 0 (false).
    pub warm_start: bool,
    /// The network.
    pub net: Network,
    /// Application messages each node sends per second to random peers.
    pub traffic_rate: f64,
    /// Queue at most this many packets for a frozen node (a socket buffer).
    pub frozen_queue: usize,
    /// Record every round-robin probe visit (costly; for coverage checks).
    pub trace_probes: bool,
    /// Sample bandwidth every this often (for plots).
    pub sample_every: Duration,
    /// Threads to run the nodes on (1 or 2; see `engine/window.rs`). The
    /// run is the same whatever the number.
    pub threads: usize,
    /// With two threads, stretches of at least this many node events run
    /// as windows on both (below it, item by item on one).
    pub window_min: usize,
    /// A window is cut shorter while it holds more node events than this:
    /// a wave of gossip puts a packet from nearly every node in flight at
    /// once, and a window holds each of its packets a second time (its
    /// items and outputs: 60 MB more at 10,000 nodes, uncut). Ending a
    /// window early is always safe (a global event does it).
    pub window_max: usize,
    /// Encode every packet to bytes and decode it at its addressee, as a
    /// real network would (false: hand over the packet and its length, see
    /// `engine/payload.rs`). The run is the same either way.
    pub wire_bytes: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 10,
            seed: 1,
            node: Config::default(),
            warm_start: true,
            net: Network::default(),
            traffic_rate: 0.0,
            frozen_queue: 1024,
            trace_probes: false,
            sample_every: Duration::from_secs(10),
            threads: 1,
            window_min: window::PARALLEL_MIN,
            window_max: window::MAX_ITEMS,
            wire_bytes: false,
        }
    }
}

pub use crate::action::{Action, Status};

#[derive(Debug)]
enum Ev {
    Deliver {
        from: u32,
        to: u32,
        channel: Channel,
        payload: Payload,
    },
    Traffic {
        node: u32,
        gen: u64,
    },
    Resume {
        node: u32,
    },
    /// `peer`'s host answered `node`'s packet: port closed.
    Refused {
        node: u32,
        peer: u32,
    },
    Act(Action),
    Sample,
}

struct Slot {
    node: Option<Node<SimId>>,
    status: Status,
    timer_at: Time,
    traffic_gen: u64,
    queued: Vec<(Channel, Payload)>,
}

/// A simulated cluster.
pub struct Sim {
    cfg: SimConfig,
    now: Time,
    seq: u64,
    /// Packets and refusals: events that one node handles.
    queue: BinaryHeap<Reverse<(Time, u64, usize)>>,
    /// Every other event (faults, resumes, traffic, samples), ordered with
    /// `queue` by (time, sequence number).
    globals: BinaryHeap<Reverse<(Time, u64, usize)>>,
    /// Node wake-ups, ordered with `queue` by (time, sequence number).
    timers: Timers,
    payloads: Vec<Option<Ev>>,
    free: Vec<usize>,
    slots: Vec<Slot>,
    rng: Xoshiro256PlusPlus,
    /// What the nodes reported, against the ground truth.
    pub observer: Observer,
    /// The network, changeable at any time.
    pub net: Network,
    traffic_rate: f64,
    /// Extra processing delay of each node (Slow), indexed by node.
    slow: Vec<Duration>,
    /// Killed processes whose host is up: their port answers "closed".
    closed_ports: rustc_hash::FxHashSet<u32>,
    /// Reused buffers for a node's output between polling and routing.
    io: window::Io,
    /// Cache warming ahead of the loop (`engine/warm.rs`).
    warm: warm::Warm,
    /// Windows run on two threads (`engine/window.rs`).
    window: window::Window,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
}

impl Sim {
    /// Builds the cluster at time zero.
    pub fn new(cfg: SimConfig) -> Sim {
        let mut sim = Sim {
            now: Time::ZERO,
            seq: 0,
            queue: BinaryHeap::new(),
            globals: BinaryHeap::new(),
            timers: Timers::default(),
            payloads: Vec::new(),
            free: Vec::new(),
            slots: Vec::new(),
            rng: Xoshiro256PlusPlus::seed_from_u64(cfg.seed),
            observer: Observer::new(cfg.nodes as usize),
            net: cfg.net.clone(),
            traffic_rate: 0.0,
            slow: Vec::new(),
            closed_ports: Default::default(),
            io: window::Io {
                bytes: cfg.wire_bytes,
                ..Default::default()
            },
            warm: warm::Warm::default(),
            window: window::Window::default(),
            pool: (cfg.threads > 1)
                .then(|| rayon::ThreadPoolBuilder::new().num_threads(2).build().ok())
                .flatten()
                .map(std::sync::Arc::new),
            cfg,
        };
        let n = sim.cfg.nodes;
        let records: Vec<MemberRecord<SimId>> = (0..n)
            .map(|i| MemberRecord {
                id: SimId(i),
                incarnation: 0,
                state: WireState::Alive,
                meta: Box::default(),
            })
            .collect();
        let mut nodes = sim.build_nodes(&records);
        for (i, node) in (0..n).zip(nodes.drain(..)) {
            sim.slots.push(Slot {
                node: Some(node),
                status: Status::Up,
                timer_at: Time::NEVER,
                traffic_gen: 0,
                queued: Vec::new(),
            });
            sim.observer.node_added(i, Time::ZERO);
            sim.after_io(i);
        }
        sim.set_traffic(sim.cfg.traffic_rate);
        sim.push(Time::ZERO + sim.cfg.sample_every, Ev::Sample);
        sim
    }

    /// Builds the initial nodes. A warm start restores every record into
    /// every node (N² work: about half a minute of CPU at N = 10,000), so it
    /// is spread over the machine's cores; each node derives only from its
    /// own seed, so the result does not depend on the number of threads.
    fn build_nodes(&self, records: &[MemberRecord<SimId>]) -> Vec<Node<SimId>> {
        let n = self.cfg.nodes;
        // The snapshot's view-hash shares, hashed once rather than by each
        // node (10^8 hashes at N = 10,000).
        let sums = self
            .cfg
            .warm_start
            .then(|| hale_core::SnapshotSums::of(records));
        let build = |i: u32| {
            let mut node = self.make_node(i);
            if let Some(sums) = &sums {
                node.restore_summed(Time::ZERO, records, sums);
                while node.poll_event().is_some() {}
            } else if i > 0 {
                node.join(Time::ZERO, [SimId(0)]);
            }
            node
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, std::num::NonZeroUsize::get)
            .min(8);
        if !self.cfg.warm_start || n < 256 || threads < 2 {
            return (0..n).map(build).collect();
        }
        let chunk = n.div_ceil(threads as u32);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads as u32)
                .map(|t| {
                    let build = &build;
                    scope.spawn(move || {
                        let lo = t * chunk;
                        let hi = ((t + 1) * chunk).min(n);
                        (lo..hi).map(build).collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("node builder thread panicked"))
                .collect()
        })
    }

    fn make_node(&self, i: u32) -> Node<SimId> {
        let mut c = self.cfg.node.clone();
        c.rng_seed = self
            .cfg
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(u64::from(i).wrapping_mul(0xbf58_476d_1ce4_e5b9))
            ^ u64::from(i);
        c.trace_probes = self.cfg.trace_probes;
        // A restarted node starts later, so its generation is larger (replay
        // protection tells its packets from its previous run's).
        c.generation = self.now.as_nanos() / 1_000_000 + 1;
        let mut node = Node::new(SimId(i), c, self.now).expect("simulator node config is valid");
        // Every simulated node is this build: they write what a cluster of
        // it negotiates (an agent's runtime, from the ranges its members
        // publish), the newest version of their range.
        node.set_wire_version(node.wire_versions().max);
        node
    }

    /// The current virtual time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Nodes ever created.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// A node's state machine, unless it crashed.
    pub fn node(&self, i: u32) -> Option<&Node<SimId>> {
        self.slots.get(i as usize).and_then(|s| s.node.as_ref())
    }

    /// A node's ground-truth status.
    pub fn status(&self, i: u32) -> Status {
        self.slots[i as usize].status
    }

    /// Schedules `action` at `at`.
    pub fn schedule(&mut self, at: Time, action: Action) {
        self.push(at.max(self.now), Ev::Act(action));
    }

    /// Queues `ev` at `at`: packets and refusals with the nodes' own
    /// events, anything else with the global ones.
    fn push(&mut self, at: Time, ev: Ev) {
        let queue = match ev {
            Ev::Deliver { .. } | Ev::Refused { .. } => &mut self.queue,
            _ => &mut self.globals,
        };
        let idx = match self.free.pop() {
            Some(i) => {
                self.payloads[i] = Some(ev);
                i
            }
            None => {
                self.payloads.push(Some(ev));
                self.payloads.len() - 1
            }
        };
        self.seq += 1;
        queue.push(Reverse((at, self.seq, idx)));
    }

    /// Runs every event up to and including `until`.
    pub fn run_until(&mut self, until: Time) {
        match self.pool.clone() {
            Some(pool) => pool.install(|| self.run_loop(until)),
            None => self.run_loop(until),
        }
        self.now = self.now.max(until);
    }

    fn run_loop(&mut self, until: Time) {
        loop {
            let global = self.globals.peek().map(|Reverse((t, seq, _))| (*t, *seq));
            let packet = self.queue.peek().map(|Reverse((t, seq, _))| (*t, *seq));
            let timer = self.timers.peek().map(|(t, seq, _)| (t, seq));
            let timer_first = timer.is_some_and(|t| packet.is_none_or(|p| t < p));
            let local = if timer_first { timer } else { packet };
            let global_first = global.is_some_and(|g| local.is_none_or(|l| g < l));
            if global_first {
                let Some(Reverse((t, _, idx))) = self.globals.peek().copied() else {
                    break;
                };
                if t > until {
                    break;
                }
                self.globals.pop();
                self.now = t;
                let ev = self.take_payload(idx);
                self.step(ev);
                continue;
            }
            let Some((t, _)) = local else {
                break;
            };
            if t > until {
                break;
            }
            if t >= self.warm.until && self.plan(t, global.map(|g| g.0), until) {
                continue;
            }
            self.now = t;
            if timer_first {
                let (_, _, node) = self.timers.pop().expect("a timer is due");
                self.timer(node);
            } else {
                let Some(Reverse((_, _, idx))) = self.queue.pop() else {
                    break;
                };
                let ev = self.take_payload(idx);
                self.step(ev);
            }
        }
    }

    fn take_payload(&mut self, idx: usize) -> Ev {
        let ev = self.payloads[idx].take().expect("event payload present");
        self.free.push(idx);
        ev
    }

    /// At `t`, the first node event after the last window: warms the caches
    /// for what is due until the next window's end and, when that is enough
    /// work for two threads, runs it as a window (true).
    fn plan(&mut self, t: Time, global: Option<Time>, until: Time) -> bool {
        let latency = self.net.latency;
        if latency.is_zero() {
            // Packets can arrive at once: no windows, only warming.
            self.warm(t + warm::HORIZON);
            return false;
        }
        let mut end = t + latency;
        if let Some(g) = global {
            end = end.min(g);
        }
        if until < end {
            end = until + Duration::from_nanos(1);
        }
        let mut n = self.collect(end);
        // Halved until it holds at most `window_max` (see `SimConfig`).
        while self.pool.is_some() && n > self.cfg.window_max && end > t + Duration::from_nanos(1) {
            end = t + end.saturating_since(t) / 2;
            n = self.collect(end);
        }
        if self.pool.is_some() && n >= self.cfg.window_min {
            self.run_window(end);
            self.warm.until = end;
            return true;
        }
        self.touch();
        false
    }

    /// Node `node`'s wake-up is due.
    fn timer(&mut self, node: u32) {
        // The timer fired: whatever the node asks for next (even this very
        // instant) is a new timer.
        self.slots[node as usize].timer_at = Time::NEVER;
        if self.slots[node as usize].status == Status::Up {
            self.with_node(node, Node::handle_timeout);
        }
    }

    /// Runs for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Deliver {
                from,
                to,
                channel,
                payload,
            } => self.deliver(from, to, channel, payload),
            Ev::Refused { node, peer } => {
                // A frozen or stalled prober misses it.
                if self.slots[node as usize].status == Status::Up {
                    self.with_node(node, |n, now| n.handle_unreachable(now, &SimId(peer)));
                }
            }
            Ev::Traffic { node, gen } => self.traffic(node, gen),
            Ev::Resume { node } => self.resume(node),
            Ev::Act(a) => self.act(a),
            Ev::Sample => {
                let view: Vec<Option<&Node<SimId>>> = self
                    .slots
                    .iter()
                    .map(|s| s.node.as_ref().filter(|_| s.status == Status::Up))
                    .collect();
                self.observer.sample(self.now, &view);
                self.push(self.now + self.cfg.sample_every, Ev::Sample);
            }
        }
    }

    fn deliver(&mut self, from: u32, to: u32, channel: Channel, payload: Payload) {
        let now = self.now;
        let slot = &mut self.slots[to as usize];
        if slot.status != Status::Up {
            self.not_up(from, to, channel, payload);
            return;
        }
        let Some(n) = slot.node.as_mut() else {
            return;
        };
        payload::hand(n, now, channel, payload);
        self.after_io(to);
    }

    /// A packet for a node that is not up: queued while it is frozen or
    /// stalled, refused by the host of a killed process, else lost.
    fn not_up(&mut self, from: u32, to: u32, channel: Channel, payload: Payload) {
        let cap = self.cfg.frozen_queue;
        let slot = &mut self.slots[to as usize];
        match slot.status {
            // Up but without state: nothing receives it.
            Status::Up => {}
            Status::Frozen(_) | Status::Stalled(_) => {
                if slot.queued.len() < cap {
                    slot.queued.push((channel, payload));
                }
            }
            Status::Crashed if self.closed_ports.contains(&to) => {
                // The host answers for its dead process: port unreachable
                // (datagram), or a reset (stream), back along the path.
                if let Some(d) = self.net.route(&mut self.rng, to, from, Channel::Datagram) {
                    let at = self.now + d;
                    self.push(
                        at,
                        Ev::Refused {
                            node: from,
                            peer: to,
                        },
                    );
                }
            }
            Status::Crashed | Status::Left => {}
        }
    }

    /// Routes what node `i` wants to send, records its events, re-arms its
    /// timer. The node is borrowed in place (moving it out and back would
    /// copy its 1.2 KB state twice per event).
    fn after_io(&mut self, i: u32) {
        let now = self.now;
        let mut io = std::mem::take(&mut self.io);
        let rearm = window::drain(&mut self.slots[i as usize], now, &mut io);
        let transmits = io.transmits.iter_mut().filter_map(Option::take);
        self.replay(i, now, transmits, &io.events, rearm);
        io.transmits.clear();
        io.events.clear();
        self.io = io;
    }

    /// The global half of [`Sim::after_io`], for what node `i` output at
    /// `now`: routes its packets (the network's random draws), records its
    /// events, re-arms its timer. Returns the timer's new sequence number.
    fn replay(
        &mut self,
        i: u32,
        now: Time,
        transmits: impl Iterator<Item = Sent>,
        events: &[hale_core::Event<SimId>],
        rearm: window::Rearm,
    ) -> Option<u64> {
        let n_slots = self.slots.len();
        for t in transmits {
            let to = t.to.0;
            if to as usize >= n_slots {
                continue;
            }
            if let Some(delay) = self.net.route(&mut self.rng, i, to, t.channel) {
                let extra = self.slow.get(to as usize).copied().unwrap_or_default();
                let ev = Ev::Deliver {
                    from: i,
                    to,
                    channel: t.channel,
                    payload: t.payload,
                };
                self.push(now + delay + extra, ev);
            }
        }
        if !events.is_empty() {
            let truth = Truth {
                statuses: &self.slots,
                net: &self.net,
            };
            for e in events {
                self.observer.record(now, i, e, &truth);
            }
        }
        match rearm {
            window::Rearm::Keep => None,
            window::Rearm::Remove => {
                self.timers.remove(i);
                None
            }
            window::Rearm::Set(at) => {
                self.seq += 1;
                self.timers.set(i, at, self.seq);
                Some(self.seq)
            }
        }
    }

    fn truth(&self) -> Truth<'_> {
        Truth {
            statuses: &self.slots,
            net: &self.net,
        }
    }

    /// Sets the application traffic rate (messages per second per node).
    pub fn set_traffic(&mut self, rate: f64) {
        self.traffic_rate = rate.max(0.0);
        for i in 0..self.slots.len() as u32 {
            self.slots[i as usize].traffic_gen += 1;
            if self.traffic_rate > 0.0 {
                let gen = self.slots[i as usize].traffic_gen;
                let at = self.now + self.exp_interval();
                self.push(at, Ev::Traffic { node: i, gen });
            }
        }
    }

    fn exp_interval(&mut self) -> Duration {
        let u: f64 = self.rng.random_range(1e-12..1.0);
        Duration::from_secs_f64(-u.ln() / self.traffic_rate)
    }

    /// One application request from `i` to a random peer, and its response.
    fn traffic(&mut self, i: u32, gen: u64) {
        if self.slots[i as usize].traffic_gen != gen || self.traffic_rate <= 0.0 {
            return;
        }
        let at = self.now + self.exp_interval();
        self.push(at, Ev::Traffic { node: i, gen });
        if self.slots[i as usize].status != Status::Up || self.slots.len() < 2 {
            return;
        }
        let mut j = self.rng.random_range(0..self.slots.len() as u32 - 1);
        if j >= i {
            j += 1;
        }
        if self.slots[j as usize].status != Status::Up {
            return;
        }
        let now = self.now;
        if self
            .net
            .route(&mut self.rng, i, j, Channel::Datagram)
            .is_some()
        {
            if let Some(n) = self.slots[j as usize].node.as_mut() {
                n.note_traffic(now, &SimId(i));
            }
            if self
                .net
                .route(&mut self.rng, j, i, Channel::Datagram)
                .is_some()
            {
                if let Some(n) = self.slots[i as usize].node.as_mut() {
                    n.note_traffic(now, &SimId(j));
                }
            }
        }
    }

    /// Runs `f` on node `i` (if it has state) at the current time, then
    /// routes what it sent. For driving API calls such as `set_metadata`.
    pub fn with_node<R>(
        &mut self,
        i: u32,
        f: impl FnOnce(&mut Node<SimId>, Time) -> R,
    ) -> Option<R> {
        let now = self.now;
        let r = self
            .slots
            .get_mut(i as usize)?
            .node
            .as_mut()
            .map(|n| f(n, now));
        self.after_io(i);
        r
    }

    /// Nodes that are up (not crashed, frozen, stalled or gone).
    pub fn up_nodes(&self) -> Vec<u32> {
        (0..self.slots.len() as u32)
            .filter(|&i| self.slots[i as usize].status == Status::Up)
            .collect()
    }

    /// Nodes that are up and not cut off from the network in any way: the
    /// observers whose views the checks and reports hold to account.
    pub fn healthy_nodes(&self) -> Vec<u32> {
        let mut up = self.up_nodes();
        up.retain(|&i| !self.is_impaired(i));
        up
    }

    /// Statuses of every node, for checks.
    pub fn statuses(&self) -> Vec<Status> {
        self.slots.iter().map(|s| s.status).collect()
    }

    /// Whether a node is cut off from the network in some way right now.
    pub fn is_impaired(&self, i: u32) -> bool {
        self.truth().impaired(i)
    }
}

/// The ground truth at one instant, for classifying what nodes report.
pub struct Truth<'a> {
    statuses: &'a [Slot],
    net: &'a Network,
}

impl Truth<'_> {
    /// Ground-truth status of node `i`.
    pub fn status(&self, i: u32) -> Status {
        self.statuses
            .get(i as usize)
            .map_or(Status::Crashed, |s| s.status)
    }

    /// Whether the network treats node `i` specially (blocked or lossy beyond the global loss).
    pub fn impaired(&self, i: u32) -> bool {
        self.net.ingress_blocked.contains(&i)
            || self.net.egress_blocked.contains(&i)
            || self.net.ingress_loss.get(&i).is_some_and(|p| *p > 0.5)
            || self.net.egress_loss.get(&i).is_some_and(|p| *p > 0.5)
    }

    /// Whether node `i` should be considered healthy: up or in a short
    /// stall, and not cut off by the network.
    pub fn healthy(&self, i: u32) -> bool {
        matches!(self.status(i), Status::Up | Status::Stalled(_)) && !self.impaired(i)
    }

    /// Whether two nodes are in the same partition group.
    pub fn same_side(&self, a: u32, b: u32) -> bool {
        self.net.group.get(&a).copied().unwrap_or(0) == self.net.group.get(&b).copied().unwrap_or(0)
    }
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("nodes", &self.slots.len())
            .finish()
    }
}
