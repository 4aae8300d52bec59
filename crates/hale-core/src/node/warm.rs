//! Cache warming: read-only hints a runtime may give a node before handing
//! it work.
//!
//! A simulator running thousands of nodes on one thread spends most of its
//! time waiting for memory: every packet is handled by a node whose state
//! has left the caches since its last packet, and reads the sender's record
//! in a table of thousands. Those loads depend on nothing but the packet's
//! addressee and sender, so a runtime that knows the next few dozen events
//! can issue them all at once, overlapped, before handling any
//! ([`Node::warm_state`] for each node first, then [`Node::warm_receive`]
//! or [`Node::warm_timeout`]). The methods only read; what they return
//! means nothing and is there to be discarded (`std::hint::black_box`), so
//! that the loads are not optimised away.

use super::Node;
use crate::identity::Identity;
use crate::time::{Time, Timer};

impl<I: Identity> Node<I> {
    /// Reads the parts of this node's own state that the receive and timer
    /// paths read first. A hint: changes nothing, returns nothing useful.
    pub fn warm_state(&self) -> u64 {
        self.sh.isolation().warm()
            ^ self.sh.timers().get(Timer::Probe).as_nanos()
            ^ self.sh.stats().datagrams_in
            ^ self.sh.members().len() as u64
            ^ self.probing.warm().0
            ^ self.monitors.monitored().len() as u64
            ^ self.sh.out().queued() as u64
            ^ u64::from(self.sh.local().incarnation())
    }

    /// Reads what handling a packet from `sender` reads first: the sender's
    /// record, then (for the next deadline) the ring neighbours' records.
    /// Call [`Node::warm_state`] on every node first. A hint.
    pub fn warm_receive(&self, sender: &I) -> u64 {
        self.sh.members().warm(sender) ^ self.sh.members().warm_watched()
    }

    /// Reads what [`Node::handle_timeout`] at `at` reads first: the ring
    /// neighbours' records, and when a probe tick is due by then, the walk's
    /// next member's. A hint.
    pub fn warm_timeout(&self, at: Time) -> u64 {
        let mut acc = self.sh.members().warm_watched();
        if at >= self.sh.timers().get(Timer::Probe) {
            if let Some(next) = self.probing.warm().1 {
                acc ^= self.sh.members().warm(&next);
            }
        }
        acc
    }
}
