//! Room: the HTTP surface. The API's handlers (`http/*_api.rs`, [`api`],
//! [`drill`], [`metrics`]), the mutation guard (`api_guard.rs`), the
//! OpenAPI document (`http/openapi.json`, served as [`api::OPENAPI`]), the
//! dashboard ([`dashboard`]), how agents ask each other (`peers.rs`) and
//! the typed client of the API ([`client`]).
//!
//! This file holds the API's one route table: every route the agent
//! serves is declared here (the handlers' modules declare none), every
//! handler shares one [`AppState`], and the mutation guard wraps every
//! mutating route once. The relay's ingestion mounts its own.
//!
//! Contract: it serves what the other rooms offer and changes nothing of
//! theirs but through their own handles: the membership driver's
//! commands, the role set (handovers) and its role views (read-only
//! snapshots), the reloader. No other room imports it, but for the
//! composition root (`lib.rs`) and the shapes' module ([`crate::view`]),
//! which stays beside it because every room publishes in them.

pub mod api;
mod api_guard;
pub mod client;
mod cluster_api;
pub mod dashboard;
pub mod drill;
mod history_api;
pub mod keys_api;
pub mod metrics;
mod peers;
pub mod relay_api;
mod roles_api;
pub(crate) mod state;
mod switchover_api;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use axum::http::HeaderMap;

use crate::http::state::AppState;

/// Every route of the HTTP API on one state: mutating routes behind the
/// browser/token guard, the sealed agent-to-agent key route behind its own,
/// the relay's ingestion (if any) behind neither.
pub(crate) fn router(st: AppState, token: Option<String>, http: SocketAddr) -> Router {
    use crate::view::routes;
    let guarded = Router::new()
        .route(routes::HEALTH, get(api::health))
        .route(routes::MEMBERS, get(api::members))
        .route(routes::EVENTS, get(api::events))
        .route(routes::EVENT_STREAM, get(api::event_stream))
        .route(routes::JOIN, post(api::join))
        .route(routes::LEAVE, post(api::leave))
        .route(routes::OPENAPI, get(api::openapi))
        .route(routes::METRICS, get(api::metrics))
        .route(routes::ROLES, get(roles_api::roles))
        .route(routes::SERVICES, get(roles_api::services))
        .route(routes::HANDOVER, post(roles_api::handover))
        .route(routes::PAUSE, post(roles_api::pause))
        .route(routes::RESUME, post(roles_api::resume))
        .route(routes::SWITCHOVER, post(switchover_api::switchover))
        .route(routes::PRIMARY, get(roles_api::primary))
        .route(routes::REPLICA, get(roles_api::replica))
        .route(routes::READ_ONLY, get(roles_api::read_only))
        .route(routes::SYNC, get(roles_api::sync))
        .route(routes::ASYNC, get(roles_api::not_sync))
        .route(routes::HISTORY, get(history_api::history))
        .route(routes::CONTROL_SERVERS, post(roles_api::add_server))
        .route(
            routes::CONTROL_SERVER_REMOVE,
            post(roles_api::remove_server),
        )
        .route(routes::CLUSTER_ROLES, get(cluster_api::roles))
        .route(routes::CLUSTER_SERVICES, get(cluster_api::services))
        .route(routes::DRILL, get(drill::status))
        .route(routes::DRILL_RESTORE, post(drill::restore))
        .route(routes::DRILL_FAULT, post(drill::set))
        .route(routes::TRAFFIC, post(drill::traffic))
        .route(routes::RELAY, get(relay_api::status))
        .route(routes::KEYS, get(keys_api::list))
        .route(routes::KEY_OP, post(keys_api::fan_out))
        .route(routes::RELOAD, post(api::reload))
        .fallback(api::not_found)
        .with_state(st.clone())
        .merge(dashboard_router())
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(api_guard::MutationGuard {
                token,
                loopback: http.ip().is_loopback(),
            }),
            api_guard::guard_mutations,
        ));
    let mut app = guarded.merge(key_peer_router(st.clone()));
    if let Some(r) = st.relay() {
        app = app.merge(r.router());
    }
    app
}

/// The route other agents call to rotate keys, behind the sealing guard
/// (not the browser/token guard: peers hold the cluster key, not this
/// API's token); none without a keyring.
fn key_peer_router(st: AppState) -> Router {
    use crate::view::routes;
    let Some(guard) = keys_api::peer_guard(&st) else {
        return Router::new();
    };
    Router::new()
        .route(routes::CLUSTER_KEY_OP, post(keys_api::peer_op))
        .layer(axum::middleware::from_fn_with_state(
            guard,
            hale_seal::authenticate,
        ))
        .with_state(st)
}

/// The dashboard's routes: `/`, `/assets/{file}`, `/favicon.ico`
/// ([`dashboard::router`]).
fn dashboard_router() -> Router {
    use axum::extract::Path;
    use dashboard::serve;
    Router::new()
        .route(
            "/",
            get(|h: HeaderMap| async move { serve("index.html", &h) }),
        )
        .route(
            "/favicon.ico",
            get(|h: HeaderMap| async move { serve("favicon.svg", &h) }),
        )
        .route(
            "/assets/{file}",
            get(|Path(f): Path<String>, h: HeaderMap| async move { serve(&f, &h) }),
        )
}
