//! Planned switchover: an operator names the holder's successor (any member
//! may ask, [`crate::LeaseRequest::Switchover`]); the order is kept in the
//! replicated table with the holding it was asked for (the role's current
//! epoch: it is cleared when that holding ends), and the holder
//! learns it from its renewals' answers ([`crate::LeaseResponse::Renewed`]).
//! The holder then hands the role over to the named candidate (the grantor
//! prefers it for one lease, [`crate::Grantor::prefer`]) once the order is
//! due and the candidate has caught up; what "caught up" means belongs to
//! the holder's agent (a PostgreSQL role: the target streams from it within
//! its `max_lag_on_failover`).
//!
//! Invariants:
//! * An order belongs to one holding (`epoch`): a new grant or a release
//!   clears it, so it never moves a later holder.
//! * A paused role takes no order (a paused role is granted to nobody, so
//!   the handover could not complete), and pausing clears none: the holder
//!   does not act on an order while paused.

use serde::{Deserialize, Serialize};

/// A switchover ordered for the current holding of a role (its epoch is
/// the role's: [`crate::RoleLease::epoch`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switchover {
    /// The candidate that is to take the role.
    pub to: String,
    /// Not before this Unix time in milliseconds (0: at once). Read against
    /// the holder's own wall clock.
    #[serde(default)]
    pub at_unix_ms: u64,
}

impl Switchover {
    /// Whether the order is due at Unix time `now_ms`.
    pub fn due(&self, now_ms: u64) -> bool {
        now_ms >= self.at_unix_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_without_a_time_is_due_at_once_and_a_timed_one_from_its_time() {
        let mut s = Switchover {
            to: "b".into(),
            at_unix_ms: 0,
        };
        assert!(s.due(0));
        s.at_unix_ms = 1_000;
        assert!(!s.due(999));
        assert!(s.due(1_000));
    }
}
