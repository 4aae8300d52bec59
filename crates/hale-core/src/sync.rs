//! Anti-entropy: push/pull over the stream channel, joining through seeds,
//! falling back to seeds when alone, and reconnecting to members declared
//! dead so that partitions heal.
//!
//! The periodic sync by digest, and its summaries, are in `digest.rs`.

use std::time::Duration;

use rand::Rng;

use crate::event::Event;
use crate::identity::Identity;
use crate::member::MemberState;
use crate::node::Node;
use crate::table::{FxMap, ViewSums};
use crate::time::{Time, Timer};
use crate::wire::{Channel, MemberRecord, Message, WireState};

/// Recovery: the seeds, the members declared dead or gone (pinged now and
/// then, forgotten after `tombstone_ttl`), and the budget of sync replies.
///
/// Invariants: `seeds` is sorted, without duplicates or this node;
/// `0 <= tokens <= sync_replies_per_sec`; every member that stopped being
/// live since the last reap is in `tombstones`.
#[derive(Debug)]
pub(crate) struct Recovery<I> {
    seeds: Vec<I>,
    tokens: f64,
    tokens_at: Time,
    tombstones: Vec<I>,
    /// When each member held dead was last told so.
    dead_notices: FxMap<I, Time>,
    /// Whether this node's view came from the cluster at least once since
    /// it started: it started a new cluster (joined through no seed), loaded
    /// a snapshot, or received a member's view (a state sync, a digest, a
    /// matching summary). Until then it knows only the members whose
    /// packets reached it, so it cannot tell how many could confirm a
    /// suspicion: it gets no small-cluster allowance (`verdict.rs`).
    synced: bool,
}

impl<I: Identity> Recovery<I> {
    /// No seeds, a full bucket of `rate` sync replies.
    pub(crate) fn new(rate: u32, now: Time) -> Recovery<I> {
        Recovery {
            seeds: Vec::new(),
            tokens: f64::from(rate),
            tokens_at: now,
            tombstones: Vec::new(),
            dead_notices: FxMap::default(),
            synced: false,
        }
    }

    /// Whether this node's view came from the cluster since it started.
    pub(crate) fn synced(&self) -> bool {
        self.synced
    }

    /// This node's view came from the cluster (or it is the cluster).
    pub(crate) fn mark_synced(&mut self) {
        self.synced = true;
    }

    /// The seeds.
    pub(crate) fn seeds(&self) -> &[I] {
        &self.seeds
    }

    /// `id` stopped being live.
    pub(crate) fn bury(&mut self, id: &I) {
        self.tombstones.push(id.clone());
    }

    /// A random tombstone, if any.
    pub(crate) fn random_tombstone(&self, rng: &mut impl Rng) -> Option<&I> {
        let n = self.tombstones.len();
        (n > 0).then(|| &self.tombstones[rng.random_range(0..n)])
    }

    /// Whether `id`, held dead, may be told so at `now` (at most once a
    /// `period`); records it.
    pub(crate) fn may_notify_dead(&mut self, id: &I, now: Time, period: Duration) -> bool {
        let last = self.dead_notices.get(id).copied();
        let ok = last.is_none_or(|t| now.saturating_since(t) >= period);
        if ok {
            self.dead_notices.insert(id.clone(), now);
        }
        ok
    }
}

/// The view-hash shares of a snapshot's records, summed once, for
/// [`Node::restore_summed`].
#[derive(Debug, Clone)]
pub struct SnapshotSums {
    sums: ViewSums,
    /// Every record is alive and names a member no other record does: a
    /// node restored from them holds them as given.
    exact: bool,
}

impl SnapshotSums {
    /// Sums the shares of `records`.
    pub fn of<I: Identity>(records: &[MemberRecord<I>]) -> SnapshotSums {
        let mut sums = ViewSums::default();
        for r in records {
            sums.add(&r.id, r.incarnation, r.state);
        }
        let mut ids: Vec<&I> = records.iter().map(|r| &r.id).collect();
        ids.sort_unstable();
        let distinct = ids.windows(2).all(|w| w[0] != w[1]);
        let alive = records.iter().all(|r| r.state == WireState::Alive);
        SnapshotSums {
            sums,
            exact: distinct && alive,
        }
    }
}

impl<I: Identity> Node<I> {
    /// Joins the cluster through `seeds` (their identities). Contacts every
    /// seed at once and again every `seed_retry_interval` while no member is
    /// live. Passing no seeds starts a new cluster.
    pub fn join(&mut self, now: Time, seeds: impl IntoIterator<Item = I>) {
        self.recovery.seeds = seeds
            .into_iter()
            .filter(|s| *s != *self.local.id())
            .collect();
        self.recovery.seeds.sort_unstable();
        self.recovery.seeds.dedup();
        if self.recovery.seeds.is_empty() {
            // A new cluster: this node's view is the whole of it.
            self.recovery.mark_synced();
        }
        self.contact_seeds(now);
    }

