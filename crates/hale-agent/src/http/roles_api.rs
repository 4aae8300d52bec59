//! HTTP endpoints for roles and services: `GET /v1/roles`, `GET /v1/services`,
//! `POST /v1/roles/{role}/handover` (refused, changing nothing, when it
//! names a node that may not be promoted), and the load balancers' checks
//! `GET /v1/roles/{role}/primary`, `/replica`, `/read-only` (503 on a
//! standby set `load_balance = false`), `/sync` and `/async`.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use hale_control::RoleState;

use hale_control::raft::api::Answer;
use hale_control::raft::{AddServer, ControlClient, ServerChange};

use crate::http::state::{error, json_body, ApiError, AppState};
use crate::http::switchover_api::TargetRefused;
use crate::membership::meta::AgentMeta;
use crate::roles::services::views;
use crate::view::{LeaseView, PostgresView, PrimaryView, ReplicaView, RolesView};

pub(crate) async fn roles(State(st): State<AppState>) -> Json<RolesView> {
    let (leases, leader) = match &st.control {
        Some(c) => (
            c.table().await.map(|t| {
                t.roles()
                    .map(|(r, l)| {
                        let lease = LeaseView {
                            holder: l.holder.clone(),
                            epoch: l.epoch,
                            paused: l.paused,
                            switchover: l.switchover.clone(),
                            kept: l.kept.is_some(),
                        };
                        (r.clone(), lease)
                    })
                    .collect()
            }),
            c.leader().await,
        ),
        None => (None, None),
    };
    let local = st.roles.snapshot().values().cloned().collect();
    Json(RolesView {
        control_plane: st.control.is_some(),
        leader,
        leases,
        local,
    })
}

/// This node's view of `role` (None: it is no candidate for it).
fn local_view(st: &AppState, role: &str) -> Option<crate::view::RoleView> {
    st.roles.get(role)
}

fn not_a_candidate(role: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("this node is no candidate for role {role:?}"),
    )
}

/// `GET /v1/roles/{role}/primary`: 200 on the node that holds `role` and has
/// finished promoting (with a lease still valid on its own clock), 503
/// everywhere else. For load balancers (HAProxy `option httpchk` +
/// `http-check expect status 200`); reads only this agent's memory, so it
/// is cheap to poll often, and needs no token.
pub(crate) async fn primary(State(st): State<AppState>, Path(role): Path<String>) -> Response {
    let Some(v) = local_view(&st, &role) else {
        return not_a_candidate(&role);
    };
    let now = tokio::time::Instant::now();
    let valid = v.valid_until.is_some_and(|t| t > now);
    let body = PrimaryView {
        lease_left_ms: v
            .valid_until
            .map(|t| t.saturating_duration_since(now).as_millis() as u64),
        role,
        state: v.state,
        epoch: v.epoch,
    };
    check(v.state == RoleState::Holder && valid, body)
}

/// A load balancer's check: 200 with `body` if `ok`, else 503 with it.
fn check(ok: bool, body: impl serde::Serialize) -> Response {
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// `?lag=BYTES` of the replica check.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LagQuery {
    lag: Option<u64>,
}

/// Why a standby set `load_balance = false` answers 503 to the load
/// balancers' read checks.
const NOT_BALANCED: &str =
    "this node takes no load-balanced reads (load_balance = false in its [[role]])";

/// `GET /v1/roles/{role}/replica[?lag=BYTES]`: 200 on a healthy, ready
/// standby of `role` (not holding it) that takes load-balanced reads, 503
/// everywhere else (a standby set `load_balance = false` says so in the
/// body's `reason`). For a `[role.postgres]` role, 200 only while its
/// server streams from the holder, unfenced, and (with `lag`) replays
/// within `lag` bytes of the holder's last mark; `lag` on a role that does
/// not replicate is a 400.
pub(crate) async fn replica(
    State(st): State<AppState>,
    Path(role): Path<String>,
    q: Result<Query<LagQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let bad = |e: String| ApiError(StatusCode::BAD_REQUEST, e);
    let Query(q) = q.map_err(|e| bad(e.body_text()))?;
    let Some(v) = local_view(&st, &role) else {
        return Ok(not_a_candidate(&role));
    };
    let pg = v.postgres.as_ref();
    if q.lag.is_some() && pg.is_none() {
        return Err(bad(format!(
            "role {role:?} does not replicate: no lag to compare"
        )));
    }
    let lag = pg.and_then(PostgresView::lag);
    let standby = v.state == RoleState::Standby;
    let balanced = v.tags.load_balance;
    let ok = standby
        && balanced
        && pg.is_none_or(|pg| pg.streams())
        && q.lag.is_none_or(|max| lag.is_some_and(|l| l <= max));
    let body = ReplicaView {
        role,
        state: v.state,
        lag,
        reason: (standby && !balanced).then(|| NOT_BALANCED.to_owned()),
    };
    Ok(check(ok, body))
}

