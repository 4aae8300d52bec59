//! Roles of a replicated service (a database with streaming standbys): what
//! the holder says of its data, what a candidate says of its copy, and the
//! rule that decides which candidates may take the role.
//!
//! # The rule
//!
//! * The holder publishes a [`Mark`] with its renewals: its data's position
//!   (a database's WAL position, a byte offset) and the candidates that
//!   replicate it synchronously. The replicated lease table keeps the last
//!   one ([`crate::lease::RoleLease::mark`]), so it survives the holder's
//!   death and a change of control-plane leader.
//! * A candidate asks with a [`Standing`]: its copy's position and the most
//!   it may lag and still take the role (`max_lag_on_failover`).
//! * [`judge`] on the control-plane leader: a candidate whose copy lags the
//!   last mark by more than its `max_lag` is **not eligible**; among the
//!   eligible, one the holder named synchronous goes first; then priority.
//!   With no eligible candidate nobody is granted the role, and each
//!   candidate is told why ([`Verdict::Lagging`]).
//! * Among synchronous candidates the most advanced copy goes first: with
//!   quorum commit (PostgreSQL's `ANY 1 (...)`) a commit is acknowledged once
//!   *one* of them has it, and only the furthest copy holds every commit any
//!   of them acknowledged.
//! * A **strict** mark ([`Mark::strict`]: the primary never commits without a
//!   synchronous standby's flush) adds a proof ([`proven`]): a candidate may
//!   take the role only if it is named synchronous and every other name in
//!   the mark has been heard from with its copy, none ahead of the
//!   candidate's, reported after the last holding ended (before, the old
//!   primary could still commit and the copy grow). A synchronous standby that cannot be heard from (its host
//!   died with the primary) may hold commits nobody else has: no one is
//!   granted the role until it is heard from or an operator decides. The
//!   holder keeps the mark's names a superset of the standbys the primary
//!   waits for (it names a standby in its mark before the primary may wait
//!   for it, and drops it only after): every acknowledged commit is on a
//!   copy the mark names.
//! * A role without marks (no holder ever published one) and a candidate
//!   without a standing (a role that does not replicate) are judged as
//!   before: priority alone.
//!
//! The mark is at most one renewal old (`renew_every`): a holder that died
//! may have written up to that much more than the mark says, which only
//! makes a standby look closer than it is by what the holder wrote in its
//! last 250 ms, a bound the synchronous standby does not need.

use serde::{Deserialize, Serialize};

/// What a role's holder last said of its data, replicated with its renewals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// The data's position (e.g. a WAL position in bytes).
    pub position: u64,
    /// The candidates replicating it synchronously (their node names): a
    /// superset of the standbys whose flush the primary may wait for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synchronous: Vec<String>,
    /// The primary never commits alone (strict durability): a candidate
    /// must prove it holds every acknowledged commit ([`proven`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
}

/// What a candidate says of its copy when it asks for a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// Its copy's position (e.g. the WAL position it has replayed).
    pub position: u64,
    /// The most its copy may lag the holder's last mark for it to take the role.
    pub max_lag: u64,
}

impl Standing {
    /// How far this copy lags `mark` (0 when it is level or ahead).
    pub fn lag(&self, mark: &Mark) -> u64 {
        mark.position.saturating_sub(self.position)
    }
}

/// Whether one candidate may take a role, judged against the role's last mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It may; `synchronous` when the holder named it a synchronous replica.
    Eligible {
        /// Named synchronous in the last mark.
        synchronous: bool,
    },
    /// Its copy lags the last mark by more than its `max_lag`.
    Lagging {
        /// By how much it lags.
        lag: u64,
        /// The most it may.
        max_lag: u64,
    },
}

/// Judges candidate `name` with `standing` (if it replicates) against the
/// role's last `mark` (if any holder published one).
pub fn judge(mark: Option<&Mark>, name: &str, standing: Option<&Standing>) -> Verdict {
    let (Some(mark), Some(standing)) = (mark, standing) else {
        return Verdict::Eligible { synchronous: false };
    };
    let lag = standing.lag(mark);
    if lag > standing.max_lag {
        return Verdict::Lagging {
            lag,
            max_lag: standing.max_lag,
        };
    }
    Verdict::Eligible {
        synchronous: mark.synchronous.iter().any(|s| s == name),
    }
}

/// The best of `candidates` (name, priority, copy) to take the role after
/// the holder that left `mark`: a copy too far behind never; among the
/// others, named synchronous first, the furthest synchronous copy first
/// among them (quorum commit: only it holds every commit one of them
/// acknowledged), then the higher priority, then the smaller name. The one
/// order every grantor uses (the control plane's, hale-etcd's).
pub fn best<'a>(
    mark: Option<&Mark>,
    candidates: impl IntoIterator<Item = (&'a str, i64, Option<&'a Standing>)>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .filter_map(|(n, priority, standing)| match judge(mark, n, standing) {
            Verdict::Eligible { synchronous } => {
                let copy = standing.filter(|_| synchronous).map_or(0, |s| s.position);
                Some((n, (synchronous, copy, priority)))
            }
            Verdict::Lagging { .. } => None,
        })
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(n, _)| n)
}

