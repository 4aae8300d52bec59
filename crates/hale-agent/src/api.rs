//! The HTTP API (axum): members, events, health, metrics, join, leave.
//! Listens on 127.0.0.1 by default; mutating endpoints are behind
//! [`crate::api_guard`] (same-origin, JSON, the token when one is
//! configured). Bad requests get a 4xx with `{"error": "..."}`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::BroadcastStream;

use crate::runtime::{Command, Shared, Snapshot};
use crate::view::EventView;

/// The OpenAPI description of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

#[derive(Clone)]
pub(crate) struct ApiState {
    pub(crate) cmds: mpsc::Sender<Command>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) relay: Option<hale_relay::Relay>,
    pub(crate) roles: crate::roles::RoleViews,
    pub(crate) services: crate::services::Services,
    /// The cluster's name (`[cluster] name`).
    pub(crate) cluster: String,
    /// The control-plane server this agent runs, if any.
    pub(crate) control: Option<hale_control::raft::ControlPlane>,
}

/// An API error: a status and a message.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

fn gone() -> ApiError {
    ApiError(
        StatusCode::SERVICE_UNAVAILABLE,
        "the agent is stopping".into(),
    )
}

pub(crate) fn router(state: ApiState) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/members", get(members))
        .route("/v1/events", get(events))
        .route("/v1/events/stream", get(event_stream))
        .route("/v1/join", post(join))
        .route("/v1/leave", post(leave))
        .route("/v1/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        "no such endpoint; see /v1/openapi.json".into(),
    )
}

async fn snapshot(st: &ApiState) -> Result<Snapshot, ApiError> {
    let (tx, rx) = oneshot::channel();
    st.cmds
        .send(Command::Snapshot(tx))
        .await
        .map_err(|_| gone())?;
    rx.await.map_err(|_| gone())
}

async fn health(State(st): State<ApiState>) -> Result<Response, ApiError> {
    let s = snapshot(&st).await?;
    let count = |state: &str| s.members.iter().filter(|m| m.state == state).count();
    let control = st.control.as_ref().map(|c| c.status());
    // A control-plane server whose storage failed is degraded: its Raft
    // has stopped (the others elect a leader without it).
    let degraded = control.as_ref().is_some_and(|c| c.storage_error.is_some());
    let body = serde_json::json!({
        "status": if s.left { "left" } else if degraded { "degraded" } else { "ok" },
        "control": control,
        "cluster": st.cluster,
        "node": st.shared.id.name(),
        "addr": st.shared.id.addr().to_string(),
        "incarnation": s.incarnation,
        "local_health": s.local_health,
        "members": {
            "alive": count("alive"),
            "suspect": count("suspect"),
            "dead": count("dead"),
            "left": count("left"),
        },
    });
    Ok(Json(body).into_response())
}

async fn members(State(st): State<ApiState>) -> Result<Response, ApiError> {
    Ok(Json(snapshot(&st).await?.members).into_response())
}

#[derive(Deserialize)]
struct EventsQuery {
    /// Only events with a larger sequence number.
    since: Option<u64>,
}

async fn events(
    State(st): State<ApiState>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let since = q.since.unwrap_or(0);
    let h = st.shared.history.lock().expect("history lock");
    let list: Vec<EventView> = h.iter().filter(|e| e.seq > since).cloned().collect();
    Ok(Json(list).into_response())
}

/// Most event-stream subscribers at once: each holds a slot in the event
/// channel and a connection; past this, new ones get 503.
pub const MAX_EVENT_SUBSCRIBERS: usize = 64;

async fn event_stream(State(st): State<ApiState>) -> Response {
    if st.shared.events.receiver_count() >= MAX_EVENT_SUBSCRIBERS {
        return ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{MAX_EVENT_SUBSCRIBERS} event-stream subscribers already; \
                 poll GET /v1/events?since=SEQ instead"
            ),
        )
        .into_response();
    }
    let rx = st.shared.events.subscribe();
    let live = BroadcastStream::new(rx).map(|r| {
        Ok::<_, Infallible>(match r {
            Ok(e) => SseEvent::default()
                .event(e.kind.clone())
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

/// A JSON error response, `{"error": msg}`, with `status`.
pub(crate) fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    ApiError(status, msg.into()).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinBody {
    addrs: Vec<String>,
}

async fn join(State(st): State<ApiState>, body: Bytes) -> Result<Response, ApiError> {
    let req: JoinBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("expected {{\"addrs\": [\"host:port\", ...]}}: {e}"),
        )
    })?;
    if req.addrs.is_empty() {
        return Err(ApiError(StatusCode::BAD_REQUEST, "addrs is empty".into()));
    }
    let addrs = req
        .addrs
        .iter()
        .map(|a| {
            a.parse::<SocketAddr>().map_err(|_| {
                ApiError(
                    StatusCode::BAD_REQUEST,
                    format!("{a:?} is not an address like 10.0.0.5:7946"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (tx, rx) = oneshot::channel();
    st.cmds
        .send(Command::Join(addrs.clone(), tx))
        .await
        .map_err(|_| gone())?;
    rx.await.map_err(|_| gone())?;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({ "joining": req.addrs })),
    )
        .into_response())
}

async fn leave(State(st): State<ApiState>) -> Result<Response, ApiError> {
    let (tx, rx) = oneshot::channel();
    st.cmds.send(Command::Leave(tx)).await.map_err(|_| gone())?;
    rx.await.map_err(|_| gone())?;
    Ok(Json(serde_json::json!({ "left": true })).into_response())
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn metrics(State(st): State<ApiState>) -> Result<Response, ApiError> {
    let s = snapshot(&st).await?;
    let mut text = crate::metrics::render(&s, &st.shared);
    text.push_str(&crate::metrics::render_roles(
        st.shared.id.name(),
        &st.roles,
        &st.services,
    ));
    if let Some(c) = &st.control {
        text.push_str(&crate::metrics::render_control(
            st.shared.id.name(),
            &c.status(),
        ));
    }
    text.push_str(&st.shared.drill.render_metrics(st.shared.id.name()));
    if let Some(r) = &st.relay {
        text.push_str(&r.render_metrics());
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}
