//! Targeted suspicions: an accusation goes to the suspect and its ring
//! watchers, not to the whole cluster.
//!
//! Only three kinds of member act on a suspicion: the suspect (it refutes),
//! the members that can corroborate it (its ring neighbours, who ping it
//! every monitor interval, and any other accuser), and nobody else: a member
//! that is neither waits for the verdict, which is still gossiped to
//! everyone. So an accuser sends its accusation straight to the suspect, to
//! the suspect's ring neighbours as it sees them and to the accusers it knows
//! of, [`TARGETED_SENDS`] times a gossip interval apart (a lost datagram
//! costs one interval, not the verdict), and nobody re-gossips it. The
//! suspect's refutation goes back the same way: to its accuser and its own
//! ring neighbours. An accuser that hears of another accuser tells it of its
//! own accusation, so that both count two.
//!
//! Under a storm of stalls this is the difference between every node
//! relaying every suspicion and its refutation (`retransmit_limit` times
//! each, a gossip round each) and a handful of datagrams per stall.
//!
//! When the suspect has fewer ring neighbours (other than this node) than a
//! verdict needs further accusers (a tiny cluster, or a `corroboration`
//! above what `monitors` provides), the suspicion is gossiped to everyone as
//! before: only then can members that are not neighbours corroborate it in
//! time.

use crate::broadcast::Key;
use crate::identity::Identity;
use crate::member::MemberState;
use crate::shared::Shared;
use crate::state::Suspicions;
use crate::time::Time;
use crate::wire::{Channel, Message};

/// Times each targeted message is sent, a gossip interval apart.
pub(crate) const TARGETED_SENDS: u8 = 3;

/// A message sent to a few members, with its remaining sends.
#[derive(Debug, Clone)]
pub(crate) struct TargetedItem<I> {
    key: Key<I>,
    msg: Message<I>,
    to: Vec<I>,
    left: u8,
    next: Time,
    /// A recipient that keeps getting it every gossip interval after the
    /// others stop, until then: the suspect, which must hear of its
    /// suspicion to refute it even through heavy loss on its side.
    keep_sending: Option<(I, Time)>,
}

/// Targeted messages still to be sent again.
///
/// Invariant: at most one item per key; every item has a send left, or a
/// suspect to keep sending to until a time after its next send.
#[derive(Debug)]
pub(crate) struct Targeted<I> {
    items: Vec<TargetedItem<I>>,
}

impl<I: Identity> Targeted<I> {
    /// Nothing pending.
    pub(crate) fn new() -> Targeted<I> {
        Targeted { items: Vec::new() }
    }

    /// Sends `msg` to `to` now and again [`TARGETED_SENDS`]` - 1` times, a
    /// gossip interval apart, replacing what was pending under `key`. With
    /// `suspect`, that member keeps getting it every gossip interval for
    /// twice `suspicion_min` (until the suspicion is cleared or decided):
    /// a member losing most of its ingress would otherwise miss all of a
    /// few copies and be convicted while it could have refuted.
    pub(crate) fn send(
        &mut self,
        sh: &mut Shared<I>,
        now: Time,
        key: Key<I>,
        msg: Message<I>,
        to: Vec<I>,
        suspect: Option<I>,
    ) {
        self.drop(&key);
        sh.stats_mut().targeted_sent += to.len() as u64;
        for t in &to {
            sh.send(t.clone(), Channel::Datagram, vec![msg.clone()]);
        }
        self.items.push(TargetedItem {
            key,
            msg,
            to,
            left: TARGETED_SENDS - 1,
            next: now + sh.cfg().gossip_interval,
            keep_sending: suspect.map(|m| (m, now + sh.cfg().suspicion_min * 2)),
        });
    }

    /// Stops sending what is pending under `key`.
    pub(crate) fn drop(&mut self, key: &Key<I>) {
        self.items.retain(|t| t.key != *key);
    }

    /// Stops sending every accusation of `member`.
    pub(crate) fn drop_about(&mut self, member: &I) {
        self.items
            .retain(|t| t.key.0 != *member || t.key.1.is_none());
    }

