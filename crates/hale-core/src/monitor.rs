//! Ring monitoring: every member is watched by its ring neighbours, so that
//! the first probe of a crashed member comes within one monitor interval of
//! its last packet, whatever the cluster's size.
//!
//! Each node pings its `monitors` closest live neighbours *before* it on the
//! ring (`monitored`) whenever it has not heard from one of them within
//! `monitor_interval`: the ack and the ping are each one side's proof of
//! life to the other, so a pair costs one exchange a period. The
//! `monitors` closest neighbours *after* it (`watchers`, who ping it) are
//! watched passively: they are expected to speak every interval, and are
//! pinged only when they stay quiet an eighth of an interval longer. So each
//! member has `2 × monitors` watchers (those before it ping it, those after
//! it expect its pings), for the cost of `monitors` exchanges a period.

use std::time::Duration;

use crate::identity::Identity;
use crate::member::MemberState;
use crate::node::Node;
use crate::time::Time;

/// The ring neighbours this node watches.
///
/// Invariants: `pinged` has one entry per member of `monitored`, then of
/// `watchers`; no member is in both; `horizon` is the ring distance of the
/// farthest unsuspected neighbour before and after (`u64::MAX` when there
/// are fewer than `monitors`). While `deferred` (a snapshot loads), changes
/// only set `dirty`.
#[derive(Debug)]
pub(crate) struct Monitors<I> {
    /// Ring neighbours before this node: pinged when quiet for a monitor interval.
    monitored: Vec<I>,
    /// Ring neighbours after this node (they ping it): pinged when quiet longer.
    watchers: Vec<I>,
    /// When each of `monitored`, then `watchers`, was last pinged by turn.
    pinged: Vec<Time>,
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
            monitored: Vec::new(),
            watchers: Vec::new(),
            pinged: Vec::new(),
            horizon: (u64::MAX, u64::MAX),
            deferred: false,
            dirty: false,
        }
    }

    /// The neighbours pinged by turn.
    pub(crate) fn monitored(&self) -> &[I] {
        &self.monitored
    }

    /// The neighbours expected to ping this node.
    pub(crate) fn watchers(&self) -> &[I] {
        &self.watchers
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
}

impl<I: Identity> Node<I> {
    /// How long a neighbour may stay quiet before this node pings it:
    /// `monitor_interval` for the members it pings by turn, an eighth more
    /// for the watchers who are expected to ping it (scaled by local health).
    fn quiet_window(&self, passive: bool) -> Duration {
        let w = self.scaled(self.cfg.monitor_interval);
        if passive {
            w + w / 8
        } else {
            w
        }
    }

    /// When neighbour `i` (an index into `monitored`, then `watchers`) is
    /// due for a ping, if it is live and none is in flight.
    fn monitor_due(&self, i: usize) -> Option<Time> {
        let (id, passive) = self.neighbour(i)?;
        let m = self.members.get(id)?;
        if !m.state().is_live() || self.probing.probe_of(id).is_some() {
            return None;
        }
        // What it sends counts only while it is unsuspected and in good
        // health (a node that cannot receive still sends).
        let heard = if self.cfg.skip_fresh
            && m.state() == MemberState::Alive
            && m.health() < self.cfg.health_discount
        {
            self.members.heard(m)
        } else {
            Time::ZERO
        };
        let since = heard.max(self.monitors.pinged[i]);
        Some(since + self.quiet_window(passive))
    }

    /// Neighbour `i`: an index into `monitored` (pinged by turn), then
    /// `watchers` (passive: `true`).
    fn neighbour(&self, i: usize) -> Option<(&I, bool)> {
        match self.monitors.monitored.get(i) {
            Some(id) => Some((id, false)),
            None => Some((
                self.monitors
                    .watchers
                    .get(i - self.monitors.monitored.len())?,
                true,
            )),
        }
    }

    /// The earliest time a neighbour is due for a ping.
    pub(crate) fn next_monitor_due(&self) -> Time {
        if self.phase.has_left() {
            return Time::NEVER;
        }
        (0..self.monitors.pinged.len())
            .filter_map(|i| self.monitor_due(i))
            .min()
            .unwrap_or(Time::NEVER)
    }

    /// Pings every neighbour whose quiet window ran out.
    pub(crate) fn monitor_tick(&mut self, now: Time) {
        if self.phase.has_left() {
            return;
        }
        for i in 0..self.monitors.pinged.len() {
            if self.monitor_due(i).is_some_and(|due| due <= now) {
                let Some((target, _)) = self.neighbour(i) else {
                    continue;
                };
                let target = target.clone();
                self.monitors.pinged[i] = now;
                self.start_probe(now, &target);
            }
        }
    }

    /// Recomputes the neighbours if a change of `id` can affect them.
    pub(crate) fn monitors_changed(&mut self, id: &I) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        if self.monitors.deferred {
            self.monitors.dirty = true;
            return;
        }
        let relevant = if m.state().is_live() {
            let k = self.cfg.monitors;
            self.monitors.monitored.len() < k || self.monitors.watchers.len() < k || {
                let ring = self.local.ring_of(id);
                self.local.ring().wrapping_sub(ring) <= self.monitors.horizon.0
                    || ring.wrapping_sub(self.local.ring()) <= self.monitors.horizon.1
            }
        } else {
            self.monitors.monitored.contains(id) || self.monitors.watchers.contains(id)
        };
        if relevant {
            self.recompute_monitors();
        }
    }

    /// The `monitors` unsuspected members closest before this node on the
    /// ring (pinged by turn) and the `monitors` closest after it (its
    /// watchers), each side with the suspected members that lie closer: a
    /// suspected neighbour stays watched, and the next one is watched too,
    /// so that when two neighbours fail together each still has two
    /// accusers. A member that is on both sides (a small cluster) is only
    /// pinged by turn.
    pub(crate) fn recompute_monitors(&mut self) {
        self.monitors.dirty = false;
        let k = self.cfg.monitors;
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
        for (id, m) in self.members.iter() {
            if !m.state().is_live() || k == 0 {
                continue;
            }
            let ring = self.local.ring_of(&*id);
            let (db, da) = (
                self.local.ring().wrapping_sub(ring),
                ring.wrapping_sub(self.local.ring()),
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
        self.monitors.horizon = (horizon(&before), horizon(&after));
        for (db, da, id) in suspects {
            if db < self.monitors.horizon.0 {
                before.push((db, id.clone()));
            }
            if da < self.monitors.horizon.1 {
                after.push((da, id));
            }
        }
        before.sort_unstable_by_key(|e| e.0);
        after.sort_unstable_by_key(|e| e.0);
        let old: Vec<(I, Time)> = self
            .monitors
            .monitored
            .iter()
            .chain(&self.monitors.watchers)
            .cloned()
            .zip(self.monitors.pinged.iter().copied())
            .collect();
        self.monitors.monitored = before.into_iter().map(|(_, id)| id).collect();
        self.monitors.watchers = after
            .into_iter()
            .map(|(_, id)| id)
            .filter(|id| !self.monitors.monitored.contains(id))
            .collect();
        // A neighbour kept keeps the time of its last ping.
        self.monitors.pinged = self
            .monitors
            .monitored
            .iter()
            .chain(&self.monitors.watchers)
            .map(|id| {
                old.iter()
                    .find(|(o, _)| o == id)
                    .map_or(Time::ZERO, |(_, t)| *t)
            })
            .collect();
    }
}
