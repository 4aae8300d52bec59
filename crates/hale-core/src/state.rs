//! Membership rules: how news changes a member's state, suspicion with
//! corroboration, verdicts and refutation.
//!
//! # Conflict rules
//!
//! * Only a member raises its own incarnation (to refute, rejoin or publish
//!   metadata). News about a member at a lower incarnation than known is old
//!   and ignored.
//! * `Alive(i)` wins over anything at an incarnation below `i`.
//! * `Suspect(i)` wins over `Alive(i)`; more `Suspect(i)` from other
//!   accusers are confirmations.
//! * `Dead(i)` wins over `Alive(i)` and `Suspect(i)` only when it rests on
//!   at least `corroboration` independent healthy accusers (fewer only when
//!   the cluster is too small to have them).
//! * `Left(i)` wins over everything at `i`: a member that said goodbye is not dead.
//! * News about this node at or above its incarnation (suspect, dead, left
//!   while it has not) is refuted by raising the incarnation above it.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::identity::Identity;
use crate::member::MemberState;
use crate::shared::Shared;
use crate::table::FxMap;
use crate::time::Time;

/// Most accusers remembered per suspicion.
pub(crate) const MAX_ACCUSERS: usize = 16;

/// Members a declarer sends its own verdict to at once, before gossip
/// (a death is rare; 32 datagrams reach everyone in most clusters).
pub(crate) const VERDICT_FANOUT: usize = 32;

/// What this node knows about one suspected member.
#[derive(Debug, Clone)]
pub(crate) struct Suspicion<I> {
    pub(crate) started: Time,
    /// When this node's own probe failed, if it did.
    pub(crate) accused_at: Option<Time>,
    /// Independent healthy accusers (this node included when it accused while healthy).
    pub(crate) accusers: Vec<I>,
    /// When each accuser's silence began, as far as this node can tell: its
    /// own failed probe's first ping; another's accusation, one probe
    /// period before it arrived (a probe fails that long after its ping).
    pub(crate) silent_since: Vec<(I, Time)>,
    pub(crate) discounted: Vec<I>,
    /// When it is next looked at: kept by [`Suspicions`] with its index.
    deadline: Time,
    /// A verification probe was started before a verdict on others' word.
    pub(crate) verifying: bool,
    /// Accusers that found the member's port closed (this node included).
    pub(crate) closed: Vec<I>,
    /// When this node itself found the member's port closed.
    pub(crate) closed_at: Option<Time>,
}

/// Accusations made by one accuser in the current window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AccuserWindow {
    pub(crate) start: Time,
    pub(crate) count: u32,
}

/// Every suspicion this node holds, when each is next looked at, and how
/// much each accuser has accused lately.
///
/// Invariants: `deadlines` holds `(s.deadline, id)` for every suspicion
/// `s` of `id` whose deadline is set (not `NEVER`); it may also hold stale
/// entries (an earlier deadline of the same suspicion, which
/// [`Suspicions::pop_due`] skips), exactly as many as the rules leave, as
/// their times are timer deadlines. Every suspicion is of a suspected member.
#[derive(Debug)]
pub(crate) struct Suspicions<I> {
    map: FxMap<I, Suspicion<I>>,
    deadlines: BTreeSet<(Time, I)>,
    accusers: FxMap<I, AccuserWindow>,
}

impl<I: Identity> Suspicions<I> {
    /// None.
    pub(crate) fn new() -> Suspicions<I> {
        Suspicions {
            map: FxMap::default(),
            deadlines: BTreeSet::new(),
            accusers: FxMap::default(),
        }
    }

    /// The suspicion of `id`.
    pub(crate) fn get(&self, id: &I) -> Option<&Suspicion<I>> {
        self.map.get(id)
    }

    /// The suspicion of `id`, to add evidence (not its deadline).
    pub(crate) fn get_mut(&mut self, id: &I) -> Option<&mut Suspicion<I>> {
        self.map.get_mut(id)
    }

    /// Drops the suspicion of `id` and its deadline.
    pub(crate) fn remove(&mut self, id: &I) -> Option<Suspicion<I>> {
        let s = self.map.remove(id)?;
        self.deadlines.remove(&(s.deadline, id.clone()));
        Some(s)
    }

    /// Moves the deadline of the suspicion of `id` to `t`.
    pub(crate) fn set_deadline(&mut self, id: &I, t: Time) {
        if let Some(s) = self.map.get_mut(id) {
            self.deadlines.remove(&(s.deadline, id.clone()));
            s.deadline = t;
            self.deadlines.insert((t, id.clone()));
        }
    }

    /// Sets the deadline of `id` (unset by [`Suspicions::pop_due`]) to `t`.
    pub(crate) fn add_deadline(&mut self, id: &I, t: Time) {
        if let Some(s) = self.map.get_mut(id) {
            s.deadline = t;
            self.deadlines.insert((t, id.clone()));
        }
    }