/// `GET /v1/roles/{role}/read-only`: 200 where reads may go: the holder,
/// or a ready standby that takes load-balanced reads (for a
/// `[role.postgres]` role: a server that serves as the primary, or streams
/// from it unfenced); 503 elsewhere (a standby set `load_balance = false`
/// says so in the body's `reason`).
pub(crate) async fn read_only(State(st): State<AppState>, Path(role): Path<String>) -> Response {
    let Some(v) = local_view(&st, &role) else {
        return not_a_candidate(&role);
    };
    let now = tokio::time::Instant::now();
    let holder = v.state == RoleState::Holder && v.valid_until.is_some_and(|t| t > now);
    let standby = v.state == RoleState::Standby;
    let balanced = v.tags.load_balance;
    let ready = standby && balanced && v.postgres.as_ref().is_none_or(PostgresView::streams);
    let body = ReplicaView {
        lag: v.postgres.as_ref().and_then(PostgresView::lag),
        role,
        state: v.state,
        reason: (standby && !balanced).then(|| NOT_BALANCED.to_owned()),
    };
    check(holder || ready, body)
}

/// `GET /v1/roles/{role}/sync`: 200 on a standby of a `[role.postgres]`
/// role that streams from the holder, unfenced, and that the holder's last
/// mark names synchronous (the primary may wait for its flush); 503
/// elsewhere. Patroni's `/sync`.
pub(crate) async fn sync(State(st): State<AppState>, Path(role): Path<String>) -> Response {
    synchronous_check(&st, role, true)
}

/// `GET /v1/roles/{role}/async`: 200 on a streaming, unfenced standby of a
/// `[role.postgres]` role that the primary does not wait for; 503
/// elsewhere. Patroni's `/async`.
pub(crate) async fn not_sync(State(st): State<AppState>, Path(role): Path<String>) -> Response {
    synchronous_check(&st, role, false)
}

fn synchronous_check(st: &AppState, role: String, synchronous: bool) -> Response {
    let Some(v) = local_view(st, &role) else {
        return not_a_candidate(&role);
    };
    let pg = v.postgres.as_ref();
    let ok = v.state == RoleState::Standby
        && pg.is_some_and(|pg| pg.streams() && pg.synchronous == synchronous);
    let body = ReplicaView {
        lag: pg.and_then(PostgresView::lag),
        role,
        state: v.state,
        reason: None,
    };
    check(ok, body)
}

pub(crate) async fn services(State(st): State<AppState>) -> Response {
    Json(views(&st.services)).into_response()
}

pub(crate) async fn handover(
    State(st): State<AppState>,
    Path(role): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let Some(tx) = st.role_set.handover(&role) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("this node is not a candidate for role {role:?}"),
        );
    };
    let holding = local_view(&st, &role)
        .is_some_and(|v| matches!(v.state, RoleState::Holder | RoleState::Promoting));
    if !holding {
        return error(
            StatusCode::CONFLICT,
            format!("this node does not hold {role:?}; ask the holder's agent"),
        );
    }
    // Optional body: {"to": "node"} names the candidate to hand over to.
    let to = if body.is_empty() {
        None
    } else {
        match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) if v.get("to").is_none_or(|t| t.is_string() || t.is_null()) => {
                v.get("to").and_then(|t| t.as_str()).map(str::to_owned)
            }
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    r#"expected {"to": "node-name"} or an empty body"#,
                )
            }
        }
    };
    if let Some(to) = &to {
        if let Err(why) = may_take(&st, &role, to).await {
            return error(
                StatusCode::CONFLICT,
                format!("handover of {role:?} refused: {why}"),
            );
        }
    }
    match tx.try_send(to) {
        Ok(()) => (
            StatusCode::ACCEPTED,
            Json(crate::view::HandoverView { handover: role }),
        )
            .into_response(),
        Err(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "a handover is already under way",
        ),
    }
}

