//! Windows: the nodes' work of a stretch of virtual time on two threads,
//! with exactly the result of running it on one.
//!
//! Every packet takes at least the network's latency `L`, so what a node
//! does at time `t` reaches any other node at `t + L` at the earliest. From
//! an instant `T`, everything due in `[T, T + L)` (packets, probe
//! replies, timers, and any timer a node sets for itself in between) is
//! already decided except by the nodes themselves, one node at a time.
//! Global events (faults, resumes, traffic, samples) end a window.
//!
//! A window runs in two phases:
//!
//! * **A, per node, in parallel.** The window's queued items are taken off
//!   the queue and grouped by node; the nodes are split in two halves, one
//!   per thread. Each node handles its items and its timer firings in the
//!   order the one-thread loop would (by time, then sequence number; a
//!   timer a node re-arms inside the window has a sequence number larger
//!   than any queued item's, so it goes after the items of its instant),
//!   and its output (packets, events, timer changes) is kept aside.
//! * **B, in order, on one thread.** The outputs are replayed in the global
//!   order of the items, as the one-thread loop would have: each packet
//!   routed (the network's random draws), queued with its sequence number,
//!   each event recorded by the observer, each timer re-armed.
//!
//! So the run is the same, draw for draw, event for event, whatever the
//! threads do and whether the window ran on one thread or two: digests do
//! not change. Phase A is most of the work (decoding, the protocol,
//! encoding, and the cache misses on each node's state).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::ops::Range;

use hale_core::{Event, Time};

use super::payload::{self, Sent};
use super::{Ev, Sim, Slot, Status};
use crate::id::SimId;
use crate::timers::Timers;

/// Windows with fewer items than this run on one thread, item by item:
/// below it, handing half to the other thread costs more than it saves.
pub(super) const PARALLEL_MIN: usize = 48;

/// The default most node events a window holds (`SimConfig::window_max`):
/// at 10,000 nodes, 63 MB less at the peak than uncut windows, and no
/// slower (`churn-10k` seed 2 on two threads, side by side: 42.4 / 39.9 s
/// against 48.3 / 41.2 s).
pub(super) const MAX_ITEMS: usize = 4_096;

/// What handling an item did to its node's timer.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rearm {
    /// Unchanged.
    Keep,
    /// Set to this time.
    Set(Time),
    /// Cancelled.
    Remove,
}

/// A node's output, drained after it handled something.
#[derive(Debug, Default)]
pub(super) struct Io {
    pub(super) transmits: Vec<Option<Sent>>,
    pub(super) events: Vec<Event<SimId>>,
    /// Packets are encoded to bytes (`SimConfig::wire_bytes`).
    pub(super) bytes: bool,
}

/// The node-local half of handling: drains node `slot`'s packets and
/// events into `io` and says what becomes of its timer (updating the
/// slot's record of it).
pub(super) fn drain(slot: &mut Slot, now: Time, io: &mut Io) -> Rearm {
    let Some(node) = slot.node.as_mut() else {
        return Rearm::Keep;
    };
    while let Some(t) = payload::poll(node, io.bytes) {
        io.transmits.push(Some(t));
    }
    io.events.extend(std::iter::from_fn(|| node.poll_event()));
    let next = node.poll_timeout().unwrap_or(Time::NEVER);
    if next == slot.timer_at {
        return Rearm::Keep;
    }
    slot.timer_at = next;
    if next == Time::NEVER {
        Rearm::Remove
    } else {
        Rearm::Set(next.max(now))
    }
}

/// A queued event for one node, taken off the queue for a window.
#[derive(Debug)]
struct Item {
    at: Time,
    seq: u64,
    ev: Option<Ev>,
}

/// What an output is the output of.
#[derive(Debug, Clone, Copy)]
enum What {
    /// Item `i` of the window, handled by its node.
    Handled(usize),
    /// Item `i`, which its node did not handle (not up): phase B does what
    /// the network does with it.
    Passive(usize),
    /// A timer firing at `at`; `old` is its sequence number if it was set
    /// before the window (else it is the one phase B gave it).
    Timer { at: Time, old: Option<u64> },
}

/// One handled item or timer firing of a node, with its output.
#[derive(Debug)]
struct Out {
    what: What,
    rearm: Rearm,
    transmits: Range<usize>,
    events: Range<usize>,
}

/// One node's share of a window.
#[derive(Debug, Clone)]
struct Job {
    node: u32,
    /// Its items, as a range of `Window::order`.
    items: Range<usize>,
    /// Its outputs, a range of its lane's `outs` (phase A).
    outs: Range<usize>,
    /// The sequence number phase B gave its latest timer.
    timer_seq: u64,
}

/// One thread's half of a window.
#[derive(Debug, Default)]
struct Lane {
    jobs: Vec<Job>,
    outs: Vec<Out>,
    io: Io,
}