    /// Exchanges whole states with `peer` once, as a join does, without
    /// changing the seeds. The agent does this for a seed that is not a
    /// live member of this node's view: when every seed restarted together,
    /// they joined each other only and formed an island, and the members
    /// that saw them leave never probe a left member again. Nothing is sent
    /// once this node has left.
    pub fn sync_with(&mut self, peer: I) {
        if self.isolation.phase().has_left() || peer == *self.local.id() {
            return;
        }
        self.send_full_state(peer, true);
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
        let empty = self.members.len() == 0;
        let keep = self.wire_version() >= 4;
        self.recovery.mark_synced();
        self.load(now, records.iter().cloned(), keep && !(empty && sums.exact));
        if keep && empty && sums.exact {
            // Every record went into the table as given, but this node's own.
            let mut v = sums.sums.clone();
            if let Some(own) = records.iter().find(|r| r.id == *self.local.id()) {
                v.sub(&own.id, own.incarnation, own.state);
            }
            self.members.take_view_sums(v);
        }
    }

    fn load(&mut self, now: Time, records: impl IntoIterator<Item = MemberRecord<I>>, keep: bool) {
        // A snapshot is not news: no events (read `members()`), and the first
        // full-state sync is spread over the interval for the new size, so
        // that nodes restored together do not all sync at once.
        let records = records.into_iter();
        let expected = records.size_hint().0;
        self.members.reserve(expected);
        self.probing.reserve(expected);
        self.out.mute(true);
        self.monitors.defer();
        if keep {
            self.members.keep_view_sum();
        }
        for r in records {
            self.merge_record(now, None, r);
        }
        self.out.mute(false);
        if self.monitors.resume() {
            self.recompute_monitors();
        }
        let interval = self.push_pull_interval().as_nanos() as u64;
        let at = now + Duration::from_nanos(self.rng.random_range(0..interval.max(1)));
        self.timers.set(Timer::PushPull, at);
    }

    /// Every member known here, this node first, then the others in
    /// identity order, as sent in a full-state sync. (The order is the
    /// identities', not the member table's, so that how the table is laid
    /// out never changes what goes on the wire, or in what order a receiver
    /// merges it.)
    pub fn state_records(&self) -> Vec<MemberRecord<I>> {
        self.records(true)
    }

    /// [`Node::state_records`] without metadata: a digest.
    pub(crate) fn digest_records(&self) -> Vec<MemberRecord<I>> {
        self.records(false)
    }

    /// This node's own record, as a sync carries it.
    pub(crate) fn own_record(&self, with_meta: bool) -> MemberRecord<I> {
        MemberRecord {
            id: self.local.id().clone(),
            incarnation: self.local.incarnation(),
            state: self.own_state(),
            meta: if with_meta {
                self.local.meta().into()
            } else {
                Box::default()
            },
        }
    }

    fn records(&self, with_meta: bool) -> Vec<MemberRecord<I>> {
        let mut out = Vec::with_capacity(self.members.len() + 1);
        out.push(self.own_record(with_meta));
        for (id, m, meta) in self.members.iter_meta() {
            out.push(MemberRecord {
                id: id.into_owned(),
                incarnation: m.incarnation,
                state: m.state().wire(),
                meta: if with_meta {
                    meta.into()
                } else {
                    Box::default()
                },
            });
        }
        let others = &mut out[1..];
        if !others.is_sorted_by(|a, b| a.id <= b.id) {
            others.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        }
        out
    }

    fn contact_seeds(&mut self, now: Time) {
        let at = now + self.jitter(self.cfg.seed_retry_interval);
        self.timers.set(Timer::SeedRetry, at);
        if self.recovery.seeds.is_empty() || self.isolation.phase().has_left() {
            return;
        }
        for seed in self.recovery.seeds.clone() {
            self.send_full_state(seed, true);
        }
    }

    /// Sends this node's whole state to `to` and asks for theirs (a join
    /// when `join`): a seed, a peer that said this node restarted, a
    /// member this node did not know. Counted as a sync.
    pub(crate) fn send_full_state(&mut self, to: I, join: bool) {
        self.stats.syncs += 1;
        let msg = Message::PushPull {
            join,
            reply: true,
            digest: false,
            members: self.state_records(),
        };
        self.send(to, Channel::Stream, vec![msg]);
    }

    /// `d` plus or minus up to 10%, so that nodes drift apart.
    fn jitter(&mut self, d: Duration) -> Duration {
        d.mul_f64(self.rng.random_range(0.9..1.1))
    }

    pub(crate) fn seed_tick(&mut self, now: Time) {
        if self.seeds_due() {
            if !self.isolation.phase().in_fallback()
                && self.members.recs().any(|m| !m.state().is_live())
            {
                self.isolation.phase_mut().fall_back();
                self.push_event(Event::SeedFallback);
            }
            self.contact_seeds(now);
        } else {
            let at = now + self.cfg.seed_retry_interval;
            self.timers.set(Timer::SeedRetry, at);
        }
    }

    /// Whether this node contacts its seeds: it has some, has not left,
    /// and is alone or cut off.
    pub(crate) fn seeds_due(&self) -> bool {
        (self.members.live() == 0 || self.isolation.phase().is_cut_off())
            && !self.recovery.seeds.is_empty()
            && !self.isolation.phase().has_left()
    }

