//! The typed client of the control plane: lease requests, acquisitions,
//! server changes and the table, sent to whichever server answers. Every
//! request is sealed with the cluster keyring and every answer must be
//! sealed for that request ([`hale_seal`]); an answer that is not
//! counts as no answer. A refusal comes back typed ([`Refusal`]).
//!
//! Every request says the protocol this client speaks and every answer is
//! read in the form its server chose ([`crate::protocol`]). A server that
//! could not decode a request (the previous release answers a request
//! newer than it with `422`) is refused like the others' decode failures:
//! [`Refusal::TooNew`], once no other server answered.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::api::{self, AddServer, Answer, Refusal, ServerChange};
use hale_seal::{CallError, Target};

use crate::auth::ControlAuth;
use crate::lease::{Change, LeaseRequest, LeaseResponse, LeaseTable};
use crate::protocol::{self, Spoken, OLDEST_PROTOCOL, PROTOCOL};

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
    /// The protocol it speaks ([`PROTOCOL`] unless pinned lower).
    speaks: u16,
    /// What each server answered in last.
    spoken: Spoken,
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
            speaks: PROTOCOL,
            spoken: Spoken::default(),
        }
    }

    /// This client, speaking at most protocol `speaks` (clamped to what
    /// this build speaks): at 1 it asks and reads answers exactly as the
    /// previous release's client did. For tests of mixed releases.
    pub fn speaking(mut self, speaks: u16) -> ControlClient {
        self.speaks = speaks.clamp(OLDEST_PROTOCOL, PROTOCOL);
        self
    }

    /// What each server answered in last (the newest protocol it speaks).
    pub fn spoken(&self) -> BTreeMap<u64, u16> {
        self.spoken.all()
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

    /// Sends one request (`path`, `body`, which needs protocol `needs`) to
    /// each server in turn, starting with the one that answered last, and
    /// returns the first authentic answer (remembering who gave it). A
    /// `503` is no answer: a server whose Raft stopped (its disk full) or
    /// that knows no leader says so, and the next server is asked. So is a
    /// server that could not decode it (older than the request): if no
    /// server answers, that is [`Refusal::TooNew`], else
    /// [`Refusal::NoAnswer`].
    async fn first_answer<T: serde::de::DeserializeOwned>(
        &self,
        limit: Duration,
        path: &str,
        (body, needs): (&(impl Serialize + ?Sized), u16),
    ) -> Result<T, Refusal> {
        if self
            .gate
            .as_ref()
            .is_some_and(|g| g.load(Ordering::Relaxed))
        {
            return Err(Refusal::NoAnswer);
        }
        let n = self.servers.len();
        let first = self.preferred.load(Ordering::Relaxed) % n.max(1);
        let mut refusal = Refusal::NoAnswer;
        for k in 0..n {
            let i = (first + k) % n;
            let (id, addr) = self.servers[i];
            let addr = addr.to_string();
            let to = Target {
                target: id,
                addr: &addr,
                path,
            };
            match protocol::call(&self.http, &self.auth, to, body, limit, self.speaks).await {
                Ok(h) => {
                    self.spoken.note(id, h.protocol);
                    self.preferred.store(i, Ordering::Relaxed);
                    return Ok(h.answer);
                }
                // Older than the request: another server may be newer.
                Err(e) if protocol::undecodable(&e) => {
                    let speaks = self.spoken.of(id).unwrap_or(OLDEST_PROTOCOL);
                    tracing::warn!(
                        server = id,
                        %addr,
                        path,
                        "control plane: server {id} (protocol {speaks}) could not decode a \
                         request of this client (protocol {}): {e}",
                        self.speaks
                    );
                    refusal = Refusal::TooNew {
                        needs: needs.max(self.speaks),
                        speaks,
                    };
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
        Err(refusal)
    }

    async fn post<T: Serialize + ?Sized, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        (body, needs): (&T, u16),
        limit: Duration,
    ) -> Answer<R> {
        // Each server gets a share of the time. The leader's refusal (not
        // grantable yet, not the holder) is an answer too: every server
        // would forward to the same leader.
        let share = (limit / 2).max(Duration::from_millis(200));
        self.first_answer::<Answer<R>>(share, path, (body, needs))
            .await
            .and_then(|a| a)
    }

    /// Sends several acquisitions and lease writes in one request (at most
    /// [`api::MAX_BATCH`]); the answer holds one answer per item, in order.
    pub async fn batch(
        &self,
        items: &[api::BatchItem],
        limit: Duration,
    ) -> Answer<Vec<Answer<LeaseResponse>>> {
        let needs = api::batch_needs(items);
        self.post(api::BATCH, (items, needs), limit).await
    }

    /// Writes a lease request through the leader.
    pub async fn write(&self, req: &LeaseRequest, limit: Duration) -> Answer<LeaseResponse> {
        self.post(api::WRITE, (req, protocol::needs(req)), limit)
            .await
    }

    /// The control-plane leader's id, as the first server that answers knows it.
    pub async fn leader(&self) -> Option<u64> {
        let limit = Duration::from_millis(500);
        let asked = (&(), OLDEST_PROTOCOL);
        let leader = self.first_answer::<Option<u64>>(limit, api::LEADER, asked);
        leader.await.ok().flatten()
    }

    /// Adds or removes a control-plane server, through whichever server
    /// answers (it forwards to the leader).
    pub async fn change_servers(&self, change: ServerChange) -> Answer<()> {
        let limit = Duration::from_secs(10);
        let path = change.path();
        let asked = (&change.body(), OLDEST_PROTOCOL);
        self.first_answer::<Answer<()>>(limit, &path, asked)
            .await
            .and_then(|a| a)
    }

    /// Adds server `id` at `addr` (see [`ControlClient::change_servers`]).
    pub async fn add_server(&self, id: u64, addr: SocketAddr) -> Answer<()> {
        self.change_servers(ServerChange::Add(AddServer { id, addr }))
            .await
    }

    /// Reads the lease table from the first server that answers.
    pub async fn table(&self) -> Option<LeaseTable> {
        let asked = (&(), OLDEST_PROTOCOL);
        self.first_answer(Duration::from_millis(500), api::TABLE, asked)
            .await
            .ok()
    }

    /// Reads the last `limit` changes (default: all kept) of `role`'s
    /// failover history, oldest first, from the first server that answers
    /// (`None`: the table has no such role). A server of 0.1.0 does not
    /// answer it.
    pub async fn history(
        &self,
        role: &str,
        limit: Option<usize>,
    ) -> Result<Option<Vec<Change>>, Refusal> {
        let q = api::HistoryQuery {
            role: role.to_owned(),
            limit,
        };
        let asked = (&q, OLDEST_PROTOCOL);
        self.first_answer(Duration::from_secs(1), api::HISTORY, asked)
            .await
    }
}
