//! Releases side by side (a rolling upgrade): a request that says no
//! version (the previous release's) is answered in the previous release's
//! form; a newer client's request this server cannot decode is refused as
//! too new, typed, not as a decode failure; the previous release's own
//! decode failure reads as the same refusal; and a cluster mixing servers
//! that speak 1 and 2 grants roles, while its leader writes nothing that
//! the oldest server could not apply.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::{Json, Router};
use hale_control::protocol::{self, HEADER, PROTOCOL};
use hale_control::raft::api::{Answer, Refusal};
use hale_control::raft::{ControlClient, ControlError, ControlPlane, ControlStatus, ServerChange};
use hale_control::{ControlAuth, LeaseRequest, LeaseResponse, LeaseTiming, Origin};
use hale_keyring::{Keyring, SharedKeyring};
use hale_seal::{exchange, CallError, Guard, Reply, Target};
use openraft::error::RaftError;
use openraft::raft::{VoteRequest, VoteResponse};
use openraft::{LogId, Vote};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::time::Instant;

use crate::raft::{acquire_eventually, cluster_key, until, Server};

fn auth() -> ControlAuth {
    ControlAuth::sealed(Keyring::new(cluster_key(), vec![]))
}

/// Server `id` speaking protocol `speaks`, its store under `dir`.
async fn serve_speaking(id: u64, dir: &std::path::Path, speaks: u16) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let store = dir.join(format!("s{id}"));
    let cp = ControlPlane::start_speaking(id, &store, LeaseTiming::default(), auth(), speaks)
        .await
        .unwrap();
    let app = cp.routes();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Server { cp, addr, task }
}

/// One server (id 1, speaking this build's protocol) leading itself.
async fn lone_leader(dir: &std::path::Path) -> Server {
    let s = serve_speaking(1, dir, PROTOCOL).await;
    s.cp.bootstrap(BTreeMap::from([(1, s.addr)])).await.unwrap();
    until("it leads", Duration::from_secs(10), || {
        (s.cp.leader() == Some(1)).then_some(())
    })
    .await;
    s
}

/// What a sealed `POST path` of raw `body` to server 1 at `addr` gets,
/// saying `version` in the header (none: as the previous release).
async fn exchange_raw(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    version: Option<&str>,
) -> Result<Reply, CallError> {
    let mut headers = HeaderMap::new();
    if let Some(v) = version {
        headers.insert(HEADER, HeaderValue::from_str(v).unwrap());
    }
    let to = Target {
        target: 1,
        addr: &addr.to_string(),
        path,
    };
    let json = serde_json::to_vec(body).unwrap();
    let t = Duration::from_secs(5);
    exchange(&reqwest::Client::new(), &auth(), to, &json, &headers, t).await
}

/// [`exchange_raw`]'s reply.
async fn raw(addr: SocketAddr, path: &str, body: &Value, version: Option<&str>) -> Reply {
    exchange_raw(addr, path, body, version).await.unwrap()
}

/// [`exchange_raw`]'s refusal.
async fn raw_refused(
    addr: SocketAddr,
    path: &str,
    body: &Value,
    version: Option<&str>,
) -> CallError {
    exchange_raw(addr, path, body, version).await.unwrap_err()
}

fn body(r: &Reply) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

