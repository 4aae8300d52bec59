//! The grantor's churn breaker: while the control plane is unstable, a
//! role whose lease ran out goes back to its holder if that holder is
//! still alive, rather than to another node.
//!
//! When the control plane cannot commit for a while (elections on a busy
//! host, a leader's disk stall), every holder's renewals fail at once: each
//! steps down at its lease's end, though nothing is wrong with it or its
//! service, and comes back as a candidate. Handing those roles to other
//! nodes then moves many services at once, each move costing a promote
//! and a demote on a host already short of CPU, which is what keeps the
//! control plane unstable (issue 41: 100 roles with scripted hooks moved
//! 143 times in two minutes after one such stall).
//!
//! So the leader's [`Breaker`] is **open** while this leader is new (for
//! [`NEW_LEADER_FOR`] leases after it took office: the stall that elected
//! it may have cost holders their leases) or while at least [`BURST`]
//! leases ran out within [`WINDOW`] leases. While open, a role whose lease
//! ran out, and whose holder the leader has heard from lately (its
//! renewals of other roles, its own acquisition: [`Breaker::heard`]), is
//! held for that holder for [`HOLD`] leases more: granted to it as soon as
//! it asks, whatever its priority, and to nobody else meanwhile. A holder
//! not heard from (its host died, its agent is gone) holds nothing back:
//! its roles move as fast as ever. The lease rules are untouched: nothing
//! is granted before the last holder's lease has run out.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use hale_core::Time;

use super::LeaseTiming;

/// How many leases a new leader keeps the breaker open.
pub const NEW_LEADER_FOR: u32 = 2;
/// How many leases ran out within [`WINDOW`] open the breaker.
pub const BURST: usize = 3;
/// The window (in leases) over which run-out leases are counted.
pub const WINDOW: u32 = 5;
/// How many leases past the end of its lease a role is held for its
/// living holder while the breaker is open.
pub const HOLD: u32 = 1;

/// The breaker's state (see the module).
#[derive(Debug, Clone)]
pub struct Breaker {
    timing: LeaseTiming,
    /// When this leader took office.
    elected: Time,
    /// When each agent was last heard from by this leader.
    heard: BTreeMap<String, Time>,
    /// When each run-out lease was first seen, oldest first, and which.
    lapses: VecDeque<(Time, (String, u64))>,
    seen: BTreeSet<(String, u64)>,
}

/// What [`Breaker::judge`] decides for an acquisition of a role whose
/// lease ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// The breaker has nothing to say: the grantor decides as usual.
    Pass,
    /// Grant it to the asker now: it is the last holder, back.
    Return,
    /// Hold it for `holder`, alive, until `until`.
    For {
        /// The last holder.
        holder: String,
        /// Until when (on the leader's clock).
        until: Time,
    },
}

impl Breaker {
    /// The breaker of a leader that took office at `now`.
    pub fn new(timing: LeaseTiming, now: Time) -> Breaker {
        Breaker {
            timing,
            elected: now,
            heard: BTreeMap::new(),
            lapses: VecDeque::new(),
            seen: BTreeSet::new(),
        }
    }

    /// Agent `agent` was heard from at `now` (a renewal, an acquisition).
    pub fn heard(&mut self, agent: &str, now: Time) {
        match self.heard.get_mut(agent) {
            Some(t) => *t = (*t).max(now),
            None => {
                self.heard.insert(agent.to_owned(), now);
            }
        }
    }

    /// Whether `agent` was heard from within two and a half renewal
    /// periods of `now`.
    fn alive(&self, agent: &str, now: Time) -> bool {
        let fresh = self.timing.renew_every * 2 + self.timing.renew_every / 2;
        self.heard
            .get(agent)
            .is_some_and(|t| now.saturating_since(*t) <= fresh)
    }

    /// Whether the breaker is open at `now`: a new leader, or a burst of
    /// run-out leases.
    pub fn open(&self, now: Time) -> bool {
        now < self.elected + self.timing.lease * NEW_LEADER_FOR || self.recent(now) >= BURST
    }

