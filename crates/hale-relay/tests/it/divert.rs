//! A drill's diversion: while set, every request goes to the given address
//! (a black hole here) and the breaker opens; once undone, events reach the
//! real upstream again.

use std::time::Duration;

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{BreakerGauge, Relay, RelayConfig};

use crate::{event_envelope, post_envelope, quick, serve, until, until_true};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diverted_relay_sends_to_the_diversion_and_back_upstream_once_undone() {
    let upstream = FakeSentry::start(Mode::Up).await.unwrap();
    let hole = FakeSentry::start(Mode::HalfDead).await.unwrap();
    let relay = Relay::start(RelayConfig::new(quick(upstream.dsn()))).unwrap();
    let addr = serve(&relay).await;
    let http = reqwest::Client::new();
    relay.divert(Some(hole.addr()));
    assert_eq!(relay.diverted(), Some(hole.addr()));
    until(
        "the breaker opens on the black hole",
        Duration::from_secs(5),
        || {
            let http = http.clone();
            let relay = relay.clone();
            async move {
                let r = post_envelope(
                    &http,
                    addr,
                    event_envelope(&hale_relay::envelope::new_event_id()),
                )
                .await;
                assert_eq!(
                    r.status(),
                    200,
                    "the relay answers whatever the upstream does"
                );
                relay.counters().breaker(0) != BreakerGauge::Closed
            }
        },
    )
    .await;
    assert!(hole.requests() > 0);
    assert_eq!(
        upstream.requests(),
        0,
        "nothing went upstream while diverted"
    );
    relay.divert(None);
    assert_eq!(relay.diverted(), None);
    until(
        "events reach the upstream again",
        Duration::from_secs(10),
        || {
            let http = http.clone();
            let upstream = &upstream;
            async move {
                post_envelope(
                    &http,
                    addr,
                    event_envelope(&hale_relay::envelope::new_event_id()),
                )
                .await;
                tokio::time::sleep(Duration::from_millis(20)).await;
                upstream.events() > 0
            }
        },
    )
    .await;
    until_true("the breaker closes", Duration::from_secs(5), || {
        relay.counters().breaker(0) == BreakerGauge::Closed
    })
    .await;
}
