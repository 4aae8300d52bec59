//! Only the cluster speaks to the control plane: strangers, replays, old
//! keys, stale or misaddressed requests and forged answers are refused over
//! real HTTP, and key rotation keeps a live control plane working.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use hale_control::auth::{self, ControlAuth};
use hale_control::raft::api::BatchItem;
use hale_control::raft::{AcquireRequest, AddServer, StateData, TypeConfig};
use hale_control::{LeaseRequest, LeaseResponse, LeaseTable, Origin};
use hale_keyring::{Key, Keyring, SharedKeyring};
use hale_seal::{open_response, seal_request, unix_ms, CallError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{
    BasicNode, CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership, Vote,
};
use serde_json::{json, Value};

use crate::raft::{acquire_eventually, cluster_key, cluster_with, until, Server};

async fn post(addr: SocketAddr, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .body(body)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.bytes().await.unwrap().to_vec())
}

fn ring(key: &Key) -> Keyring {
    Keyring::new(key.clone(), vec![])
}

/// A cluster (shared test key) where node-a holds `db` at epoch 1 on every server.
async fn cluster_with_db_held(dir: &std::path::Path) -> Vec<Server> {
    let auth = || ControlAuth::sealed(ring(&cluster_key()));
    let s = cluster_with(dir, [auth(), auth(), auth()]).await;
    acquire_eventually(&s[0].cp, "db", "node-a").await;
    for x in &s {
        until(
            "every server applied the grant",
            Duration::from_secs(10),
            || (x.cp.table().role("db").map(|r| r.epoch) == Some(1)).then_some(()),
        )
        .await;
    }
    s
}

fn assert_unchanged(s: &[Server]) {
    for x in s {
        let t = x.cp.table();
        let db = t.role("db").unwrap();
        assert_eq!(
            (db.holder.as_deref(), db.epoch),
            (Some("node-a"), 1),
            "server {}'s lease table changed",
            x.cp.id
        );
        let voters: BTreeSet<u64> = x.cp.servers().keys().copied().collect();
        assert_eq!(voters, BTreeSet::from([1, 2, 3]), "server {}", x.cp.id);
    }
}

