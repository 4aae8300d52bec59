// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]
//! hale-relay's integration tests: a real Sentry SDK through the relay to a
//! fake upstream in each of its states, the spool across restarts, failover,
//! bounded memory under a flood, bad input, and deadlines.

mod bad_input;
mod deadlines;
mod divert;
mod failover;
mod flood;
mod sdk;
mod spool;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use hale_relay::{BreakerConfig, Dsn, PipelineConfig, Relay, UpstreamConfig};
use tokio::time::Instant;

/// Serves the relay's router on an ephemeral loopback port.
pub async fn serve(relay: &Relay) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let app = relay.router();
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    addr
}

/// Pipeline settings scaled down so failure paths take milliseconds: the
/// defaults are what the benchmarks measure.
pub fn quick(primary: Dsn) -> PipelineConfig {
    let mut c = PipelineConfig::new(UpstreamConfig::new(primary));
    c.request_timeout = Duration::from_millis(800);
    c.connect_timeout = Duration::from_millis(300);
    c.breaker = BreakerConfig {
        failures: 5,
        stall: Duration::from_millis(300),
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_millis(400),
    };
    c.spool_after = Duration::from_millis(100);
    c.client_report_interval = Duration::from_millis(100);
    c
}

/// Polls `f` until it holds, failing after `limit`.
pub async fn until<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls a plain condition.
pub async fn until_true(what: &str, limit: Duration, f: impl Fn() -> bool) {
    until(what, limit, || std::future::ready(f())).await;
}

/// A minimal envelope carrying one event.
pub fn event_envelope(id: &str) -> Vec<u8> {
    let payload = format!("{{\"event_id\":\"{id}\",\"message\":\"boom\",\"level\":\"error\"}}");
    format!(
        "{{\"event_id\":\"{id}\"}}\n{{\"type\":\"event\",\"length\":{}}}\n{payload}\n",
        payload.len()
    )
    .into_bytes()
}

/// Posts an envelope to the relay.
pub async fn post_envelope(
    http: &reqwest::Client,
    relay: SocketAddr,
    body: Vec<u8>,
) -> reqwest::Response {
    http.post(format!("http://{relay}/api/1/envelope/"))
        .header(
            "x-sentry-auth",
            "Sentry sentry_key=public, sentry_version=7",
        )
        .body(body)
        .send()
        .await
        .unwrap()
}
