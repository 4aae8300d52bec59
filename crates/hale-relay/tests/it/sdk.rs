//! A real Sentry SDK (the `sentry` crate) sends through the relay to the
//! fake upstream in each of its states. The SDK is always answered at once;
//! what the upstream does only decides whether events are delivered now,
//! later, or dropped and counted.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{DropReason, Relay, RelayConfig};

use crate::{quick, serve, until_true};

const N: usize = 20;

/// Sends `N` messages with a real SDK through the relay at `addr`; returns
/// their ids (without dashes) once the SDK's flush returned, asserting it
/// returned in time (the relay answered at once).
async fn send_with_sdk(addr: SocketAddr) -> HashSet<String> {
    tokio::task::spawn_blocking(move || {
        let client = Arc::new(sentry::Client::from(sentry::ClientOptions {
            dsn: Some(format!("http://public@{addr}/1").parse().unwrap()),
            // The SDK's own reqwest transport, as an application would use it.
            transport: Some(Arc::new(sentry::transports::DefaultTransportFactory)),
            ..Default::default()
        }));
        let hub = sentry::Hub::new(Some(client.clone()), Arc::new(sentry::Scope::default()));
        let ids: HashSet<String> = (0..N)
            .map(|i| {
                hub.capture_message(&format!("boom {i}"), sentry::Level::Error)
                    .simple()
                    .to_string()
            })
            .collect();
        let t = std::time::Instant::now();
        assert!(
            client.flush(Some(Duration::from_secs(5))),
            "the SDK could not deliver to the relay"
        );
        assert!(t.elapsed() < Duration::from_secs(5));
        client.close(Some(Duration::from_secs(1)));
        ids
    })
    .await
    .unwrap()
}

fn delivered(fake: &FakeSentry) -> HashSet<String> {
    fake.event_ids()
        .into_iter()
        .map(|id| id.replace('-', ""))
        .collect()
}

async fn relay_to(fake: &FakeSentry, max_age: Duration) -> (Relay, SocketAddr) {
    let mut p = quick(fake.dsn());
    p.max_age = max_age;
    let relay = Relay::start(RelayConfig::new(p)).unwrap();
    let addr = serve(&relay).await;
    (relay, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_every_event_is_delivered() {
    let fake = FakeSentry::start(Mode::Up).await.unwrap();
    let (relay, addr) = relay_to(&fake, Duration::from_secs(30)).await;
    let ids = send_with_sdk(addr).await;
    until_true("all delivered", Duration::from_secs(10), || {
        delivered(&fake).is_superset(&ids) && relay.counters().forwarded() == N as u64
    })
    .await;
    assert_eq!(relay.counters().accepted(), N as u64);
    assert_eq!(relay.counters().dropped_total(), 0);
    assert!(relay
        .render_metrics()
        .contains("hale_relay_forwarded_total 20"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_dead_the_breaker_opens_and_events_are_delivered_once_it_is_back() {
    let fake = FakeSentry::start(Mode::HalfDead).await.unwrap();
    let (relay, addr) = relay_to(&fake, Duration::from_secs(20)).await;
    let ids = send_with_sdk(addr).await;
    until_true("the breaker opens", Duration::from_secs(5), || {
        relay.counters().breaker(0) != hale_relay::BreakerGauge::Closed
    })
    .await;
    assert!(delivered(&fake).is_empty());
    fake.set_mode(Mode::Up);
    until_true("all delivered", Duration::from_secs(15), || {
        delivered(&fake).is_superset(&ids)
    })
    .await;
    assert_eq!(relay.counters().dropped_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_requests_time_out_and_are_retried_when_it_is_fast_again() {
    let fake = FakeSentry::start(Mode::Slow(Duration::from_millis(1500)))
        .await
        .unwrap();
    let (relay, addr) = relay_to(&fake, Duration::from_secs(20)).await;
    let ids = send_with_sdk(addr).await;
    until_true("a request times out", Duration::from_secs(5), || {
        relay
            .render_metrics()
            .contains("hale_relay_request_failures_total")
            && relay.counters().breaker(0) != hale_relay::BreakerGauge::Closed
    })
    .await;
    fake.set_mode(Mode::Up);
    until_true("all delivered", Duration::from_secs(15), || {
        delivered(&fake).is_superset(&ids)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusing_events_are_dropped_counted_and_reported_when_it_returns() {
    let fake = FakeSentry::start(Mode::Refusing).await.unwrap();
    let (relay, addr) = relay_to(&fake, Duration::from_millis(500)).await;
    send_with_sdk(addr).await;
    let c = relay.counters();
    until_true(
        "every event is accounted for",
        Duration::from_secs(10),
        || c.forwarded() + c.dropped_total() == N as u64,
    )
    .await;
    assert_eq!(c.accepted(), N as u64);
    assert_eq!(
        c.dropped(DropReason::UpstreamError) + c.dropped(DropReason::BreakerOpen),
        N as u64
    );
    fake.set_mode(Mode::Up);
    // Something must succeed for the report to go: one more event.
    let ids = send_with_sdk(addr).await;
    until_true("a client report arrives", Duration::from_secs(10), || {
        delivered(&fake).is_superset(&ids) && !fake.client_reports().is_empty()
    })
    .await;
    let reported: u64 = fake
        .client_reports()
        .iter()
        .flat_map(|r| {
            r["discarded_events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|d| d["category"] == "error")
        .map(|d| d["quantity"].as_u64().unwrap())
        .sum();
    assert_eq!(reported, N as u64, "every drop is reported, once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_events_are_dropped_counted_and_reported() {
    let fake = FakeSentry::start(Mode::RateLimiting(1)).await.unwrap();
    let (relay, addr) = relay_to(&fake, Duration::from_secs(30)).await;
    send_with_sdk(addr).await;
    let c = relay.counters();
    until_true(
        "every event is accounted for",
        Duration::from_secs(10),
        || c.dropped(DropReason::RateLimited) == N as u64,
    )
    .await;
    fake.set_mode(Mode::Up);
    // Retry-After is 1 s: keep sending until a delivery carries the report.
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fake.client_reports().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no client report");
        let id = hale_relay::envelope::new_event_id();
        crate::post_envelope(&http, addr, crate::event_envelope(&id)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reported: u64 = fake
        .client_reports()
        .iter()
        .flat_map(|r| {
            r["discarded_events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|d| d["reason"] == "ratelimit_backoff")
        .map(|d| d["quantity"].as_u64().unwrap())
        .sum();
    assert!(reported >= N as u64 && reported <= c.dropped(DropReason::RateLimited));
}