/// What windows reuse from one to the next.
#[derive(Debug, Default)]
pub(super) struct Window {
    items: Vec<Item>,
    /// (node, item index or `u32::MAX` for a timer), sorted.
    keys: Vec<(u32, u32)>,
    /// Item indices grouped by node, each group in time order.
    order: Vec<u32>,
    lanes: [Lane; 2],
    merge: BinaryHeap<Reverse<(Time, u64, u32, u32)>>,
    stack: Vec<usize>,
}

/// What phase A reads besides the nodes.
struct Shared<'a> {
    items: &'a [Item],
    order: &'a [u32],
    timers: &'a Timers,
    end: Time,
}

impl Sim {
    /// Runs every item due before `end` (see the module documentation).
    /// `end` is at most the network latency after the first item, and no
    /// later than the next global event.
    pub(super) fn run_window(&mut self, end: Time) {
        let mut w = std::mem::take(&mut self.window);
        for lane in &mut w.lanes {
            lane.io.bytes = self.cfg.wire_bytes;
        }
        self.take_items(end, &mut w);
        let half = self.slots.len().div_ceil(2) as u32;
        {
            let Window {
                items,
                keys,
                order,
                lanes,
                ..
            } = &mut w;
            let [lo, hi] = lanes;
            split_jobs(keys, order, half, lo, hi);
            let shared = Shared {
                items,
                order,
                timers: &self.timers,
                end,
            };
            let (lo_slots, hi_slots) = self.slots.split_at_mut(half as usize);
            match &self.pool {
                Some(pool) => pool.install(|| {
                    rayon::join(
                        || phase_a(lo_slots, 0, lo, &shared),
                        || phase_a(hi_slots, half, hi, &shared),
                    )
                }),
                None => (
                    phase_a(lo_slots, 0, lo, &shared),
                    phase_a(hi_slots, half, hi, &shared),
                ),
            };
        }
        self.phase_b(&mut w);
        self.window = w;
    }

    /// Takes every queued item due before `end` off the queue, in order, and
    /// lists them and the nodes whose timers are due by node.
    fn take_items(&mut self, end: Time, w: &mut Window) {
        w.items.clear();
        w.keys.clear();
        while let Some(&Reverse((at, seq, idx))) = self.queue.peek() {
            if at >= end {
                break;
            }
            self.queue.pop();
            let ev = self.take_payload(idx);
            let node = match ev {
                Ev::Deliver { to, .. } => to,
                Ev::Refused { node, .. } => node,
                _ => unreachable!("only packets are queued with the nodes' items"),
            };
            w.keys.push((node, w.items.len() as u32));
            w.items.push(Item {
                at,
                seq,
                ev: Some(ev),
            });
        }
        let keys = &mut w.keys;
        self.timers
            .for_each_before(end, &mut w.stack, |node| keys.push((node, u32::MAX)));
        keys.sort_unstable();
    }

    /// Replays the outputs of phase A in the global order of their items.
    fn phase_b(&mut self, w: &mut Window) {
        let Window {
            items,
            lanes,
            merge,
            ..
        } = w;
        merge.clear();
        for (l, lane) in lanes.iter().enumerate() {
            for (j, job) in lane.jobs.iter().enumerate() {
                if let Some((at, seq)) = key(lane, job, job.outs.start, items) {
                    merge.push(Reverse((at, seq, l as u32, j as u32)));
                }
            }
        }
        while let Some(Reverse((at, _, l, j))) = merge.pop() {
            let lane = &mut lanes[l as usize];
            let job = &mut lane.jobs[j as usize];
            let k = job.outs.start;
            job.outs.start += 1;
            let node = job.node;
            let out = &lane.outs[k];
            self.now = at;
            let handled = match out.what {
                What::Handled(_) => true,
                What::Timer { .. } => {
                    self.timers.remove(node);
                    true
                }
                What::Passive(i) => {
                    let ev = items[i].ev.take().expect("item replayed once");
                    self.passive(ev);
                    false
                }
            };
            if handled {
                let (tx, ev) = (out.transmits.clone(), out.events.clone());
                let transmits = lane.io.transmits[tx].iter_mut().filter_map(Option::take);
                if let Some(seq) = self.replay(node, at, transmits, &lane.io.events[ev], out.rearm)
                {
                    job.timer_seq = seq;
                }
            }
            if let Some((at, seq)) = key(lane, &lane.jobs[j as usize], k + 1, items) {
                merge.push(Reverse((at, seq, l, j)));
            }
        }
        for lane in lanes.iter_mut() {
            lane.io.transmits.clear();
            lane.io.events.clear();
        }
    }

    /// What the one-thread loop does with a packet for a node that is not
    /// up (`deliver`'s other branches).
    fn passive(&mut self, ev: Ev) {
        let Ev::Deliver {
            from,
            to,
            channel,
            payload,
        } = ev
        else {
            return; // A refusal for a prober that is not up: missed.
        };
        self.not_up(from, to, channel, payload);
    }
}

/// The key (time, sequence number) of a job's output `k`, if it has one.
fn key(lane: &Lane, job: &Job, k: usize, items: &[Item]) -> Option<(Time, u64)> {
    if k >= job.outs.end {
        return None;
    }
    Some(match lane.outs[k].what {
        What::Handled(i) | What::Passive(i) => (items[i].at, items[i].seq),
        What::Timer { at, old } => (at, old.unwrap_or(job.timer_seq)),
    })
}

