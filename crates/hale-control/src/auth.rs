//! Only the cluster speaks to the control plane: every request and every
//! response is sealed with the cluster keyring (ChaCha20-Poly1305).
//!
//! A request's body is `seal(aad, unix_ms (8, big-endian) | JSON)` where
//! `aad = "hale control request v1" | target server id | method | path`:
//! it opens only at the server it was addressed to, on the route it was
//! sent to. A server admits it when it opens with a key of the ring, its
//! timestamp is within [`REPLAY_WINDOW`] of the server's wall clock, and
//! its nonce was not seen before (a replayed request is refused; nonces are
//! remembered until their timestamp leaves the window). Only then does the
//! request reach Raft or the lease table; anything else is answered 401
//! and changes nothing.
//!
//! The response is `seal("hale control response v1" | request nonce, JSON)`:
//! bound to the request it answers, so nobody without a key can answer a
//! renewal, and an old response cannot be passed off as the answer to a
//! new request.
//!
//! Clocks: a request whose timestamp is outside the window but which opens
//! (it was sealed by a cluster key, so it comes from a member whose clock
//! is off) is refused with the server's time, sealed to the request's
//! nonce. The client opens it, learns its offset to that server's clock
//! and stamps its requests to that server in the server's time from then on
//! (and sends the refused one again at once). A host whose wall clock is
//! minutes or hours off therefore keeps renewing and voting; both sides
//! record it ([`clock_report`]) so the agent can name it (event, metric,
//! `hale status`). Lease timing never reads wall clocks.
//!
//! Bodies are read with a cap ([`RAFT_BODY_LIMIT`], [`CONTROL_BODY_LIMIT`])
//! before anything else is done with them. See ARCHITECTURE.md
//! ("Control-plane authentication") for what an attacker on the path can
//! and cannot do, and the clock assumption.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hale_keyring::{sealed_nonce, Keyring, OpenError, SharedKeyring, NONCE};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// How far a request's timestamp may be from the server's wall clock, in
/// either direction. Servers' and agents' clocks must agree within this.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(30);
/// The largest Raft RPC body read (`/raft/...`; snapshots travel in chunks
/// well below it).
pub const RAFT_BODY_LIMIT: usize = 8 << 20;
/// The largest body read on `/control/...` routes.
pub const CONTROL_BODY_LIMIT: usize = 64 << 10;
/// The largest response a client reads.
pub const RESPONSE_LIMIT: usize = 8 << 20;
/// Nonces remembered at most; beyond this (only reachable with the cluster
/// key) requests are refused until old ones expire.
const MAX_REMEMBERED: usize = 1 << 18;

const REQUEST_AAD: &[u8] = b"hale control request v1\0";
/// The content type of a sealed refusal for a timestamp out of the window.
const STALE_CONTENT_TYPE: &str = "application/x-hale-stale";
const RESPONSE_AAD: &[u8] = b"hale control response v1\0";

/// How the control plane authenticates its traffic.
#[derive(Debug, Clone)]
pub enum ControlAuth {
    /// Every request and response sealed with these keys.
    Sealed(SharedKeyring),
    /// Nothing authenticated: anyone who reaches a server's port can take
    /// roles and change voters (`insecure_plaintext = true`).
    InsecurePlaintext,
}

impl ControlAuth {
    /// Sealed with `ring` (a fresh shared handle).
    pub fn sealed(ring: Keyring) -> ControlAuth {
        ControlAuth::Sealed(SharedKeyring::new(ring))
    }
}

/// The wall clock in milliseconds since the Unix epoch (0 before it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn request_aad(target: u64, method: &str, path: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(REQUEST_AAD.len() + 10 + method.len() + path.len());
    aad.extend_from_slice(REQUEST_AAD);
    aad.extend_from_slice(&target.to_be_bytes());
    aad.extend_from_slice(method.as_bytes());
    aad.push(0);
    aad.extend_from_slice(path.as_bytes());
    aad
}

fn response_aad(nonce: &[u8; NONCE]) -> Vec<u8> {
    [RESPONSE_AAD, nonce.as_slice()].concat()
}

