//! Elections that a slow member cannot force (`raft/prevote.rs`): a server
//! that hears no leader asks the others first, and campaigns only if a
//! majority of them hear no leader either.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use hale_control::raft::prevote::PREVOTE_PATH;
use hale_control::raft::ControlPlane;
use hale_control::{ControlAuth, LeaseTiming};
use hale_keyring::Keyring;
use tokio::net::TcpListener;

use crate::raft::{cluster_key, until};

/// Three servers whose routes each answer 503 to everything while their
/// `deaf` flag is set (a host too busy to take its requests in).
async fn deafenable_cluster(dir: &std::path::Path) -> Vec<(ControlPlane, Arc<AtomicBool>)> {
    cluster_with_old(dir, &[]).await
}

/// [`deafenable_cluster`], the servers in `old` without the pre-vote
/// route (404), as a server of the previous release.
async fn cluster_with_old(
    dir: &std::path::Path,
    old: &[u64],
) -> Vec<(ControlPlane, Arc<AtomicBool>)> {
    // The library's own log lines, shown for a failing test (RUST_LOG).
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let mut servers = Vec::new();
    let mut members = BTreeMap::<u64, SocketAddr>::new();
    for id in 1..=3 {
        let auth = ControlAuth::sealed(Keyring::new(cluster_key(), vec![]));
        let store = dir.join(format!("s{id}"));
        let cp = ControlPlane::start(id, &store, LeaseTiming::default(), auth)
            .await
            .unwrap();
        let deaf = Arc::new(AtomicBool::new(false));
        let flag = deaf.clone();
        let is_old = old.contains(&id);
        let app = cp.routes().layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let flag = flag.clone();
                async move {
                    if flag.load(Ordering::SeqCst) {
                        return (StatusCode::SERVICE_UNAVAILABLE, "deaf").into_response();
                    }
                    if is_old && req.uri().path() == PREVOTE_PATH {
                        return StatusCode::NOT_FOUND.into_response();
                    }
                    next.run(req).await
                }
            },
        ));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        members.insert(id, listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        servers.push((cp, deaf));
    }
    servers[0].0.bootstrap(members).await.unwrap();
    servers
}

/// The cluster's leader, once one is elected, and its term.
async fn elected(servers: &[(ControlPlane, Arc<AtomicBool>)]) -> (u64, u64) {
    let leader = until("a leader is elected", Duration::from_secs(10), || {
        servers[0].0.status().leader
    })
    .await;
    (leader, servers[0].0.status().term)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_heard_no_heartbeats_for_two_seconds_does_not_unseat_a_leader_the_others_hear(
) {
    let dir = tempfile::tempdir().unwrap();
    let servers = deafenable_cluster(dir.path()).await;
    let (leader, term) = elected(&servers).await;
    let (follower, deaf) = servers
        .iter()
        .find(|(cp, _)| cp.id != leader)
        .map(|(cp, d)| (cp.clone(), d.clone()))
        .unwrap();
    // The follower takes nothing in for 2 s: no heartbeat reaches it, and it
    // asks the others (which hear the leader) for a pre-vote, four times or so.
    deaf.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    deaf.store(false, Ordering::SeqCst);
    until(
        "the follower hears the leader again",
        Duration::from_secs(5),
        || {
            (follower.status().leader == Some(leader) && follower.status().term == term)
                .then_some(())
        },
    )
    .await;
    // Time for a higher term, had the follower raised one, to reach the leader.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (cp, _) in &servers {
        let s = cp.status();
        assert_eq!(
            (s.leader, s.term),
            (Some(leader), term),
            "server {} after the follower was deaf for 2 s",
            cp.id
        );
    }
}