/// Groups the sorted keys into one job per node, nodes below `half` in
/// `lo`, the others in `hi`.
fn split_jobs(keys: &[(u32, u32)], order: &mut Vec<u32>, half: u32, lo: &mut Lane, hi: &mut Lane) {
    order.clear();
    lo.jobs.clear();
    hi.jobs.clear();
    let mut k = 0;
    while k < keys.len() {
        let node = keys[k].0;
        let start = order.len();
        while k < keys.len() && keys[k].0 == node {
            if keys[k].1 != u32::MAX {
                order.push(keys[k].1);
            }
            k += 1;
        }
        let job = Job {
            node,
            items: start..order.len(),
            outs: 0..0,
            timer_seq: 0,
        };
        if node < half {
            lo.jobs.push(job);
        } else {
            hi.jobs.push(job);
        }
    }
}

/// Phase A for one lane: each node of `lane.jobs` handles its items and
/// timer firings in order. `slots` starts at node `base`.
fn phase_a(slots: &mut [Slot], base: u32, lane: &mut Lane, sh: &Shared<'_>) {
    lane.outs.clear();
    lane.io.transmits.clear();
    lane.io.events.clear();
    warm(slots, base, lane, sh);
    let Lane { jobs, outs, io } = lane;
    for job in jobs.iter_mut() {
        let slot = &mut slots[(job.node - base) as usize];
        let first = outs.len();
        // The node's pending wake-up: (time, sequence number if set before
        // the window).
        let mut armed = sh.timers.get(job.node).map(|(at, seq)| (at, Some(seq)));
        let mut k = job.items.start;
        loop {
            let item = (k < job.items.end).then(|| sh.order[k] as usize);
            let due = armed.filter(|&(at, _)| at < sh.end);
            let timer_first = due.is_some_and(|(at, old)| {
                item.is_none_or(|i| {
                    (at, old.unwrap_or(u64::MAX)) < (sh.items[i].at, sh.items[i].seq)
                })
            });
            let (tx, ev) = (io.transmits.len(), io.events.len());
            let (what, rearm) = if timer_first {
                let (at, old) = due.expect("a timer is due");
                armed = None;
                // The timer fired: whatever the node asks for next (even
                // this very instant) is a new timer.
                slot.timer_at = Time::NEVER;
                let rearm = if slot.status == Status::Up {
                    if let Some(n) = slot.node.as_mut() {
                        n.handle_timeout(at);
                    }
                    drain(slot, at, io)
                } else {
                    Rearm::Keep
                };
                (What::Timer { at, old }, rearm)
            } else if let Some(i) = item {
                k += 1;
                handle_item(slot, &sh.items[i], i, io)
            } else {
                break;
            };
            match rearm {
                Rearm::Keep => {}
                Rearm::Set(at) => armed = Some((at, None)),
                Rearm::Remove => armed = None,
            }
            outs.push(Out {
                what,
                rearm,
                transmits: tx..io.transmits.len(),
                events: ev..io.events.len(),
            });
        }
        job.outs = first..outs.len();
    }
}

/// A node handles queued item `i` if it is up (`deliver` and the refusal
/// branch of `step`, node-local half).
fn handle_item(slot: &mut Slot, item: &Item, i: usize, io: &mut Io) -> (What, Rearm) {
    let up = slot.status == Status::Up;
    match item.ev.as_ref().expect("item not replayed yet") {
        Ev::Deliver {
            channel, payload, ..
        } if up && slot.node.is_some() => {
            if let Some(n) = slot.node.as_mut() {
                payload::hand_ref(n, item.at, *channel, payload);
            }
            (What::Handled(i), drain(slot, item.at, io))
        }
        Ev::Refused { peer, .. } if up => {
            if let Some(n) = slot.node.as_mut() {
                n.handle_unreachable(item.at, &SimId(*peer));
            }
            (What::Handled(i), drain(slot, item.at, io))
        }
        _ => (What::Passive(i), Rearm::Keep),
    }
}

/// Cache warming for a lane (see `engine/warm.rs`): every node's state,
/// then every sender's record and probe target.
fn warm(slots: &[Slot], base: u32, lane: &Lane, sh: &Shared<'_>) {
    let node = |n: u32| slots[(n - base) as usize].node.as_ref();
    let mut acc = 0u64;
    for job in &lane.jobs {
        if let Some(n) = node(job.node) {
            acc ^= n.warm_state();
        }
    }
    for job in &lane.jobs {
        let Some(n) = node(job.node) else { continue };
        acc ^= n.warm_timeout(sh.end);
        for &i in &sh.order[job.items.clone()] {
            if let Some(Ev::Deliver { from, .. }) = &sh.items[i as usize].ev {
                acc ^= n.warm_receive(&SimId(*from));
            }
        }
    }
    std::hint::black_box(acc);
}
