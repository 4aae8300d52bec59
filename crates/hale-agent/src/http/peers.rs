//! How the agent asks other agents over their HTTP API: one client, and a
//! short cache of their answers (for the cluster views).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

/// How long the agent waits to connect to another agent.
pub(crate) const PEER_CONNECT: Duration = Duration::from_millis(500);
/// Most peers asked in one request.
pub const MAX_FANOUT: usize = 64;

/// How long a peer may take to answer.
pub const PEER_TIMEOUT: Duration = Duration::from_millis(300);

/// How long a peer's answer (or failure) is reused.
pub const PEER_TTL: Duration = Duration::from_secs(1);

/// Largest answer read from a peer's agent: a peer is a member of the
/// cluster, but not trusted to be small.
pub const MAX_PEER_BODY: usize = 256 * 1024;

/// Peer answers (bodies), by URL, with when they were fetched.
type Cache = Arc<Mutex<HashMap<String, (Instant, Result<Arc<[u8]>, String>)>>>;

/// How the agent asks other agents: one HTTP client (no proxy), and the
/// cluster views' cache of peers' answers.
#[derive(Clone)]
pub(crate) struct Peers {
    /// The client (connections time out after [`PEER_CONNECT`]).
    pub(crate) client: reqwest::Client,
    cache: Cache,
}

impl Default for Peers {
    fn default() -> Peers {
        Peers {
            client: reqwest::Client::builder()
                .connect_timeout(PEER_CONNECT)
                .no_proxy()
                .build()
                .unwrap_or_default(),
            cache: Cache::default(),
        }
    }
}

impl Peers {
    /// GETs `path` from the agent at `http`, through the cache, as a `T`
    /// (a peer's answer reaches the dashboard only as the fields of a `T`).
    pub(crate) async fn peer_get<T: DeserializeOwned>(
        &self,
        http: &str,
        path: &str,
    ) -> Result<T, String> {
        let body = self.peer_body(http, path).await?;
        serde_json::from_slice(&body).map_err(|_| format!("bad answer to {path}"))
    }

    async fn peer_body(&self, http: &str, path: &str) -> Result<Arc<[u8]>, String> {
        let url = format!("http://{http}{path}");
        if let Some((at, v)) = self.cache.lock().expect("cache lock").get(&url) {
            if at.elapsed() < PEER_TTL {
                return v.clone();
            }
        }
        let got = async {
            let mut r = self
                .client
                .get(&url)
                .timeout(PEER_TIMEOUT)
                .send()
                .await
                .map_err(|e| format!("unreachable: {}", short(&e)))?;
            if !r.status().is_success() {
                return Err(format!("answered {}", r.status()));
            }
            hale_seal::read_capped(&mut r, MAX_PEER_BODY)
                .await
                .map(Arc::from)
                .map_err(|e| match e {
                    hale_seal::CallError::TooLarge => {
                        format!("answer larger than {MAX_PEER_BODY} bytes")
                    }
                    _ => "bad answer: the connection failed".to_owned(),
                })
        }
        .await;
        let mut c = self.cache.lock().expect("cache lock");
        if c.len() > 4 * MAX_FANOUT {
            c.retain(|_, (at, _)| at.elapsed() < PEER_TTL);
        }
        c.insert(url, (Instant::now(), got.clone()));
        got
    }
}

fn short(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection refused"
    } else {
        "request failed"
    }
}