    /// How many leases ran out within the window before `now`.
    fn recent(&self, now: Time) -> usize {
        let window = self.timing.lease * WINDOW;
        self.lapses
            .iter()
            .filter(|(t, _)| now.saturating_since(*t) <= window)
            .count()
    }

    /// An acquisition by `asker` of `role`, whose lease at `epoch`, held by
    /// `holder`, ran out at `ended` (the grantor may grant it: the lease
    /// has run out on the leader's clock).
    pub fn judge(
        &mut self,
        role: &str,
        (holder, epoch): (&str, u64),
        ended: Time,
        asker: &str,
        now: Time,
    ) -> Hold {
        self.note_lapse(role, epoch, now);
        if !self.open(now) || !self.alive(holder, now) {
            return Hold::Pass;
        }
        if holder == asker {
            return Hold::Return;
        }
        let until = ended + self.timing.lease * HOLD;
        if now < until {
            Hold::For {
                holder: holder.to_owned(),
                until,
            }
        } else {
            Hold::Pass
        }
    }

    /// Notes once that `role`'s lease at `epoch` ran out (seen at `now`),
    /// forgetting what left the window; says so when that opens the breaker.
    fn note_lapse(&mut self, role: &str, epoch: u64, now: Time) {
        let window = self.timing.lease * WINDOW;
        while let Some((t, key)) = self.lapses.front() {
            if now.saturating_since(*t) <= window {
                break;
            }
            self.seen.remove(key);
            self.lapses.pop_front();
        }
        let key = (role.to_owned(), epoch);
        if self.seen.insert(key.clone()) {
            let was_open = self.recent(now) >= BURST;
            self.lapses.push_back((now, key));
            if !was_open && self.recent(now) >= BURST {
                tracing::warn!(
                    lapses = self.recent(now),
                    "churn breaker open: {BURST} or more leases ran out within {WINDOW} leases; \
                     roles whose holders are alive go back to them rather than move"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Time {
        Time::from_nanos(ms * 1_000_000)
    }

    fn timing() -> LeaseTiming {
        LeaseTiming::default()
    }

    #[test]
    fn a_new_leader_holds_a_run_out_role_for_its_living_holder_and_grants_it_back_to_it() {
        let mut b = Breaker::new(timing(), at(0));
        b.heard("a", at(1_000));
        let j = b.judge("r", ("a", 3), at(900), "b", at(1_100));
        assert_eq!(
            j,
            Hold::For {
                holder: "a".into(),
                until: at(2_900)
            }
        );
        assert_eq!(
            b.judge("r", ("a", 3), at(900), "a", at(1_200)),
            Hold::Return
        );
        // Held no longer than a lease past the end of its lease.
        b.heard("a", at(2_900));
        assert_eq!(b.judge("r", ("a", 3), at(900), "b", at(2_900)), Hold::Pass);
    }

    #[test]
    fn a_holder_not_heard_from_holds_nothing_back() {
        let mut b = Breaker::new(timing(), at(0));
        b.heard("a", at(100));
        // 625 ms after its last request: gone (its host died).
        assert_eq!(b.judge("r", ("a", 3), at(900), "b", at(726)), Hold::Pass);
        assert_eq!(b.judge("r", ("x", 3), at(900), "b", at(726)), Hold::Pass);
    }

    #[test]
    fn an_old_leader_opens_only_on_a_burst_of_run_out_leases_and_closes_after_the_window() {
        let t = timing();
        let start = at(60_000);
        let mut b = Breaker::new(t, at(0));
        b.heard("a", start);
        assert!(!b.open(start));
        assert_eq!(b.judge("r1", ("a", 1), start, "b", start), Hold::Pass);
        assert_eq!(b.judge("r2", ("a", 1), start, "b", start), Hold::Pass);
        // The same lapse seen again counts once.
        assert_eq!(b.judge("r2", ("a", 1), start, "b", start), Hold::Pass);
        assert!(!b.open(start));
        let j = b.judge("r3", ("a", 1), start, "b", start);
        assert!(matches!(j, Hold::For { .. }), "{j:?}");
        assert!(b.open(start));
        let later = start + t.lease * WINDOW + Duration::from_millis(1);
        assert!(!b.open(later));
    }
}
