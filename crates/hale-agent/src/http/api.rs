//! The HTTP API (axum): members, events, health, metrics, join, leave.
//! Listens on 127.0.0.1 by default; mutating endpoints are behind
//! `api_guard` (same-origin, JSON, the token when one is
//! configured). Bad requests get a 4xx with `{"error": "..."}`.

use std::convert::Infallible;
use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use tokio_stream::wrappers::BroadcastStream;

use crate::http::state::{ApiError, AppState, Stopping};
use crate::membership::runtime::Command;
use crate::view::{HealthStatus, HealthView, MemberCounts, MemberState};

/// The OpenAPI description of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

pub(crate) async fn not_found() -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "no such endpoint; see /v1/openapi.json".into(),
    )
}

pub(crate) async fn health(State(st): State<AppState>) -> Result<Response, ApiError> {
    let s = st.snapshot().await?;
    let count = |state: MemberState| s.members.iter().filter(|m| m.state == state).count();
    let control = st.control_server.as_ref().map(|c| c.status());
    // A control-plane server whose storage failed is degraded: its Raft
    // has stopped (the others elect a leader without it).
    let degraded = control.as_ref().is_some_and(|c| c.storage_error.is_some());
    let status = if s.left {
        HealthStatus::Left
    } else if degraded {
        HealthStatus::Degraded
    } else {
        HealthStatus::Ok
    };
    let body = HealthView {
        status,
        control,
        clock: hale_seal::clock_report(),
        cluster: st.cluster.clone(),
        node: st.me().to_owned(),
        addr: st.shared.id().addr().to_string(),
        incarnation: s.incarnation,
        local_health: s.local_health,
        members: MemberCounts {
            alive: count(MemberState::Alive),
            suspect: count(MemberState::Suspect),
            dead: count(MemberState::Dead),
            left: count(MemberState::Left),
        },
        wire: s.wire.speaks.map(|speaks| crate::view::WireView {
            speaks: speaks.to_string(),
            writes: s.wire.writes,
        }),
        hooks: st.role_set.hook_counts(),
    };
    Ok(Json(body).into_response())
}

pub(crate) async fn members(State(st): State<AppState>) -> Result<Response, ApiError> {
    Ok(Json(st.snapshot().await?.members).into_response())
}

#[derive(Deserialize)]
pub(crate) struct EventsQuery {
    /// Only events with a larger sequence number.
    since: Option<u64>,
}

pub(crate) async fn events(
    State(st): State<AppState>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let since = q.since.unwrap_or(0);
    let list = st.shared.history_since(since);
    Ok(Json(list).into_response())
}

/// Most event-stream subscribers at once: each holds a slot in the event
/// channel and a connection; past this, new ones get 503.
pub const MAX_EVENT_SUBSCRIBERS: usize = 64;

pub(crate) async fn event_stream(State(st): State<AppState>) -> Response {
    if st.shared.subscribers() >= MAX_EVENT_SUBSCRIBERS {
        return ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{MAX_EVENT_SUBSCRIBERS} event-stream subscribers already; \
                 poll GET /v1/events?since=SEQ instead"
            ),
        )
        .into_response();
    }
    let rx = st.shared.subscribe();
    let live = BroadcastStream::new(rx).map(|r| {
        Ok::<_, Infallible>(match r {
            Ok(e) => SseEvent::default()
                .event(e.event.kind())
                .id(e.seq.to_string())
                .json_data(&e)
                .unwrap_or_default(),
            // This subscriber fell behind and the channel dropped events
            // for it: say how many, so it can fetch them from /v1/events.
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                SseEvent::default()
                    .event("lagged")
                    .json_data(serde_json::json!({ "missed": n }))
                    .unwrap_or_default()
            }
        })
    });
    Sse::new(stream::select(live, stream::pending()))
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinBody {
    addrs: Vec<String>,
}

pub(crate) async fn join(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let bad = |e: String| ApiError(StatusCode::BAD_REQUEST, e);
    let req: JoinBody = serde_json::from_slice(&body)
        .map_err(|e| bad(format!("expected {{\"addrs\": [\"host:port\", ...]}}: {e}")))?;
    if req.addrs.is_empty() {
        return Err(bad("addrs is empty".into()));
    }
    let addrs = req
        .addrs
        .iter()
        .map(|a| {
            a.parse::<SocketAddr>()
                .map_err(|_| bad(format!("{a:?} is not an address like 10.0.0.5:7946")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let joined = crate::membership::runtime::ask(&st.cmds, |tx| Command::Join(addrs, tx)).await;
    joined.ok_or(Stopping)?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "joining": req.addrs })),
    )
        .into_response())
}

pub(crate) async fn leave(State(st): State<AppState>) -> Result<Response, ApiError> {
    let left = crate::membership::runtime::ask(&st.cmds, Command::Leave).await;
    left.ok_or(Stopping)?;
    Ok(Json(serde_json::json!({ "left": true })).into_response())
}

pub(crate) async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

pub(crate) async fn metrics(State(st): State<AppState>) -> Result<Response, ApiError> {
    let s = st.snapshot().await?;
    let mut text = crate::http::metrics::render(&s, &st.shared);
    let me = st.me();
    crate::http::metrics::render_roles(&mut text, me, &st.roles, &st.services);
    if let Some(h) = st.role_set.hook_counts() {
        crate::http::metrics::render_hooks(&mut text, me, h);
    }
    if let Some(c) = &st.control_server {
        crate::http::metrics::render_control(&mut text, me, &c.status());
    }
    crate::http::metrics::render_clocks(&mut text, me, &hale_seal::clock_report());
    crate::http::metrics::render_drill(&mut text, me, st.shared.drill());
    crate::http::metrics::render_reloads(&mut text, me, st.reloader.counts());
    if let Some(r) = st.relay() {
        text.push_str(&r.render_metrics());
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// `POST /v1/reload`: 200 with what changed, or the refusal (409, 422,
/// 503) with nothing changed (see [`crate::config::reload`]).
pub(crate) async fn reload(State(st): State<AppState>) -> Response {
    match st.reloader.reload().await {
        Ok(v) => Json(v).into_response(),
        Err(e) => (e.status(), Json(e.refusal())).into_response(),
    }
}
