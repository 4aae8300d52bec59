//! The Sentry-compatible relay: an axum [`Router`] for Sentry's ingestion
//! endpoints that answers at once after queueing, and forwards upstream
//! under the pipeline's policies.
//!
//! * `POST {prefix}/api/{project_id}/envelope/` — an envelope.
//! * `POST {prefix}/api/{project_id}/store/` — a bare event (JSON object),
//!   wrapped into an envelope.
//!
//! Answers: `200 {"id": "<event id>"}` once queued — and also when the
//! event was dropped because memory and spool are full (it is counted, and
//! reported upstream in a client report): the client never waits for, and
//! never gets a 5xx because of, the upstream. `400` for a malformed body
//! (with the reason), `401` for a missing or wrong key when keys are
//! configured, `413` for a body (or its decompressed form) over the limit.
//!
//! Everything goes to the project of the configured upstream DSN.

use std::io::Read;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use crate::envelope::{self, Envelope};
use crate::pipeline::{Owned, Pipeline, PipelineConfig, StartError};

/// The relay's configuration.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// Upstreams, queue, breaker, spool.
    pub pipeline: PipelineConfig,
    /// Keys clients must present (`X-Sentry-Auth: Sentry sentry_key=...` or
    /// `?sentry_key=`); empty: any key, or none, is accepted.
    pub keys: Vec<String>,
    /// Largest body, compressed or decompressed. 1 MiB.
    pub body_limit: usize,
    /// Path prefix the routes are mounted under (`""` or like `/sentry`).
    pub prefix: String,
}

impl RelayConfig {
    /// Defaults around a pipeline.
    pub fn new(pipeline: PipelineConfig) -> RelayConfig {
        RelayConfig {
            pipeline,
            keys: Vec::new(),
            body_limit: 1 << 20,
            prefix: String::new(),
        }
    }
}

#[derive(Debug)]
struct Inner {
    p: Owned<Envelope>,
    /// Who may send and how much: taken by each request as it starts,
    /// replaced whole by [`Relay::set_access`].
    access: std::sync::RwLock<Arc<Access>>,
    prefix: String,
}

/// What a request must present, and the most it may send.
#[derive(Debug)]
struct Access {
    keys: Vec<String>,
    body_limit: usize,
}

/// A running relay. Cheap to clone; dropping the last clone stops its
/// worker without waiting (memory is spooled if a spool is configured).
#[derive(Debug, Clone)]
pub struct Relay {
    inner: Arc<Inner>,
}

/// The relay's pipeline: its counters, flush, close, drills' diversion,
/// membership verdicts on its upstreams' hosts.
impl std::ops::Deref for Relay {
    type Target = Pipeline<Envelope>;

    fn deref(&self) -> &Pipeline<Envelope> {
        &self.inner.p.0
    }
}

/// A refused request: status and reason.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "detail": self.1 }))).into_response()
    }
}

impl Relay {
    /// Opens the spool and starts the worker.
    pub fn start(cfg: RelayConfig) -> Result<Relay, StartError> {
        let prefix = cfg.prefix.trim_end_matches('/').to_owned();
        Ok(Relay {
            inner: Arc::new(Inner {
                p: Owned(Pipeline::start(cfg.pipeline)?),
                access: std::sync::RwLock::new(Arc::new(Access {
                    keys: cfg.keys,
                    body_limit: cfg.body_limit,
                })),
                prefix,
            }),
        })
    }

    /// The routes, to merge into an HTTP app.
    pub fn router(&self) -> Router {
        let p = &self.inner.prefix;
        Router::new()
            .route(
                &format!("{p}/api/{{project_id}}/envelope/"),
                post(ingest::<false>),
            )
            .route(
                &format!("{p}/api/{{project_id}}/envelope"),
                post(ingest::<false>),
            )
            .route(
                &format!("{p}/api/{{project_id}}/store/"),
                post(ingest::<true>),
            )
            .route(
                &format!("{p}/api/{{project_id}}/store"),
                post(ingest::<true>),
            )
            .with_state(self.clone())
    }

    /// Replaces the keys clients must present ([`RelayConfig::keys`]) and
    /// the body limit ([`RelayConfig::body_limit`]) while the relay runs:
    /// requests that start from now on are checked against them (one
    /// already reading its body keeps the limit it started with). Nothing
    /// queued or spooled is touched.
    pub fn set_access(&self, keys: Vec<String>, body_limit: usize) {
        let access = Arc::new(Access { keys, body_limit });
        *self.inner.access.write().unwrap_or_else(|e| e.into_inner()) = access;
    }

    /// The keys clients must present and the body limit in force.
    pub fn access(&self) -> (Vec<String>, usize) {
        let a = self.current_access();
        (a.keys.clone(), a.body_limit)
    }

    fn current_access(&self) -> Arc<Access> {
        self.inner
            .access
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Prometheus text, metric names prefixed `hale_relay_`.
    pub fn render_metrics(&self) -> String {
        self.inner.p.0.metrics_text("hale_relay")
    }

    fn authorize(&self, headers: &HeaderMap, query: Option<&str>) -> Result<(), Refusal> {
        let access = self.current_access();
        if access.keys.is_empty() {
            return Ok(());
        }
        let from_header = headers
            .get("x-sentry-auth")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| auth_param(v, "sentry_key"));
        let from_query = query.and_then(|q| {
            q.split('&')
                .filter_map(|kv| kv.split_once('='))
                .find(|(k, _)| *k == "sentry_key")
                .map(|(_, v)| v)
        });
        let why = match from_header.or(from_query) {
            Some(k) if access.keys.iter().any(|want| want == k) => return Ok(()),
            Some(_) => "unknown sentry_key",
            None => "missing sentry_key (X-Sentry-Auth header or sentry_key query parameter)",
        };
        Err(Refusal(StatusCode::UNAUTHORIZED, why.into()))
    }

