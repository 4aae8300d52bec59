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
    let mut admitted =
        match guard.admit(parts.method.as_str(), parts.uri.path(), &sealed, unix_ms()) {
            Ok(a) => a,
            Err(r) => {
                match &r {
                    // A peer with the key but a wrong clock: the operator must know.
                    Refusal::Stale { .. } | Refusal::Busy => {
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
    /// The server could not be reached, or did not answer in time.
    #[error("unreachable: {0}")]
    Unreachable(String),
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
            Err(e) => return Err(CallError::Unreachable(e.to_string())),
        }
    }
}

/// Sends `body` to server `target` at `addr` (`POST path`) and returns its
/// answer, sealing and opening per `auth`. Nothing unauthenticated is
/// returned in sealed mode.
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
    let (req, sealed) = match auth {
        ControlAuth::InsecurePlaintext => (
            http.post(url)
                .header(header::CONTENT_TYPE, "application/json")
                .body(json),
            None,
        ),
        ControlAuth::Sealed(keys) => {
            let s = seal_request(&keys.current(), target, "POST", path, unix_ms(), &json);
            (
                http.post(url)
                    .header(header::CONTENT_TYPE, "application/octet-stream")
                    .body(s.body.clone()),
                Some((keys, s)),
            )
        }
    };
    let mut r = req
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| CallError::Unreachable(e.to_string()))?;
    let status = r.status();
    let raw = read_capped(&mut r, RESPONSE_LIMIT).await?;
    if !status.is_success() {
        return Err(CallError::Refused {
            status: status.as_u16(),
            message: String::from_utf8_lossy(&raw[..raw.len().min(512)]).into_owned(),
        });
    }
    let plain = match sealed {
        None => raw,
        Some((keys, s)) => {
            open_response(&keys.current(), &s, &raw).map_err(|_| CallError::Unauthentic)?
        }
    };
    serde_json::from_slice(&plain).map_err(|e| CallError::Decode(e.to_string()))
}
