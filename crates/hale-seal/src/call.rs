//! The client's side: [`call`] seals a request and opens its answer;
//! [`read_capped`] reads any answer with a cap.

use std::time::Duration;

use axum::http::header;
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
    let url = format!("http://{addr}{path}");
    let keys = match sealing {
        Sealing::InsecurePlaintext => {
            let req = http
                .post(url)
                .header(header::CONTENT_TYPE, "application/json")
                .body(json);
            let (status, raw) = send(req, timeout).await?;
            refused(status, &raw)?;
            return serde_json::from_slice(&raw).map_err(|e| CallError::Decode(e.to_string()));
        }
        Sealing::Sealed(keys) => keys,
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
        if status == StatusCode::UNAUTHORIZED && !corrected {
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
                        "server {target}'s wall clock minus this host's is {offset} ms (beyond \
                         the {} s window): stamping requests to it in its time",
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
async fn send(req: RequestBuilder, timeout: Duration) -> Result<(StatusCode, Vec<u8>), CallError> {
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