/// A request sealed for one server; keeps what opens its response.
#[derive(Debug, Clone)]
pub struct SealedRequest {
    /// The body to send.
    pub body: Vec<u8>,
    nonce: [u8; NONCE],
}

/// Seals `payload` as a request to server `target`, `method path`, stamped
/// `unix_ms` (tests pass other times to show what a server refuses).
pub fn seal_request(
    keys: &Keyring,
    target: u64,
    method: &str,
    path: &str,
    unix_ms: u64,
    payload: &[u8],
) -> SealedRequest {
    let mut plain = Vec::with_capacity(8 + payload.len());
    plain.extend_from_slice(&unix_ms.to_be_bytes());
    plain.extend_from_slice(payload);
    let body = keys.seal_with(&request_aad(target, method, path), &plain);
    let nonce = sealed_nonce(&body).expect("a fresh seal has a nonce");
    SealedRequest { body, nonce }
}

/// Opens the response to `req`: fails unless it was sealed by a key of the
/// ring for this very request.
pub fn open_response(
    keys: &Keyring,
    req: &SealedRequest,
    sealed: &[u8],
) -> Result<Vec<u8>, OpenError> {
    keys.open_with(&response_aad(&req.nonce), sealed)
}

/// Why a server refused a request (answered 401; nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The body is not a sealed request at all.
    #[error("not a sealed control-plane request")]
    Malformed,
    /// No key of the ring opens it for this server and route.
    #[error("not sealed with a cluster key for this server and route")]
    Unauthentic,
    /// Its timestamp is outside the replay window of this server's clock.
    #[error("timestamp {skew_ms} ms from this server's clock (window {window_ms} ms)")]
    Stale {
        /// Request time minus server time.
        skew_ms: i64,
        /// The window allowed either way.
        window_ms: u64,
        /// Its nonce: it opened (a member whose clock is off), so the
        /// server's time may be sealed to it ([`Guard::seal_stale`]).
        nonce: [u8; NONCE],
    },
    /// This exact request was already admitted.
    #[error("replayed request")]
    Replayed,
    /// Too many recent requests remembered to admit another.
    #[error("too many recent requests")]
    Busy,
}

/// What the server admitted: the plaintext, and the nonce its response is
/// bound to.
#[derive(Debug)]
pub struct Admitted {
    /// The request's JSON payload.
    pub payload: Vec<u8>,
    nonce: [u8; NONCE],
}

/// A server's gate: opens requests addressed to it and remembers their
/// nonces while their timestamps are in the window.
#[derive(Debug)]
pub struct Guard {
    id: u64,
    keys: SharedKeyring,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    expiry: HashMap<[u8; NONCE], u64>,
    next_prune_ms: u64,
}