    /// Forgets dead and left members after the tombstone time, and old bookkeeping.
    pub(crate) fn reap(&mut self, now: Time) {
        self.timers.set(Timer::Reap, now + Duration::from_secs(10));
        let ttl = self.cfg.tombstone_ttl;
        let tombs = &mut self.recovery.tombstones;
        tombs.sort_unstable();
        tombs.dedup();
        tombs.retain(|id| match self.members.get(id) {
            Some(m) if !m.state().is_live() => {
                if now.saturating_since(self.members.since(id)) >= ttl {
                    self.members.remove(id);
                    false
                } else {
                    true
                }
            }
            _ => false,
        });
        self.suspicions
            .forget_accusers(now, self.cfg.accusation_window);
        let period = self.cfg.probe_interval;
        self.recovery
            .dead_notices
            .retain(|_, t| now.saturating_since(*t) < period);
    }

    /// The periodic sync's mean period. In version 4 it is
    /// `push_pull_interval` at every size: a sync in agreement is one
    /// datagram each way at most, and a disagreement costs what differs
    /// (`digest.rs`), so that a member that gossip missed is repaired in
    /// about a period, not in hours at 10,000 members. Before, it grows
    /// with the cluster (`push_pull_scale`): a disagreement costs two
    /// whole digests.
    pub(crate) fn push_pull_interval(&self) -> Duration {
        if self.wire_version() >= 4 {
            return self.cfg.push_pull_interval;
        }
        let scale = (self.members.live() + 1)
            .div_ceil(self.cfg.push_pull_scale)
            .max(1);
        self.cfg.push_pull_interval * scale as u32
    }

    pub(crate) fn push_pull_tick(&mut self, now: Time) {
        // Spread over half to one and a half intervals, so that nodes started
        // together do not sync in waves.
        let interval = self
            .push_pull_interval()
            .mul_f64(self.rng.random_range(0.5..1.5));
        self.timers.set(Timer::PushPull, now + interval);
        if self.isolation.phase().has_left() {
            return;
        }
        if let Some(peer) = self.random_live(1, None).pop() {
            self.open_sync(peer);
        }
    }

    /// Pings a random member declared dead. If it is alive on the other side
    /// of a healed partition, the dead notices both sides send each other make
    /// both refute, and the refutations spread on each side. A ping, not a
    /// full-state sync: every node does this, and the target is usually
    /// really dead.
    pub(crate) fn reconnect_tick(&mut self, now: Time) {
        let at = now + self.jitter(self.cfg.reconnect_interval);
        self.timers.set(Timer::Reconnect, at);
        if self.isolation.phase().has_left() {
            return;
        }
        let Some(c) = self.recovery.random_tombstone(&mut self.rng).cloned() else {
            return;
        };
        if self
            .members
            .get(&c)
            .is_some_and(|m| m.state() == MemberState::Dead)
        {
            let seq = self.next_seq();
            self.send_ping(c, Channel::Datagram, seq, None);
        }
    }

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
            if reply && self.take_sync_token(now) {
                let msg = Message::PushPull {
                    join: false,
                    reply: false,
                    digest: false,
                    members: self.state_records(),
                };
                self.send(from.clone(), Channel::Stream, vec![msg]);
            }
            return;
        }
        self.answer_digest(now, from, reply, None, members);
    }

    /// Bounded: a token bucket caps sync replies per second. Counts a refusal.
    pub(crate) fn take_sync_token(&mut self, now: Time) -> bool {
        let rate = f64::from(self.cfg.sync_replies_per_sec);
        let elapsed = now.saturating_since(self.recovery.tokens_at).as_secs_f64();
        self.recovery.tokens = (self.recovery.tokens + elapsed * rate).min(rate);
        self.recovery.tokens_at = now;
        if self.recovery.tokens >= 1.0 {
            self.recovery.tokens -= 1.0;
            true
        } else {
            self.stats.sync_replies_refused += 1;
            false
        }
    }

    /// Merges one record of a full-state sync from `from` (None: a restore).
    /// Only news about the sender itself is re-gossiped: bulk state is old
    /// news to everyone else, and gossiping it would flood the cluster on joins.
    pub(crate) fn merge_record(&mut self, now: Time, from: Option<&I>, r: MemberRecord<I>) {
        let about_sender = from == Some(&r.id);
        let declarer = from.cloned().unwrap_or_else(|| self.local.id().clone());
        match r.state {
            WireState::Alive | WireState::Suspect => {
                self.apply_alive(now, &r.id, r.incarnation, Some(r.meta), about_sender);
            }
            // Never learn of a member through its death or departure.
            WireState::Dead | WireState::Left
                if !self.members.contains(&r.id) && r.id != *self.local.id() => {}
            WireState::Dead => {
                let accusers = self.cfg.corroboration as u8;
                self.apply_dead(now, &r.id, r.incarnation, &declarer, accusers, false);
            }
            WireState::Left => self.apply_left(now, &r.id, r.incarnation, about_sender),
        }
    }
}
