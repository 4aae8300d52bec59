//! A typed client of an agent's HTTP API: what the `hale` commands, the
//! tests and other tools use to talk to an agent. Every answer is decoded
//! into the types the agent serves (the contract, [`crate::view`]), never
//! dug out of untyped JSON.

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use reqwest::Response;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::view::{
    routes, ClusterRolesView, ClusterServicesView, DrillView, ErrorBody, EventView, Fault,
    FaultView, HandoverView, HealthView, HistoryView, KeyOp, KeyReport, KeysView, MemberView,
    PauseView, PrimaryView, RelayView, ReloadRefusal, ReloadView, ReplicaView, RestoredView,
    RolesView, ServiceView, SwitchoverRequest, SwitchoverView, TrafficView,
};

/// The API address a client uses when told none.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7947";

/// Why a request to an agent failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The agent could not be reached, or did not answer in time.
    #[error("cannot reach the agent at {addr}: {source}")]
    Unreachable {
        /// The agent's address.
        addr: String,
        /// Why.
        source: reqwest::Error,
    },
    /// The agent answered with an error status.
    #[error("the agent at {addr} answered {status} to {path}: {message}")]
    Status {
        /// The agent's address.
        addr: String,
        /// The request's path.
        path: String,
        /// The HTTP status.
        status: u16,
        /// The agent's `error` message, or the body.
        message: String,
    },
    /// The answer was not what the API describes.
    #[error("the agent at {addr} gave an unexpected answer to {path}: {source}")]
    Decode {
        /// The agent's address.
        addr: String,
        /// The request's path.
        path: String,
        /// Why it could not be read.
        source: reqwest::Error,
    },
}

impl ClientError {
    /// The HTTP status the agent answered, if it answered with an error.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A client of one agent's HTTP API. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    addr: String,
    token: Option<String>,
    timeout: Duration,
}

