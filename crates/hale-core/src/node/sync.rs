//! Anti-entropy as Node drives it: joining, restoring a snapshot, and
//! merging a peer's records into the membership rules. The seeds,
//! tombstones and sync budget are [`crate::sync::Recovery`]'s.

use std::time::Duration;

use rand::Rng;

use crate::identity::Identity;
use crate::sync::SnapshotSums;
use crate::time::{Time, Timer};
use crate::wire::{Channel, MemberRecord, Message, WireState};

use super::Node;

impl<I: Identity> Node<I> {
    /// Joins the cluster through `seeds` (their identities). Contacts every
    /// seed at once and again while no member is live: every
    /// `seed_retry_interval`, and sooner until a member's view first
    /// arrives (a sixteenth of it, then doubling), so that agents started
    /// together in any order form at once. Passing no seeds starts a new
    /// cluster.
    pub fn join(&mut self, now: Time, seeds: impl IntoIterator<Item = I>) {
        self.recovery.set_seeds(self.sh.local().id(), seeds);
        self.recovery.contact_seeds(&mut self.sh, now);
    }

    /// Exchanges whole states with `peer` once, as a join does, without
    /// changing the seeds. The agent does this for a seed that is not a
    /// live member of this node's view: when every seed restarted together,
    /// they joined each other only and formed an island, and the members
    /// that saw them leave never probe a left member again. Nothing is sent
    /// once this node has left.
    pub fn sync_with(&mut self, peer: I) {
        if self.sh.isolation().phase().has_left() || peer == *self.sh.local().id() {
            return;
        }
        self.sh.send_full_state(peer, true);
    }

    /// Loads a member list from a trusted snapshot (a saved state, or a
    /// simulator's warm start): every record is merged as if received in a
    /// full-state sync, without gossiping it and without events.
    pub fn restore(&mut self, now: Time, records: impl IntoIterator<Item = MemberRecord<I>>) {
        // Its first summary is due within a period: in version 4 the view
        // sums are kept from the start, each record's share added as it
        // loads (no second pass).
        let keep = self.wire_version() >= 4;
        self.load(now, records, keep);
        self.recovery.mark_synced();
    }

    /// [`Node::restore`] from `records` whose view-hash shares `sums`
    /// holds ([`SnapshotSums::of`] the same records): when the snapshot
    /// holds only alive members, each once, and this node knew nobody, the
    /// node takes the sums instead of hashing every record. A simulator
    /// that restores thousands of nodes from one snapshot hashes it once.
    pub fn restore_summed(&mut self, now: Time, records: &[MemberRecord<I>], sums: &SnapshotSums) {
        let empty = self.sh.members().len() == 0;
        let keep = self.wire_version() >= 4;
        self.recovery.mark_synced();
        self.load(
            now,
            records.iter().cloned(),
            keep && !(empty && sums.exact()),
        );
        if keep && empty && sums.exact() {
            // Every record went into the table as given, but this node's own.
            let mut v = sums.sums().clone();
            if let Some(own) = records.iter().find(|r| r.id == *self.sh.local().id()) {
                v.sub(&own.id, own.incarnation, own.state);
            }
            self.sh.members_mut().take_view_sums(v);
        }
    }

    /// Merges a snapshot's records silently (no events, monitors
    /// recomputed once), then spreads the first periodic sync.
    fn load(&mut self, now: Time, records: impl IntoIterator<Item = MemberRecord<I>>, keep: bool) {
        // A snapshot is not news: no events (read `members()`), and the first
        // full-state sync is spread over the interval for the new size, so
        // that nodes restored together do not all sync at once.
        let records = records.into_iter();
        let expected = records.size_hint().0;
        self.sh.members_mut().reserve(expected);
        self.probing.reserve(expected);
        self.sh.out_mut().mute(true);
        self.monitors.defer();
        if keep {
            self.sh.members_mut().keep_view_sum();
        }
        for r in records {
            self.merge_record(now, None, r);
        }
        self.sh.out_mut().mute(false);
        if self.monitors.resume() {
            self.monitors.recompute(&mut self.sh);
        }
        let interval = self.sh.push_pull_interval().as_nanos() as u64;
        let at = now + Duration::from_nanos(self.sh.rng().random_range(0..interval.max(1)));
        self.sh.timers_mut().set(Timer::PushPull, at);
    }

    /// The periodic sync with a random live member.
    pub(crate) fn push_pull_tick(&mut self, now: Time) {
        // Spread over half to one and a half intervals, so that nodes started
        // together do not sync in waves.
        let interval = self
            .sh
            .push_pull_interval()
            .mul_f64(self.sh.rng().random_range(0.5..1.5));
        self.sh.timers_mut().set(Timer::PushPull, now + interval);
        if self.sh.isolation().phase().has_left() {
            return;
        }
        if let Some(peer) = self.sh.random_live(self.probing.walk(), 1, None).pop() {
            self.sh.open_sync(peer);
        }
    }

    /// A peer's whole state (or digest): merged; answered with ours
    /// when asked and a sync token is left.
    pub(crate) fn handle_push_pull(
        &mut self,
        now: Time,
        from: &I,
        reply: bool,
        digest: bool,
        members: Vec<MemberRecord<I>>,
    ) {
        self.recovery.mark_synced();
        if !digest {
            for r in members {
                self.merge_record(now, Some(from), r);
            }
            if reply && self.recovery.take_sync_token(&mut self.sh, now) {
                let msg = Message::PushPull {
                    join: false,
                    reply: false,
                    digest: false,
                    members: self.state_records(),
                };
                self.sh.send(from.clone(), Channel::Stream, vec![msg]);
            }
            return;
        }
        self.answer_digest(now, from, reply, None, members);
    }

    /// Merges one record of a full-state sync from `from` (None: a restore).
    /// Only news about the sender itself is re-gossiped: bulk state is old
    /// news to everyone else, and gossiping it would flood the cluster on joins.
    pub(crate) fn merge_record(&mut self, now: Time, from: Option<&I>, r: MemberRecord<I>) {
        let about_sender = from == Some(&r.id);
        let declarer = from
            .cloned()
            .unwrap_or_else(|| self.sh.local().id().clone());
        match r.state {
            WireState::Alive | WireState::Suspect => {
                self.apply_alive(now, &r.id, r.incarnation, Some(r.meta), about_sender);
            }
            // Never learn of a member through its death or departure.
            WireState::Dead | WireState::Left
                if !self.sh.members().contains(&r.id) && r.id != *self.sh.local().id() => {}
            WireState::Dead => {
                let accusers = self.sh.cfg().corroboration as u8;
                self.apply_dead(now, &r.id, r.incarnation, &declarer, accusers, false);
            }
            WireState::Left => self.apply_left(now, &r.id, r.incarnation, about_sender),
        }
    }
}
