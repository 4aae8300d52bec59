//! `POST /v1/roles/{role}/switchover`: a planned switchover to a named
//! candidate, asked of any member.
//!
//! The member that is asked checks the target before it writes anything:
//! a live member that is a candidate for the role, that may be promoted
//! (not set `promotable = false`), with passing checks and,
//! for a PostgreSQL role, a replica streaming unfenced within its
//! `max_lag_on_failover` (asked of the target's own agent). A refused
//! target changes nothing. The order is then written to the control plane
//! against the current holding ([`hale_control::switchover`]); the holder
//! carries it out (`roles/switchover.rs`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use hale_control::{LeaseRequest, LeaseResponse, RoleLease};

use crate::http::roles_api::{control, unexpected};
use crate::http::state::{json_body, ApiError, AppState};
use crate::membership::meta::AgentMeta;
use crate::view::{
    routes, AgentEvent, MemberState, RoleView, RolesView, SwitchoverRequest, SwitchoverStep,
    SwitchoverView,
};

/// Why a switchover target was refused (nothing was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetRefused {
    /// It already holds the role.
    #[error("{0} already holds the role")]
    Holder(String),
    /// No member has that name.
    #[error("no member is named {0:?}")]
    Unknown(String),
    /// It is not alive.
    #[error("{0} is {1}, not alive")]
    NotAlive(String, MemberState),
    /// It publishes no candidacy for the role.
    #[error("{0} is not a candidate for the role")]
    NotCandidate(String),
    /// It may not be promoted (its `[[role]]` says `promotable = false`).
    #[error("{0} may not be promoted (promotable = false in its [[role]]): it never takes the role; name another candidate")]
    NotPromotable(String),
    /// Its checks fail.
    #[error("{0}'s checks fail: it may not hold the role now")]
    Ineligible(String),
    /// Its agent could not be asked about its copy of the data.
    #[error("{0}'s agent did not say how far its copy is: {1}")]
    Unreachable(String, String),
    /// Its data directory is fenced (it is rejoining).
    #[error("{0}'s PostgreSQL is fenced: it is rejoining and may not be promoted")]
    Fenced(String),
    /// It does not stream from the holder.
    #[error("{0}'s PostgreSQL does not stream from the primary")]
    NotStreaming(String),
    /// Its copy lags too far.
    #[error("{0}'s copy lags the primary by {1} bytes, more than its max_lag_on_failover ({2})")]
    Lagging(String, u64, u64),
}

/// Judges a target from its own view of the role (`None`: it has none, so
/// nothing replicates there to judge), against the holder's last `mark`
/// (its WAL position as its last renewal said, fresher than the one the
/// target read) when there is one.
pub fn judge_copy(
    to: &str,
    view: Option<&RoleView>,
    mark: Option<u64>,
) -> Result<(), TargetRefused> {
    let Some(pg) = view.and_then(|v| v.postgres.as_ref()) else {
        return Ok(());
    };
    if pg.fenced {
        return Err(TargetRefused::Fenced(to.to_owned()));
    }
    if !pg.streams() {
        return Err(TargetRefused::NotStreaming(to.to_owned()));
    }
    if let Some(l) = view.and_then(|v| v.lagging) {
        return Err(TargetRefused::Lagging(to.to_owned(), l.lag, l.max_lag));
    }
    let fresher = mark.and_then(|m| pg.standing.as_ref()?.replay_lag(m));
    let lag = fresher.or_else(|| pg.lag());
    match (lag, pg.max_lag) {
        (Some(lag), Some(max)) if lag > max => Err(TargetRefused::Lagging(to.to_owned(), lag, max)),
        _ => Ok(()),
    }
}

pub(crate) async fn switchover(
    State(st): State<AppState>,
    Path(role): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let expected =
        r#"expected {"to": "node", "at_unix_ms": 1767261600000} (at optional) or {"cancel": true}"#;
    let req: SwitchoverRequest = json_body(&body, expected)?;
    let c = control(&st)?;
    let unavailable = || {
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "the control plane's lease table cannot be read now".into(),
        )
    };
    let table = c.table().await.ok_or_else(unavailable)?;
    let lease: RoleLease = table.role(&role).cloned().ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            format!("no role {role:?}: the control plane has never granted it"),
        )
    })?;
    let conflict = |m: String| ApiError(StatusCode::CONFLICT, m);
    let Some(holder) = lease.holder.clone() else {
        return Err(conflict(format!(
            "nobody holds {role:?} now: there is nothing to switch over"
        )));
    };
    let to = match (&req.to, req.cancel) {
        (None, true) => None,
        (Some(to), false) => {
            if lease.paused {
                return Err(conflict(format!(
                    "{role:?} is paused: resume it before a switchover"
                )));
            }
            let mark = lease.mark.as_ref().map(|m| m.position);
            check_target(&st, &role, &holder, to, mark)
                .await
                .map_err(|e| conflict(format!("switchover of {role:?} refused: {e}")))?;
            Some(to.clone())
        }
        _ => return Err(ApiError(StatusCode::BAD_REQUEST, expected.into())),
    };
    let at_unix_ms = req.at_unix_ms.unwrap_or(0);
    let write = LeaseRequest::Switchover {
        role: role.clone(),
        epoch: lease.epoch,
        to: to.clone(),
        at_unix_ms,
        origin: hale_control::Origin::by(st.me()),
    };
    match c.write(&write, std::time::Duration::from_secs(3)).await {
        Ok(LeaseResponse::SwitchoverOrdered(_)) => {
            let previous = lease.switchover.map(|s| s.to);
            let (step, named) = match (&to, previous) {
                (Some(t), _) => (SwitchoverStep::Ordered, Some(t.clone())),
                (None, p) => (SwitchoverStep::Cancelled, p),
            };
            if let Some(named) = named {
                st.shared.emit(
                    AgentEvent::Switchover {
                        role: role.clone(),
                        to: named,
                        step,
                        reason: None,
                    },
                    None,
                );
            }
            let view = SwitchoverView {
                role,
                from: holder,
                epoch: lease.epoch,
                to,
                at_unix_ms,
            };
            Ok((StatusCode::ACCEPTED, Json(view)).into_response())
        }
        Ok(LeaseResponse::Rejected(e)) => Err(conflict(format!(
            "the control plane refused the order: {e}"
        ))),
        other => Err(unexpected(other)),
    }
}

