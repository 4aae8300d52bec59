//! Which packets a [`Node`] admits by their freshness, and what it tells
//! the senders of those it refuses: the node's side of [`crate::freshness`],
//! whose types ([`Freshness`](crate::freshness::Freshness),
//! [`Generation`](crate::freshness::Generation)) hold the state.

use std::time::Duration;

use crate::event::Event;
use crate::freshness::Verdict;
use crate::identity::Identity;
use crate::node::Node;
use crate::time::Time;
use crate::wire::{Channel, Header, Message};

impl<I: Identity> Node<I> {
    /// How fresh a packet with header `h` from a known member is. Packets
    /// from unknown senders (joins) and every packet when the check is off
    /// are current.
    pub(crate) fn freshness(&mut self, now: Time, h: &Header<I>) -> Verdict {
        if self.cfg.replay_window.is_zero() {
            return Verdict::Current;
        }
        let credit = self.isolation.pause_credit(now);
        let allowance = self.cfg.replay_window + credit;
        let proof_window = self.cfg.probe_timeout + credit;
        let Some(mut f) = self.members.fresh(&h.sender) else {
            return Verdict::Current;
        };
        let verdict = f.judge(now, h.generation, h.sent_ms, allowance, proof_window);
        // A current packet is also heard now (note_header sets it again, a
        // no-op): stored together, the table keeps the state packed.
        let heard = (verdict == Verdict::Current).then_some(now);
        self.members.set_fresh(&h.sender, f, heard);
        verdict
    }

    /// A packet from `h.sender` was dropped as a replay of an older
    /// generation, or as stale: tells the sender which generation this node
    /// heard from it, so that a genuine new run (clock set back), or a run
    /// whose clock was stepped back, can start above it.
    pub(crate) fn notice_superseded(&mut self, now: Time, h: &Header<I>) {
        let Some(f) = self.members.fresh(&h.sender) else {
            return;
        };
        let key = self.local.ring_of(&h.sender);
        if !self.local.generation().may_notice(now, key) {
            return;
        }
        let msg = Message::Superseded {
            known: f.generation,
        };
        self.send(h.sender.clone(), Channel::Datagram, vec![msg]);
    }

    /// A member this node does not know sent it a packet that is not a
    /// sync: they are on two islands (both restarted at once, each with the
    /// other as its only seed, and the rest of the cluster still holding
    /// them alive, so nobody sends them its state), or this node restarted
    /// and its seeds had not met the stranger yet. A full-state sync both
    /// ways merges them now instead of at the next periodic sync (30 s or
    /// more). At most one a probe interval: one sync teaches a restarted
    /// node the whole cluster, and a mass restart must not flood anyone.
    pub(crate) fn sync_with_stranger(&mut self, now: Time, stranger: &I) {
        let interval = self.cfg.probe_interval;
        if self.local.generation().may_sync_stranger(now, interval) {
            self.send_full_state(stranger.clone(), false);
        }
    }

    /// `from` heard a newer generation from this node than the one its
    /// packets now carry (`known`): this run starts again above it, and
    /// syncs with `from` so that it is heard at once.
    pub(crate) fn handle_superseded(&mut self, from: &I, known: u64) {
        if known < self.local.my_generation() || self.isolation.phase().has_left() {
            return;
        }
        let previous = self.local.generation().raise(known);
        self.stats.generations_raised += 1;
        self.push_event(Event::GenerationRaised {
            previous,
            generation: self.local.my_generation(),
            by: from.clone(),
        });
        self.send_full_state(from.clone(), true);
    }

    /// This node just came out of a pause of `length`: packets that queued
    /// up meanwhile are late by up to that much through no fault of their
    /// senders. They are accepted for one replay window.
    pub(crate) fn credit_pause(&mut self, now: Time, length: Duration) {
        self.isolation
            .credit_pause(now + self.cfg.replay_window, length);
    }
}
