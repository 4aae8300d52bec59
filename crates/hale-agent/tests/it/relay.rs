//! The relay mounted on the agent's HTTP API: envelopes posted to the agent
//! reach the upstream, and its counters are on /metrics.

use hale_agent::view::MemberState;
use std::time::Duration;

use hale_agent::{Agent, FileConfig, Key};
use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::BreakerGauge;

use crate::support::{alive_count, loopback_file, state_of, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelopes_posted_to_the_agent_reach_the_upstream_and_are_counted() {
    let fake = FakeSentry::start(Mode::Up).await.unwrap();
    let text = format!(
        "[agent]\nname = \"r\"\nbind = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\n\
         [cluster]\nkeys = [\"{}\"]\n\
         [relay]\nprimary = {{ dsn = \"{}\", member = \"sentry-host\" }}\nkeys = [\"public\"]\npath_prefix = \"/sentry\"\n",
        Key::generate().to_base64(),
        fake.dsn()
    );
    let cfg = FileConfig::parse(&text, "t").unwrap().validate().unwrap();
    let agent = Agent::start(cfg).await.unwrap();
    let path = "/sentry/api/1/envelope/?sentry_key=public";
    post(
        &reqwest::Client::new(),
        &agent,
        path,
        "0123456789abcdef0123456789abcdef",
    )
    .await;
    let ten = Duration::from_secs(10);
    wait_until("delivered", ten, || async { fake.events() >= 1 }).await;
    let forwarded = || async { agent.client().metrics().await.unwrap() };
    wait_until("forwarded counted", ten, || async {
        forwarded().await.contains("hale_relay_forwarded_total 1")
    })
    .await;
    let metrics = forwarded().await;
    assert!(metrics.contains("hale_probes_total"), "agent metrics stay");
    // The rest of the API is unchanged.
    let nope = agent.client().get::<serde_json::Value>("/v1/nope").await;
    assert_eq!(nope.unwrap_err().status(), Some(404));
    agent.relay().unwrap().member_dead("sentry-host");
    agent.shutdown().await;
}

/// The relay's envelope route (no prefix, no key).
const ENVELOPE: &str = "/api/1/envelope/";

fn member_config(name: &str, key: &str) -> hale_agent::FileConfig {
    let mut f = loopback_file("relay-test", name, key);
    f.cluster.profile = Some("local".to_owned());
    f
}

/// Posts an envelope of one event (`id`) to the relay's `path` on `agent`: it answers 200.
async fn post(http: &reqwest::Client, agent: &Agent, path: &str, id: &str) {
    let payload = r#"{"message":"boom","level":"error"}"#;
    let body = format!(
        "{{\"event_id\":\"{id}\"}}\n{{\"type\":\"event\",\"length\":{}}}\n{payload}\n",
        payload.len()
    );
    let r = http
        .post(format!("http://{}{path}", agent.http_addr()))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// Three real agents on loopback: `app` runs the relay, whose primary
/// upstream is hosted on member `sentry-host`; `witness` corroborates the
/// verdict; `sentry-host` crashes (its runtime is shut down, no leave). The primary keeps answering until `sentry-host` dies, then hangs
/// (the host is gone); no request is in flight to it at that moment, so no
/// timeout can be what opens the breaker: only the membership verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_membership_declares_the_upstream_host_dead_the_breaker_opens_at_once_and_events_go_to_the_standby(
) {
    let primary = FakeSentry::start(Mode::Up).await.unwrap();
    let standby = FakeSentry::start(Mode::Up).await.unwrap();
    let key = Key::generate().to_base64();
    // The host runs on its own runtime, so that it can crash: shutting that
    // runtime down stops its tasks where they stand (dropping the agent
    // instead may let it leave gracefully, which is not a death).
    let host_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let host_cfg = member_config("sentry-host", &key).validate().unwrap();
    let host = host_rt
        .spawn(async move { Agent::start(host_cfg).await.unwrap() })
        .await
        .unwrap();
    let witness = Agent::start(member_config("witness", &key).validate().unwrap())
        .await
        .unwrap();
    let mut f = member_config("app", &key);
    f.relay = Some(hale_agent::config::RelaySection {
        primary: Some(hale_agent::config::UpstreamSection {
            dsn: primary.dsn().to_string(),
            member: Some("sentry-host".to_owned()),
        }),
        standby: Some(hale_agent::config::UpstreamSection {
            dsn: standby.dsn().to_string(),
            member: None,
        }),
        ..Default::default()
    });
    let app = Agent::start(f.validate().unwrap()).await.unwrap();
    witness.join(vec![app.gossip_addr()]).await.unwrap();
    host.join(vec![app.gossip_addr()]).await.unwrap();
    wait_until(
        "all three are alive at app",
        Duration::from_secs(20),
        || async { alive_count(&app).await == 3 },
    )
    .await;

    // While the host is alive, events go to the primary.
    let http = reqwest::Client::new();
    post(&http, &app, ENVELOPE, "00000000000000000000000000000001").await;
    wait_until(
        "the primary has the event",
        Duration::from_secs(10),
        || async { primary.events() == 1 },
    )
    .await;
    let relay = app.relay().unwrap();
    wait_until(
        "the request to the primary has completed",
        Duration::from_secs(10),
        || async { relay.counters().forwarded() == 1 && relay.counters().in_flight() == 0 },
    )
    .await;
    assert_eq!(relay.counters().breaker(0), BreakerGauge::Closed);

    // The host crashes (no leave); the sink on it hangs with it.
    let mut events = app.subscribe();
    primary.set_mode(Mode::HalfDead);
    host_rt.shutdown_background();
    drop(host);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Ok(e) = events.recv().await {
                seen.lock()
                    .unwrap()
                    .push(format!("{} {:?}", e.event.kind(), e.member));
            }
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let state = state_of(&app, "sentry-host").await;
        if state == Some(MemberState::Dead) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sentry-host never declared dead at app (now {state:?}); events: {:?}",
            seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    wait_until(
        "the primary's breaker is open",
        Duration::from_secs(5),
        || async { relay.counters().breaker(0) == BreakerGauge::Open },
    )
    .await;
    log.abort();
    // Nothing timed out or failed: the verdict, not a timeout, opened it.
    assert_eq!(relay.counters().request_failures(), 0);
    assert_eq!(primary.requests(), 1);

    // Events now go to the standby, none to the hung primary.
    for i in 0..5 {
        post(&http, &app, ENVELOPE, &format!("{:032x}", 0x100 + i)).await;
    }
    wait_until(
        "the standby has all five",
        Duration::from_secs(10),
        || async { standby.events() == 5 },
    )
    .await;
    assert_eq!(primary.requests(), 1, "nothing was sent to the dead host");
    assert_eq!(relay.counters().request_failures(), 0);
    assert!(relay.counters().failovers() >= 5);
    assert_eq!(relay.counters().dropped_total(), 0);
    app.shutdown().await;
    witness.shutdown().await;
}