/// Whether `to` may take `role` from `holder` now (see the module docs).
async fn check_target(
    st: &AppState,
    role: &str,
    holder: &str,
    to: &str,
    mark: Option<u64>,
) -> Result<(), TargetRefused> {
    if to == holder {
        return Err(TargetRefused::Holder(to.to_owned()));
    }
    let members = st.snapshot().await.map(|s| s.members).unwrap_or_default();
    let m = (members.iter().find(|m| m.name == to))
        .ok_or_else(|| TargetRefused::Unknown(to.to_owned()))?;
    if m.state != MemberState::Alive {
        return Err(TargetRefused::NotAlive(to.to_owned(), m.state));
    }
    let meta = AgentMeta::parse(&m.meta).unwrap_or_default();
    let candidacy =
        (meta.roles.get(role)).ok_or_else(|| TargetRefused::NotCandidate(to.to_owned()))?;
    if !candidacy.tags.promotable {
        return Err(TargetRefused::NotPromotable(to.to_owned()));
    }
    if !candidacy.eligible {
        return Err(TargetRefused::Ineligible(to.to_owned()));
    }
    let view = if m.is_self || to == st.me() {
        st.roles.get(role)
    } else {
        let http = meta.http.ok_or_else(|| {
            TargetRefused::Unreachable(to.to_owned(), "it publishes no HTTP address".into())
        })?;
        let views: RolesView = st
            .peers
            .peer_get(&http, routes::ROLES)
            .await
            .map_err(|e| TargetRefused::Unreachable(to.to_owned(), e))?;
        views.local.into_iter().find(|v| v.role == role)
    };
    judge_copy(to, view.as_ref(), mark)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{Lagging, PostgresView};
    use hale_control::RoleState;

    fn view(pg: Option<PostgresView>, lagging: Option<Lagging>) -> RoleView {
        RoleView {
            role: "db".into(),
            priority: 0,
            state: RoleState::Standby,
            epoch: None,
            lease_left_ms: None,
            last_change: None,
            held_since_unix_ms: None,
            promotions: 0,
            demotions: 0,
            demote_failures: 0,
            renewals: 0,
            paused: false,
            lagging,
            postgres: pg,
            tags: Default::default(),
            handover_waits: None,
            valid_until: None,
        }
    }

    fn replica(streaming: bool, replay: u64) -> PostgresView {
        PostgresView {
            standing: Some(hale_postgres::Standing::Replica {
                receive_lsn: Some(replay),
                replay_lsn: replay,
                replay_paused: false,
                last_replay: None,
                streaming,
                upstream: Some("a".into()),
                upstream_port: Some(5432),
                timeline: 1,
            }),
            primary_lsn: Some(10_000),
            max_lag: Some(1_000),
            ..PostgresView::default()
        }
    }

    #[test]
    fn a_target_that_replicates_nothing_is_judged_by_its_candidacy_alone() {
        assert_eq!(judge_copy("b", None, None), Ok(()));
        assert_eq!(judge_copy("b", Some(&view(None, None)), Some(5)), Ok(()));
    }

    #[test]
    fn a_target_is_judged_against_the_holders_last_mark_when_there_is_one() {
        // The target read an older mark (10,000): level with it, yet 5,000
        // behind what the holder's last renewal said.
        let v = view(Some(replica(true, 10_000)), None);
        assert_eq!(judge_copy("b", Some(&v), Some(10_500)), Ok(()));
        assert_eq!(
            judge_copy("b", Some(&v), Some(15_000)),
            Err(TargetRefused::Lagging("b".into(), 5_000, 1_000))
        );
    }

    #[test]
    fn a_postgres_target_must_stream_unfenced_within_its_max_lag() {
        let ok = view(Some(replica(true, 9_500)), None);
        assert_eq!(judge_copy("b", Some(&ok), None), Ok(()));
        let far = view(Some(replica(true, 5_000)), None);
        assert_eq!(
            judge_copy("b", Some(&far), None),
            Err(TargetRefused::Lagging("b".into(), 5_000, 1_000))
        );
        let cut = view(Some(replica(false, 10_000)), None);
        assert_eq!(
            judge_copy("b", Some(&cut), None),
            Err(TargetRefused::NotStreaming("b".into()))
        );
        let mut fenced = replica(true, 10_000);
        fenced.fenced = true;
        assert_eq!(
            judge_copy("b", Some(&view(Some(fenced), None)), None),
            Err(TargetRefused::Fenced("b".into()))
        );
        let refused = view(
            Some(replica(true, 10_000)),
            Some(Lagging {
                lag: 20_000_000,
                max_lag: 1_000,
            }),
        );
        assert_eq!(
            judge_copy("b", Some(&refused), None),
            Err(TargetRefused::Lagging("b".into(), 20_000_000, 1_000))
        );
    }
}
