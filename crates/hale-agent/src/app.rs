//! The HTTP API's one state and its one route table: every handler of
//! every API module ([`crate::api`], [`crate::roles_api`],
//! [`crate::cluster_api`], [`crate::drill`], [`crate::relay_api`],
//! [`crate::keys_api`]; the dashboard and the relay's ingestion mount
//! their own) shares [`AppState`], and the mutation guard wraps every
//! mutating route once.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;

use crate::state::AppState;

/// Every route of the HTTP API on one state: mutating routes behind the
/// browser/token guard, the sealed agent-to-agent key route behind its own,
/// the relay's ingestion (if any) behind neither.
pub(crate) fn router(st: AppState, token: Option<String>, http: SocketAddr) -> Router {
    use crate::view::routes;
    use crate::{api, cluster_api, drill, keys_api, relay_api, roles_api, switchover_api};
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
        .merge(crate::dashboard::router())
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(crate::api_guard::MutationGuard {
                token,
                loopback: http.ip().is_loopback(),
            }),
            crate::api_guard::guard_mutations,
        ));
    let mut app = guarded.merge(crate::keys_api::peer_router(st.clone()));
    if let Some(r) = st.relay() {
        app = app.merge(r.router());
    }
    app
}
