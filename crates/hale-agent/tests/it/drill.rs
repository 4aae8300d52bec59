//! Drill faults on embedded agents: they need the token, revert on their
//! own when their duration ends, and `freeze` cuts an agent off the cluster
//! while its HTTP API keeps answering.

use hale_agent::view::MemberState;
use std::time::Duration;

use hale_agent::view::{DrillView, Fault};
use hale_agent::{Agent, AgentEvent, ClientError, Key};

use crate::support::{start, start_cluster, state_of, wait_until};

async fn drill(a: &Agent) -> DrillView {
    a.client().drill().await.unwrap()
}

#[tokio::test]
async fn a_drill_fault_needs_the_token_and_reverts_on_its_own_when_its_duration_ends() {
    let a = start("drill-test", "a", &Key::generate().to_base64(), Some("tok")).await;
    let (api, quiet, ms300) = (a.client(), Fault::Quiet, Duration::from_millis(300));
    let status = |r: Result<_, ClientError>| r.unwrap_err().status();
    assert_eq!(status(api.set_fault(quiet, ms300).await), Some(401));
    let api = api.with_token(Some("tok".into()));
    let no_relay = api.set_fault(Fault::Blackhole, ms300).await;
    assert_eq!(status(no_relay), Some(409), "no relay to divert");
    let no_server = api.slow_disk(ms300, ms300).await;
    assert_eq!(status(no_server), Some(409), "no control-plane server");
    let too_slow = api.slow_disk(ms300, Duration::from_secs(11)).await;
    assert_eq!(status(too_slow), Some(400), "a delay over 10 s");
    let delayed_quiet = api
        .post::<_, hale_agent::view::FaultView>(
            "/v1/drill/quiet",
            &serde_json::json!({"duration_ms": 300, "delay_ms": 5}),
        )
        .await;
    assert_eq!(status(delayed_quiet), Some(400), "delay_ms on quiet");
    assert_eq!(
        status(api.set_fault(quiet, Duration::ZERO).await),
        Some(400)
    );
    api.set_fault(quiet, ms300).await.unwrap();
    assert_eq!(drill(&a).await.active.len(), 1);
    // Traffic signals are ignored (and counted) while quiet.
    let (status, noted) = api.traffic(&["b"]).await.unwrap();
    assert_eq!(status, 202, "{noted:?}");
    assert!(noted.quiet && noted.noted == 1, "{noted:?}");
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
    let [a, b, x] = start_cluster("drill-test", ["a", "b", "x"]).await;
    let api = x.client();
    api.set_fault(Fault::Freeze, Duration::from_secs(60))
        .await
        .unwrap();
    wait_until(
        "the others stop hearing x",
        Duration::from_secs(20),
        || async { state_of(&a, "x").await != Some(MemberState::Alive) },
    )
    .await;
    let metrics = x.client().metrics().await.unwrap();
    assert!(
        metrics.contains("hale_drill_fault_active{node=\"x\",fault=\"freeze\"} 1"),
        "{metrics}"
    );
    assert_eq!(api.restore(None).await.unwrap().restored, [Fault::Freeze]);
    wait_until(
        "x is alive everywhere again",
        Duration::from_secs(20),
        || async {
            state_of(&a, "x").await == Some(MemberState::Alive)
                && state_of(&b, "x").await == Some(MemberState::Alive)
                && state_of(&x, "a").await == Some(MemberState::Alive)
        },
    )
    .await;
    for g in [a, b, x] {
        g.shutdown().await;
    }
}
