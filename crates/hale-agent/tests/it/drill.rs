//! Drill faults on embedded agents: they need the token, revert on their
//! own when their duration ends, and `freeze` cuts an agent off the cluster
//! while its HTTP API keeps answering.

use std::time::Duration;

use hale_agent::drill::DrillView;
use hale_agent::{Agent, AgentEvent, Key};

use crate::support::{start, wait_until};

async fn drill(a: &Agent) -> DrillView {
    a.client().drill().await.unwrap()
}

async fn state_of(a: &Agent, name: &str) -> Option<String> {
    a.members()
        .await
        .ok()?
        .into_iter()
        .find(|m| m.name == name)
        .map(|m| m.state)
}

#[tokio::test]
async fn a_drill_fault_needs_the_token_and_reverts_on_its_own_when_its_duration_ends() {
    let a = start("drill-test", "a", &Key::generate().to_base64(), Some("tok")).await;
    let c = reqwest::Client::new();
    let url = format!("http://{}/v1/drill/quiet", a.http_addr());
    let body = serde_json::json!({ "duration_ms": 300 });
    let r = c.post(&url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .post(format!("http://{}/v1/drill/blackhole", a.http_addr()))
        .bearer_auth("tok")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "no relay to divert");
    let r = c
        .post(&url)
        .bearer_auth("tok")
        .json(&serde_json::json!({ "duration_ms": 0 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = c
        .post(&url)
        .bearer_auth("tok")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(drill(&a).await.active.len(), 1);
    // Traffic signals are ignored (and counted) while quiet.
    let r = c
        .post(format!("http://{}/v1/traffic", a.http_addr()))
        .bearer_auth("tok")
        .json(&serde_json::json!({ "peers": ["b"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    wait_until(
        "the ignored signal is counted",
        Duration::from_secs(5),
        || async { drill(&a).await.traffic_ignored == 1 },
    )
    .await;
    wait_until(
        "quiet reverts on its own",
        Duration::from_secs(5),
        || async { drill(&a).await.active.is_empty() },
    )
    .await;
    let events = a.client().events(0).await.unwrap();
    let has = |f: fn(&AgentEvent) -> bool| events.iter().any(|e| f(&e.event));
    assert!(
        has(|e| matches!(e, AgentEvent::DrillSet { .. })),
        "{events:?}"
    );
    assert!(
        has(|e| matches!(e, AgentEvent::DrillRestored { .. })),
        "{events:?}"
    );
    a.shutdown().await;
}

#[tokio::test]
async fn a_frozen_agent_is_cut_off_the_cluster_and_comes_back_when_restored() {
    let key = Key::generate().to_base64();
    let a = start("drill-test", "a", &key, None).await;
    let b = start("drill-test", "b", &key, None).await;
    let x = start("drill-test", "x", &key, None).await;
    b.join(vec![a.gossip_addr()]).await.unwrap();
    x.join(vec![a.gossip_addr()]).await.unwrap();
    wait_until("all alive", Duration::from_secs(10), || async {
        for o in [&a, &b] {
            if state_of(o, "x").await.as_deref() != Some("alive") {
                return false;
            }
        }
        state_of(&x, "a").await.as_deref() == Some("alive")
    })
    .await;
    let c = reqwest::Client::new();
    let r = c
        .post(format!("http://{}/v1/drill/freeze", x.http_addr()))
        .json(&serde_json::json!({ "duration_ms": 60_000 }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_until(
        "the others stop hearing x",
        Duration::from_secs(20),
        || async { state_of(&a, "x").await.as_deref() != Some("alive") },
    )
    .await;
    let metrics = x.client().metrics().await.unwrap();
    assert!(
        metrics.contains("hale_drill_fault_active{node=\"x\",fault=\"freeze\"} 1"),
        "{metrics}"
    );
    let r: serde_json::Value = c
        .post(format!("http://{}/v1/drill/restore", x.http_addr()))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r["restored"], serde_json::json!(["freeze"]));
    wait_until(
        "x is alive everywhere again",
        Duration::from_secs(20),
        || async {
            state_of(&a, "x").await.as_deref() == Some("alive")
                && state_of(&b, "x").await.as_deref() == Some("alive")
                && state_of(&x, "a").await.as_deref() == Some("alive")
        },
    )
    .await;
    for g in [a, b, x] {
        g.shutdown().await;
    }
}
