//! The replicated control plane: three servers over HTTP on loopback.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use hale_control::raft::{AcquireRequest, ControlError, ControlPlane};
use hale_control::{ControlAuth, LeaseRequest, LeaseResponse, LeaseTiming};
use hale_keyring::{Key, Keyring};
use hale_seal::CallError;
use tokio::net::TcpListener;
use tokio::time::Instant;

pub(crate) struct Server {
    pub(crate) cp: ControlPlane,
    pub(crate) addr: SocketAddr,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

/// The key these tests' servers share (one per test process).
pub(crate) fn cluster_key() -> Key {
    static KEY: std::sync::OnceLock<Key> = std::sync::OnceLock::new();
    KEY.get_or_init(Key::generate).clone()
}

async fn serve(id: u64, dir: &std::path::Path, listener: TcpListener) -> Server {
    let auth = ControlAuth::sealed(Keyring::new(cluster_key(), vec![]));
    serve_with(id, dir, listener, auth).await
}

/// Starts server `id` (store under `dir`) on `listener`, authenticating per `auth`.
pub(crate) async fn serve_with(
    id: u64,
    dir: &std::path::Path,
    listener: TcpListener,
    auth: ControlAuth,
) -> Server {
    let addr = listener.local_addr().unwrap();
    // A server restarted in the same process may find its store still held
    // for a moment by the previous instance's tasks: retry with a deadline.
    let deadline = Instant::now() + Duration::from_secs(10);
    let cp = loop {
        let store = dir.join(format!("s{id}"));
        match ControlPlane::start(id, &store, LeaseTiming::default(), auth.clone()).await {
            Ok(cp) => break cp,
            Err(ControlError::StoreInUse(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    let app = cp.routes();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Server { cp, addr, task }
}

async fn cluster(dir: &std::path::Path) -> Vec<Server> {
    let auth = || ControlAuth::sealed(Keyring::new(cluster_key(), vec![]));
    cluster_with(dir, [auth(), auth(), auth()]).await
}

/// Three servers (ids 1 to 3), each authenticating per its `auth`,
/// bootstrapped by the first.
pub(crate) async fn cluster_with(dir: &std::path::Path, auth: [ControlAuth; 3]) -> Vec<Server> {
    let mut servers = Vec::new();
    for (id, auth) in (1..=3).zip(auth) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        servers.push(serve_with(id, dir, l, auth).await);
    }
    let members: BTreeMap<u64, SocketAddr> = servers.iter().map(|s| (s.cp.id, s.addr)).collect();
    servers[0].cp.bootstrap(members).await.unwrap();
    servers
}

pub(crate) async fn until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn acquire_eventually(
    cp: &ControlPlane,
    role: &str,
    holder: &str,
) -> (u64, Instant) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match cp.acquire(role, holder, 0, 0).await {
            Ok(LeaseResponse::Granted { epoch }) => return (epoch, Instant::now()),
            Ok(other) => panic!("unexpected {other:?}"),
            Err(
                ControlError::NotYet(_)
                | ControlError::NoLeader
                | ControlError::Unavailable(_)
                | ControlError::Request(_),
            ) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline, "never granted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_elect_a_leader_and_grant_with_increasing_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let s = cluster(dir.path()).await;
    let leader = until("a leader is elected", Duration::from_secs(10), || {
        s[1].cp.leader()
    })
    .await;
    assert!((1..=3).contains(&leader));
    // Any server can ask; the request is forwarded to the leader.
    let (e1, _) = acquire_eventually(&s[2].cp, "db", "node-a").await;
    assert_eq!(e1, 1);
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    };
    assert_eq!(
        s[1].cp.write(renew).await.unwrap(),
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        }
    );
    // While node-a renews, nobody else gets the role.
    let denied = s[0].cp.acquire("db", "node-b", 0, 0).await;
    assert!(
        matches!(
            denied,
            Err(ControlError::NotYet(_)) | Err(ControlError::Request(_))
        ),
        "{denied:?}"
    );
    // Once its lease has run out on the leader's clock, node-b gets epoch 2.
    let (e2, _) = acquire_eventually(&s[0].cp, "db", "node-b").await;
    assert_eq!(e2, 2);
    for x in &s {
        until(
            "every server applied epoch 2",
            Duration::from_secs(5),
            || (x.cp.table().role("db").map(|r| r.epoch) == Some(2)).then_some(()),
        )
        .await;
    }
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_grants_only_a_full_lease_after_the_last_renewal_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let s = cluster(dir.path()).await;
    let leader = until("a leader is elected", Duration::from_secs(10), || {
        s[0].cp.leader()
    })
    .await;
    let (e1, _) = acquire_eventually(&s[0].cp, "auth", "node-a").await;
    assert_eq!(e1, 1);
    // The holder renews a few times; the last committed renewal was sent at
    // `last_sent`, and the holder may act on it until `last_sent + lease`.
    let l = &s[(leader - 1) as usize];
    let mut last_sent = Instant::now();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sent = Instant::now();
        let r =
            l.cp.write(LeaseRequest::Renew {
                role: "auth".into(),
                holder: "node-a".into(),
                epoch: 1,
                mark: None,
            })
            .await
            .unwrap();
        assert_eq!(
            r,
            LeaseResponse::Renewed {
                epoch: 1,
                paused: false,
                switchover: None,
            }
        );
        last_sent = sent;
    }
    // The leader dies right after that renewal.
    l.cp.shutdown().await;
    l.task.abort();
    let others: Vec<&Server> = s.iter().filter(|x| x.cp.id != leader).collect();
    let (e2, granted) = acquire_eventually(&others[0].cp, "auth", "node-b").await;
    assert_eq!(e2, 2);
    assert_ne!(others[0].cp.leader(), Some(leader));
    let after = granted.duration_since(last_sent);
    assert!(
        after >= LeaseTiming::default().lease,
        "granted {after:?} after the last renewal was sent: the old lease may still run"
    );
    for x in others {
        x.cp.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_raft_stopped_refuses_lease_requests_with_503_so_the_holder_asks_another() {
    // Its disk full, a server's Raft stops but its HTTP routes still
    // serve. Its answer used to be an error *answer*, which ended the
    // client's search: a holder preferring its own server (the agent's
    // default) could not renew through the live ones and lost its lease.
    let dir = tempfile::tempdir().unwrap();
    let s = cluster(dir.path()).await;
    let leader = until("a leader is elected", Duration::from_secs(10), || {
        s[0].cp.leader()
    })
    .await;
    let (epoch, _) = acquire_eventually(&s[0].cp, "db", "node-a").await;
    let stopped = &s[(leader - 1) as usize];
    stopped.cp.shutdown().await; // Raft stopped; the routes still serve.
    let auth = ControlAuth::sealed(Keyring::new(cluster_key(), vec![]));
    let http = reqwest::Client::new();
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch,
        mark: None,
    };
    let acquire = AcquireRequest {
        role: "db".into(),
        holder: "node-b".into(),
        priority: 0,
        attempt: 0,
        standing: None,
    };
    let addr = stopped.addr.to_string();
    let t = Duration::from_secs(5);
    let r = hale_seal::call::<_, hale_control::raft::api::Answer<LeaseResponse>>(
        &http,
        &auth,
        leader,
        &addr,
        "/control/write",
        &renew,
        t,
    )
    .await;
    assert!(
        matches!(r, Err(CallError::Refused { status: 503, .. })),
        "{r:?}"
    );
    let r = hale_seal::call::<_, hale_control::raft::api::Answer<LeaseResponse>>(
        &http,
        &auth,
        leader,
        &addr,
        "/control/acquire",
        &acquire,
        t,
    )
    .await;
    assert!(
        matches!(r, Err(CallError::Refused { status: 503, .. })),
        "{r:?}"
    );
    assert_eq!(
        stopped.cp.leader(),
        None,
        "a stopped server knows no leader"
    );
    // A stranger still meets the seal first: 401, never the 503.
    let stranger = http
        .post(format!("http://{addr}/control/write"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&renew).unwrap())
        .timeout(t)
        .send()
        .await
        .unwrap();
    assert_eq!(stranger.status().as_u16(), 401);
    // The others elect a leader and the holder renews through them.
    let live = s.iter().find(|x| x.cp.id != leader).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match live.cp.write(renew.clone()).await {
            Ok(r) => {
                break assert_eq!(
                    r,
                    LeaseResponse::Renewed {
                        epoch,
                        paused: false,
                        switchover: None,
                    }
                )
            }
            Err(e) => assert!(Instant::now() < deadline, "never renewed: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_table_survives_a_restart_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let s = cluster(dir.path()).await;
    until("a leader is elected", Duration::from_secs(10), || {
        s[0].cp.leader()
    })
    .await;
    acquire_eventually(&s[0].cp, "db", "node-a").await;
    for x in &s {
        until("applied", Duration::from_secs(5), || {
            (x.cp.table().role("db").map(|r| r.epoch) == Some(1)).then_some(())
        })
        .await;
    }
    let addrs: Vec<SocketAddr> = s.iter().map(|x| x.addr).collect();
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
        let _ = x.task.await;
    }
    // Restart all three on the same addresses and data.
    let mut again = Vec::new();
    for (i, a) in addrs.iter().enumerate() {
        let l = TcpListener::bind(a).await.unwrap();
        again.push(serve(i as u64 + 1, dir.path(), l).await);
    }
    until("a leader is re-elected", Duration::from_secs(10), || {
        again[0].cp.leader()
    })
    .await;
    for x in &again {
        until("the table is back", Duration::from_secs(10), || {
            let t = x.cp.table();
            let r = t.role("db")?;
            (r.epoch == 1 && r.holder.as_deref() == Some("node-a")).then_some(())
        })
        .await;
    }
    for x in again {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_are_added_and_removed_through_any_server() {
    let dir = tempfile::tempdir().unwrap();
    let s = cluster(dir.path()).await;
    let leader = until("a leader is elected", Duration::from_secs(10), || {
        s[0].cp.leader()
    })
    .await;
    let follower = s.iter().find(|x| x.cp.id != leader).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fourth = serve(4, dir.path(), l).await;
    follower
        .cp
        .change_servers(hale_control::raft::ServerChange::Add(
            hale_control::raft::AddServer {
                id: 4,
                addr: fourth.addr,
            },
        ))
        .await
        .unwrap();
    until("four voters everywhere", Duration::from_secs(10), || {
        (s.iter().all(|x| x.cp.servers().len() == 4) && fourth.cp.servers().len() == 4)
            .then_some(())
    })
    .await;
    // The new server has the replicated state.
    acquire_eventually(&s[0].cp, "db", "node-a").await;
    until(
        "the new server applied the grant",
        Duration::from_secs(10),
        || (fourth.cp.table().role("db").map(|r| r.epoch) == Some(1)).then_some(()),
    )
    .await;
    follower
        .cp
        .change_servers(hale_control::raft::ServerChange::Remove(4))
        .await
        .unwrap();
    until("three voters again", Duration::from_secs(10), || {
        s.iter().all(|x| x.cp.servers().len() == 3).then_some(())
    })
    .await;
    for x in s.into_iter().chain([fourth]) {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_through_any_server_is_answered_item_by_item_and_committed_as_one_entry() {
    use hale_control::raft::api::BatchItem;
    use hale_control::raft::{ControlClient, Refusal};
    let dir = tempfile::tempdir().unwrap();
    let s = cluster(dir.path()).await;
    until("a leader is elected", Duration::from_secs(10), || {
        s[0].cp.leader()
    })
    .await;
    let servers: BTreeMap<u64, SocketAddr> = s.iter().map(|x| (x.cp.id, x.addr)).collect();
    let auth = ControlAuth::sealed(Keyring::new(cluster_key(), vec![]));
    let client = ControlClient::new(&servers, auth);
    let acquire = |role: &str, holder: &str| {
        BatchItem::Acquire(AcquireRequest {
            role: role.into(),
            holder: holder.into(),
            priority: 0,
            attempt: 1,
            standing: None,
        })
    };
    // node-a asks for two roles in one batch until both are granted.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut granted = BTreeMap::new();
    while granted.len() < 2 {
        assert!(Instant::now() < deadline, "never granted: {granted:?}");
        let items: Vec<BatchItem> = ["db", "cache"]
            .iter()
            .filter(|r| !granted.contains_key(**r))
            .map(|r| acquire(r, "node-a"))
            .collect();
        let roles: Vec<&str> = ["db", "cache"]
            .into_iter()
            .filter(|r| !granted.contains_key(*r))
            .collect();
        if let Ok(answers) = client.batch(&items, Duration::from_secs(2)).await {
            assert_eq!(answers.len(), items.len());
            for (role, a) in roles.into_iter().zip(answers) {
                if let Ok(LeaseResponse::Granted { epoch }) = a {
                    granted.insert(role.to_owned(), epoch);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(granted.values().copied().collect::<Vec<_>>(), vec![1, 1]);
    let leader_log = |x: &Server| x.cp.raft_metrics().borrow().last_log_index.unwrap_or(0);
    let before = leader_log(&s[0]);
    // Both renewals and another node's acquisition in one request: each
    // item has its own answer; one log entry holds the two renewals.
    let renew = |role: &str| {
        BatchItem::Write(LeaseRequest::Renew {
            role: role.into(),
            holder: "node-a".into(),
            epoch: 1,
            mark: None,
        })
    };
    let answers = client
        .batch(
            &[renew("db"), acquire("db", "node-b"), renew("cache")],
            Duration::from_secs(2),
        )
        .await
        .unwrap();
    assert_eq!(
        answers[0],
        Ok(LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        })
    );
    assert!(matches!(answers[1], Err(Refusal::NotYet(_))), "{answers:?}");
    assert_eq!(
        answers[2],
        Ok(LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        })
    );
    until("the batch is replicated", Duration::from_secs(5), || {
        (leader_log(&s[0]) > before).then_some(())
    })
    .await;
    assert_eq!(leader_log(&s[0]), before + 1);
}
