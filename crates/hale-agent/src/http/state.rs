//! What every handler of the HTTP API shares: [`AppState`], and the error
//! answer ([`ApiError`], the contract's [`ErrorBody`]).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hale_control::raft::ControlClient;
use hale_keyring::SharedKeyring;
use tokio::sync::mpsc;

use crate::config::reload::Reloader;
use crate::http::peers::Peers;
use crate::membership::runtime::{Command, Shared, Snapshot};
use crate::roles::services::Services;
use crate::roles::{RoleSet, RoleViews};
use crate::view::ErrorBody;

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
    /// This node's candidacies (handovers go to them).
    pub(crate) role_set: Arc<RoleSet>,
    /// Configuration reloads.
    pub(crate) reloader: Arc<Reloader>,
    /// The control-plane server this agent runs, if any.
    pub(crate) control_server: Option<hale_control::raft::ControlPlane>,
    /// The control plane's client, if one is configured.
    pub(crate) control: Option<ControlClient>,
    /// The cluster keyring (None: `insecure_plaintext`).
    pub(crate) keys: Option<SharedKeyring>,
    /// Asks other agents (key fan-out, cluster views), with its answers'
    /// cache for the cluster views.
    pub(crate) peers: Peers,
}

/// The agent is stopping: the request was not carried out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stopping;

impl AppState {
    /// This node's name.
    pub(crate) fn me(&self) -> &str {
        self.shared.id().name()
    }

    /// A snapshot of members and counters from the driver.
    pub(crate) async fn snapshot(&self) -> Result<Snapshot, Stopping> {
        let s = crate::membership::runtime::ask(&self.cmds, Command::Snapshot).await;
        s.ok_or(Stopping)
    }

    /// The relay, if this agent runs one.
    pub(crate) fn relay(&self) -> Option<&hale_relay::Relay> {
        self.relay.as_ref().map(|(r, _)| r)
    }
}

/// An API error: a status and a message.
#[derive(Debug)]
pub(crate) struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

impl From<Stopping> for ApiError {
    fn from(_: Stopping) -> ApiError {
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "the agent is stopping".into(),
        )
    }
}

/// A JSON error response, `{"error": msg}`, with `status`.
pub(crate) fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    ApiError(status, msg.into()).into_response()
}

/// A JSON request body; one that does not parse is answered 400 with
/// `expected`.
pub(crate) fn json_body<T: serde::de::DeserializeOwned>(
    body: &[u8],
    expected: &str,
) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|_| ApiError(StatusCode::BAD_REQUEST, expected.into()))
}
