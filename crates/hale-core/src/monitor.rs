//! Ring monitoring: every member is watched by its ring neighbours, so that
//! the first probe of a crashed member comes within one monitor interval of
//! its last packet, whatever the cluster's size.
//!
//! Each node sends its `monitors` closest live neighbours *before* it on
//! the ring (`monitored`) a heartbeat whenever it has not heard from one of
//! them within `monitor_interval` (`Config::ring_heartbeats`, to members
//! written version 3). The `monitors` closest neighbours *after* it
//! (`watchers`, whose heartbeats it gets) are watched: they are expected to
//! speak every interval, and are pinged only when they stay quiet a
//! sixteenth of an interval longer; as that probe starts, a second observer
//! is asked to probe too ([`crate::wire::Message::Corroborate`]), so that a
//! verdict's two accusers date from the same silence. So each member is
//! watched by the `monitors` members before it, for one datagram per
//! member a period.
//!
//! A heartbeat is sent the way a ping is, so that a closed port answers it
//! ([`crate::Node::handle_unreachable`] then probes at once): a crashed
//! predecessor is found by its successor's next heartbeat. What a
//! heartbeat cannot find (a frozen predecessor) is found by that member's
//! own predecessor, whose heartbeats stop.
//!
//! Without heartbeats (a member written version 2, `ring_heartbeats`
//! off, or this node's local health not perfect) the neighbour before is
//! pinged: the ack and the ping are each one side's proof of life to the
//! other, so each member has `2 × monitors` watchers for `monitors`
//! exchanges a period. A node whose health is not perfect pings by turn
//! unscaled, whatever it heard: its acks are what bring its score back,
//! and its watchers' pings (which its slower turn invites) are not.

use std::time::Duration;

use smallvec::SmallVec;

use crate::identity::Identity;
use crate::member::MemberState;
use crate::probe::Probing;
use crate::shared::Shared;
use crate::time::Time;
use crate::walk::Walk;
use crate::wire::{Channel, Message};

/// Neighbours kept inline, in the node's own memory: they are read after
/// every input (the next deadline), and a separate allocation would be a
/// cache miss each time in a simulator of 10,000 nodes.
type Inline<T> = SmallVec<[T; 4]>;

/// The ring neighbours this node watches.
///
/// Invariants: `ids` holds the members of `monitored` (its first
/// `monitored` entries), then of `watchers`; no member is in both;
/// `pinged` has one entry per member of `ids`; `horizon` is the ring
/// distance of the farthest unsuspected neighbour before and after
/// (`u64::MAX` when there are fewer than `monitors`); the member table
/// watches `ids`, in order ([`crate::table::Table::watch`]). While
/// `deferred` (a snapshot loads), changes only set `dirty`.
#[derive(Debug)]
pub(crate) struct Monitors<I> {
    /// Ring neighbours before this node (pinged when quiet for a monitor
    /// interval), then those after it (they ping it; pinged when quiet
    /// longer).
    ids: Inline<I>,
    /// How many of `ids` are before this node.
    monitored: usize,
    /// When each of `ids` was last pinged by turn.
    pinged: Inline<Time>,
    horizon: (u64, u64),
    /// A snapshot is loading: not a lifecycle phase (it lasts within one
    /// call, in any phase), and set apart from `dirty`, which says whether
    /// a change came meanwhile.
    deferred: bool,
    dirty: bool,
}

impl<I: Identity> Monitors<I> {
    /// No neighbours yet.
    pub(crate) fn new() -> Monitors<I> {
        Monitors {
            ids: Inline::new(),
            monitored: 0,
            pinged: Inline::new(),
            horizon: (u64::MAX, u64::MAX),
            deferred: false,
            dirty: false,
        }
    }

    /// The neighbours pinged by turn.
    pub(crate) fn monitored(&self) -> &[I] {
        &self.ids[..self.monitored]
    }

    /// The neighbours expected to ping this node.
    pub(crate) fn watchers(&self) -> &[I] {
        &self.ids[self.monitored..]
    }

    /// Defers recomputing until [`Monitors::resume`].
    pub(crate) fn defer(&mut self) {
        self.deferred = true;
    }

    /// Stops deferring; whether a change was deferred.
    pub(crate) fn resume(&mut self) -> bool {
        self.deferred = false;
        self.dirty
    }

