//! Cache warming ahead of the event loop.
//!
//! Nearly every event is handled by a node whose state left the caches
//! since its previous event, and a packet reads its sender's record in a
//! table of thousands: with 10,000 nodes, most of a run was the processor
//! waiting on memory, one miss at a time. The next events are known, though:
//! every packet takes at least the network's latency, so the queue already
//! holds everything due in the next fraction of a millisecond. Before the
//! loop reaches them, [`Sim::warm`] reads what they will read, all at once,
//! so that the misses overlap: first every addressee's own state, then
//! every sender's record (the second depends on the first).
//!
//! It only reads. Which events run, in which order, with which random
//! draws, is untouched: digests are the same with or without it.

use std::cmp::Reverse;
use std::time::Duration;

use hale_core::Time;

use super::{Ev, Sim};
use crate::id::SimId;

/// No sender: a timer.
const TIMER: u32 = u32::MAX;

/// How far ahead to warm: about a hundred events at 10,000 nodes, a dozen
/// at 1,000 (more would be evicted again before use).
pub(super) const HORIZON: Duration = Duration::from_micros(500);

/// What the warming pass reuses between calls.
#[derive(Debug, Default)]
pub(super) struct Warm {
    /// Events are warmed (or run in a window) up to here (exclusive).
    pub(super) until: Time,
    /// (node, sender or [`TIMER`]) of each event to warm.
    list: Vec<(u32, u32)>,
    stack: Vec<usize>,
}

impl Sim {
    /// Reads ahead what the events due before `until` will read (see the
    /// module documentation).
    pub(super) fn warm(&mut self, until: Time) {
        self.collect(until);
        self.touch();
    }

    /// Lists the events due before `until` (packets and timers), and
    /// returns how many there are.
    pub(super) fn collect(&mut self, until: Time) -> usize {
        let Sim {
            queue,
            payloads,
            timers,
            warm,
            ..
        } = self;
        let Warm { list, stack, .. } = warm;
        list.clear();
        // The event heap, in storage order: a subtree's events are all at or
        // after its root's.
        let heap = queue.as_slice();
        stack.clear();
        stack.push(0);
        while let Some(i) = stack.pop() {
            let Some(&Reverse((at, _, idx))) = heap.get(i) else {
                continue;
            };
            if at >= until {
                continue;
            }
            if let Some(Ev::Deliver { from, to, .. }) = payloads[idx] {
                list.push((to, from));
            }
            stack.push(2 * i + 2);
            stack.push(2 * i + 1);
        }
        timers.for_each_before(until, stack, |node| list.push((node, TIMER)));
        warm.until = until;
        warm.list.len()
    }

    /// Reads what the listed events will read, all at once.
    pub(super) fn touch(&self) {
        let list = &self.warm.list;
        let until = self.warm.until;
        let node = |n: u32| self.slots.get(n as usize).and_then(|s| s.node.as_ref());
        let mut acc = 0u64;
        for &(n, _) in list {
            if let Some(node) = node(n) {
                acc ^= node.warm_state();
            }
        }
        for &(n, sender) in list {
            if let Some(node) = node(n) {
                acc ^= if sender == TIMER {
                    node.warm_timeout(until)
                } else {
                    node.warm_receive(&SimId(sender))
                };
            }
        }
        std::hint::black_box(acc);
    }
}
