//! The server's side: [`Guard`] admits sealed requests, [`authenticate`]
//! puts it in front of routes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hale_keyring::{sealed_nonce, SharedKeyring, NONCE};

use crate::clocks::CLOCKS;
use crate::format::{request_aad, response_aad, StaleAnswer, STALE_CONTENT_TYPE};
use crate::{unix_ms, DEFAULT_BODY_LIMIT, REPLAY_WINDOW, RESPONSE_LIMIT};

/// Nonces remembered at most; beyond this (only reachable with the cluster
/// key) requests are refused until old ones expire.
const MAX_REMEMBERED: usize = 1 << 18;

/// Why a server refused a request (answered 401; nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The body is not a sealed request at all.
    #[error("not a sealed request")]
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
    body_limit: fn(&str) -> usize,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    expiry: HashMap<[u8; NONCE], u64>,
    next_prune_ms: u64,
}

impl Guard {
    /// The gate of server `id`, opening with `keys`, reading request
    /// bodies of at most [`DEFAULT_BODY_LIMIT`] bytes.
    pub fn new(id: u64, keys: SharedKeyring) -> Guard {
        Guard {
            id,
            keys,
            body_limit: |_| DEFAULT_BODY_LIMIT,
            seen: Mutex::new(Seen::default()),
        }
    }

    /// The same gate reading at most `limit(path)` bytes of a request to
    /// `path` (a larger one is answered 413 unread).
    pub fn with_body_limit(self, limit: fn(&str) -> usize) -> Guard {
        Guard {
            body_limit: limit,
            ..self
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

fn refuse(status: StatusCode, why: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": why }))).into_response()
}

/// The middleware in front of every sealed route: reads the body (capped
/// per the guard's body limit), admits it or answers 401, hands the
/// plaintext JSON to the route, and seals the route's answer to this
/// request.
pub async fn authenticate(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let limit = (guard.body_limit)(parts.uri.path());
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
                        "refused a sealed request stamped by a clock {skew_ms} ms from this \
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
                    tracing::warn!(path = parts.uri.path(), "refused a sealed request: {r}");
                }
                _ => tracing::debug!(path = parts.uri.path(), "refused a sealed request: {r}"),
            }
            return refuse(StatusCode::UNAUTHORIZED, r.to_string());
        }
    };
    retype(&mut parts.headers, "application/json");
    let payload = std::mem::take(&mut admitted.payload);
    let answer = next
        .run(Request::from_parts(parts, Body::from(payload)))
        .await;
    let (mut parts, body) = answer.into_parts();
    let Ok(plain) = axum::body::to_bytes(body, RESPONSE_LIMIT).await else {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, "answer too large".into());
    };
    retype(&mut parts.headers, "application/octet-stream");
    Response::from_parts(parts, Body::from(guard.seal_response(&admitted, &plain)))
}

/// A body's headers once it is opened or sealed: its new type, no length.
fn retype(headers: &mut axum::http::HeaderMap, content_type: &'static str) {
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.remove(header::CONTENT_LENGTH);
}