    /// A verification probe of `id` starts; it is looked at again at `t`.
    pub(crate) fn verify(&mut self, id: &I, t: Time) {
        if let Some(s) = self.map.get_mut(id) {
            s.verifying = true;
        }
        self.add_deadline(id, t);
    }

    /// A suspicion whose deadline is `now` or earlier, its deadline unset.
    pub(crate) fn pop_due(&mut self, now: Time) -> Option<I> {
        while let Some((t, id)) = self.deadlines.first().cloned() {
            if t > now {
                break;
            }
            self.deadlines.remove(&(t, id.clone()));
            match self.map.get_mut(&id) {
                Some(s) if s.deadline == t => {
                    s.deadline = Time::NEVER;
                    return Some(id);
                }
                _ => {} // A stale entry (an earlier suspicion of the member).
            }
        }
        None
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Time {
        self.deadlines.first().map_or(Time::NEVER, |(t, _)| *t)
    }

    /// Moves every deadline before `floor` to `floor` (after a pause).
    pub(crate) fn postpone(&mut self, floor: Time, me: &I) {
        let late: Vec<(Time, I)> = self
            .deadlines
            .range(..(floor, me.clone()))
            .cloned()
            .collect();
        for (d, id) in late {
            self.deadlines.remove(&(d, id.clone()));
            if let Some(s) = self.map.get_mut(&id) {
                s.deadline = floor;
            }
            self.deadlines.insert((floor, id));
        }
    }

    /// Dates `me`'s fresh accusation of `id` (made `now`) back to `started`,
    /// when its probe began; whether it did.
    pub(crate) fn date_accusation(&mut self, id: &I, me: &I, now: Time, started: Time) -> bool {
        let Some(s) = self.map.get_mut(id).filter(|s| s.accused_at == Some(now)) else {
            return false;
        };
        s.accused_at = Some(started);
        for (a, t) in &mut s.silent_since {
            if a == me {
                *t = started;
            }
        }
        true
    }

    /// Takes back every accusation `me` made; the members, in order.
    pub(crate) fn withdraw_all(&mut self, me: &I) -> Vec<I> {
        let mut mine: Vec<I> = self
            .map
            .iter()
            .filter(|(_, s)| {
                s.accused_at.is_some() || s.accusers.contains(me) || s.discounted.contains(me)
            })
            .map(|(id, _)| id.clone())
            .collect();
        mine.sort_unstable();
        for id in &mine {
            if let Some(s) = self.map.get_mut(id) {
                s.accused_at = None;
                s.closed_at = None;
                s.closed.retain(|a| a != me);
                s.accusers.retain(|a| a != me);
                s.discounted.retain(|a| a != me);
            }
        }
        mine
    }

    /// Forgets accusers' windows older than `window`.
    pub(crate) fn forget_accusers(&mut self, now: Time, window: Duration) {
        self.accusers
            .retain(|_, w| now.saturating_since(w.start) <= window);
    }

    /// The suspected members, in the map's (deterministic) order.
    pub(crate) fn ids(&self) -> Vec<I> {
        self.map.keys().cloned().collect()
    }

    /// A fresh suspicion of `id`, started `now`, with no evidence and no
    /// deadline yet (replacing any).
    pub(crate) fn start(&mut self, id: &I, now: Time) {
        self.map.insert(
            id.clone(),
            Suspicion {
                started: now,
                accused_at: None,
                accusers: Vec::new(),
                silent_since: Vec::new(),
                discounted: Vec::new(),
                deadline: Time::NEVER,
                verifying: false,
                closed: Vec::new(),
                closed_at: None,
            },
        );
    }

    /// Counts an accusation by `accuser` at `now` (`new`: not a renewal of
    /// one already counted) in its current window of `window`, which
    /// restarts when older: the accusations counted in it.
    pub(crate) fn count_accusation(
        &mut self,
        now: Time,
        accuser: &I,
        window: Duration,
        new: bool,
    ) -> u32 {
        let w = self
            .accusers
            .entry(accuser.clone())
            .or_insert(AccuserWindow {
                start: now,
                count: 0,
            });
        if now.saturating_since(w.start) > window {
            *w = AccuserWindow {
                start: now,
                count: 0,
            };
        }
        w.count += u32::from(new);
        w.count
    }
}

/// Verdicts: when a suspicion is enough, and when it is next looked at
/// (Lifeguard's suspicion time, closed-port evidence, expiry).
impl<I: Identity> Suspicions<I> {
    /// Whether this node has heard from no live, unsuspected member other
    /// than `target` within `suspicion_max`: it is cut off, or the others
    /// are all gone.
    fn alone(sh: &Shared<I>, target: &I, now: Time) -> bool {
        if sh.members().alive() == 0 {
            return true;
        }
        let window = sh.cfg().suspicion_max;
        !sh.members().iter().any(|(id, m)| {
            m.state() == MemberState::Alive
                && *id != *target
                && sh.members().heard(m) > Time::ZERO
                && now.saturating_since(sh.members().heard(m)) < window
        })
    }