impl Guard {
    /// The gate of server `id`, opening with `keys`.
    pub fn new(id: u64, keys: SharedKeyring) -> Guard {
        Guard {
            id,
            keys,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// Checks a sealed request (`method path`, body `sealed`) at wall-clock
    /// time `now_ms`: authentic, fresh, first seen. Only an authentic
    /// request is remembered, so strangers cannot fill the memory.
    pub fn admit(
        &self,
        method: &str,
        path: &str,
        sealed: &[u8],
        now_ms: u64,
    ) -> Result<Admitted, Refusal> {
        let nonce = sealed_nonce(sealed).ok_or(Refusal::Malformed)?;
        let plain = self
            .keys
            .current()
            .open_with(&request_aad(self.id, method, path), sealed)
            .map_err(|_| Refusal::Unauthentic)?;
        let Some((stamp, payload)) = plain.split_first_chunk::<8>() else {
            return Err(Refusal::Malformed);
        };
        let stamp = u64::from_be_bytes(*stamp);
        let window = REPLAY_WINDOW.as_millis() as u64;
        if stamp.abs_diff(now_ms) > window {
            return Err(Refusal::Stale {
                nonce,
                skew_ms: stamp as i64 - now_ms as i64,
                window_ms: window,
            });
        }
        let mut seen = self.seen.lock().expect("replay memory lock");
        if now_ms >= seen.next_prune_ms || seen.expiry.len() >= MAX_REMEMBERED {
            seen.expiry.retain(|_, until| *until >= now_ms);
            seen.next_prune_ms = now_ms + 1000;
        }
        if seen.expiry.contains_key(&nonce) {
            return Err(Refusal::Replayed);
        }
        if seen.expiry.len() >= MAX_REMEMBERED {
            return Err(Refusal::Busy);
        }
        seen.expiry.insert(nonce, stamp + window);
        Ok(Admitted {
            payload: payload.to_vec(),
            nonce,
        })
    }

    /// Seals the answer to an authentic request refused for its timestamp:
    /// this server's wall-clock time, bound to the request's nonce, so the
    /// client can trust it and nobody can replay it to another request.
    /// Only a request that opened is refused as stale, so only members
    /// learn the time.
    pub fn seal_stale(&self, nonce: &[u8; NONCE], now_ms: u64) -> Vec<u8> {
        let body =
            serde_json::to_vec(&StaleAnswer { server_ms: now_ms }).expect("one integer serializes");
        self.keys.current().seal_with(&response_aad(nonce), &body)
    }

    /// Seals the response to an admitted request.
    pub fn seal_response(&self, req: &Admitted, body: &[u8]) -> Vec<u8> {
        self.keys
            .current()
            .seal_with(&response_aad(&req.nonce), body)
    }
}

fn body_limit(path: &str) -> usize {
    if path.starts_with("/raft/") {
        RAFT_BODY_LIMIT
    } else {
        CONTROL_BODY_LIMIT
    }
}

fn refuse(status: StatusCode, why: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": why }))).into_response()
}

/// The middleware in front of every control-plane route: reads the body
/// (capped), admits it or answers 401, hands the plaintext JSON to the
/// route, and seals the route's answer to this request.
pub async fn authenticate(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let limit = body_limit(parts.uri.path());
    let Ok(sealed) = axum::body::to_bytes(body, limit).await else {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("bodies are at most {limit} bytes"),
        );
    };
    let now = unix_ms();
    let mut admitted = match guard.admit(parts.method.as_str(), parts.uri.path(), &sealed, now) {
        Ok(a) => a,
        Err(r) => {
            match &r {
                // A member with the key but a clock off by more than the
                // window: answered with this server's time, sealed, so that
                // it corrects its stamps; recorded so the operator knows.
                Refusal::Stale { skew_ms, nonce, .. } => {
                    tracing::warn!(
                        path = parts.uri.path(),
                        skew_ms,
                        "control plane refused a request stamped by a clock {skew_ms} ms from this \
                         server's; answering with this server's time so that it corrects"
                    );
                    CLOCKS.note_refused(guard.id, *skew_ms, now);
                    return (
                        StatusCode::UNAUTHORIZED,
                        [(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static(STALE_CONTENT_TYPE),
                        )],
                        guard.seal_stale(nonce, now),
                    )
                        .into_response();
                }
                Refusal::Busy => {
                    tracing::warn!(
                        path = parts.uri.path(),
                        "control plane refused a request: {r}"
                    );
                }
                _ => tracing::debug!(
                    path = parts.uri.path(),
                    "control plane refused a request: {r}"
                ),
            }
            return refuse(StatusCode::UNAUTHORIZED, r.to_string());
        }
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    let payload = std::mem::take(&mut admitted.payload);
    let answer = next
        .run(Request::from_parts(parts, Body::from(payload)))
        .await;
    let (mut parts, body) = answer.into_parts();
    let Ok(plain) = axum::body::to_bytes(body, RESPONSE_LIMIT).await else {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, "answer too large".into());
    };
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(guard.seal_response(&admitted, &plain)))
}

/// Why a call to a control-plane server got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The server could not be reached (refused, reset, no route).
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// The server did not answer within the call's timeout: it may be
    /// busy (a loaded host, a slow disk) rather than gone.
    #[error("timed out: {0}")]
    TimedOut(String),
    /// The server refused the request (e.g. 401: keys or clocks disagree).
    #[error("refused with {status}: {message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The server's plain-text explanation (unauthenticated).
        message: String,
    },
    /// The answer was not sealed for this request by a cluster key:
    /// ignored, as if none came.
    #[error("the answer is not authentic")]
    Unauthentic,
    /// The answer was larger than [`RESPONSE_LIMIT`].
    #[error("the answer is too large")]
    TooLarge,
    /// The answer was authentic but not the JSON expected.
    #[error("undecodable answer: {0}")]
    Decode(String),
}