    /// What every ingestion request goes through before its body is parsed:
    /// a valid project id, an accepted key, and a body read within the limit
    /// (decompressed with a bound).
    async fn admit(
        &self,
        project_id: &str,
        headers: &HeaderMap,
        query: Option<&str>,
        body: Body,
    ) -> Result<Vec<u8>, Refusal> {
        check_project(project_id)?;
        self.authorize(headers, query)?;
        self.read_body(headers, body).await
    }

    async fn read_body(&self, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, Refusal> {
        let limit = self.current_access().body_limit;
        let too_big = || {
            Refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over the limit of {limit} bytes"),
            )
        };
        let declared = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(too_big());
        }
        let raw = axum::body::to_bytes(body, limit)
            .await
            .map_err(|_| too_big())?;
        let encoding = headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("identity")
            .trim()
            .to_ascii_lowercase();
        decode_body(&raw, &encoding, limit).map_err(Refusal::from)
    }
}

/// Why a request body could not be read: the relay answers 413 for
/// [`BodyError::TooLarge`] and 400 for the others. Nothing was queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// More than the limit, decompressed.
    #[error("the decompressed body is over the limit of {0} bytes")]
    TooLarge(usize),
    /// The compressed stream is corrupt.
    #[error("bad {encoding} body: {reason}")]
    Corrupt {
        /// `gzip` or `deflate`.
        encoding: &'static str,
        /// What the decoder said.
        reason: String,
    },
    /// A `Content-Encoding` the relay does not decode.
    #[error("unsupported content-encoding {0:?} (gzip, deflate or none)")]
    Unsupported(String),
}

/// Decodes a request body sent with `Content-Encoding: encoding` (lower
/// case; `""`, `identity`, `gzip`, `x-gzip` or `deflate`, zlib-wrapped or
/// raw), producing at most `limit` bytes however small the input (no zip
/// bombs): memory used is bounded by `limit` whatever the bytes.
pub fn decode_body(raw: &[u8], encoding: &str, limit: usize) -> Result<Vec<u8>, BodyError> {
    let capped = |r: &mut dyn Read, what: &'static str| -> Result<Vec<u8>, BodyError> {
        let mut out = Vec::new();
        r.take(limit as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| BodyError::Corrupt {
                encoding: what,
                reason: e.to_string(),
            })?;
        if out.len() > limit {
            return Err(BodyError::TooLarge(limit));
        }
        Ok(out)
    };
    match encoding {
        "" | "identity" if raw.len() > limit => Err(BodyError::TooLarge(limit)),
        "" | "identity" => Ok(raw.to_vec()),
        "gzip" | "x-gzip" => capped(&mut flate2::read::GzDecoder::new(raw), "gzip"),
        // HTTP's "deflate" is zlib-wrapped; some clients send it raw.
        "deflate" => {
            if raw.len() >= 2 && (u16::from(raw[0]) << 8 | u16::from(raw[1])) % 31 == 0 {
                capped(&mut flate2::read::ZlibDecoder::new(raw), "deflate")
            } else {
                capped(&mut flate2::read::DeflateDecoder::new(raw), "deflate")
            }
        }
        other => Err(BodyError::Unsupported(other.to_owned())),
    }
}

impl From<BodyError> for Refusal {
    fn from(e: BodyError) -> Refusal {
        let status = match e {
            BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Corrupt { .. } | BodyError::Unsupported(_) => StatusCode::BAD_REQUEST,
        };
        Refusal(status, e.to_string())
    }
}

/// A parameter of `X-Sentry-Auth: Sentry k=v, k=v`.
fn auth_param<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    let rest = header.trim().strip_prefix("Sentry").unwrap_or(header);
    rest.split(',')
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim())
}

fn bad(e: impl std::fmt::Display) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, e.to_string())
}

fn check_project(project_id: &str) -> Result<(), Refusal> {
    if project_id.is_empty() || !project_id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("the project id must be numeric"));
    }
    Ok(())
}

fn queued(relay: &Relay, env: Envelope, id: Option<String>) -> Response {
    let bytes = env.body.len() + std::mem::size_of::<Envelope>();
    // Dropped or not, the answer is the same: the drop is counted and
    // reported upstream; the client must never wait on the upstream.
    let _ = relay.inner.p.0.offer(env, bytes);
    Json(match id {
        Some(id) => serde_json::json!({ "id": id }),
        None => serde_json::json!({}),
    })
    .into_response()
}

/// Both ingestion endpoints, `envelope` and (`STORE`) `store`, whose body
/// is one event as JSON: admits a
/// request for `project_id`, turns its body into an envelope, and queues it.
async fn ingest<const STORE: bool>(
    State(relay): State<Relay>,
    Path(project_id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let run = async {
        let body = relay
            .admit(&project_id, &headers, query.as_deref(), body)
            .await?;
        let (env, id) = if STORE {
            let (env, id) = envelope::store_to_envelope(&body).map_err(bad)?;
            (env, Some(id))
        } else {
            (body, None)
        };
        let parsed = envelope::parse_envelope(&env).map_err(bad)?;
        let id = id.or(parsed.event_id);
        let env = Envelope::new(Bytes::from(env), parsed.category);
        Ok::<_, Refusal>(queued(&relay, env, id))
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_header_parameters() {
        let h = "Sentry sentry_key=abc, sentry_version=7, sentry_client=x/1";
        assert_eq!(auth_param(h, "sentry_key"), Some("abc"));
        assert_eq!(auth_param(h, "nope"), None);
    }
}