    /// Whether the suspicion of `target` is enough for a verdict: enough
    /// independent healthy accusers. A node that concluded it is cut off
    /// convicts nobody (`isolation.rs`). Only in a cluster too small for that
    /// conclusion may a node that is alone (nobody heard from lately)
    /// conclude on its own failed probes, whatever its health: nobody else
    /// could confirm, and every other member may really have failed. Such a
    /// verdict rests on one accuser, so other members do not accept it; and
    /// only a node that knows the cluster's size may reach it: one whose
    /// view never came from the cluster since it started
    /// (`Recovery::synced`; restarted behind a one-way cut, it knows only
    /// the members whose packets reached it) may be one of many.
    pub(crate) fn verdict_allowed(
        sh: &Shared<I>,
        synced: bool,
        target: &I,
        s: &Suspicion<I>,
        now: Time,
    ) -> bool {
        if Self::convicts_alone(sh) {
            return s.accused_at.is_some();
        }
        if sh.isolation().phase().is_cut_off() {
            return false;
        }
        s.accusers.len() >= sh.required_accusers(target)
            || (s.accused_at.is_some()
                && synced
                && !sh.large_enough_to_infer_cut_off()
                && Self::alone(sh, target, now))
    }

    /// Test builds only (`Fault::ConvictAlone`, a planted bug): this node's
    /// own accusation is a verdict on its own, after `suspicion_min`.
    fn convicts_alone(sh: &Shared<I>) -> bool {
        #[cfg(feature = "fault-injection")]
        if sh.cfg().fault == Some(crate::config::Fault::ConvictAlone) {
            return true;
        }
        let _ = sh; // Read only by the fault-injection feature.
        false
    }

    /// When the suspicion of `member` should next be looked at.
    pub(crate) fn rearm(&mut self, sh: &Shared<I>, synced: bool, member: &I, now: Time) {
        let Some(s) = self.get(member) else {
            return;
        };
        let allowed = Self::verdict_allowed(sh, synced, member, s, now);
        let required = sh.required_accusers(member);
        let (min, max, k) = (
            sh.cfg().suspicion_min,
            sh.cfg().suspicion_max,
            sh.cfg().expected_confirmations,
        );
        let expiry = s.started + max * 2;
        let closed_ready = s.closed.len() >= required;
        let verdict_at = match s.accused_at {
            // Corroborated closed-port evidence, our own included: no stall
            // produces it, so the silence suspicion time does not apply.
            Some(_) if closed_ready && s.closed_at.is_some() => {
                s.closed_at.unwrap_or(now) + sh.cfg().closed_port_min
            }
            // Others found it closed: verify it ourselves at once.
            None if closed_ready => now,
            // Lifeguard: from max toward min as independent confirmations
            // arrive, counted from when the `required`-th accuser's silence
            // began (one accuser's probe may have failed on lost packets
            // before a stall began: the others' silence must be as long).
            Some(t0) => {
                let others = if Self::convicts_alone(sh) {
                    k
                } else {
                    s.accusers
                        .iter()
                        .filter(|a| **a != *sh.local().id())
                        .count()
                };
                let frac = ((others + 1) as f64).ln() / ((k + 1) as f64).ln();
                let span = max.saturating_sub(min).mul_f64(frac.min(1.0));
                let mut since: Vec<Time> = s
                    .silent_since
                    .iter()
                    .filter(|(a, _)| s.accusers.contains(a))
                    .map(|(_, t)| *t)
                    .collect();
                since.sort_unstable();
                // And never before this node has itself seen the silence
                // last that long: accusations it holds may be stale (their
                // refutation lost on its way here) and the member silent
                // now in a later stall, which the suspicion time must cover.
                let from = since
                    .get(required.saturating_sub(1))
                    .copied()
                    .unwrap_or(t0)
                    .max(t0);
                from + max.saturating_sub(span).max(min)
            }
            // No evidence of our own: an accuser's verdict usually arrives
            // first; if it was lost, conclude a second after an accuser would
            // have (Lifeguard's time from when we heard, plus one second, so a
            // refutation has even more time to reach us than it has to reach
            // the accusers).
            None => {
                let frac = ((s.accusers.len().max(1)) as f64).ln() / ((k + 1) as f64).ln();
                let span = max.saturating_sub(min).mul_f64(frac.min(1.0));
                s.started + max.saturating_sub(span).max(min) + Duration::from_secs(1)
            }
        };
        let deadline = if s.verifying && s.accused_at.is_none() {
            // A verification probe is under way or did not fail: its outcome,
            // news, or expiry decides.
            expiry
        } else if allowed {
            verdict_at.min(expiry)
        } else {
            expiry
        };
        self.set_deadline(member, deadline);
    }
}