/// Reads a response's body, refusing one longer than `limit` bytes as
/// soon as it is (nothing past the limit is held in memory).
pub async fn read_capped(r: &mut reqwest::Response, limit: usize) -> Result<Vec<u8>, CallError> {
    let mut raw = Vec::new();
    loop {
        match r.chunk().await {
            Ok(Some(c)) if raw.len() + c.len() <= limit => raw.extend_from_slice(&c),
            Ok(Some(_)) => return Err(CallError::TooLarge),
            Ok(None) => return Ok(raw),
            Err(e) => return Err(transport(&e)),
        }
    }
}

/// Sends `body` to server `target` at `addr` (`POST path`) and returns its
/// answer, sealing and opening per `auth`. Nothing unauthenticated is
/// returned in sealed mode. Requests are stamped with this process's
/// wall clock corrected by what the server told it of its own (see the
/// module's doc); a refusal for the timestamp corrects it and the request
/// is sent once more at once.
pub async fn call<Req: Serialize + ?Sized, Resp: DeserializeOwned>(
    http: &reqwest::Client,
    auth: &ControlAuth,
    target: u64,
    addr: &str,
    path: &str,
    body: &Req,
    timeout: Duration,
) -> Result<Resp, CallError> {
    let json = serde_json::to_vec(body).map_err(|e| CallError::Decode(e.to_string()))?;
    let url = format!("http://{addr}{path}");
    let keys = match auth {
        ControlAuth::InsecurePlaintext => {
            let req = http
                .post(url)
                .header(header::CONTENT_TYPE, "application/json")
                .body(json);
            let (status, raw) = send(req, timeout).await?;
            refused(status, &raw)?;
            return serde_json::from_slice(&raw).map_err(|e| CallError::Decode(e.to_string()));
        }
        ControlAuth::Sealed(keys) => keys,
    };
    let mut corrected = false;
    loop {
        let sent_at = unix_ms();
        let stamp = CLOCKS.server_time(target, addr, sent_at);
        let s = seal_request(&keys.current(), target, "POST", path, stamp, &json);
        let req = http
            .post(&url)
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(s.body.clone());
        let (status, raw) = send(req, timeout).await?;
        if status == reqwest::StatusCode::UNAUTHORIZED && !corrected {
            if let Ok(plain) = open_response(&keys.current(), &s, &raw) {
                if let Ok(stale) = serde_json::from_slice::<StaleAnswer>(&plain) {
                    // Offset from the midpoint of the exchange.
                    let back = unix_ms();
                    let mid = sent_at + back.saturating_sub(sent_at) / 2;
                    let offset = stale.server_ms as i64 - mid as i64;
                    CLOCKS.note_offset(target, addr, offset, back);
                    tracing::warn!(
                        server = target,
                        addr,
                        offset_ms = offset,
                        "control-plane server {target}'s wall clock minus this host's is \
                         {offset} ms (beyond the {} s window): stamping requests to it in its time",
                        REPLAY_WINDOW.as_secs()
                    );
                    corrected = true;
                    continue;
                }
            }
        }
        refused(status, &raw)?;
        let plain = open_response(&keys.current(), &s, &raw).map_err(|_| CallError::Unauthentic)?;
        return serde_json::from_slice(&plain).map_err(|e| CallError::Decode(e.to_string()));
    }
}

/// Sends a request and reads its answer (capped).
async fn send(
    req: reqwest::RequestBuilder,
    timeout: Duration,
) -> Result<(reqwest::StatusCode, Vec<u8>), CallError> {
    let mut r = req
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| transport(&e))?;
    let status = r.status();
    let raw = read_capped(&mut r, RESPONSE_LIMIT).await?;
    Ok((status, raw))
}

/// A transport error: timed out (the server may only be slow), or
/// unreachable; with its causes.
fn transport(e: &reqwest::Error) -> CallError {
    if e.is_timeout() {
        CallError::TimedOut(chain(e))
    } else {
        CallError::Unreachable(chain(e))
    }
}