fn pause() -> Value {
    serde_json::to_value(LeaseRequest::Pause {
        role: "db".into(),
        paused: true,
        force: false,
        origin: Origin::default(),
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_version_is_answered_in_the_previous_releases_form() {
    let dir = tempfile::tempdir().unwrap();
    let s = lone_leader(dir.path()).await;
    // As the previous release's client asks: no header; bare answers.
    let r = raw(s.addr, "/control/write", &pause(), None).await;
    assert!(r.headers.get(HEADER).is_none(), "{:?}", r.headers);
    assert_eq!(body(&r), json!({"Ok": {"Paused": true}}));
    let r = raw(s.addr, "/control/leader", &Value::Null, None).await;
    assert_eq!(body(&r), json!(1));
    // Its Raft RPCs too: a vote request, answered as openraft's bare result.
    let vote = VoteRequest::new(Vote::new(0, 9), Some(LogId::default()));
    let r = raw(
        s.addr,
        "/raft/vote",
        &serde_json::to_value(vote).unwrap(),
        None,
    )
    .await;
    let answer: Result<VoteResponse<u64>, RaftError<u64>> =
        serde_json::from_slice(&r.body).unwrap();
    assert!(!answer.unwrap().vote_granted, "an old term gets no vote");
    // Asked in this build's protocol: the same answers, wrapped with the
    // server's version inside the sealed body, and the header says so.
    let ours = PROTOCOL.to_string();
    let r = raw(s.addr, "/control/write", &pause(), Some(&ours)).await;
    assert_eq!(r.headers.get(HEADER).unwrap(), ours.as_str());
    assert_eq!(
        body(&r),
        json!({"protocol": PROTOCOL, "answer": {"Ok": {"Paused": true}}})
    );
    let r = raw(s.addr, "/control/leader", &Value::Null, Some(&ours)).await;
    assert_eq!(body(&r), json!({"protocol": PROTOCOL, "answer": 1}));
    s.cp.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_clients_request_this_server_cannot_decode_is_refused_as_too_new() {
    let dir = tempfile::tempdir().unwrap();
    let s = lone_leader(dir.path()).await;
    // A request kind of a future protocol, from a client that speaks it.
    let future = json!({"Fence": {"role": "db", "epoch": 4}});
    let (ours, newer) = (PROTOCOL.to_string(), (PROTOCOL + 1).to_string());
    let r = raw(s.addr, "/control/write", &future, Some(&newer)).await;
    assert_eq!(r.headers.get(HEADER).unwrap(), ours.as_str());
    let refused: protocol::Envelope<Answer<LeaseResponse>> =
        serde_json::from_slice(&r.body).unwrap();
    assert_eq!(refused.protocol, PROTOCOL);
    let refusal = refused.answer.unwrap_err();
    assert_eq!(
        refusal,
        Refusal::TooNew {
            needs: PROTOCOL + 1,
            speaks: PROTOCOL
        }
    );
    let words = refusal.to_string();
    assert!(
        words.contains(&format!("protocol {newer}"))
            && words.contains(&format!("up to {ours}"))
            && words.contains("retry"),
        "{words}"
    );
    // The same client's ordinary request is served, in this server's form.
    let r = raw(s.addr, "/control/write", &pause(), Some(&newer)).await;
    assert_eq!(
        body(&r),
        json!({"protocol": PROTOCOL, "answer": {"Ok": {"Paused": true}}})
    );
    // A Raft RPC it cannot decode: 422 naming both versions (openraft's
    // answers have no place for a refusal).
    let e = raw_refused(
        s.addr,
        "/raft/append",
        &json!({"entries": "?"}),
        Some(&newer),
    )
    .await;
    match e {
        CallError::Refused { status, message } => {
            assert_eq!(status, 422);
            assert!(
                message.contains(&format!("up to {ours}"))
                    && message.contains(&format!("speaking {newer}")),
                "{message}"
            );
        }
        e => panic!("{e:?}"),
    }
    // Without a newer version, an undecodable request is what it was: a
    // malformed body (422), not a version skew.
    let e = raw_refused(s.addr, "/control/write", &future, None).await;
    assert!(matches!(e, CallError::Refused { status: 422, .. }), "{e:?}");
    // Nothing was written by any of them but the two pauses.
    assert!(s.cp.table().role("db").unwrap().paused);
    s.cp.shutdown().await;
}

/// The previous release's lease request, without a kind this build added
/// since (here `Switchover`, to stand for a kind newer than it): what its
/// `/control/write` decodes.
#[derive(serde::Deserialize)]
#[allow(dead_code)] // Decoded, never read: only whether it decodes matters.
enum PreviousRequest {
    Pause { role: String, paused: bool },
}

/// A server as the previous release's routes are built: the sealed guard,
/// no version layer, and axum's JSON extractor (a body it cannot decode
/// gets axum's own 422, sealed by the guard).
async fn previous_release_server() -> SocketAddr {
    async fn write(Json(_): Json<PreviousRequest>) -> Json<Answer<LeaseResponse>> {
        Json(Ok(LeaseResponse::Paused(true)))
    }
    let guard = Arc::new(Guard::new(
        1,
        SharedKeyring::new(Keyring::new(cluster_key(), vec![])),
    ));
    let app = Router::new().route("/control/write", post(write)).layer(
        axum::middleware::from_fn_with_state(guard, hale_seal::authenticate),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_an_older_servers_decode_failure_as_the_typed_too_new_refusal() {
    let addr = previous_release_server().await;
    let newer = serde_json::to_value(LeaseRequest::Switchover {
        role: "db".into(),
        epoch: 1,
        to: Some("b".into()),
        at_unix_ms: 0,
        origin: Origin::default(),
    })
    .unwrap();
    // What the previous release really answers: 422, axum's words, sealed.
    match raw_refused(addr, "/control/write", &newer, Some("2")).await {
        CallError::Refused { status, message } => {
            assert_eq!(status, 422);
            assert!(
                message.contains("unknown variant `Switchover`"),
                "{message}"
            );
        }
        e => panic!("{e:?}"),
    }
    let client = ControlClient::new(&BTreeMap::from([(1, addr)]), auth());
    let t = Duration::from_secs(5);
    // What it knows is answered (in its form: version 1)...
    let paused = LeaseRequest::Pause {
        role: "db".into(),
        paused: true,
        force: false,
        origin: Origin::default(),
    };
    assert_eq!(
        client.write(&paused, t).await,
        Ok(LeaseResponse::Paused(true))
    );
    assert_eq!(client.spoken(), BTreeMap::from([(1, 1)]));
    // ...and what it does not is the typed, retryable refusal naming both
    // versions, not a decode failure or "no answer".
    let switchover: LeaseRequest = serde_json::from_value(newer).unwrap();
    assert_eq!(
        client.write(&switchover, t).await,
        Err(Refusal::TooNew {
            needs: PROTOCOL,
            speaks: 1
        })
    );
}

#[test]
fn a_status_from_a_server_of_the_previous_release_reads_as_protocol_1() {
    let old = json!({"id": 1, "state": "leader", "leader": 1, "term": 2,
        "last_log_index": 5, "applied_index": 5, "snapshot_index": null,
        "voters": [1, 2, 3], "storage_error": null});
    let s: ControlStatus = serde_json::from_value(old).unwrap();
    assert_eq!((s.protocol, s.common_protocol), (1, None));
}

/// The leader among `s`, once one is known to all and it is one of them.
async fn leader_of(s: &[Server]) -> &Server {
    let id = until("a leader", Duration::from_secs(15), || {
        let l = s[0].cp.leader()?;
        s.iter().all(|x| x.cp.leader() == Some(l)).then_some(l)
    })
    .await;
    s.iter().find(|x| x.cp.id == id).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_mixing_releases_grants_roles_and_its_leader_gates_entries_on_the_oldest_server()
{
    let dir = tempfile::tempdir().unwrap();
    // Servers 1 and 2 speak this build's protocol; 3 speaks only the
    // previous release's on the wire.
    let mut s = Vec::new();
    for (id, speaks) in [(1, PROTOCOL), (2, PROTOCOL), (3, 1)] {
        s.push(serve_speaking(id, dir.path(), speaks).await);
    }
    let members: BTreeMap<u64, SocketAddr> = s.iter().map(|x| (x.cp.id, x.addr)).collect();
    s[0].cp.bootstrap(members.clone()).await.unwrap();
    // Granted through each of them, whoever leads.
    acquire_eventually(&s[2].cp, "db", "node-a").await;
    acquire_eventually(&s[0].cp, "web", "node-b").await;
    for x in &s {
        until(
            "every server applied both grants",
            Duration::from_secs(10),
            || {
                let t = x.cp.table();
                (t.role("db").is_some() && t.role("web").is_some()).then_some(())
            },
        )
        .await;
    }
    // Clients of either release, through any server.
    let t = Duration::from_secs(5);
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    };
    for speaks in [1, PROTOCOL] {
        for x in &s {
            let c =
                ControlClient::new(&BTreeMap::from([(x.cp.id, x.addr)]), auth()).speaking(speaks);
            let r = c.write(&renew, t).await;
            assert!(
                matches!(r, Ok(LeaseResponse::Renewed { epoch: 1, .. })),
                "client speaking {speaks} through server {}: {r:?}",
                x.cp.id
            );
            let heard = c.spoken()[&x.cp.id];
            assert_eq!(heard, speaks.min(if x.cp.id == 3 { 1 } else { PROTOCOL }));
        }
    }
    // The leader will not write an entry that needs protocol 2 while
    // server 3 is a voter: it cannot be sure server 3 would apply it.
    let leader = leader_of(&s).await;
    assert_eq!(leader.cp.common_protocol(), 1);
    assert_eq!(
        leader.cp.admits(2).unwrap_err().to_string(),
        ControlError::TooNew {
            needs: 2,
            speaks: 1
        }
        .to_string()
    );
    assert!(leader.cp.admits(1).is_ok());
    let status = leader.cp.status();
    assert_eq!(status.common_protocol, Some(1), "{status:?}");
    assert_eq!(
        status.protocol,
        if leader.cp.id == 3 { 1 } else { PROTOCOL }
    );
    // Server 3 leaves (upgraded elsewhere, say): once a leader has heard
    // every remaining server answer in protocol 2, it admits such entries.
    let client = ControlClient::new(&members, auth());
    let deadline = Instant::now() + Duration::from_secs(20);
    while client
        .change_servers(ServerChange::Remove(3))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "server 3 was never removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rest = &s[..2];
    let leader = until(
        "a leader of 1 and 2 admits protocol 2",
        Duration::from_secs(20),
        || {
            rest.iter()
                .find(|x| x.cp.leader() == Some(x.cp.id) && x.cp.admits(2).is_ok())
                .map(|x| x.cp.id)
        },
    )
    .await;
    let leader = &s[(leader - 1) as usize];
    assert_eq!(leader.cp.spoken().get(&(3 - leader.cp.id)), Some(&PROTOCOL));
    assert_eq!(leader.cp.status().common_protocol, Some(PROTOCOL));
    for x in &s {
        x.cp.shutdown().await;
    }
}

/// The previous release's store (`tests/fixtures/previous-release`),
/// unpacked as `control.redb` into `dir`.
pub(crate) fn previous_release_store(dir: &std::path::Path) {
    use std::io::Read;
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/previous-release/control.redb.gz"
    );
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(fixture).unwrap())
        .read_to_end(&mut raw)
        .unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("control.redb"), raw).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_written_by_the_previous_release_starts_migrated_with_its_lease_table() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("control");
    previous_release_store(&store);
    let cp = ControlPlane::start(1, &store, LeaseTiming::default(), auth())
        .await
        .unwrap();
    // It was server 1 alone: it leads again, with the roles it had.
    until("the old log is applied", Duration::from_secs(10), || {
        let t = cp.table();
        let db = t.role("db")?;
        let done = cp.leader() == Some(1) && t.role("web").is_some_and(|w| w.paused);
        (done && db.holder.as_deref() == Some("node-a")).then_some(())
    })
    .await;
    let db = cp.table().role("db").cloned().unwrap();
    assert_eq!((db.epoch, db.attempt), (1, 7));
    // And it takes new writes on top of them.
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    };
    assert!(matches!(
        cp.write(renew).await,
        Ok(LeaseResponse::Renewed { epoch: 1, .. })
    ));
    cp.shutdown().await;
    drop(cp);
    // Migrated on the first start: the file now records format 2.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match hale_control::raft::format::open_store(&store) {
            Ok((_, migrated)) => {
                assert_eq!(migrated, None, "already in format 2");
                break;
            }
            Err(hale_control::raft::format::StoreError::InUse(_)) => {
                assert!(Instant::now() < deadline, "the store stays in use");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test]
async fn a_store_of_a_future_format_keeps_the_server_from_starting_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("control");
    previous_release_store(&store);
    {
        let db = redb::Database::create(store.join("control.redb")).unwrap();
        let tx = db.begin_write().unwrap();
        let meta: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
        tx.open_table(meta)
            .unwrap()
            .insert("format", b"3".as_slice())
            .unwrap();
        tx.commit().unwrap();
    }
    let e = ControlPlane::start(1, &store, LeaseTiming::default(), auth())
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ControlError::Store(_)), "{e:?}");
    let words = e.to_string();
    let file = store.join("control.redb").display().to_string();
    assert!(words.contains(&file), "{words}");
    assert!(
        words.contains("format 3") && words.contains("up to 2"),
        "{words}"
    );
}
