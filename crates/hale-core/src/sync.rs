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
use crate::probe::Probing;
use crate::shared::Shared;
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
    /// The wait before the next contact of the seeds while joining (not
    /// yet `synced`): zero before the first retry, then doubling up to
    /// `seed_retry_interval`.
    join_wait: Duration,
}

/// While joining, the first retry of the seeds waits
/// `seed_retry_interval / 2^JOIN_BACKOFF_STEPS`, and each next one twice
/// as long until `seed_retry_interval`: agents started together (a boot, a
/// rolling restart of every seed) find each other within a few hundred
/// milliseconds of the last one listening, whatever their order, and a
/// seed that is down is still asked only every `seed_retry_interval`.
const JOIN_BACKOFF_STEPS: u32 = 4;

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
            join_wait: Duration::ZERO,
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

    /// Sends every seed this node's whole state, unless it has left; the
    /// next try is a jittered `seed_retry_interval` away, or sooner while
    /// joining ([`JOIN_BACKOFF_STEPS`]).
    pub(crate) fn contact_seeds(&mut self, sh: &mut Shared<I>, now: Time) {
        let wait = self.next_wait(sh.cfg().seed_retry_interval);
        let at = now + sh.jitter(wait);
        sh.timers_mut().set(Timer::SeedRetry, at);
        if self.seeds.is_empty() || sh.isolation().phase().has_left() {
            return;
        }
        for seed in self.seeds.clone() {
            sh.send_full_state(seed, true);
        }
    }

    /// The wait before the seeds are contacted again: `full` once this
    /// node's view came from the cluster, else the join's backoff.
    fn next_wait(&mut self, full: Duration) -> Duration {
        if self.synced {
            return full;
        }
        self.join_wait = if self.join_wait.is_zero() {
            full / 2u32.pow(JOIN_BACKOFF_STEPS)
        } else {
            (self.join_wait * 2).min(full)
        };
        self.join_wait
    }

    /// The seed timer: falls back to the seeds when alone or cut off
    /// (reported once), else looks again in a `seed_retry_interval`.
    pub(crate) fn seed_tick(&mut self, sh: &mut Shared<I>, now: Time) {
        if self.seeds_due(sh) {
            if !sh.isolation().phase().in_fallback()
                && sh.members().recs().any(|m| !m.state().is_live())
            {
                sh.isolation_mut().phase_mut().fall_back();
                sh.push_event(Event::SeedFallback);
            }
            self.contact_seeds(sh, now);
        } else {
            let at = now + sh.cfg().seed_retry_interval;
            sh.timers_mut().set(Timer::SeedRetry, at);
        }
    }

    /// Whether this node contacts its seeds: it has some, has not left,
    /// and is alone or cut off.
    pub(crate) fn seeds_due(&self, sh: &Shared<I>) -> bool {
        (sh.members().live() == 0 || sh.isolation().phase().is_cut_off())
            && !self.seeds.is_empty()
            && !sh.isolation().phase().has_left()
    }

    /// Forgets dead and left members after the tombstone time, and old bookkeeping.
    pub(crate) fn reap(&mut self, sh: &mut Shared<I>, now: Time) {
        sh.timers_mut()
            .set(Timer::Reap, now + Duration::from_secs(10));
        let ttl = sh.cfg().tombstone_ttl;
        let tombs = &mut self.tombstones;
        tombs.sort_unstable();
        tombs.dedup();
        tombs.retain(|id| match sh.members().get(id) {
            Some(m) if !m.state().is_live() => {
                if now.saturating_since(sh.members().since(id)) >= ttl {
                    sh.members_mut().remove(id);
                    false
                } else {
                    true
                }
            }
            _ => false,
        });
        let period = sh.cfg().probe_interval;
        self.dead_notices
            .retain(|_, t| now.saturating_since(*t) < period);
    }

    /// Pings a random member declared dead. If it is alive on the other side
    /// of a healed partition, the dead notices both sides send each other make
    /// both refute, and the refutations spread on each side. A ping, not a
    /// full-state sync: every node does this, and the target is usually
    /// really dead.
    pub(crate) fn reconnect_tick(
        &mut self,
        sh: &mut Shared<I>,
        probing: &mut Probing<I>,
        now: Time,
    ) {
        let at = now + sh.jitter(sh.cfg().reconnect_interval);
        sh.timers_mut().set(Timer::Reconnect, at);
        if sh.isolation().phase().has_left() {
            return;
        }
        let Some(c) = self.random_tombstone(&mut sh.rng()).cloned() else {
            return;
        };
        if sh
            .members()
            .get(&c)
            .is_some_and(|m| m.state() == MemberState::Dead)
        {
            let seq = probing.next_seq();
            sh.send_ping(c, Channel::Datagram, seq, None);
        }
    }

    /// Bounded: a token bucket caps sync replies per second. Counts a refusal.
    pub(crate) fn take_sync_token(&mut self, sh: &mut Shared<I>, now: Time) -> bool {
        let rate = f64::from(sh.cfg().sync_replies_per_sec);
        let elapsed = now.saturating_since(self.tokens_at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.tokens_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            sh.stats_mut().sync_replies_refused += 1;
            false
        }
    }

    /// Takes `seeds` (their identities), without this node (`me`) or
    /// duplicates; none means a new cluster, whose view this node is.
    pub(crate) fn set_seeds(&mut self, me: &I, seeds: impl IntoIterator<Item = I>) {
        self.seeds = seeds.into_iter().filter(|s| s != me).collect();
        self.seeds.sort_unstable();
        self.seeds.dedup();
        self.join_wait = Duration::ZERO;
        if self.seeds.is_empty() {
            // A new cluster: this node's view is the whole of it.
            self.mark_synced();
        }
    }
}