/// Under a strict `mark`, whether candidate `name` (with `standing`) is
/// proven to hold every acknowledged commit, given what `heard` says of the
/// other candidates' copies (`None`: not heard from): `Err` names the
/// synchronous standbys not heard from, or ahead of it (the better copies).
/// Always `Ok` for a mark that is not strict, or that names no standby (the
/// primary never waited for one: nothing was acknowledged by a standby).
pub fn proven<'a>(
    mark: Option<&Mark>,
    name: &str,
    standing: Option<&Standing>,
    heard: impl Fn(&str) -> Option<&'a Standing>,
) -> Result<(), Vec<String>> {
    let Some(mark) = mark.filter(|m| m.strict && !m.synchronous.is_empty()) else {
        return Ok(());
    };
    let Some(own) = standing.filter(|_| mark.synchronous.iter().any(|s| s == name)) else {
        // Not a synchronous standby (or no copy to speak of): whatever it
        // holds, a commit one of them acknowledged may be missing.
        return Err(mark.synchronous.clone());
    };
    let unproven: Vec<String> = mark
        .synchronous
        .iter()
        .filter(|s| *s != name)
        .filter(|s| heard(s).is_none_or(|other| other.position > own.position))
        .cloned()
        .collect();
    if unproven.is_empty() {
        Ok(())
    } else {
        Err(unproven)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(position: u64, sync: &[&str]) -> Mark {
        Mark {
            position,
            synchronous: sync.iter().map(|s| s.to_string()).collect(),
            strict: false,
        }
    }

    fn at(position: u64) -> Standing {
        Standing {
            position,
            max_lag: u64::MAX,
        }
    }

    #[test]
    fn under_a_strict_mark_only_a_synchronous_copy_at_least_as_far_as_every_other_is_proven() {
        let m = Mark {
            strict: true,
            ..mark(1000, &["b", "c"])
        };
        let (b, c) = (at(900), at(950));
        let both = |n: &str| match n {
            "b" => Some(&b),
            "c" => Some(&c),
            _ => None,
        };
        assert_eq!(proven(Some(&m), "c", Some(&c), both), Ok(()));
        assert_eq!(
            proven(Some(&m), "b", Some(&b), both),
            Err(vec!["c".to_owned()]),
            "c is further: it may hold commits b lacks"
        );
        // c's host died with the primary: b cannot know what c acknowledged.
        let only_b = |n: &str| (n == "b").then_some(&b);
        assert_eq!(
            proven(Some(&m), "b", Some(&b), only_b),
            Err(vec!["c".to_owned()])
        );
        // An asynchronous copy is never proven, however far it is.
        assert_eq!(
            proven(Some(&m), "d", Some(&at(5000)), both),
            Err(vec!["b".to_owned(), "c".to_owned()])
        );
        // Not strict, or no standby ever waited for: nothing to prove.
        assert_eq!(
            proven(Some(&mark(1000, &["b", "c"])), "b", Some(&b), only_b),
            Ok(())
        );
        let none = Mark {
            strict: true,
            ..mark(1000, &[])
        };
        assert_eq!(proven(Some(&none), "d", Some(&b), only_b), Ok(()));
        assert_eq!(proven(None, "d", None, only_b), Ok(()));
    }

    #[test]
    fn a_copy_within_its_max_lag_is_eligible_and_one_named_synchronous_says_so() {
        let m = mark(1000, &["b"]);
        let s = Standing {
            position: 900,
            max_lag: 100,
        };
        assert_eq!(
            judge(Some(&m), "b", Some(&s)),
            Verdict::Eligible { synchronous: true }
        );
        assert_eq!(
            judge(Some(&m), "c", Some(&s)),
            Verdict::Eligible { synchronous: false }
        );
    }

    #[test]
    fn a_copy_lagging_past_its_max_lag_is_not_eligible_even_if_named_synchronous() {
        let m = mark(1000, &["b"]);
        let s = Standing {
            position: 899,
            max_lag: 100,
        };
        assert_eq!(
            judge(Some(&m), "b", Some(&s)),
            Verdict::Lagging {
                lag: 101,
                max_lag: 100
            }
        );
    }

    #[test]
    fn without_a_mark_or_a_standing_every_candidate_is_eligible() {
        let s = Standing {
            position: 0,
            max_lag: 0,
        };
        assert_eq!(
            judge(None, "b", Some(&s)),
            Verdict::Eligible { synchronous: false }
        );
        assert_eq!(
            judge(Some(&mark(5, &["b"])), "b", None),
            Verdict::Eligible { synchronous: false }
        );
    }

    #[test]
    fn a_copy_ahead_of_the_mark_lags_nothing() {
        let s = Standing {
            position: 2000,
            max_lag: 0,
        };
        assert_eq!(s.lag(&mark(1000, &[])), 0);
    }
}
