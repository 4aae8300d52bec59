//! `GET /v1/relay` shows the relay's queue, breakers and drops, and breaker
//! changes reach the event stream.

use hale_agent::view::BreakerState;
use std::time::Duration;

use hale_agent::{Agent, AgentEvent, FileConfig, Key};
use hale_relay::fake::{FakeSentry, Mode};

use crate::support::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_status_shows_upstreams_and_a_dead_host_opens_its_breaker_with_an_event() {
    let primary = FakeSentry::start(Mode::Up).await.unwrap();
    let standby = FakeSentry::start(Mode::Up).await.unwrap();
    let text = format!(
        "[agent]\nname = \"r\"\nbind = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\n\
         [cluster]\nkeys = [\"{}\"]\n\
         [relay]\nprimary = {{ dsn = \"{}\", member = \"sentry-host\" }}\n\
         standby = {{ dsn = \"{}\" }}\n",
        Key::generate().to_base64(),
        primary.dsn(),
        standby.dsn()
    );
    let cfg = FileConfig::parse(&text, "t").unwrap().validate().unwrap();
    let agent = Agent::start(cfg).await.unwrap();
    let api = agent.client();

    let v = api.relay().await.unwrap().unwrap();
    assert_eq!(v.upstreams.len(), 2);
    assert_eq!(v.upstreams[0].role, hale_agent::view::UpstreamRole::Primary);
    assert_eq!(v.upstreams[0].member.as_deref(), Some("sentry-host"));
    assert_eq!(v.upstreams[0].breaker, BreakerState::Closed);
    assert!(
        !v.upstreams[0].target.contains('@'),
        "no key in {}",
        v.upstreams[0].target
    );
    assert_eq!(v.queue_cap, 8 << 20);
    assert_eq!(v.dropped.len(), 9, "every reason listed: {:?}", v.dropped);
    assert_eq!(v.dropped_total, 0);

    agent.relay().unwrap().member_dead("sentry-host");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let v = api.relay().await.unwrap().unwrap();
        let events = api.events(0).await.unwrap();
        let ev = events.iter().find_map(|e| match &e.event {
            AgentEvent::Breaker { role, from, to, .. } => Some((e, role, from, to)),
            _ => None,
        });
        if v.upstreams[0].breaker == BreakerState::Open {
            if let Some((e, role, from, to)) = ev {
                assert_eq!(
                    (role.as_str(), *from, *to),
                    ("primary", BreakerState::Closed, BreakerState::Open)
                );
                assert_eq!(e.member.as_deref(), Some("sentry-host"));
                break;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "{v:?} {events:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_status_is_null_without_a_relay() {
    let agent = start("relay-view", "n", &Key::generate().to_base64(), None).await;
    assert!(agent.client().relay().await.unwrap().is_none());
    agent.shutdown().await;
}
