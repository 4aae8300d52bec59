//! The HTTP API's one state and its one route table: every handler of
//! every API module ([`crate::api`], [`crate::roles_api`],
//! [`crate::cluster_api`], [`crate::drill`], [`crate::relay_api`],
//! [`crate::keys_api`]; the dashboard and the relay's ingestion mount
//! their own) shares [`AppState`], and the mutation guard wraps every
//! mutating route once.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use tokio::sync::mpsc;

use crate::control_client::ControlClient;
use crate::keyring::SharedKeyring;
use crate::roles::RoleViews;
use crate::runtime::{Command, Shared, Snapshot};
use crate::services::Services;

/// What every handler of the HTTP API may use.
#[derive(Clone)]
pub(crate) struct AppState {
    /// Requests to the membership driver.
    pub(crate) cmds: mpsc::Sender<Command>,
    /// What the driver shares: identity, events, counters, drill faults.
    pub(crate) shared: Arc<Shared>,
    /// The cluster's name (`[cluster] name`).
    pub(crate) cluster: String,
    /// The relay and its configuration, if this agent runs one.
    pub(crate) relay: Option<(hale_relay::Relay, Arc<hale_relay::RelayConfig>)>,
    /// This node's view of each role it is a candidate for.
    pub(crate) roles: RoleViews,
    /// This node's services and their checks.
    pub(crate) services: Services,
    /// The control-plane server this agent runs, if any.
    pub(crate) control_server: Option<hale_control::raft::ControlPlane>,
    /// The control plane's client, if one is configured.
    pub(crate) control: Option<ControlClient>,
    /// Handover requests, per role this node is a candidate for.
    pub(crate) handovers: Arc<BTreeMap<String, mpsc::Sender<Option<String>>>>,
    /// The cluster keyring (None: `insecure_plaintext`).
    pub(crate) keys: Option<SharedKeyring>,
    /// Asks other agents (key fan-out, cluster views), with its answers'
    /// cache for the cluster views.
    pub(crate) peers: crate::cluster_api::Peers,
}

/// The agent is stopping: the request was not carried out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopping;

impl AppState {
    /// This node's name.
    pub(crate) fn me(&self) -> &str {
        self.shared.id.name()
    }

    /// A snapshot of members and counters from the driver.
    pub(crate) async fn snapshot(&self) -> Result<Snapshot, Stopping> {
        let s = crate::runtime::ask(&self.cmds, Command::Snapshot).await;
        s.ok_or(Stopping)
    }

    /// The relay, if this agent runs one.
    pub(crate) fn relay(&self) -> Option<&hale_relay::Relay> {
        self.relay.as_ref().map(|(r, _)| r)
    }
}

/// Every route of the HTTP API on one state: mutating routes behind the
/// browser/token guard, the sealed agent-to-agent key route behind its own,
/// the relay's ingestion (if any) behind neither.
pub(crate) fn router(st: AppState, token: Option<String>, http: SocketAddr) -> Router {
    use crate::view::routes;
    use crate::{api, cluster_api, drill, keys_api, relay_api, roles_api};
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
        .route(routes::PRIMARY, get(roles_api::primary))
        .route(routes::REPLICA, get(roles_api::replica))
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

/// How long the agent waits to connect to another agent.
pub(crate) const PEER_CONNECT: Duration = Duration::from_millis(500);
