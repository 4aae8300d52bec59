//! Anti-entropy: push/pull over the stream channel, joining through seeds,
//! falling back to seeds when alone, and reconnecting to members declared
//! dead so that partitions heal.
//!
//! # Periodic sync by digest
//!
//! A join sends and gets back whole records. The periodic sync does not
//! resend what the other side knows: A sends a digest (every member's
//! identity, incarnation and state, no metadata); B answers with the whole
//! records it knows better than the digest says, and its own digest; A
//! sends back the whole records it knows better than B's digest. In a
//! cluster in agreement that is two digests, not two copies of everyone's
//! metadata. Deaths and departures in a digest are merged at once (they
//! carry no metadata); every reply spends a token of
//! `sync_replies_per_sec`.

use std::time::Duration;

use rand::Rng;

use crate::event::Event;
use crate::identity::Identity;
use crate::member::MemberState;
use crate::node::Node;
use crate::time::Time;
use crate::wire::{Channel, MemberRecord, Message, WireState};

impl<I: Identity> Node<I> {
    /// Joins the cluster through `seeds` (their identities). Contacts every
    /// seed at once and again every `seed_retry_interval` while no member is
    /// live. Passing no seeds starts a new cluster.
    pub fn join(&mut self, now: Time, seeds: impl IntoIterator<Item = I>) {
        self.seeds = seeds.into_iter().filter(|s| *s != self.me).collect();
        self.seeds.sort_unstable();
        self.seeds.dedup();
        self.contact_seeds(now);
    }

