//! The relay mounted on the agent's HTTP API: envelopes posted to the agent
//! reach the upstream, and its counters are on /metrics.

use std::time::Duration;

use hale_agent::{Agent, FileConfig, Key};
use hale_relay::fake::{FakeSentry, Mode};

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
    let http = reqwest::Client::new();
    let payload = r#"{"message":"boom"}"#;
    let body = format!(
        "{{\"event_id\":\"0123456789abcdef0123456789abcdef\"}}\n{{\"type\":\"event\",\"length\":{}}}\n{payload}\n",
        payload.len()
    );
    let r = http
        .post(format!(
            "http://{}/sentry/api/1/envelope/?sentry_key=public",
            agent.http_addr()
        ))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while fake.events() < 1 {
        assert!(tokio::time::Instant::now() < deadline, "never delivered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let metrics = loop {
        let m = http
            .get(format!("http://{}/metrics", agent.http_addr()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if m.contains("hale_relay_forwarded_total 1") {
            break m;
        }
        assert!(tokio::time::Instant::now() < deadline, "{m}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(metrics.contains("hale_probes_total"), "agent metrics stay");
    // The rest of the API is unchanged.
    let r = http
        .get(format!("http://{}/v1/nope", agent.http_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    agent.relay().unwrap().member_dead("sentry-host");
    agent.shutdown().await;
}