/// The view-hash shares of a snapshot's records, summed once, for
/// [`crate::Node::restore_summed`].
#[derive(Debug, Clone)]
pub struct SnapshotSums {
    sums: ViewSums,
    /// Every record is alive and names a member no other record does: a
    /// node restored from them holds them as given.
    exact: bool,
}

impl SnapshotSums {
    /// Whether a node that knew nobody holds the records as given.
    pub(crate) fn exact(&self) -> bool {
        self.exact
    }

    /// The records' view-hash shares.
    pub(crate) fn sums(&self) -> &ViewSums {
        &self.sums
    }

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

impl<I: Identity> Shared<I> {
    /// Every member known here, this node first, then the others in
    /// identity order, as sent in a full-state sync. (The order is the
    /// identities', not the member table's, so that how the table is laid
    /// out never changes what goes on the wire, or in what order a receiver
    /// merges it.)
    pub(crate) fn state_records(&self) -> Vec<MemberRecord<I>> {
        self.records(true)
    }

    /// [`crate::Node::state_records`] without metadata: a digest.
    pub(crate) fn digest_records(&self) -> Vec<MemberRecord<I>> {
        self.records(false)
    }

    /// This node's own record, as a sync carries it.
    pub(crate) fn own_record(&self, with_meta: bool) -> MemberRecord<I> {
        MemberRecord {
            id: self.local().id().clone(),
            incarnation: self.local().incarnation(),
            state: self.own_state(),
            meta: if with_meta {
                self.local().meta().into()
            } else {
                Box::default()
            },
        }
    }

    /// Every member known here, this node first, then the others in
    /// identity order; with their metadata or without.
    fn records(&self, with_meta: bool) -> Vec<MemberRecord<I>> {
        let mut out = Vec::with_capacity(self.members().len() + 1);
        out.push(self.own_record(with_meta));
        for (id, m, meta) in self.members().iter_meta() {
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

    /// Sends this node's whole state to `to` and asks for theirs (a join
    /// when `join`): a seed, a peer that said this node restarted, a
    /// member this node did not know. Counted as a sync.
    pub(crate) fn send_full_state(&mut self, to: I, join: bool) {
        self.stats_mut().syncs += 1;
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
        d.mul_f64(self.rng().random_range(0.9..1.1))
    }

    /// The periodic sync's mean period. In version 4 it is
    /// `push_pull_interval` at every size: a sync in agreement is one
    /// datagram each way at most, and a disagreement costs what differs
    /// (`digest.rs`), so that a member that gossip missed is repaired in
    /// about a period, not in hours at 10,000 members. Before, it grows
    /// with the cluster (`push_pull_scale`): a disagreement costs two
    /// whole digests.
    pub(crate) fn push_pull_interval(&self) -> Duration {
        if self.wire().speak() >= 4 {
            return self.cfg().push_pull_interval;
        }
        let scale = (self.members().live() + 1)
            .div_ceil(self.cfg().push_pull_scale)
            .max(1);
        self.cfg().push_pull_interval * scale as u32
    }

    /// This node's own state as a sync carries it.
    pub(crate) fn own_state(&self) -> WireState {
        if self.isolation().phase().has_left() {
            WireState::Left
        } else {
            WireState::Alive
        }
    }
}
