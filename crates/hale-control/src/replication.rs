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
    /// The candidates replicating it synchronously (their node names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub synchronous: Vec<String>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(position: u64, sync: &[&str]) -> Mark {
        Mark {
            position,
            synchronous: sync.iter().map(|s| s.to_string()).collect(),
        }
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
