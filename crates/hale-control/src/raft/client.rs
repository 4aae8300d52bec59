//! The typed client of the control plane: lease requests, acquisitions,
//! server changes and the table, sent to whichever server answers. Every
//! request is sealed with the cluster keyring and every answer must be
//! sealed for that request ([`hale_seal`]); an answer that is not
//! counts as no answer. A refusal comes back typed ([`Refusal`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::api::{self, AddServer, Answer, Refusal, ServerChange};
use super::AcquireRequest;
use hale_seal::CallError;

use crate::auth::ControlAuth;
use crate::lease::{LeaseRequest, LeaseResponse, LeaseTable};

/// Talks to whichever control-plane server answers (they forward to the
/// leader). It sticks to the last server that answered, so that a frozen
/// server (which still accepts connections) costs one timeout, not one per
/// request.
#[derive(Debug, Clone)]
pub struct ControlClient {
    servers: Vec<(u64, SocketAddr)>,
    auth: ControlAuth,
    http: reqwest::Client,
    preferred: Arc<AtomicUsize>,
    /// While this flag is set (a drill's freeze), every request fails as if
    /// no server answered.
    gate: Option<Arc<AtomicBool>>,
}

impl ControlClient {
    /// A client for these servers (id → address), authenticating per `auth`.
    pub fn new(servers: &BTreeMap<u64, SocketAddr>, auth: ControlAuth) -> ControlClient {
        ControlClient {
            servers: servers.iter().map(|(id, a)| (*id, *a)).collect(),
            auth,
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_millis(300))
                .build()
                .expect("a plain HTTP client builds"),
            preferred: Arc::new(AtomicUsize::new(0)),
            gate: None,
        }
    }

    /// This client, asking server `id` first (an agent's own server: it
    /// is frozen or gone only when this agent is, and it forwards to the
    /// leader).
    pub fn preferring(self, id: u64) -> ControlClient {
        if let Some(i) = self.servers.iter().position(|(s, _)| *s == id) {
            self.preferred.store(i, Ordering::Relaxed);
        }
        self
    }

    /// This client, failing every request while `gate` is set (a drill's
    /// freeze: the node cannot reach the control plane).
    pub fn gated(mut self, gate: Arc<AtomicBool>) -> ControlClient {
        self.gate = Some(gate);
        self
    }

    /// Sends one request (`path`, `body`) to each server in turn, starting
    /// with the one that answered last, and returns the first authentic
    /// answer (remembering who gave it). A `503` is no answer: a server
    /// whose Raft stopped (its disk full) or that knows no leader says so,
    /// and the next server is asked.
    async fn first_answer<T: serde::de::DeserializeOwned>(
        &self,
        limit: Duration,
        path: &str,
        body: &(impl Serialize + ?Sized),
    ) -> Option<T> {
        if self
            .gate
            .as_ref()
            .is_some_and(|g| g.load(Ordering::Relaxed))
        {
            return None;
        }
        let n = self.servers.len();
        let first = self.preferred.load(Ordering::Relaxed) % n.max(1);
        for k in 0..n {
            let i = (first + k) % n;
            let (id, addr) = self.servers[i];
            let addr = addr.to_string();
            match hale_seal::call(&self.http, &self.auth, id, &addr, path, body, limit).await {
                Ok(v) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return Some(v);
                }
                // This server cannot serve it now (its Raft stopped, no
                // leader known, or its leader unreachable): ask the next.
                Err(CallError::Refused { status: 503, .. }) => {
                    tracing::debug!(server = id, %addr, path, "control plane: unavailable");
                }
                Err(e @ (CallError::Refused { .. } | CallError::Unauthentic)) => {
                    tracing::warn!(server = id, %addr, path, "control plane: {e}");
                }
                Err(_) => {}
            }
            // Not answered: the next request starts with the next server
            // (a frozen server costs one timeout, not one per request).
            let _ = self.preferred.compare_exchange(
                i,
                (i + 1) % n,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        None
    }

    async fn post<T: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &T,
        limit: Duration,
    ) -> Answer<R> {
        // Each server gets a share of the time. The leader's refusal (not
        // grantable yet, not the holder) is an answer too: every server
        // would forward to the same leader.
        let share = (limit / 2).max(Duration::from_millis(200));
        self.first_answer::<Answer<R>>(share, path, body)
            .await
            .unwrap_or(Err(Refusal::NoAnswer))
    }

    /// Sends several acquisitions and lease writes in one request (at most
    /// [`api::MAX_BATCH`]); the answer holds one answer per item, in order.
    pub async fn batch(
        &self,
        items: &[api::BatchItem],
        limit: Duration,
    ) -> Answer<Vec<Answer<LeaseResponse>>> {
        self.post(api::BATCH, &items, limit).await
    }

    /// Asks for `role` for `holder` at `priority`, as acquisition `attempt`.
    pub async fn acquire(
        &self,
        role: &str,
        holder: &str,
        priority: i64,
        attempt: u64,
        limit: Duration,
    ) -> Answer<LeaseResponse> {
        let body = AcquireRequest {
            role: role.to_owned(),
            holder: holder.to_owned(),
            priority,
            attempt,
            standing: None,
        };
        self.post(api::ACQUIRE, &body, limit).await
    }

    /// Writes a lease request through the leader.
    pub async fn write(&self, req: &LeaseRequest, limit: Duration) -> Answer<LeaseResponse> {
        self.post(api::WRITE, req, limit).await
    }

    /// The control-plane leader's id, as the first server that answers knows it.
    pub async fn leader(&self) -> Option<u64> {
        self.first_answer::<Option<u64>>(Duration::from_millis(500), api::LEADER, &())
            .await
            .flatten()
    }

    /// Adds or removes a control-plane server, through whichever server
    /// answers (it forwards to the leader).
    pub async fn change_servers(&self, change: ServerChange) -> Answer<()> {
        let limit = Duration::from_secs(10);
        let path = change.path();
        self.first_answer::<Answer<()>>(limit, &path, &change.body())
            .await
            .unwrap_or(Err(Refusal::NoAnswer))
    }

    /// Adds server `id` at `addr` (see [`ControlClient::change_servers`]).
    pub async fn add_server(&self, id: u64, addr: SocketAddr) -> Answer<()> {
        self.change_servers(ServerChange::Add(AddServer { id, addr }))
            .await
    }

    /// Reads the lease table from the first server that answers.
    pub async fn table(&self) -> Option<LeaseTable> {
        self.first_answer(Duration::from_millis(500), api::TABLE, &())
            .await
    }
}
