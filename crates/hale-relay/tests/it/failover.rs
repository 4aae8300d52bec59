//! The standby takes over while the primary is unavailable; a membership
//! verdict opens the primary's breaker at once.

use std::time::Duration;

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{BreakerGauge, Relay, RelayConfig, UpstreamConfig};

use crate::{event_envelope, post_envelope, quick, serve, until, until_true};

async fn pair(member: Option<&str>) -> (FakeSentry, FakeSentry, Relay, std::net::SocketAddr) {
    let primary = FakeSentry::start(Mode::Up).await.unwrap();
    let standby = FakeSentry::start(Mode::Up).await.unwrap();
    let mut p = quick(primary.dsn());
    p.primary.member = member.map(str::to_owned);
    p.standby = Some(UpstreamConfig::new(standby.dsn()));
    let relay = Relay::start(RelayConfig::new(p)).unwrap();
    let addr = serve(&relay).await;
    (primary, standby, relay, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_when_the_primary_hangs() {
    let (primary, standby, relay, addr) = pair(None).await;
    let http = reqwest::Client::new();
    post_envelope(&http, addr, event_envelope("a0")).await;
    until_true("the primary has it", Duration::from_secs(5), || {
        primary.events() == 1
    })
    .await;
    primary.set_mode(Mode::HalfDead);
    let mut ids = std::collections::HashSet::new();
    until(
        "events flow to the standby",
        Duration::from_secs(10),
        || {
            let id = hale_relay::envelope::new_event_id();
            ids.insert(id.clone());
            let http = http.clone();
            let standby = &standby;
            async move {
                post_envelope(&http, addr, event_envelope(&id)).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                standby.events() >= 10
            }
        },
    )
    .await;
    assert!(relay.counters().failovers() > 0);
    // Every event sent after the hang reaches the standby (those caught in
    // flight to the primary are retried there).
    until_true("all reach the standby", Duration::from_secs(10), || {
        standby.event_ids().is_superset(&ids)
    })
    .await;
    assert_eq!(relay.counters().dropped_total(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_opens_the_breaker_at_once_and_alive_lets_a_probe_through() {
    let (primary, standby, relay, addr) = pair(Some("sentry-host")).await;
    relay.member_dead("sentry-host");
    relay.member_dead("unrelated");
    until_true("the breaker opens", Duration::from_secs(2), || {
        relay.counters().breaker(0) == BreakerGauge::Open
    })
    .await;
    let http = reqwest::Client::new();
    for i in 0..5 {
        post_envelope(&http, addr, event_envelope(&format!("d{i}"))).await;
    }
    until_true("the standby has them", Duration::from_secs(5), || {
        standby.events() == 5
    })
    .await;
    assert_eq!(primary.requests(), 0, "no request to a dead member");
    relay.member_alive("sentry-host");
    until(
        "the primary takes traffic again",
        Duration::from_secs(5),
        || {
            let http = http.clone();
            let primary = &primary;
            async move {
                post_envelope(&http, addr, event_envelope("x")).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                primary.events() > 0
            }
        },
    )
    .await;
}
