//! A switchover ordered for a role this node holds ([`hale_control::switchover`]):
//! when the holder hands the role to the named candidate.
//!
//! The order reaches the holder in each renewal's answer (every
//! `renew_every`), so this is asked again on each: nothing here waits. A
//! PostgreSQL role hands over only once the target streams from this
//! primary and has replayed all but `max_lag_on_failover` of its WAL; the
//! demote hook's clean shutdown then waits for every connected standby to
//! flush the rest (PostgreSQL's walsenders send up to the shutdown
//! checkpoint before the server exits), so the target holds every
//! committed transaction when it is promoted.

use hale_control::Switchover;
use hale_postgres::{SenderState, Standing};

use crate::view::PostgresView;

/// What the holder does with an order at a renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Not yet: its time has not come, or the role is paused.
    NotDue,
    /// Due, but the target has not caught up.
    Waiting(Behind),
    /// Hand over now.
    Go,
}

/// Why a due switchover waits for its target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Behind {
    /// This node's server was not measured as a primary yet.
    #[error("this node's PostgreSQL has not been measured as the primary")]
    NotMeasured,
    /// The target does not stream from this primary.
    #[error("{0} does not stream from this primary")]
    NotStreaming(String),
    /// The target streams but has replayed too little.
    #[error("{to} has replayed {lag} bytes less than this primary wrote (at most {max_lag} to hand over)")]
    Lagging {
        /// The target.
        to: String,
        /// Bytes behind this primary's write position.
        lag: u64,
        /// The most it may be behind.
        max_lag: u64,
    },
}

/// Whether the holder hands over now, at Unix time `now_ms`: the order is
/// due, the role is not paused, and (a PostgreSQL role) the target has
/// caught up with this primary within `max_lag`.
pub fn readiness(
    order: &Switchover,
    now_ms: u64,
    paused: bool,
    postgres: Option<(&PostgresView, u64)>,
) -> Readiness {
    if paused || !order.due(now_ms) {
        return Readiness::NotDue;
    }
    let Some((view, max_lag)) = postgres else {
        return Readiness::Go;
    };
    let Some(Standing::Primary { lsn, standbys, .. }) = &view.standing else {
        return Readiness::Waiting(Behind::NotMeasured);
    };
    let to = &order.to;
    let Some(s) = standbys
        .iter()
        .find(|s| &s.name == to && s.state == SenderState::Streaming)
    else {
        return Readiness::Waiting(Behind::NotStreaming(to.clone()));
    };
    // Replayed, not only flushed: a promotion replays what it received
    // before it takes writes, so a target whose replay is held back would
    // keep the service down that much longer (the grantor judges the
    // furthest of what the target received and replayed).
    let lag = hale_postgres::lag_bytes(*lsn, s.replay_lsn.or(s.flush_lsn).unwrap_or(0));
    if lag > max_lag {
        return Readiness::Waiting(Behind::Lagging {
            to: to.clone(),
            lag,
            max_lag,
        });
    }
    Readiness::Go
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_postgres::StandbyState;

    fn order(at: u64) -> Switchover {
        Switchover {
            to: "b".into(),
            at_unix_ms: at,
        }
    }

    fn primary(standbys: Vec<StandbyState>) -> PostgresView {
        PostgresView {
            standing: Some(Standing::Primary {
                lsn: 10_000,
                timeline: 1,
                standbys,
                synchronous: String::new(),
            }),
            ..PostgresView::default()
        }
    }

    fn standby(name: &str, state: SenderState, flush: Option<u64>) -> StandbyState {
        StandbyState {
            name: name.into(),
            sync: false,
            flush_lsn: flush,
            replay_lsn: flush,
            state,
        }
    }

    #[test]
    fn an_order_waits_for_its_time_and_while_the_role_is_paused() {
        assert_eq!(readiness(&order(500), 499, false, None), Readiness::NotDue);
        assert_eq!(readiness(&order(500), 500, true, None), Readiness::NotDue);
        assert_eq!(readiness(&order(500), 500, false, None), Readiness::Go);
    }

    #[test]
    fn a_postgres_holder_hands_over_only_to_a_target_streaming_within_its_max_lag() {
        let v = primary(vec![standby("b", SenderState::Catchup, Some(10_000))]);
        assert_eq!(
            readiness(&order(0), 1, false, Some((&v, 100))),
            Readiness::Waiting(Behind::NotStreaming("b".into()))
        );
        let v = primary(vec![
            standby("c", SenderState::Streaming, Some(10_000)),
            standby("b", SenderState::Streaming, Some(9_000)),
        ]);
        assert_eq!(
            readiness(&order(0), 1, false, Some((&v, 100))),
            Readiness::Waiting(Behind::Lagging {
                to: "b".into(),
                lag: 1_000,
                max_lag: 100
            })
        );
        assert_eq!(
            readiness(&order(0), 1, false, Some((&v, 1_000))),
            Readiness::Go
        );
        assert_eq!(
            readiness(&order(0), 1, false, Some((&PostgresView::default(), 1_000))),
            Readiness::Waiting(Behind::NotMeasured)
        );
    }
}