    /// When a targeted message is next due.
    pub(crate) fn next_due(&self) -> Time {
        self.items
            .iter()
            .map(|t| t.next)
            .min()
            .unwrap_or(Time::NEVER)
    }

    /// Sends every targeted message that is due again.
    pub(crate) fn tick(&mut self, sh: &mut Shared<I>, now: Time) {
        if self.items.iter().all(|t| t.next > now) {
            return;
        }
        let mut items = std::mem::take(&mut self.items);
        for item in &mut items {
            if item.next > now {
                continue;
            }
            let to: &[I] = match &item.keep_sending {
                _ if item.left > 0 => &item.to,
                Some((m, until)) if now < *until => std::slice::from_ref(m),
                _ => &[],
            };
            sh.stats_mut().targeted_sent += to.len() as u64;
            for t in to {
                sh.send(t.clone(), Channel::Datagram, vec![item.msg.clone()]);
            }
            item.left = item.left.saturating_sub(1);
            item.next = now + sh.cfg().gossip_interval;
        }
        items.retain(|t| {
            t.left > 0
                || t.keep_sending
                    .as_ref()
                    .is_some_and(|(_, until)| t.next < *until)
        });
        // Sends never queue targeted messages: nothing was added meanwhile.
        debug_assert!(self.items.is_empty());
        self.items = items;
    }
}

impl<I: Identity> Shared<I> {
    /// The members that watch `x` as this node sees the ring, this node
    /// included when it is one, each with whether it is unsuspected here
    /// (only those ping `x` by this node's reckoning): on each side, the live members closer to
    /// `x` than its `monitors`-th unsuspected neighbour, and at least
    /// `monitors + 1` of them. The one more covers a neighbour suspected
    /// somewhere else but not here: the member that watches `x` in its
    /// place (because it skips the suspect) is then still told.
    pub(crate) fn ring_neighbours(&mut self, x: &I) -> Vec<(I, bool)> {
        let k = self.cfg().monitors;
        if k == 0 {
            return Vec::new();
        }
        let xr = self.local().ring_of(x);
        // (distance, id, unsuspected), closest first, trimmed as it grows.
        let mut before: Vec<(u64, I, bool)> = Vec::with_capacity(k + 2);
        let mut after: Vec<(u64, I, bool)> = Vec::with_capacity(k + 2);
        let keep = |side: &mut Vec<(u64, I, bool)>, d: u64, id: &I, alive: bool| {
            let full = side.len() > k && side.iter().filter(|e| e.2).count() >= k;
            if full && side.last().is_some_and(|e| d >= e.0) {
                return;
            }
            let pos = side.partition_point(|e| e.0 <= d);
            side.insert(pos, (d, id.clone(), alive));
            // Everything up to the k-th unsuspected, and k + 1 at least.
            let mut alive_seen = 0;
            let mut end = side.len();
            for (i, e) in side.iter().enumerate() {
                alive_seen += usize::from(e.2);
                if alive_seen >= k && i >= k {
                    end = i + 1;
                    break;
                }
            }
            side.truncate(end);
        };
        if *x != *self.local().id() {
            let me = self.local().id().clone();
            keep(&mut before, xr.wrapping_sub(self.local().ring()), &me, true);
            keep(&mut after, self.local().ring().wrapping_sub(xr), &me, true);
        }
        for (id, m) in self.members().iter() {
            if !m.state().is_live() || *id == *x {
                continue;
            }
            let alive = m.state() == MemberState::Alive;
            let r = self.local().ring_of(&*id);
            keep(&mut before, xr.wrapping_sub(r), &id, alive);
            keep(&mut after, r.wrapping_sub(xr), &id, alive);
        }
        let mut out: Vec<(I, bool)> = Vec::with_capacity(before.len() + after.len());
        for (_, id, alive) in before.into_iter().chain(after) {
            if !out.iter().any(|(o, _)| *o == id) {
                out.push((id, alive));
            }
        }
        out
    }

