//! The routes a control-plane server serves (Raft RPCs, lease requests,
//! server changes), in front of them the guard and the protocol layer, and
//! their handlers.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

use super::{api, batch, raft_routes, AcquireRequest, AddServer, ControlError, ControlPlane};
use super::{Refusal, ServerChange};
use crate::auth::{self, ControlAuth};
use crate::lease::{LeaseRequest, LeaseTable};
use crate::protocol::{self, Asker};

impl ControlPlane {
    /// Routes to serve: Raft RPCs, and `/control/acquire` and `/control/write`
    /// for requests forwarded to the leader. With sealed auth every route
    /// is behind [`hale_seal::authenticate`]: a request that is not sealed for
    /// this server by a cluster key, fresh and first seen, gets 401 before
    /// any route sees it. Inside it, [`protocol::speak`] answers each asker
    /// in the form of the protocol it speaks.
    pub fn routes(&self) -> Router {
        let app = raft_routes(self.raft.clone()).merge(
            Router::new()
                .route(api::ACQUIRE, post(acquire_route))
                .route(api::WRITE, post(write_route))
                .route(api::BATCH, post(batch::route))
                .route(api::TABLE, get(table_route).post(table_route))
                .route(api::LEADER, get(leader_route).post(leader_route))
                .route(api::SERVERS, post(add_server_route))
                .route(api::SERVER_REMOVE, post(remove_server_route))
                .with_state(self.clone()),
        );
        let app = app.layer(axum::middleware::from_fn_with_state(
            self.speaks,
            protocol::speak,
        ));
        match &self.auth {
            ControlAuth::InsecurePlaintext => app,
            ControlAuth::Sealed(keys) => {
                let guard = Arc::new(auth::guard(self.id, keys.clone()));
                app.layer(axum::middleware::from_fn_with_state(
                    guard,
                    hale_seal::authenticate,
                ))
            }
        }
    }
}

/// A lease request's outcome on the wire: an answer (`200`, the leader's
/// `Result`, in a form the asker decodes), or `503` when the client should
/// ask another server ([`ControlError::ask_another`]).
pub(super) fn lease_answer<T: Serialize>(r: Result<T, ControlError>, asker: Asker) -> Response {
    match r {
        Err(e) if e.ask_another() => {
            (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response()
        }
        r => Json(protocol::answer_for(r.map_err(Refusal::from), asker.0)).into_response(),
    }
}

async fn acquire_route(
    State(cp): State<ControlPlane>,
    asker: Asker,
    Json(req): Json<AcquireRequest>,
) -> Response {
    let r = cp
        .acquire(&req.role, &req.holder, req.priority, req.attempt)
        .await;
    lease_answer(r, asker)
}

async fn write_route(
    State(cp): State<ControlPlane>,
    asker: Asker,
    Json(req): Json<LeaseRequest>,
) -> Response {
    lease_answer(cp.write(req).await, asker)
}

async fn table_route(State(cp): State<ControlPlane>) -> Json<LeaseTable> {
    Json(cp.table())
}

async fn leader_route(State(cp): State<ControlPlane>) -> Json<Option<u64>> {
    Json(cp.leader())
}

async fn add_server_route(
    State(cp): State<ControlPlane>,
    asker: Asker,
    Json(req): Json<AddServer>,
) -> Json<api::Answer<()>> {
    let change = ServerChange::Add(req);
    let r = cp.change_servers(change).await.map_err(Refusal::from);
    Json(protocol::answer_for(r, asker.0))
}

async fn remove_server_route(
    State(cp): State<ControlPlane>,
    asker: Asker,
    axum::extract::Path(id): axum::extract::Path<u64>,
) -> Json<api::Answer<()>> {
    let change = ServerChange::Remove(id);
    let r = cp.change_servers(change).await.map_err(Refusal::from);
    Json(protocol::answer_for(r, asker.0))
}