impl Client {
    /// A client of the agent whose API listens on `addr` (`host:port`),
    /// with a 5 s timeout per request and no token.
    pub fn new(addr: impl Into<String>) -> Client {
        Client {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(2))
                .no_proxy()
                .build()
                .unwrap_or_default(),
            addr: addr.into(),
            token: None,
            timeout: Duration::from_secs(5),
        }
    }

    /// The same client, sending `token` with mutating requests.
    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.token = token;
        self
    }

    /// The same client with another per-request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The same client (connections, token, timeout), for another agent.
    pub fn at(&self, addr: impl Into<String>) -> Client {
        Client {
            addr: addr.into(),
            ..self.clone()
        }
    }

    /// The agent's API address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<Response, ClientError> {
        req.send().await.map_err(|source| ClientError::Unreachable {
            addr: self.addr.clone(),
            source,
        })
    }

    /// `r` if its status is a success, else the agent's error.
    async fn check(&self, path: &str, r: Response) -> Result<Response, ClientError> {
        if r.status().is_success() {
            return Ok(r);
        }
        let status = r.status().as_u16();
        Err(self.status_error(path, status, r.text().await.unwrap_or_default()))
    }

    /// The agent answered `status` to `path` with the body `text`: its
    /// `error` message, or the body.
    fn status_error(&self, path: &str, status: u16, text: String) -> ClientError {
        let message = serde_json::from_str::<ErrorBody>(&text).map_or(text, |b| b.error);
        ClientError::Status {
            addr: self.addr.clone(),
            path: path.to_owned(),
            status,
            message,
        }
    }

    fn decode_error(&self, path: &str, source: reqwest::Error) -> ClientError {
        ClientError::Decode {
            addr: self.addr.clone(),
            path: path.to_owned(),
            source,
        }
    }

    async fn decode<T: DeserializeOwned>(&self, path: &str, r: Response) -> Result<T, ClientError> {
        let r = self.check(path, r).await?;
        r.json().await.map_err(|e| self.decode_error(path, e))
    }

    /// GETs `path`; the answer, whatever its status.
    async fn get_response(&self, path: &str) -> Result<Response, ClientError> {
        self.send(self.http.get(self.url(path)).timeout(self.timeout))
            .await
    }

    /// GETs `path` as a `T`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let r = self.get_response(path).await?;
        self.decode(path, r).await
    }

    /// GETs `path` as a `T` whatever the status (the load balancers'
    /// checks answer their body with 503 too); with the status.
    pub async fn get_with_status<T: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<(u16, T), ClientError> {
        let r = self.get_response(path).await?;
        let status = r.status().as_u16();
        let body = r.json().await.map_err(|e| self.decode_error(path, e))?;
        Ok((status, body))
    }

    /// POSTs `body` as JSON to `path` (with the token, if any); the answer.
    async fn post_response<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<Response, ClientError> {
        let mut req = self
            .http
            .post(self.url(path))
            .json(body)
            .timeout(self.timeout * 2);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        self.send(req).await
    }

    /// POSTs `body` as JSON to `path` (with the token, if any), reads a `T`.
    pub async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        let r = self.post_response(path, body).await?;
        self.decode(path, r).await
    }

    /// POSTs `body` as JSON to `path`, for an answer that is only a receipt.
    async fn post_only<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<(), ClientError> {
        self.post::<_, serde_json::Value>(path, body)
            .await
            .map(drop)
    }

    /// `GET /v1/health`.
    pub async fn health(&self) -> Result<HealthView, ClientError> {
        self.get(routes::HEALTH).await
    }

    /// `GET /metrics`: the Prometheus text.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let path = routes::METRICS;
        let r = self.get_response(path).await?;
        let r = self.check(path, r).await?;
        r.text().await.map_err(|e| self.decode_error(path, e))
    }

    /// `GET /v1/members`: every member, this node first.
    pub async fn members(&self) -> Result<Vec<MemberView>, ClientError> {
        self.get(routes::MEMBERS).await
    }

    /// `GET /v1/events?since=`: recent events with a larger sequence number.
    pub async fn events(&self, since: u64) -> Result<Vec<EventView>, ClientError> {
        self.get(&format!("{}?since={since}", routes::EVENTS)).await
    }

    /// `GET /v1/events/stream`: live events, until the agent closes the
    /// stream. Lines that are not events (lag notices) are skipped.
    pub async fn event_stream(
        &self,
    ) -> Result<impl Stream<Item = Result<EventView, ClientError>>, ClientError> {
        let path = routes::EVENT_STREAM;
        let r = self.send(self.http.get(self.url(path))).await?;
        let r = self.check(path, r).await?;
        let addr = self.addr.clone();
        let mut buf = String::new();
        Ok(r.bytes_stream().flat_map(move |chunk| {
            let mut out = Vec::new();
            match chunk {
                Ok(c) => {
                    buf.push_str(&String::from_utf8_lossy(&c));
                    while let Some(end) = buf.find("\n\n") {
                        let block: String = buf.drain(..end + 2).collect();
                        out.extend(
                            block
                                .lines()
                                .filter_map(|l| l.strip_prefix("data:"))
                                .filter_map(|d| serde_json::from_str::<EventView>(d.trim()).ok())
                                .map(Ok),
                        );
                    }
                }
                Err(source) => out.push(Err(ClientError::Unreachable {
                    addr: addr.clone(),
                    source,
                })),
            }
            futures_util::stream::iter(out)
        }))
    }

    /// `GET /v1/roles`.
    pub async fn roles(&self) -> Result<RolesView, ClientError> {
        self.get(routes::ROLES).await
    }

    /// `GET /v1/roles/{role}/primary`: the status (200: serving as primary)
    /// and this node's state for the role.
    pub async fn primary(&self, role: &str) -> Result<(u16, PrimaryView), ClientError> {
        self.get_with_status(&routes::fill(routes::PRIMARY, "role", role))
            .await
    }

    /// `GET /v1/roles/{role}/replica`: the status (200: a ready standby).
    pub async fn replica(&self, role: &str) -> Result<(u16, ReplicaView), ClientError> {
        self.get_with_status(&routes::fill(routes::REPLICA, "role", role))
            .await
    }

    /// `GET /v1/roles/{role}/replica?lag=BYTES`: the status (200: a
    /// streaming replica within `lag` bytes of the holder's last mark).
    pub async fn replica_within(
        &self,
        role: &str,
        lag: u64,
    ) -> Result<(u16, ReplicaView), ClientError> {
        let path = format!("{}?lag={lag}", routes::fill(routes::REPLICA, "role", role));
        self.get_with_status(&path).await
    }

    /// `GET /v1/roles/{role}/sync` (`synchronous`) or `/async`: the status
    /// (200: a streaming standby the primary may wait for, or does not).
    pub async fn synchronous(
        &self,
        role: &str,
        synchronous: bool,
    ) -> Result<(u16, ReplicaView), ClientError> {
        let route = if synchronous {
            routes::SYNC
        } else {
            routes::ASYNC
        };
        self.get_with_status(&routes::fill(route, "role", role))
            .await
    }

    /// `GET /v1/roles/{role}/read-only`: the status (200: reads may go here).
    pub async fn read_only(&self, role: &str) -> Result<(u16, ReplicaView), ClientError> {
        self.get_with_status(&routes::fill(routes::READ_ONLY, "role", role))
            .await
    }

    /// `GET /v1/roles/{role}/history[?limit=N]`: the role's failover
    /// history, oldest first (its last `limit` changes, or every one kept).
    pub async fn history(
        &self,
        role: &str,
        limit: Option<usize>,
    ) -> Result<HistoryView, ClientError> {
        let path = routes::fill(routes::HISTORY, "role", role);
        match limit {
            Some(n) => self.get(&format!("{path}?limit={n}")).await,
            None => self.get(&path).await,
        }
    }

    /// `POST /v1/reload`: the agent reads its configuration file again and
    /// applies it, all of it (`Ok(Ok(what changed))`) or nothing
    /// (`Ok(Err(why))`, the keys named).
    pub async fn reload(&self) -> Result<Result<ReloadView, ReloadRefusal>, ClientError> {
        let path = routes::RELOAD;
        let r = self.post_response(path, &serde_json::json!({})).await?;
        let status = r.status().as_u16();
        if matches!(status, 409 | 422 | 503) {
            let text = r.text().await.unwrap_or_default();
            if let Ok(refusal) = serde_json::from_str::<ReloadRefusal>(&text) {
                return Ok(Err(refusal));
            }
            return Err(self.status_error(path, status, text));
        }
        self.decode(path, r).await.map(Ok)
    }

    /// `POST /v1/roles/{role}/handover`, to `to` or to whoever is next.
    pub async fn handover(
        &self,
        role: &str,
        to: Option<&str>,
    ) -> Result<HandoverView, ClientError> {
        let body = serde_json::json!({ "to": to });
        self.post(&routes::fill(routes::HANDOVER, "role", role), &body)
            .await
    }

    /// `POST /v1/roles/{role}/pause` (`true`) or `/resume` (`false`).
    pub async fn set_paused(&self, role: &str, paused: bool) -> Result<PauseView, ClientError> {
        let route = if paused {
            routes::PAUSE
        } else {
            routes::RESUME
        };
        self.post(&routes::fill(route, "role", role), &serde_json::json!({}))
            .await
    }

    /// `POST /v1/roles/{role}/resume` with `{"force": true}`: resumes
    /// `role` even though its holder has been silent for longer than a
    /// lease (its service must have been stopped by hand).
    pub async fn force_resume(&self, role: &str) -> Result<PauseView, ClientError> {
        let route = routes::fill(routes::RESUME, "role", role);
        self.post(&route, &serde_json::json!({ "force": true }))
            .await
    }

    /// `POST /v1/roles/{role}/switchover`: orders (or, `to` none, cancels)
    /// a planned switchover of `role` to candidate `to`, not before
    /// `at_unix_ms`; any member may be asked.
    pub async fn switchover(
        &self,
        role: &str,
        to: Option<&str>,
        at_unix_ms: Option<u64>,
    ) -> Result<SwitchoverView, ClientError> {
        let body = SwitchoverRequest {
            to: to.map(str::to_owned),
            at_unix_ms,
            cancel: to.is_none(),
        };
        self.post(&routes::fill(routes::SWITCHOVER, "role", role), &body)
            .await
    }

    /// `GET /v1/cluster/roles`.
    pub async fn cluster_roles(&self) -> Result<ClusterRolesView, ClientError> {
        self.get(routes::CLUSTER_ROLES).await
    }

    /// `GET /v1/services`.
    pub async fn services(&self) -> Result<Vec<ServiceView>, ClientError> {
        self.get(routes::SERVICES).await
    }

    /// `GET /v1/cluster/services`.
    pub async fn cluster_services(&self) -> Result<ClusterServicesView, ClientError> {
        self.get(routes::CLUSTER_SERVICES).await
    }

    /// `GET /v1/relay` (None: the agent runs no relay).
    pub async fn relay(&self) -> Result<Option<RelayView>, ClientError> {
        self.get(routes::RELAY).await
    }

    /// `GET /v1/drill`.
    pub async fn drill(&self) -> Result<DrillView, ClientError> {
        self.get(routes::DRILL).await
    }

    /// `POST /v1/drill/{fault}`: sets `fault` for `length`.
    pub async fn set_fault(
        &self,
        fault: Fault,
        length: Duration,
    ) -> Result<FaultView, ClientError> {
        let body = serde_json::json!({ "duration_ms": length.as_millis() as u64 });
        self.post(
            &routes::fill(routes::DRILL_FAULT, "fault", fault.as_str()),
            &body,
        )
        .await
    }

    /// `POST /v1/drill/slow-disk`: this agent's control-plane server takes
    /// `delay` longer over every durable log write, for `length`.
    pub async fn slow_disk(
        &self,
        length: Duration,
        delay: Duration,
    ) -> Result<FaultView, ClientError> {
        let body = serde_json::json!({
            "duration_ms": length.as_millis() as u64,
            "delay_ms": delay.as_millis() as u64,
        });
        let path = routes::fill(routes::DRILL_FAULT, "fault", Fault::SlowDisk.as_str());
        self.post(&path, &body).await
    }

    /// `POST /v1/drill/restore`: reverts `fault`, or every fault.
    pub async fn restore(&self, fault: Option<Fault>) -> Result<RestoredView, ClientError> {
        let body = serde_json::json!({ "fault": fault });
        self.post(routes::DRILL_RESTORE, &body).await
    }

    /// Sends a probe event to the relay's Sentry ingestion route `path`
    /// (with `key` as its `sentry_key`): how long the answer took, and its
    /// status (the relay's answer, not an error, whatever it is).
    pub async fn relay_probe(
        &self,
        path: &str,
        key: Option<&str>,
    ) -> Result<(Duration, u16), ClientError> {
        let mut req = self
            .http
            .post(self.url(path))
            .timeout(self.timeout)
            .json(&serde_json::json!({ "message": "hale drill probe", "level": "info" }));
        if let Some(k) = key {
            req = req.header(
                "x-sentry-auth",
                format!("Sentry sentry_key={k}, sentry_version=7"),
            );
        }
        let start = std::time::Instant::now();
        let r = self.send(req).await?;
        Ok((start.elapsed(), r.status().as_u16()))
    }

    /// `POST /v1/traffic`: application traffic from `peers` was seen; the
    /// status (202: noted) and the answer.
    pub async fn traffic(&self, peers: &[&str]) -> Result<(u16, TrafficView), ClientError> {
        let path = routes::TRAFFIC;
        let body = serde_json::json!({ "peers": peers });
        let r = self.post_response(path, &body).await?;
        let status = r.status().as_u16();
        Ok((status, self.decode(path, r).await?))
    }

    /// `POST /v1/join`.
    pub async fn join(&self, addrs: &[String]) -> Result<(), ClientError> {
        self.post_only(routes::JOIN, &serde_json::json!({ "addrs": addrs }))
            .await
    }

    /// `POST /v1/leave`.
    pub async fn leave(&self) -> Result<(), ClientError> {
        self.post_only(routes::LEAVE, &serde_json::json!({})).await
    }

    /// `GET /v1/keys`.
    pub async fn keys(&self) -> Result<KeysView, ClientError> {
        self.get(routes::KEYS).await
    }

    /// `POST /v1/keys/{op}`: installs, uses or removes `key` on every live agent.
    pub async fn key_op(&self, op: KeyOp, key: &str) -> Result<KeyReport, ClientError> {
        self.key_op_forced(op, key, false).await
    }

    /// [`Client::key_op`], with `force` (a `remove` while a member that has
    /// not left is dead: it may be locked out when it comes back).
    pub async fn key_op_forced(
        &self,
        op: KeyOp,
        key: &str,
        force: bool,
    ) -> Result<KeyReport, ClientError> {
        let body = crate::view::KeyRequest {
            key: key.to_owned(),
            force,
        };
        self.post(&routes::fill(routes::KEY_OP, "op", op.as_str()), &body)
            .await
    }

    /// `POST /v1/control/servers`: adds a control-plane server.
    pub async fn add_server(&self, id: u64, addr: &str) -> Result<(), ClientError> {
        let body = serde_json::json!({ "id": id, "addr": addr });
        self.post_only(routes::CONTROL_SERVERS, &body).await
    }

    /// `POST /v1/control/servers/{id}/remove`.
    pub async fn remove_server(&self, id: u64) -> Result<(), ClientError> {
        let path = routes::fill(routes::CONTROL_SERVER_REMOVE, "id", &id.to_string());
        self.post_only(&path, &serde_json::json!({})).await
    }
}
