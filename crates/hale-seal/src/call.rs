//! The client's side: [`call`] seals a request and opens its answer;
//! [`read_capped`] reads any answer with a cap.

use std::time::Duration;

use axum::http::header;
use reqwest::header::HeaderMap;
use reqwest::{RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::clocks::CLOCKS;
use crate::format::{open_response, seal_request, StaleAnswer};
use crate::{unix_ms, Sealing, REPLAY_WINDOW, RESPONSE_LIMIT};

/// Why a call to a server got no usable answer.
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
    /// The answer was larger than the limit read ([`RESPONSE_LIMIT`] for
    /// [`call`]).
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

/// An authentic answer as it came: its headers, as received (a header is
/// not authenticated: only the body is sealed), and its body, opened.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The answer's HTTP headers, as received.
    pub headers: HeaderMap,
    /// The answer's body: the JSON the server sealed for this request.
    pub body: Vec<u8>,
}

/// Sends `body` to server `target` at `addr` (`POST path`) and returns its
/// answer, sealing and opening per `sealing`. Nothing unauthenticated is
/// returned in sealed mode. Requests are stamped with this process's
/// wall clock corrected by what the server told it of its own (see the
/// crate's doc); a refusal for the timestamp corrects it and the request
/// is sent once more at once.
pub async fn call<Req: Serialize + ?Sized, Resp: DeserializeOwned>(
    http: &reqwest::Client,
    sealing: &Sealing,
    target: u64,
    addr: &str,
    path: &str,
    body: &Req,
    timeout: Duration,
) -> Result<Resp, CallError> {
    let json = serde_json::to_vec(body).map_err(|e| CallError::Decode(e.to_string()))?;
    let to = Target { target, addr, path };
    let reply = exchange(http, sealing, to, &json, &HeaderMap::new(), timeout).await?;
    serde_json::from_slice(&reply.body).map_err(|e| CallError::Decode(e.to_string()))
}

/// Where a call goes: server `target` at `addr`, `POST path`.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The server's id (in the request's associated data).
    pub target: u64,
    /// Its address (`host:port`).
    pub addr: &'a str,
    /// The route.
    pub path: &'a str,
}

/// [`call`] with the JSON already encoded and `headers` sent beside the
/// body (unauthenticated: a header a stranger on the path could change
/// must be one whose forgery can do no more harm than dropping the
/// request), returning the opened answer with the headers it came with.
/// A refusal's message is the server's sealed explanation when it opens
/// for this request (a route's own refusal, such as a body the route could
/// not decode), else the plain text the guard answered.
pub async fn exchange(
    http: &reqwest::Client,
    sealing: &Sealing,
    to: Target<'_>,
    json: &[u8],
    headers: &HeaderMap,
    timeout: Duration,
) -> Result<Reply, CallError> {
    let Target { target, addr, path } = to;
    let url = format!("http://{addr}{path}");
    let keys = match sealing {
        Sealing::InsecurePlaintext => {
            let req = http
                .post(url)
                .headers(headers.clone())
                .header(header::CONTENT_TYPE, "application/json")
                .body(json.to_vec());
            let (status, headers, raw) = send(req, timeout).await?;
            refused(status, &raw)?;
            return Ok(Reply { headers, body: raw });
        }
        Sealing::Sealed(keys) => keys,
    };
    let mut corrected = false;
    loop {
        let sent_at = unix_ms();
        let stamp = CLOCKS.server_time(target, addr, sent_at);
        let s = seal_request(&keys.current(), target, "POST", path, stamp, json);
        let req = http
            .post(&url)
            .headers(headers.clone())
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .body(s.body.clone());
        let (status, got, raw) = send(req, timeout).await?;
        let opened = open_response(&keys.current(), &s, &raw);
        if status == StatusCode::UNAUTHORIZED && !corrected {
            if let Ok(plain) = &opened {
                if let Ok(stale) = serde_json::from_slice::<StaleAnswer>(plain) {
                    // Offset from the midpoint of the exchange.
                    let back = unix_ms();
                    let mid = sent_at + back.saturating_sub(sent_at) / 2;
                    let offset = stale.server_ms as i64 - mid as i64;
                    CLOCKS.note_offset(target, addr, offset, back);
                    tracing::warn!(
                        server = target,
                        addr,
                        offset_ms = offset,
                        "server {target}'s wall clock minus this host's is {offset} ms (beyond \
                         the {} s window): stamping requests to it in its time",
                        REPLAY_WINDOW.as_secs()
                    );
                    corrected = true;
                    continue;
                }
            }
        }
        // A route's refusal is sealed (the guard seals whatever the route
        // answered): its text is the one to report.
        refused(status, opened.as_deref().unwrap_or(&raw))?;
        let body = opened.map_err(|_| CallError::Unauthentic)?;
        return Ok(Reply { headers: got, body });
    }
}

/// Sends a request and reads its answer (capped).
async fn send(
    req: RequestBuilder,
    timeout: Duration,
) -> Result<(StatusCode, HeaderMap, Vec<u8>), CallError> {
    let mut r = req
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| transport(&e))?;
    let status = r.status();
    let headers = std::mem::take(r.headers_mut());
    let raw = read_capped(&mut r, RESPONSE_LIMIT).await?;
    Ok((status, headers, raw))
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
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let causes = std::iter::successors(Some(e), |e| e.source());
    causes
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// A non-success status as [`CallError::Refused`].
fn refused(status: StatusCode, raw: &[u8]) -> Result<(), CallError> {
    if status.is_success() {
        return Ok(());
    }
    Err(CallError::Refused {
        status: status.as_u16(),
        message: String::from_utf8_lossy(&raw[..raw.len().min(512)]).into_owned(),
    })
}