/// Stops the leader of a fresh three-server cluster (the servers in `old`
/// without the pre-vote route), every durable write `slow` longer, and waits (5 s at most) for the other two to elect one
/// of them. openraft's own election timer is off: the pre-vote driver is
/// what campaigns when the leader is gone.
async fn stop_the_leader_and_see_another_elected(slow: Duration, old: &[u64]) {
    let dir = tempfile::tempdir().unwrap();
    let servers = cluster_with_old(dir.path(), old).await;
    let (leader, term) = elected(&servers).await;
    for (cp, _) in &servers {
        cp.slow_disk(slow);
    }
    let gone = servers.iter().find(|(cp, _)| cp.id == leader).unwrap();
    gone.0.shutdown().await;
    let other = servers.iter().find(|(cp, _)| cp.id != leader).unwrap();
    let new = until(
        "the others elect a new leader",
        Duration::from_secs(5),
        || {
            let s = other.0.status();
            s.leader.filter(|l| *l != leader && s.term > term)
        },
    )
    .await;
    assert_ne!(new, leader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_leader_stops_the_others_campaign_and_elect_one_of_them() {
    stop_the_leader_and_see_another_elected(Duration::ZERO, &[]).await;
}

/// Runs `body` on a two-worker runtime whose threads run as the agent
/// runs its control plane: real-time (`SCHED_RR` 1, `[agent] realtime`,
/// on by default), so that the host's other work cannot delay them. The
/// claims that rest on a leader answering within a campaign timeout of a
/// stall's end hold for a real-time agent; under the full suite's load, a
/// test process of the normal policy was once held off its cores that long
/// (1 run in 8 with two busy loops) and an election followed. Without the
/// privilege (not root) the runtime runs at the normal policy.
fn real_time<F: std::future::Future<Output = ()>>(body: F) {
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy,
        ThreadPriority, ThreadSchedulePolicy,
    };
    let rr = ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::RoundRobin);
    let runtime = std::thread::spawn(move || {
        // Threads inherit the policy of the thread that creates them: set
        // here, before the runtime starts its workers and blocking pool.
        let _ = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, rr);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
    .join()
    .unwrap();
    runtime.block_on(body);
}

#[test]
fn every_disk_stalling_for_a_moment_under_renewals_changes_neither_leader_nor_term() {
    real_time(every_disk_stalling());
}

async fn every_disk_stalling() {
    let dir = tempfile::tempdir().unwrap();
    let servers = deafenable_cluster(dir.path()).await;
    let (leader, _) = elected(&servers).await;
    let cps: Vec<ControlPlane> = servers.iter().map(|(cp, _)| cp.clone()).collect();
    let (epoch, _) = crate::raft::acquire_eventually(&cps[0], "db", "node-a").await;
    // A holder renews every 250 ms, through the leader: the leader has a
    // durable append under way when the disks stop, and falls silent.
    let renewing = Arc::new(AtomicBool::new(true));
    let renewer = {
        let (cp, renewing) = (cps[0].clone(), renewing.clone());
        tokio::spawn(async move {
            while renewing.load(Ordering::SeqCst) {
                let renew = hale_control::LeaseRequest::Renew {
                    role: "db".into(),
                    holder: "node-a".into(),
                    epoch,
                    mark: None,
                };
                let _ = cp.write(renew).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    let term = cps[0].status().term;
    for round in 0..5 {
        for cp in &cps {
            cp.stall_disk(true);
        }
        tokio::time::sleep(Duration::from_millis(800)).await;
        for cp in &cps {
            cp.stall_disk(false);
        }
        // Time for a campaign, had one started in the stall, to show.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for cp in &cps {
            let s = cp.status();
            assert_eq!(
                (s.leader, s.term),
                (Some(leader), term),
                "server {} after every disk stalled for 0.8 s (round {round})",
                cp.id
            );
        }
    }
    renewing.store(false, Ordering::SeqCst);
    renewer.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_disk_slow_a_stopped_leader_is_still_replaced() {
    // Every campaign's disk probe is slow: the grace it buys the leader
    // must not stop elections.
    stop_the_leader_and_see_another_elected(Duration::from_millis(150), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_the_previous_release_without_pre_votes_still_helps_elect_a_leader() {
    // Servers 2 and 3 are of the previous release: whichever server stops,
    // each remaining one has an old server as its only peer, whose 404
    // must count as a granted pre-vote (it votes by openraft's rules).
    stop_the_leader_and_see_another_elected(Duration::ZERO, &[2, 3]).await;
}