/// An error and its causes, `: `-separated (reqwest's own text leaves out
/// why: refused, reset, timed out).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// A non-success status as [`CallError::Refused`].
fn refused(status: reqwest::StatusCode, raw: &[u8]) -> Result<(), CallError> {
    if status.is_success() {
        return Ok(());
    }
    Err(CallError::Refused {
        status: status.as_u16(),
        message: String::from_utf8_lossy(&raw[..raw.len().min(512)]).into_owned(),
    })
}

/// A server's answer to an authentic request whose timestamp was out of
/// the window: its wall-clock time (sealed to the request's nonce).
#[derive(Debug, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StaleAnswer {
    #[serde(rename = "clock_refusal_server_ms")]
    server_ms: u64,
}

/// What this process learned about clocks that disagree with its own, on
/// both sides of the control plane (see [`clock_report`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ClockReport {
    /// Servers whose clocks this process's clock is off from by more than
    /// the window, and the offset it stamps its requests to them with.
    pub offsets: Vec<ServerOffset>,
    /// Requests this process's control-plane server refused because their
    /// stamps were out of the window (a member whose clock is off).
    pub refused: Vec<StampsRefused>,
}

/// The offset this process applies to its wall clock for one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ServerOffset {
    /// The server's id.
    pub server: u64,
    /// Its address.
    pub addr: String,
    /// Its clock minus this process's, in ms (as learned).
    pub offset_ms: i64,
    /// When it was learned (this process's wall clock, ms since the epoch).
    pub learned_unix_ms: u64,
}

/// Requests a server refused for their timestamps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StampsRefused {
    /// The refusing server's id.
    pub server: u64,
    /// How many.
    pub count: u64,
    /// The last one's stamp minus the server's clock, in ms.
    pub last_skew_ms: i64,
    /// When the last one came (the server's wall clock, ms since the epoch).
    pub last_unix_ms: u64,
}

/// The process-wide record behind [`clock_report`]. Process-wide because
/// the wall clock it corrects is: every client in the process stamps with
/// the same clock, so one offset per server serves them all.
#[derive(Debug, Default)]
struct Clocks {
    inner: Mutex<ClockReport>,
}

static CLOCKS: std::sync::LazyLock<Clocks> = std::sync::LazyLock::new(Clocks::default);

impl Clocks {
    /// `now_ms` of this process's clock in server `target`'s time.
    fn server_time(&self, target: u64, addr: &str, now_ms: u64) -> u64 {
        let r = self.inner.lock().expect("clock record lock");
        match r
            .offsets
            .iter()
            .find(|o| o.server == target && o.addr == addr)
        {
            Some(o) => now_ms.saturating_add_signed(o.offset_ms),
            None => now_ms,
        }
    }

    fn note_offset(&self, server: u64, addr: &str, offset_ms: i64, now_ms: u64) {
        let mut r = self.inner.lock().expect("clock record lock");
        r.offsets
            .retain(|o| !(o.server == server && o.addr == addr));
        // Bounded: a handful of servers per cluster; the oldest goes first.
        if r.offsets.len() >= 64 {
            r.offsets.remove(0);
        }
        r.offsets.push(ServerOffset {
            server,
            addr: addr.to_owned(),
            offset_ms,
            learned_unix_ms: now_ms,
        });
    }

    fn note_refused(&self, server: u64, skew_ms: i64, now_ms: u64) {
        let mut r = self.inner.lock().expect("clock record lock");
        if let Some(x) = r.refused.iter_mut().find(|x| x.server == server) {
            x.count += 1;
            x.last_skew_ms = skew_ms;
            x.last_unix_ms = now_ms;
            return;
        }
        if r.refused.len() >= 64 {
            r.refused.remove(0);
        }
        r.refused.push(StampsRefused {
            server,
            count: 1,
            last_skew_ms: skew_ms,
            last_unix_ms: now_ms,
        });
    }
}

/// What this process knows of clocks that disagree with its own by more
/// than [`REPLAY_WINDOW`]: the offsets it stamps requests to each server
/// with (client side), and the requests its server refused for their
/// stamps (server side). Empty when every clock agrees.
pub fn clock_report() -> ClockReport {
    CLOCKS.inner.lock().expect("clock record lock").clone()
}
