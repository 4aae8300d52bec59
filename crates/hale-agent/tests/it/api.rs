//! Agents embedded in one process: they form a cluster, and the HTTP API
//! answers with members, events and metrics, and refuses bad requests.

use hale_agent::view::MemberState;
use std::time::Duration;

use hale_agent::view::ErrorBody;
use hale_agent::{ClientError, Key};

use crate::support::{alive_count, start, start_cluster, state_of, wait_until};

#[tokio::test]
async fn three_agents_join_through_a_seed_and_see_each_other() {
    let [a, b, c] = start_cluster("api-test", ["a", "b", "c"]).await;
    // A graceful shutdown is recorded as left, not dead.
    c.shutdown().await;
    wait_until("c is recorded as left", Duration::from_secs(10), || async {
        state_of(&a, "c").await == Some(MemberState::Left)
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn an_agent_with_another_key_cannot_join_and_its_packets_are_counted() {
    let a = start("api-test", "a", &Key::generate().to_base64(), None).await;
    let x = start("api-test", "x", &Key::generate().to_base64(), None).await;
    x.join(vec![a.gossip_addr()]).await.unwrap();
    wait_until(
        "a counts authentication failures",
        Duration::from_secs(10),
        || async {
            let text = a.client().metrics().await.unwrap();
            text.lines().any(|l| {
                l.starts_with("hale_dropped_packets_total")
                    && l.contains("auth_failed")
                    && !l.ends_with(" 0")
            })
        },
    )
    .await;
    assert_eq!(
        alive_count(&a).await,
        1,
        "the foreign agent never became a member"
    );
    assert_eq!(alive_count(&x).await, 1);
    a.shutdown().await;
    x.shutdown().await;
}

#[tokio::test]
async fn the_api_serves_members_health_events_metrics_and_openapi() {
    let a = start("api-test", "solo", &Key::generate().to_base64(), None).await;
    let api = a.client();
    let members = api.members().await.unwrap();
    assert_eq!(members.len(), 1);
    assert!(members[0].is_self);
    assert_eq!(members[0].name, "solo");
    let health = api.health().await.unwrap();
    assert_eq!(health.status, hale_agent::view::HealthStatus::Ok);
    assert_eq!(health.members.alive, 1);
    api.events(0).await.unwrap();
    let metrics = api.metrics().await.unwrap();
    assert!(metrics.contains("# TYPE hale_probes_total counter"));
    assert!(metrics.contains("hale_members{node=\"solo\",state=\"alive\"} 1"));
    let spec: serde_json::Value = api.get("/v1/openapi.json").await.unwrap();
    assert_eq!(spec["openapi"], "3.1.0");
    a.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_a_4xx_with_a_message() {
    // (Without the token, mutating endpoints answer 401: see api_guard.rs.)
    let a = start("api-test", "t", &Key::generate().to_base64(), Some("tok")).await;
    let join = |body: &str| {
        reqwest::Client::new()
            .post(format!("http://{}/v1/join", a.http_addr()))
            .bearer_auth("tok")
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
    };
    let r = join("{not json").await.unwrap();
    assert_eq!(r.status(), 400);
    let body: ErrorBody = r.json().await.unwrap();
    assert!(body.error.contains("addrs"), "{}", body.error);
    let r = join(r#"{"addrs": ["nope"]}"#).await.unwrap();
    assert_eq!(r.status(), 400);
    let status = |r: Result<serde_json::Value, ClientError>| r.unwrap_err().status();
    assert_eq!(
        status(a.client().get("/v1/events?since=minus").await),
        Some(400)
    );
    assert_eq!(status(a.client().get("/v1/nothing").await), Some(404));
    let r = join(r#"{"addrs": ["127.0.0.1:9"]}"#).await.unwrap();
    assert_eq!(r.status(), 202);
    a.shutdown().await;
}

#[tokio::test]
async fn events_stream_live_over_server_sent_events() {
    let key = Key::generate().to_base64();
    let a = start("api-test", "a", &key, None).await;
    let mut sub = a.subscribe();
    let b = start("api-test", "b", &key, None).await;
    b.join(vec![a.gossip_addr()]).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), sub.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.event, hale_agent::AgentEvent::Joined);
    assert_eq!(e.member.as_deref(), Some("b"));
    // The same through HTTP.
    let r = reqwest::Client::new()
        .get(format!("http://{}/v1/events/stream", a.http_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn the_event_stream_refuses_subscribers_past_its_cap_and_takes_them_again_when_they_leave() {
    let key = Key::generate().to_base64();
    let a = start("api-cap", "a", &key, None).await;
    let url = format!("http://{}/v1/events/stream", a.http_addr());
    let http = reqwest::Client::new();
    let mut open = Vec::new();
    let mut refused = None;
    for _ in 0..=hale_agent::api::MAX_EVENT_SUBSCRIBERS {
        let r = http.get(&url).send().await.unwrap();
        if r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE {
            refused = Some(r.json::<serde_json::Value>().await.unwrap());
            break;
        }
        assert_eq!(r.status(), reqwest::StatusCode::OK);
        open.push(r);
    }
    let refused = refused.expect("a subscriber past the cap was refused");
    assert!(
        refused["error"].as_str().unwrap().contains("/v1/events"),
        "{refused}"
    );
    assert!(open.len() <= hale_agent::api::MAX_EVENT_SUBSCRIBERS);
    assert!(
        open.len() >= hale_agent::api::MAX_EVENT_SUBSCRIBERS - 4,
        "{}",
        open.len()
    );
    drop(open);
    wait_until(
        "a subscriber is taken again",
        Duration::from_secs(10),
        || {
            let (http, url) = (http.clone(), url.clone());
            async move {
                http.get(&url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        },
    )
    .await;
    a.shutdown().await;
}