/// What a stranger would send to take over: every route, with bodies that
/// would do harm if accepted.
fn strangers_requests() -> Vec<(&'static str, Value)> {
    let vote = Vote::new_committed(1_000, 9);
    let log = LogId::new(CommittedLeaderId::new(1_000, 9), 1_000_000);
    let mut table = LeaseTable::default();
    table.apply(&LeaseRequest::Grant {
        role: "db".into(),
        holder: "mallory".into(),
        epoch: 1,
        attempt: 0,
        origin: Origin::default(),
    });
    let nodes = BTreeMap::from([(
        9,
        BasicNode {
            addr: "127.0.0.1:9".into(),
        },
    )]);
    let membership =
        StoredMembership::new(Some(log), Membership::new(vec![BTreeSet::from([9])], nodes));
    let data = StateData {
        last_applied: Some(log),
        membership: membership.clone(),
        table,
    };
    let snapshot = InstallSnapshotRequest::<TypeConfig> {
        vote,
        meta: SnapshotMeta {
            last_log_id: Some(log),
            last_membership: membership,
            snapshot_id: "mallory".into(),
        },
        offset: 0,
        data: serde_json::to_vec(&data).unwrap(),
        done: true,
    };
    let append = AppendEntriesRequest::<TypeConfig> {
        vote,
        prev_log_id: None,
        entries: vec![],
        leader_commit: Some(log),
    };
    let grant = LeaseRequest::Grant {
        role: "db".into(),
        holder: "mallory".into(),
        epoch: 2,
        attempt: 0,
        origin: Origin::default(),
    };
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    };
    let release = LeaseRequest::Release {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        next: Some("mallory".into()),
        reason: None,
        origin: Origin::default(),
    };
    let batch = vec![
        BatchItem::Write(grant.clone()),
        BatchItem::Write(LeaseRequest::Renewals {
            holder: "node-a".into(),
            leases: vec![("db".into(), 1)],
            marks: Vec::new(),
        }),
        BatchItem::Acquire(AcquireRequest {
            role: "db".into(),
            holder: "mallory".into(),
            priority: 1000,
            attempt: 1,
            standing: None,
        }),
    ];
    vec![
        ("/control/write", serde_json::to_value(grant).unwrap()),
        ("/control/write", serde_json::to_value(renew).unwrap()),
        ("/control/write", serde_json::to_value(release).unwrap()),
        (
            "/control/acquire",
            json!({"role": "db", "holder": "mallory", "priority": 1000}),
        ),
        (
            "/raft/vote",
            serde_json::to_value(VoteRequest::new(vote, Some(log))).unwrap(),
        ),
        ("/raft/append", serde_json::to_value(append).unwrap()),
        ("/raft/snapshot", serde_json::to_value(snapshot).unwrap()),
        (
            hale_control::raft::prevote::PREVOTE_PATH,
            serde_json::to_value(hale_control::raft::prevote::PreVoteRequest {
                candidate: 9,
                last_log_id: None,
            })
            .unwrap(),
        ),
        (
            "/control/servers",
            serde_json::to_value(AddServer {
                id: 9,
                addr: "127.0.0.1:9".parse().unwrap(),
            })
            .unwrap(),
        ),
        ("/control/servers/2/remove", Value::Null),
        ("/control/servers/3/remove", Value::Null),
        ("/control/table", Value::Null),
        ("/control/leader", Value::Null),
        ("/control/batch", serde_json::to_value(batch).unwrap()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_request_on_every_route_gets_401_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = cluster_with_db_held(dir.path()).await;
    let strangers_key = Key::generate();
    for x in &s {
        for (path, body) in strangers_requests() {
            let plain = serde_json::to_vec(&body).unwrap();
            let (status, _) = post(x.addr, path, plain.clone()).await;
            assert_eq!(status, 401, "plain JSON to server {} {path}", x.cp.id);
            let sealed = seal_request(
                &ring(&strangers_key),
                x.cp.id,
                "POST",
                path,
                unix_ms(),
                &plain,
            );
            let (status, _) = post(x.addr, path, sealed.body).await;
            assert_eq!(
                status, 401,
                "sealed with a stranger's key, server {} {path}",
                x.cp.id
            );
        }
    }
    assert_unchanged(&s);
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_stale_or_misaddressed_request_is_refused_and_a_fresh_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let s = cluster_with_db_held(dir.path()).await;
    let keys = ring(&cluster_key());
    let renew = serde_json::to_vec(&LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    })
    .unwrap();
    let path = "/control/write";
    let req = seal_request(&keys, 1, "POST", path, unix_ms(), &renew);
    let (status, answer) = post(s[0].addr, path, req.body.clone()).await;
    assert_eq!(status, 200, "a fresh request from the cluster is served");
    let answer: hale_control::raft::api::Answer<LeaseResponse> =
        serde_json::from_slice(&open_response(&keys, &req, &answer).unwrap()).unwrap();
    assert_eq!(
        answer,
        Ok(LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        })
    );
    let (status, _) = post(s[0].addr, path, req.body.clone()).await;
    assert_eq!(status, 401, "the same request again is a replay");
    // Addressed to server 1, delivered to server 2.
    let (status, _) = post(s[1].addr, path, req.body).await;
    assert_eq!(
        status, 401,
        "a request opens only at the server it was sealed for"
    );
    // Sealed for another route.
    let req = seal_request(&keys, 1, "POST", "/control/table", unix_ms(), &renew);
    let (status, _) = post(s[0].addr, path, req.body).await;
    assert_eq!(
        status, 401,
        "a request opens only on the route it was sealed for"
    );
    let window = hale_seal::REPLAY_WINDOW.as_millis() as u64;
    for stamp in [unix_ms() - window - 5_000, unix_ms() + 3_600_000] {
        let req = seal_request(&keys, 1, "POST", path, stamp, &renew);
        let (status, answer) = post(s[0].addr, path, req.body.clone()).await;
        assert_eq!(status, 401, "stamped {stamp}, outside the window");
        // A member whose clock is off is told the server's time, sealed to
        // its request, so that it can correct its stamps.
        let told: Value =
            serde_json::from_slice(&open_response(&keys, &req, &answer).unwrap()).unwrap();
        let server_ms = told["clock_refusal_server_ms"].as_u64().unwrap();
        assert!(server_ms.abs_diff(unix_ms()) < 5_000, "{told}");
        // A stranger's stale request learns nothing.
        let stranger = ring(&Key::generate());
        let req = seal_request(&stranger, 1, "POST", path, stamp, &renew);
        let (status, answer) = post(s[0].addr, path, req.body.clone()).await;
        assert_eq!(status, 401);
        assert!(open_response(&stranger, &req, &answer).is_err());
        assert!(!String::from_utf8_lossy(&answer).contains("clock_refusal"));
    }
    let report = hale_seal::clock_report();
    assert!(
        report.refused.iter().any(|r| r.server == 1 && r.count >= 2),
        "{report:?}"
    );
    let (status, _) = post(s[0].addr, path, vec![b'x'; auth::CONTROL_BODY_LIMIT + 1]).await;
    assert_eq!(status, 413, "bodies are capped before anything else");
    assert_unchanged(&s);
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

