//! Which packets a [`crate::Node`] admits by their freshness, and what it tells
//! the senders of those it refuses: the node's side of [`crate::freshness`],
//! whose types ([`Freshness`](crate::freshness::Freshness),
//! [`Generation`](crate::freshness::Generation)) hold the state.

use std::time::Duration;

use crate::event::Event;
use crate::freshness::Verdict;
use crate::identity::Identity;
use crate::shared::Shared;
use crate::stats::DropReason;
use crate::time::Time;
use crate::wire::{peek, Channel, Header, Message, Versions};

impl<I: Identity> Shared<I> {
    /// How fresh a packet with header `h` from a known member is. Packets
    /// from unknown senders (joins) and every packet when the check is off
    /// are current.
    pub(crate) fn freshness(&mut self, now: Time, h: &Header<I>) -> Verdict {
        if self.cfg().replay_window.is_zero() {
            return Verdict::Current;
        }
        let credit = self.isolation().pause_credit(now);
        let allowance = self.cfg().replay_window + credit;
        let proof_window = self.cfg().probe_timeout + credit;
        let Some(mut f) = self.members().fresh(&h.sender) else {
            return Verdict::Current;
        };
        let verdict = f.judge(now, h.generation, h.sent_ms, allowance, proof_window);
        // A current packet is also heard now (note_header sets it again, a
        // no-op): stored together, the table keeps the state packed.
        let heard = (verdict == Verdict::Current).then_some(now);
        self.members_mut().set_fresh(&h.sender, f, heard);
        verdict
    }

    /// A packet from `h.sender` was dropped as a replay of an older
    /// generation, or as stale: tells the sender which generation this node
    /// heard from it, so that a genuine new run (clock set back), or a run
    /// whose clock was stepped back, can start above it.
    pub(crate) fn notice_superseded(&mut self, now: Time, h: &Header<I>) {
        let Some(f) = self.members().fresh(&h.sender) else {
            return;
        };
        let key = self.local().ring_of(&h.sender);
        if !self.local_mut().generation().may_notice(now, key) {
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
        let interval = self.cfg().probe_interval;
        if self
            .local_mut()
            .generation()
            .may_sync_stranger(now, interval)
        {
            self.send_full_state(stranger.clone(), false);
        }
    }

    /// `from` heard a newer generation from this node than the one its
    /// packets now carry (`known`): this run starts again above it, and
    /// syncs with `from` so that it is heard at once.
    pub(crate) fn handle_superseded(&mut self, from: &I, known: u64) {
        if known < self.local().my_generation() || self.isolation().phase().has_left() {
            return;
        }
        let previous = self.local_mut().generation().raise(known);
        self.stats_mut().generations_raised += 1;
        self.push_event(Event::GenerationRaised {
            previous,
            generation: self.local().my_generation(),
            by: from.clone(),
        });
        self.send_full_state(from.clone(), true);
    }

    /// This node just came out of a pause of `length`: packets that queued
    /// up meanwhile are late by up to that much through no fault of their
    /// senders. They are accepted for one replay window.
    pub(crate) fn credit_pause(&mut self, now: Time, length: Duration) {
        let until = now + self.cfg().replay_window;
        self.isolation_mut().credit_pause(until, length);
    }

    /// Admits a decoded packet's version: `false` (dropped, counted,
    /// reported) unless this node speaks it. Notes the sender's new run in
    /// an older version (see the module docs).
    pub(crate) fn admit_version(&mut self, now: Time, h: &Header<I>) -> bool {
        if !self.wire().range().contains(h.version) {
            let key = self.local().ring_of(&h.sender);
            self.wire_mut().count_received(h.version);
            self.stats_mut().drop(DropReason::Version);
            self.report_version(now, key, Some(h.sender.clone()), h.version, h.speaks);
            return false;
        }
        let new_run = h.version != self.wire().speak()
            && self
                .members()
                .fresh(&h.sender)
                .is_none_or(|f| !f.known || h.generation > f.generation);
        self.wire_heard(now, h, new_run);
        true
    }

    /// A packet did not decode for its version: reads what its prefix
    /// says of its sender and reports it.
    pub(crate) fn unsupported_bytes(&mut self, now: Time, bytes: &[u8]) {
        let Some(p) = peek::<I>(bytes, self.local().cluster()) else {
            return;
        };
        self.wire_mut().count_received(p.version);
        let key = p.sender.as_ref().map_or(0, |s| self.local().ring_of(s));
        self.report_version(now, key, p.sender, p.version, p.speaks);
    }

    /// Reports a packet in a version this node does not speak, at most
    /// once a `REPORT_INTERVAL` per sender.
    fn report_version(
        &mut self,
        now: Time,
        key: u64,
        sender: Option<I>,
        version: u8,
        speaks: Option<Versions>,
    ) {
        if self.wire_mut().may_report(now, key) {
            self.push_event(Event::UnsupportedVersion {
                sender,
                version,
                speaks,
                ours: self.wire().range(),
            });
        }
    }

    /// Whether a cluster this size lets a node that hears from nobody infer
    /// that it is the one cut off. The size is the larger of the view now
    /// and the view when a member was last heard from: members convicted
    /// during this node's silence (on others' word, before it went quiet)
    /// shrink the view, not the cluster it was cut off from; counting them
    /// out used to leave an isolated node "alone in a cluster of three" and
    /// convicting the two members it last heard from (nemesis seed 170066).
    pub(crate) fn large_enough_to_infer_cut_off(&self) -> bool {
        let live = self
            .members()
            .live()
            .max(self.isolation().live_when_heard());
        live > self.cfg().corroboration
    }
}
