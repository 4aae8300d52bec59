//! The routes a control-plane server serves (Raft RPCs, lease requests,
//! server changes, reads of the table and of a role's history), in front
//! of them the guard and the protocol layer, and their handlers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

use super::api::{self, answer_for, Answer};
use super::{batch, raft_routes, AcquireRequest, AddServer, ControlError, ControlPlane};
use super::{Refusal, ServerChange};
use crate::auth::{self, ControlAuth};
use crate::lease::{Change, LeaseRequest, LeaseTable, HISTORY_LIMIT};
use crate::protocol::{spoken, Asker, Envelope, HEADER};

impl ControlPlane {
    /// Routes to serve: Raft RPCs, `/control/acquire` and `/control/write`
    /// for requests forwarded to the leader, and the reads (the table, a
    /// role's history, the leader). With sealed auth every route
    /// is behind [`hale_seal::authenticate`]: a request that is not sealed for
    /// this server by a cluster key, fresh and first seen, gets 401 before
    /// any route sees it. Inside it, `speak` answers each asker
    /// in the form of the protocol it speaks.
    pub fn routes(&self) -> Router {
        let app = raft_routes(self.raft.clone(), self.contact.clone(), self.log.clone()).merge(
            Router::new()
                .route(api::ACQUIRE, post(acquire_route))
                .route(api::WRITE, post(write_route))
                .route(api::BATCH, post(batch::route))
                .route(api::TABLE, get(table_route).post(table_route))
                .route(api::HISTORY, post(history_route))
                .route(api::LEADER, get(leader_route).post(leader_route))
                .route(api::SERVERS, post(add_server_route))
                .route(api::SERVER_REMOVE, post(remove_server_route))
                .with_state(self.clone()),
        );
        let app = app.layer(axum::middleware::from_fn_with_state(self.speaks, speak));
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

impl ControlPlane {
    /// The last `limit` changes of `role`'s failover history, oldest first,
    /// as this server applied them (may lag the leader by moments): `None`
    /// when the table has no such role ([`crate::lease::changes`]).
    pub fn history(&self, role: &str, limit: usize) -> Option<Vec<Change>> {
        let sm = self.sm.lock();
        sm.table.role(role)?;
        let all = sm.table.history(role);
        Some(all[all.len().saturating_sub(limit)..].to_vec())
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
        r => Json(answer_for(r.map_err(Refusal::from), asker.0)).into_response(),
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
    Json(cp.sm.lock().table.without_history())
}

async fn history_route(
    State(cp): State<ControlPlane>,
    Json(q): Json<api::HistoryQuery>,
) -> Json<Option<Vec<Change>>> {
    let limit = q.limit.unwrap_or(HISTORY_LIMIT);
    Json(cp.history(&q.role, limit))
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
    Json(answer_for(r, asker.0))
}

async fn remove_server_route(
    State(cp): State<ControlPlane>,
    asker: Asker,
    axum::extract::Path(id): axum::extract::Path<u64>,
) -> Json<api::Answer<()>> {
    let change = ServerChange::Remove(id);
    let r = cp.change_servers(change).await.map_err(Refusal::from);
    Json(answer_for(r, asker.0))
}

/// The largest answer [`speak`] wraps (what a client reads at most).
const WRAP_LIMIT: usize = hale_seal::RESPONSE_LIMIT;

/// The layer in front of a server's routes, inside the guard (it sees
/// plaintext): notes the asker's protocol for the routes ([`Asker`]),
/// refuses a request from a newer client that did not decode here
/// ([`Refusal::TooNew`] on `/control/*`; `422` naming both versions on
/// `/raft/*`, whose answers have no place for it), and answers in the
/// asker's form: version 1 as it is, version 2 and newer in an
/// [`Envelope`] with the [`HEADER`]. `ours` is what this server speaks
/// (1: it behaves on the wire as the previous release did).
async fn speak(State(ours): State<u16>, mut req: Request, next: Next) -> Response {
    let theirs = spoken(req.headers());
    req.extensions_mut().insert(Asker(theirs));
    let path = req.uri().path().to_owned();
    let res = next.run(req).await;
    let form = theirs.min(ours);
    if form < 2 {
        return res;
    }
    let undecodable = matches!(
        res.status(),
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY
    );
    if undecodable && theirs > ours {
        tracing::warn!(
            path,
            client = theirs,
            server = ours,
            "a request from a client speaking control-plane protocol {theirs} did not decode \
             on this server (protocol {ours}): refused as too new; upgrade this server"
        );
        return too_new(&path, theirs, ours);
    }
    let (mut parts, body) = res.into_parts();
    parts.headers.insert(HEADER, HeaderValue::from(ours));
    if !parts.status.is_success() {
        return Response::from_parts(parts, body);
    }
    let Ok(plain) = axum::body::to_bytes(body, WRAP_LIMIT).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "answer too large").into_response();
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(envelope(ours, &plain)))
}

/// `{"protocol": ours, "answer": <plain>}`, the answer's JSON kept as it is.
fn envelope(ours: u16, plain: &[u8]) -> Vec<u8> {
    let mut out = format!("{{\"protocol\":{ours},\"answer\":").into_bytes();
    out.extend_from_slice(if plain.is_empty() { b"null" } else { plain });
    out.push(b'}');
    out
}

/// The refusal of a request too new for this server (see [`speak`]).
fn too_new(path: &str, theirs: u16, ours: u16) -> Response {
    let header = [(HEADER, HeaderValue::from(ours))];
    if path.starts_with("/raft/") {
        let why = format!(
            "this server speaks control-plane protocol up to {ours}; the RPC (from a server \
             speaking {theirs}) did not decode"
        );
        return (StatusCode::UNPROCESSABLE_ENTITY, header, why).into_response();
    }
    let refusal: Answer<()> = Err(Refusal::TooNew {
        needs: theirs,
        speaks: ours,
    });
    let body = serde_json::to_vec(&Envelope {
        protocol: ours,
        answer: refusal,
    })
    .expect("a refusal serializes");
    let json = [(axum::http::header::CONTENT_TYPE, "application/json")];
    (StatusCode::OK, header, json, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::envelope;

    #[test]
    fn an_answer_is_wrapped_with_the_servers_version_and_its_body_kept_as_it_is() {
        let wrapped = envelope(2, br#"{"Ok":{"Paused":true}}"#);
        let expected = br#"{"protocol":2,"answer":{"Ok":{"Paused":true}}}"#;
        assert_eq!(wrapped, expected.to_vec());
        // An empty version-1 body (a route answering nothing) wraps as null.
        assert_eq!(
            envelope(2, b""),
            br#"{"protocol":2,"answer":null}"#.to_vec()
        );
    }
}