/// A fake server answering every request with `answer`.
async fn fake_server(answer: Vec<u8>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let app = axum::Router::new().fallback(move || {
        let a = answer.clone();
        async move { a }
    });
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (
        addr,
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_replayed_answer_to_a_renewal_is_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let s = cluster_with_db_held(dir.path()).await;
    let auth = ControlAuth::sealed(ring(&cluster_key()));
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    };
    let http = reqwest::Client::new();
    let t = Duration::from_secs(5);
    let path = "/control/write";
    // A genuine answer, captured on the path.
    let keys = ring(&cluster_key());
    let req = seal_request(
        &keys,
        1,
        "POST",
        path,
        unix_ms(),
        &serde_json::to_vec(&renew).unwrap(),
    );
    let (_, genuine) = post(s[0].addr, path, req.body.clone()).await;
    assert!(open_response(&keys, &req, &genuine).is_ok());
    let forged = serde_json::to_vec(&json!({"Ok": {"Renewed": {"epoch": 1}}})).unwrap();
    let strangers = Keyring::new(Key::generate(), vec![]).seal(&forged);
    for (what, answer) in [
        ("plain JSON", forged.clone()),
        ("sealed by a stranger", strangers),
        ("a genuine answer to another request", genuine),
    ] {
        let (addr, task) = fake_server(answer).await;
        let r = hale_seal::call::<_, hale_control::raft::api::Answer<LeaseResponse>>(
            &http,
            &auth,
            1,
            &addr.to_string(),
            path,
            &renew,
            t,
        )
        .await;
        assert!(matches!(r, Err(CallError::Unauthentic)), "{what}: {r:?}");
        task.abort();
    }
    // The same call to the real server is believed.
    let r: hale_control::raft::api::Answer<LeaseResponse> =
        hale_seal::call(&http, &auth, 1, &s[0].addr.to_string(), path, &renew, t)
            .await
            .unwrap();
    assert_eq!(
        r,
        Ok(LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        })
    );
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

/// Renews `db` for node-a at epoch 1 through every server (forwarded to
/// the leader over Raft-authenticated routes) and through a client with
/// `client` keys straight at every server.
async fn renewals_work(s: &[Server], client: &ControlAuth, step: &str) {
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    };
    let http = reqwest::Client::new();
    for x in s {
        let r = x.cp.write(renew.clone()).await;
        assert_eq!(
            r.unwrap(),
            LeaseResponse::Renewed {
                epoch: 1,
                paused: false,
                switchover: None,
            },
            "{step}: through server {}",
            x.cp.id
        );
        let r: hale_control::raft::api::Answer<LeaseResponse> = hale_seal::call(
            &http,
            client,
            x.cp.id,
            &x.addr.to_string(),
            "/control/write",
            &renew,
            Duration::from_secs(5),
        )
        .await
        .unwrap_or_else(|e| panic!("{step}: client to server {}: {e}", x.cp.id));
        assert_eq!(
            r,
            Ok(LeaseResponse::Renewed {
                epoch: 1,
                paused: false,
                switchover: None,
            }),
            "{step}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_key_server_by_server_keeps_the_control_plane_working_and_the_old_key_is_refused_once_removed(
) {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (Key::generate(), Key::generate());
    let handles: Vec<SharedKeyring> = (0..3).map(|_| SharedKeyring::new(ring(&old))).collect();
    let auth = |i: usize| ControlAuth::Sealed(handles[i].clone());
    let s = cluster_with(dir.path(), [auth(0), auth(1), auth(2)]).await;
    acquire_eventually(&s[0].cp, "db", "node-a").await;
    let client_keys = SharedKeyring::new(ring(&old));
    let client = ControlAuth::Sealed(client_keys.clone());
    renewals_work(&s, &client, "before").await;
    let steps = [
        (
            "new key added",
            Keyring::new(old.clone(), vec![new.clone()]),
        ),
        (
            "new key first",
            Keyring::new(new.clone(), vec![old.clone()]),
        ),
        ("old key removed", Keyring::new(new.clone(), vec![])),
    ];
    for (step, ring) in steps {
        // One server at a time: the cluster runs with mixed keyrings.
        for (i, h) in handles.iter().enumerate() {
            h.replace(ring.clone());
            renewals_work(&s, &client, &format!("{step}, on {} of 3", i + 1)).await;
        }
        client_keys.replace(ring);
        renewals_work(&s, &client, &format!("{step}, client too")).await;
    }
    let renew = serde_json::to_vec(&LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    })
    .unwrap();
    for x in &s {
        let req = seal_request(
            &ring(&old),
            x.cp.id,
            "POST",
            "/control/write",
            unix_ms(),
            &renew,
        );
        let (status, _) = post(x.addr, "/control/write", req.body).await;
        assert_eq!(
            status, 401,
            "sealed with the removed key, server {}",
            x.cp.id
        );
    }
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_keys_the_control_plane_takes_a_strangers_grant() {
    // insecure_plaintext: today's open behaviour, which the tests above
    // show is closed with keys (the same request is refused there).
    let dir = tempfile::tempdir().unwrap();
    let plain = || ControlAuth::InsecurePlaintext;
    let s = cluster_with(dir.path(), [plain(), plain(), plain()]).await;
    acquire_eventually(&s[0].cp, "db", "node-a").await;
    let leader = until("a leader", Duration::from_secs(10), || s[0].cp.leader()).await;
    let l = &s[(leader - 1) as usize];
    let (_, first) = strangers_requests().remove(0);
    let (status, body) = post(
        l.addr,
        "/control/write",
        serde_json::to_vec(&first).unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let r: hale_control::raft::api::Answer<LeaseResponse> = serde_json::from_slice(&body).unwrap();
    assert_eq!(r, Ok(LeaseResponse::Granted { epoch: 2 }));
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
    }
}