    /// How long a neighbour may stay quiet before this node pings it:
    /// `monitor_interval` for the members it pings by turn, and for the
    /// watchers who are expected to speak to it an eighth more (a
    /// sixteenth with heartbeats); scaled by local health.
    fn quiet_window(sh: &Shared<I>, passive: bool) -> Duration {
        let w = sh.scaled(sh.cfg().monitor_interval);
        match (passive, sh.cfg().ring_heartbeats) {
            // A heartbeat is due on the sender's timer, a ping's ack a
            // round trip later: a sixteenth (47 ms on lan) is the slack.
            (true, true) => w + w / 16,
            (true, false) => w + w / 8,
            (false, _) => w,
        }
    }

    /// When neighbour `i` (an index into `monitored`, then `watchers`) is
    /// due for a ping, if it is live and none is in flight.
    fn due(&self, sh: &Shared<I>, probing: &Probing<I>, i: usize) -> Option<Time> {
        let (id, passive) = self.neighbour(i)?;
        let m = sh.members().watched(i, id)?;
        if !m.state().is_live() || probing.probe_of(id).is_some() {
            return None;
        }
        if !passive && sh.cfg().ring_heartbeats && sh.health() > 0 {
            // Recovering: pinged by turn for the acks (module docs).
            return Some(self.pinged[i] + sh.cfg().monitor_interval);
        }
        // What it sends counts only while it is unsuspected and in good
        // health (a node that cannot receive still sends).
        let heard = if sh.cfg().skip_fresh
            && m.state() == MemberState::Alive
            && m.health() < sh.cfg().health_discount
        {
            sh.members().heard(m)
        } else {
            Time::ZERO
        };
        let since = heard.max(self.pinged[i]);
        Some(since + Self::quiet_window(sh, passive))
    }

    /// Neighbour `i`: an index into `monitored` (pinged by turn), then
    /// `watchers` (passive: `true`).
    fn neighbour(&self, i: usize) -> Option<(&I, bool)> {
        let id = self.ids.get(i)?;
        Some((id, i >= self.monitored))
    }

    /// Whether `id` is a neighbour this node sent a heartbeat to within
    /// `window` of `now`.
    pub(crate) fn heartbeat_within(
        &self,
        sh: &Shared<I>,
        id: &I,
        now: Time,
        window: Duration,
    ) -> bool {
        sh.cfg().ring_heartbeats
            && self
                .monitored()
                .iter()
                .zip(&self.pinged)
                .any(|(m, at)| m == id && *at + window >= now)
    }

    /// The earliest time a neighbour is due for a ping.
    pub(crate) fn next_due(&self, sh: &Shared<I>, probing: &Probing<I>) -> Time {
        if sh.isolation().phase().has_left() {
            return Time::NEVER;
        }
        (0..self.pinged.len())
            .filter_map(|i| self.due(sh, probing, i))
            .min()
            .unwrap_or(Time::NEVER)
    }

    /// Pings every neighbour whose quiet window ran out.
    pub(crate) fn tick(&mut self, sh: &mut Shared<I>, probing: &mut Probing<I>, now: Time) {
        if sh.isolation().phase().has_left() {
            return;
        }
        for i in 0..self.pinged.len() {
            if self.due(sh, probing, i).is_some_and(|due| due <= now) {
                let Some((target, passive)) = self.neighbour(i) else {
                    continue;
                };
                let target = target.clone();
                self.pinged[i] = now;
                if !passive
                    && sh.cfg().ring_heartbeats
                    && sh.health() == 0
                    && sh.writes_v3_to(&target)
                {
                    sh.stats_mut().heartbeats += 1;
                    sh.send(target, Channel::Datagram, vec![Message::Heartbeat]);
                } else {
                    probing.start_probe(sh, now, &target);
                    if passive && sh.cfg().ring_heartbeats {
                        sh.ask_corroboration(probing.walk(), &target);
                    }
                }
            }
        }
    }

    /// Recomputes the neighbours if a change of `id` can affect them.
    pub(crate) fn changed(&mut self, sh: &mut Shared<I>, id: &I) {
        let Some(m) = sh.members().get(id) else {
            return;
        };
        if self.deferred {
            self.dirty = true;
            return;
        }
        let relevant = if m.state().is_live() {
            let k = sh.cfg().monitors;
            self.monitored().len() < k || self.watchers().len() < k || {
                let ring = sh.local().ring_of(id);
                sh.local().ring().wrapping_sub(ring) <= self.horizon.0
                    || ring.wrapping_sub(sh.local().ring()) <= self.horizon.1
            }
        } else {
            self.ids.contains(id)
        };
        if relevant {
            self.recompute(sh);
        }
    }