    /// Where this node's accusation of `member` goes: the member, its ring
    /// neighbours and every accuser known here, this node excluded. None
    /// when the suspicion must be gossiped to everyone instead (targeted
    /// suspicions are off, or the neighbours cannot corroborate it alone).
    pub(crate) fn suspicion_targets(
        &mut self,
        suspicions: &Suspicions<I>,
        member: &I,
    ) -> Option<Vec<I>> {
        let mut to = self.targeted_neighbours(member)?;
        to.push(member.clone());
        if let Some(s) = suspicions.get(member) {
            for a in s.accusers.iter().chain(&s.discounted) {
                if *a != *self.local().id() && !to.contains(a) {
                    to.push(a.clone());
                }
            }
        }
        Some(to)
    }

    /// Whether suspicions of `member` (and so its refutations) are gossiped
    /// to everyone here rather than targeted.
    pub(crate) fn gossips_suspicions_of(&mut self, member: &I) -> bool {
        self.targeted_neighbours(member).is_none()
    }

    /// `member`'s ring neighbours other than this node, when suspicions of
    /// it are targeted: they are on, and the neighbours with this node are
    /// as many as a verdict needs accusers.
    fn targeted_neighbours(&mut self, member: &I) -> Option<Vec<I>> {
        if !self.cfg().targeted_suspicions {
            return None;
        }
        let mut to = self.ring_neighbours(member);
        to.retain(|(id, _)| *id != *self.local().id());
        let watching = to.iter().filter(|(_, alive)| *alive).count();
        (watching + 1 >= self.required_accusers(member))
            .then(|| to.into_iter().map(|(id, _)| id).collect())
    }

    /// Whether this node's refutations go to its accusers and ring
    /// neighbours only: it has as many neighbours as a verdict needs
    /// accusers (so its accusers targeted their suspicions too).
    pub(crate) fn targeted_refutation(&self, neighbours: usize) -> bool {
        self.cfg().targeted_suspicions
            && neighbours >= self.cfg().corroboration.min(self.members().alive().max(1))
    }

    /// Where this node's refutation goes: `accuser` and its own ring
    /// neighbours as [`Shared::ring_neighbours`] counts them, which is where
    /// every accuser sent its accusation. A holder of the suspicion that
    /// missed the refutation would combine its stale accusers with a
    /// failed probe in a later stall into a verdict at the old incarnation,
    /// which members that never heard the refutation would accept.
    pub(crate) fn refutation_targets(&mut self, accuser: &I) -> Vec<I> {
        let me = self.local().id().clone();
        let mut to = vec![accuser.clone()];
        for (id, _) in self.ring_neighbours(&me) {
            if !to.contains(&id) {
                to.push(id);
            }
        }
        to
    }

    /// An accusation of this node at `incarnation`, older than its own,
    /// came straight from its accuser `from`: the suspicion reached it after
    /// the refutation went out. Answer it with the refutation.
    pub(crate) fn answer_old_accusation(&mut self, from: &I, accuser: &I, incarnation: u32) {
        if !self.cfg().targeted_suspicions
            || from != accuser
            || incarnation >= self.local().incarnation()
            || self.isolation().phase().has_left()
        {
            return;
        }
        let msg = self.local().alive();
        self.stats_mut().targeted_sent += 1;
        self.send(from.clone(), Channel::Datagram, vec![msg]);
    }

    /// Independent healthy accusers needed for a verdict here: the
    /// configured corroboration, or fewer when the cluster has fewer
    /// unsuspected members that could confirm; never this node's word
    /// alone in a cluster large enough to infer that it is the one cut off.
    pub(crate) fn required_accusers(&self, target: &I) -> usize {
        // The target itself is no witness (it is suspect or dead in a verdict
        // we reach, possibly still alive in one we are told about).
        let target_alive = self
            .members()
            .get(target)
            .is_some_and(|m| m.state() == MemberState::Alive);
        let witnesses = self.members().alive() - usize::from(target_alive);
        let required = self.cfg().corroboration.min(witnesses + 1).max(1);
        // With every other member suspected, no one is left to confirm; in a
        // cluster large enough to tell, that silence says this node is the one
        // cut off (`isolation.rs`), so its own word is no verdict: it waits
        // to conclude so, which withdraws its accusations.
        if self.large_enough_to_infer_cut_off() {
            required.max(self.cfg().corroboration.min(2))
        } else {
            required
        }
    }
}