    /// Loads a member list from a trusted snapshot (a saved state, or a
    /// simulator's warm start): every record is merged as if received in a
    /// full-state sync, without gossiping it and without events.
    pub fn restore(&mut self, now: Time, records: impl IntoIterator<Item = MemberRecord<I>>) {
        // A snapshot is not news: no events (read `members()`), and the first
        // full-state sync is spread over the interval for the new size, so
        // that nodes restored together do not all sync at once.
        let records = records.into_iter();
        let expected = records.size_hint().0;
        self.members.reserve(expected);
        self.walk.reserve(expected);
        self.quiet = true;
        self.defer_monitors = true;
        for r in records {
            self.merge_record(now, None, r);
        }
        self.quiet = false;
        self.defer_monitors = false;
        if self.monitors_dirty {
            self.recompute_monitors();
        }
        let interval = self.push_pull_interval().as_nanos() as u64;
        self.next_push_pull = now + Duration::from_nanos(self.rng.random_range(0..interval.max(1)));
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

    fn records(&self, with_meta: bool) -> Vec<MemberRecord<I>> {
        let mut out = Vec::with_capacity(self.members.len() + 1);
        out.push(MemberRecord {
            id: self.me.clone(),
            incarnation: self.incarnation,
            state: if self.left {
                WireState::Left
            } else {
                WireState::Alive
            },
            meta: if with_meta {
                self.meta.to_vec()
            } else {
                Vec::new()
            },
        });
        for (id, m, meta) in self.members.iter_meta() {
            out.push(MemberRecord {
                id: id.into_owned(),
                incarnation: m.incarnation,
                state: m.state().wire(),
                meta: if with_meta { meta.to_vec() } else { Vec::new() },
            });
        }
        let others = &mut out[1..];
        if !others.is_sorted_by(|a, b| a.id <= b.id) {
            others.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        }
        out
    }

    fn contact_seeds(&mut self, now: Time) {
        self.next_seed_retry = now + self.jitter(self.cfg.seed_retry_interval);
        if self.seeds.is_empty() || self.left {
            return;
        }
        for seed in self.seeds.clone() {
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
        if (self.live == 0 || self.cut_off) && !self.seeds.is_empty() && !self.left {
            if !self.in_fallback && self.members.recs().any(|m| !m.state().is_live()) {
                self.in_fallback = true;
                self.push_event(Event::SeedFallback);
            }
            self.contact_seeds(now);
        } else {
            self.next_seed_retry = now + self.cfg.seed_retry_interval;
        }
    }

    pub(crate) fn push_pull_interval(&self) -> Duration {
        let scale = (self.live + 1).div_ceil(self.cfg.push_pull_scale).max(1);
        self.cfg.push_pull_interval * scale as u32
    }

    pub(crate) fn push_pull_tick(&mut self, now: Time) {
        // Spread over half to one and a half intervals, so that nodes started
        // together do not sync in waves.
        let interval = self
            .push_pull_interval()
            .mul_f64(self.rng.random_range(0.5..1.5));
        self.next_push_pull = now + interval;
        if self.left {
            return;
        }
        if let Some(peer) = self.random_live(1, None).pop() {
            self.stats.syncs += 1;
            let msg = Message::PushPull {
                join: false,
                reply: true,
                digest: true,
                members: self.digest_records(),
            };
            self.send(peer, Channel::Stream, vec![msg]);
        }
    }

    /// Pings a random member declared dead. If it is alive on the other side
    /// of a healed partition, the dead notices both sides send each other make
    /// both refute, and the refutations spread on each side. A ping, not a
    /// full-state sync: every node does this, and the target is usually
    /// really dead.
    pub(crate) fn reconnect_tick(&mut self, now: Time) {
        self.next_reconnect = now + self.jitter(self.cfg.reconnect_interval);
        if self.left || self.tombstones.is_empty() {
            return;
        }
        let c = self.tombstones[self.rng.random_range(0..self.tombstones.len())].clone();
        if self
            .members
            .get(&c)
            .is_some_and(|m| m.state() == MemberState::Dead)
        {
            let seq = self.fresh_seq();
            let ping = Message::Ping {
                seq,
                target: c.clone(),
                suspected: None,
            };
            self.send(c, Channel::Datagram, vec![ping]);
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
        // A digest: deaths and departures need no metadata; the rest is
        // compared with what this node knows.
        let mut theirs: crate::node::FxMap<I, (u32, u8)> = crate::node::FxMap::default();
        theirs.reserve(members.len());
        for r in members {
            theirs.insert(r.id.clone(), (r.incarnation, rank(r.state)));
            if matches!(r.state, WireState::Dead | WireState::Left) {
                self.merge_record(now, Some(from), r);
            }
        }
        // Chosen without metadata; only what is sent gets its metadata copied.
        let mut better: Vec<MemberRecord<I>> = self
            .digest_records()
            .into_iter()
            .filter(|m| match theirs.get(&m.id) {
                Some(&(inc, r)) => (m.incarnation, rank(m.state)) > (inc, r),
                // Never teach a member through its death.
                None => matches!(m.state, WireState::Alive | WireState::Suspect),
            })
            .collect();
        for r in &mut better {
            r.meta = if r.id == self.me {
                self.meta.to_vec()
            } else {
                self.members.meta(&r.id).to_vec()
            };
        }
        if better.is_empty() && !reply {
            return;
        }
        if !self.take_sync_token(now) {
            return;
        }
        let mut msgs = Vec::with_capacity(2);
        if !better.is_empty() {
            msgs.push(Message::PushPull {
                join: false,
                reply: false,
                digest: false,
                members: better,
            });
        }
        if reply {
            msgs.push(Message::PushPull {
                join: false,
                reply: false,
                digest: true,
                members: self.digest_records(),
            });
        }
        self.send(from.clone(), Channel::Stream, msgs);
    }

    /// Bounded: a token bucket caps sync replies per second. Counts a refusal.
    fn take_sync_token(&mut self, now: Time) -> bool {
        let rate = f64::from(self.cfg.sync_replies_per_sec);
        let elapsed = now.saturating_since(self.sync_tokens_at).as_secs_f64();
        self.sync_tokens = (self.sync_tokens + elapsed * rate).min(rate);
        self.sync_tokens_at = now;
        if self.sync_tokens >= 1.0 {
            self.sync_tokens -= 1.0;
            true
        } else {
            self.stats.sync_replies_refused += 1;
            false
        }
    }

    /// Merges one record of a full-state sync from `from` (None: a restore).
    /// Only news about the sender itself is re-gossiped: bulk state is old
    /// news to everyone else, and gossiping it would flood the cluster on joins.
    fn merge_record(&mut self, now: Time, from: Option<&I>, r: MemberRecord<I>) {
        let about_sender = from == Some(&r.id);
        let declarer = from.cloned().unwrap_or_else(|| self.me.clone());
        match r.state {
            WireState::Alive | WireState::Suspect => {
                self.apply_alive(now, &r.id, r.incarnation, Some(r.meta), about_sender);
            }
            WireState::Dead => {
                if !self.members.contains(&r.id) && r.id != self.me {
                    return; // Never learn of a member through its death.
                }
                let accusers = self.cfg.corroboration as u8;
                self.apply_dead(now, &r.id, r.incarnation, &declarer, accusers, false);
            }
            WireState::Left => {
                if !self.members.contains(&r.id) && r.id != self.me {
                    return;
                }
                self.apply_left(now, &r.id, r.incarnation, about_sender);
            }
        }
    }
}

/// Which of two records at the same incarnation is news: a suspicion over
/// an alive, a death over both, a departure over everything.
fn rank(s: WireState) -> u8 {
    match s {
        WireState::Alive => 0,
        WireState::Suspect => 1,
        WireState::Dead => 2,
        WireState::Left => 3,
    }
}