    /// The `monitors` unsuspected members closest before this node on the
    /// ring (pinged by turn) and the `monitors` closest after it (its
    /// watchers), each side with the suspected members that lie closer: a
    /// suspected neighbour stays watched, and the next one is watched too,
    /// so that when two neighbours fail together each still has two
    /// accusers. A member that is on both sides (a small cluster) is only
    /// pinged by turn.
    pub(crate) fn recompute(&mut self, sh: &mut Shared<I>) {
        self.dirty = false;
        let k = sh.cfg().monitors;
        let mut before: Vec<(u64, I)> = Vec::with_capacity(k + 1);
        let mut after: Vec<(u64, I)> = Vec::with_capacity(k + 1);
        let mut suspects: Vec<(u64, u64, I)> = Vec::new();
        let keep = |best: &mut Vec<(u64, I)>, d: u64, id: &I| {
            if best.len() < k || best.last().is_some_and(|(bd, _)| d < *bd) {
                let pos = best.partition_point(|(bd, _)| *bd <= d);
                best.insert(pos, (d, id.clone()));
                best.truncate(k);
            }
        };
        for (id, m) in sh.members().iter() {
            if !m.state().is_live() || k == 0 {
                continue;
            }
            let ring = sh.local().ring_of(&*id);
            let (db, da) = (
                sh.local().ring().wrapping_sub(ring),
                ring.wrapping_sub(sh.local().ring()),
            );
            if m.state() == MemberState::Suspect {
                suspects.push((db, da, id.into_owned()));
                continue;
            }
            keep(&mut before, db, &id);
            keep(&mut after, da, &id);
        }
        let horizon = |best: &Vec<(u64, I)>| {
            if best.len() < k {
                u64::MAX
            } else {
                best.last().map_or(u64::MAX, |(d, _)| *d)
            }
        };
        self.horizon = (horizon(&before), horizon(&after));
        for (db, da, id) in suspects {
            if db < self.horizon.0 {
                before.push((db, id.clone()));
            }
            if da < self.horizon.1 {
                after.push((da, id));
            }
        }
        before.sort_unstable_by_key(|e| e.0);
        after.sort_unstable_by_key(|e| e.0);
        let old_ids = std::mem::take(&mut self.ids);
        let old_pinged = std::mem::take(&mut self.pinged);
        let mut ids: Inline<I> = before.into_iter().map(|(_, id)| id).collect();
        let monitored = ids.len();
        for (_, id) in after {
            if !ids[..monitored].contains(&id) {
                ids.push(id);
            }
        }
        // A neighbour kept keeps the time of its last ping.
        self.pinged = ids
            .iter()
            .map(|id| {
                old_ids
                    .iter()
                    .position(|o| o == id)
                    .map_or(Time::ZERO, |k| old_pinged[k])
            })
            .collect();
        self.ids = ids;
        self.monitored = monitored;
        // The records read after every input (`next_monitor_due`).
        sh.members_mut().watch(&self.ids);
    }
}

impl<I: Identity> Shared<I> {
    /// A watcher's probe of `target` started: a second observer probes it
    /// too (the module docs), if written version 3. It is the unsuspected
    /// ring neighbour closest after `target` (whose heartbeats it gets),
    /// or a random unsuspected member: a ring neighbour holds `target`'s
    /// latest incarnation (refutations go to them), where a random member
    /// may hold an older one and accuse at it, which counts for nothing.
    fn ask_corroboration(&mut self, walk: &Walk<I>, target: &I) {
        let me = self.local().id().clone();
        let at = self.local().ring_of(target);
        let neighbour = self
            .ring_neighbours(target)
            .into_iter()
            .filter(|(id, unsuspected)| *unsuspected && *id != me)
            .min_by_key(|(id, _)| self.local().ring_of(id).wrapping_sub(at))
            .map(|(id, _)| id);
        let Some(other) =
            neighbour.or_else(|| self.random_unsuspected(walk, 1, Some(target)).pop())
        else {
            return;
        };
        if self.writes_v3_to(&other) {
            let msg = Message::Corroborate {
                target: target.clone(),
            };
            self.send(other, Channel::Datagram, vec![msg]);
        }
    }
}
