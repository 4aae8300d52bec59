//! Raft RPCs over HTTP (JSON), and the routes that receive them. Every
//! RPC says the protocol its sender speaks and notes the one its answer
//! says ([`crate::protocol`]): the leader's gate reads what followers
//! answered.

use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Raft};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::prevote::{self, Contact, RouteState, PREVOTE_PATH};
use super::store::LogStore;
use super::types::TypeConfig;
use hale_seal::{CallError, Target};

use crate::auth::ControlAuth;
use crate::election::RPC_TIMEOUT_FLOOR;
use crate::protocol::{self, Spoken};

/// How long one RPC may take: what openraft asks, but no less than
/// [`RPC_TIMEOUT_FLOOR`] (see `runtime.rs`).
fn ttl(option: &RPCOption) -> Duration {
    option.hard_ttl().max(RPC_TIMEOUT_FLOOR)
}

/// Opens connections to peers.
#[derive(Debug, Clone)]
pub struct Network {
    pub(super) client: reqwest::Client,
    pub(super) auth: ControlAuth,
    pub(super) speaks: u16,
    spoken: Spoken,
}

impl Network {
    /// A network with its own HTTP client, sealing RPCs per `auth`, saying
    /// it speaks protocol `speaks` and noting in `spoken` what each peer
    /// answers in.
    pub fn new(auth: ControlAuth, speaks: u16, spoken: Spoken) -> Network {
        Network {
            client: reqwest::Client::builder()
                .connect_timeout(Duration::from_millis(500))
                .build()
                .expect("a plain HTTP client builds"),
            auth,
            speaks,
            spoken,
        }
    }
}

/// A connection to one peer.
#[derive(Debug, Clone)]
pub struct Conn {
    /// The network it came from: the client, the keys, the protocols.
    net: Network,
    target: u64,
    addr: String,
}

/// An RPC the peer could not decode: newer than it speaks (the previous
/// release answers such a request with `422`). Retried like any network
/// error; the leader's gate keeps it from happening for log entries.
#[derive(Debug, thiserror::Error)]
#[error(
    "control-plane server {target} could not decode this {path} RPC: it speaks protocol {theirs}, \
     this server {ours} ({message})"
)]
struct NotUnderstood {
    target: u64,
    path: String,
    theirs: String,
    ours: u16,
    message: String,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Conn;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Conn {
        Conn {
            net: self.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

impl Conn {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        ttl: Duration,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let path = format!("/raft/{path}");
        let to = Target {
            target: self.target,
            addr: &self.addr,
            path: &path,
        };
        let net = &self.net;
        let heard = protocol::call(&net.client, &net.auth, to, req, ttl, net.speaks).await;
        let res: Result<Resp, RaftError<u64, E>> = match heard {
            Ok(h) => {
                net.spoken.note(self.target, h.protocol);
                Ok(h.answer)
            }
            Err(e) => Err(e),
        }
        .map_err(|e| match e {
            // Gone: openraft backs off (500 ms) before trying it again.
            CallError::Unreachable(_) => RPCError::Unreachable(Unreachable::new(&e)),
            e if protocol::undecodable(&e) => {
                let message = match e {
                    CallError::Refused { message, .. } => message,
                    e => e.to_string(),
                };
                let theirs = net.spoken.of(self.target);
                let e = NotUnderstood {
                    target: self.target,
                    path: path.clone(),
                    theirs: theirs.map_or_else(|| "1 (or unknown)".into(), |v| v.to_string()),
                    ours: net.speaks,
                    message,
                };
                tracing::warn!("{e}");
                RPCError::Network(NetworkError::new(&e))
            }
            // Slow, not gone (an append and its fsync on a loaded host can
            // outlast the 100 ms openraft allows): no backoff, the next
            // heartbeat tries again. Taken for unreachable, every slow
            // append stopped replication for 500 ms, and three in a row
            // cost a holder its lease with nothing wrong (CI, under load).
            _ => RPCError::Network(NetworkError::new(&e)),
        })?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call("append", &rpc, ttl(&option)).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.call("snapshot", &rpc, ttl(&option)).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call("vote", &rpc, ttl(&option)).await
    }
}

/// An append from a leader this server follows (any answer but a higher
/// vote: a conflict is still that leader speaking) is contact, from the
/// moment it arrives with a vote at least this server's: the answer waits
/// for the disk, and a stalled disk is not a leader gone (openraft, too,
/// counts the leader alive from the request).
async fn append(
    State(s): State<RouteState>,
    Json(req): Json<AppendEntriesRequest<TypeConfig>>,
) -> Json<Result<AppendEntriesResponse<u64>, RaftError<u64>>> {
    let from_leader = req.vote.is_committed() && req.vote >= s.raft.metrics().borrow().vote;
    let writing = from_leader.then(|| s.contact.writing());
    let r = s.raft.append_entries(req).await;
    drop(writing);
    if matches!(&r, Ok(a) if !matches!(a, AppendEntriesResponse::HigherVote(_))) {
        s.contact.touch();
    }
    Json(r)
}

/// A vote granted is contact: the server waits a campaign timeout for its
/// candidate to win.
async fn vote(
    State(s): State<RouteState>,
    Json(req): Json<VoteRequest<u64>>,
) -> Json<Result<VoteResponse<u64>, RaftError<u64>>> {
    let r = s.raft.vote(req).await;
    if matches!(&r, Ok(v) if v.vote_granted) {
        s.contact.touch();
    }
    Json(r)
}

/// A snapshot comes from a leader: contact.
async fn snapshot(
    State(s): State<RouteState>,
    Json(req): Json<InstallSnapshotRequest<TypeConfig>>,
) -> Json<Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>> {
    let r = s.raft.install_snapshot(req).await;
    if r.is_ok() {
        s.contact.touch();
    }
    Json(r)
}

/// The routes peers call (`/raft/append`, `/raft/vote`, `/raft/snapshot`,
/// `/raft/prevote`), unauthenticated: [`super::ControlPlane::routes`] puts
/// them behind the guard. Each notes this server's `contact` with a leader
/// (see [`super::prevote`]).
pub fn raft_routes(raft: Raft<TypeConfig>, contact: Contact, log: LogStore) -> Router {
    Router::new()
        .route("/raft/append", post(append))
        .route("/raft/vote", post(vote))
        .route("/raft/snapshot", post(snapshot))
        .route(PREVOTE_PATH, post(prevote::route))
        .with_state(RouteState { raft, contact, log })
}