/// Whether the member named `to` may be handed `role`, as its published
/// candidacy says: refused when it may not be promoted (its
/// `promotable = false`). Nothing else is judged here: a handover goes to
/// whom the operator names (`hale roles switchover` checks more).
async fn may_take(st: &AppState, role: &str, to: &str) -> Result<(), TargetRefused> {
    let members = st.snapshot().await.map(|s| s.members).unwrap_or_default();
    let candidacy = members
        .iter()
        .find(|m| m.name == to)
        .and_then(|m| AgentMeta::parse(&m.meta))
        .and_then(|meta| meta.roles.get(role).copied());
    match candidacy {
        Some(c) if !c.tags.promotable => Err(TargetRefused::NotPromotable(to.to_owned())),
        _ => Ok(()),
    }
}

/// `POST /v1/roles/{role}/pause`: no automatic promotion or demotion of
/// `role` until it is resumed (any member may ask; written to the control
/// plane).
pub(crate) async fn pause(
    State(st): State<AppState>,
    Path(role): Path<String>,
) -> Result<Response, ApiError> {
    set_paused(&st, role, true, false).await
}

/// `POST /v1/roles/{role}/resume`: the role moves on faults again.
/// Refused (409) while the role's holder has been silent for longer than
/// a lease, unless the body says `{"force": true}`.
pub(crate) async fn resume(
    State(st): State<AppState>,
    Path(role): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let force = if body.iter().all(u8::is_ascii_whitespace) {
        false
    } else {
        #[derive(serde::Deserialize)]
        struct Resume {
            #[serde(default)]
            force: bool,
        }
        let r: Resume = json_body(&body, r#"expected {"force": true}, {} or an empty body"#)?;
        r.force
    };
    set_paused(&st, role, false, force).await
}

async fn set_paused(
    st: &AppState,
    role: String,
    paused: bool,
    force: bool,
) -> Result<Response, ApiError> {
    let c = control(st)?;
    // A role the control plane never heard of, and this node is no
    // candidate for, is a typo: pausing it would create it.
    let known =
        st.role_set.is_candidate(&role) || c.table().await.is_some_and(|t| t.role(&role).is_some());
    if !known {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no role {role:?}: the control plane has never granted it and this node is no candidate for it"),
        ));
    }
    let req = hale_control::LeaseRequest::Pause {
        role: role.clone(),
        paused,
        force,
        origin: hale_control::Origin::by(st.me()),
    };
    match c.write(&req, std::time::Duration::from_secs(3)).await {
        Ok(hale_control::LeaseResponse::Paused(p)) => {
            Ok(Json(crate::view::PauseView { role, paused: p }).into_response())
        }
        Err(refusal @ hale_control::raft::api::Refusal::HolderSilent { .. }) => {
            Err(ApiError(StatusCode::CONFLICT, refusal.to_string()))
        }
        other => Err(unexpected(other)),
    }
}

/// A control-plane write's answer that is not the one asked for: 502 with
/// what it said, or 503 when no server could take it (retryable).
pub(crate) fn unexpected(r: Answer<hale_control::LeaseResponse>) -> ApiError {
    match r {
        Ok(other) => ApiError(
            StatusCode::BAD_GATEWAY,
            format!("the control plane answered {other:?}"),
        ),
        Err(refusal) => ApiError(StatusCode::SERVICE_UNAVAILABLE, refusal.to_string()),
    }
}

/// This agent's control-plane client, or the answer that it has none.
pub(crate) fn control(st: &AppState) -> Result<&ControlClient, ApiError> {
    let none = "this agent has no control plane configured";
    (st.control.as_ref()).ok_or_else(|| ApiError(StatusCode::CONFLICT, none.into()))
}

/// A server change's answer: `done` once it is made, else 503 and why.
fn changed(r: Answer<()>, done: serde_json::Value) -> Result<Response, ApiError> {
    r.map(|()| Json(done).into_response())
        .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))
}

pub(crate) async fn add_server(
    State(st): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let req: AddServer = json_body(&body, r#"expected {"id": 4, "addr": "10.0.0.8:7948"}"#)?;
    let added = control(&st)?.add_server(req.id, req.addr).await;
    changed(added, serde_json::json!({ "added": req.id }))
}

pub(crate) async fn remove_server(
    State(st): State<AppState>,
    Path(id): Path<u64>,
) -> Result<Response, ApiError> {
    let removed = control(&st)?.change_servers(ServerChange::Remove(id)).await;
    changed(removed, serde_json::json!({ "removed": id }))
}
