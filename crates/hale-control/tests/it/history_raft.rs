//! The failover history through the replicated control plane: recorded on
//! every server, stamped with the leader's wall clock, read through any
//! server's `/control/history`, and rebuilt from a previous release's log.

use std::collections::BTreeMap;
use std::time::Duration;

use hale_control::raft::api::Refusal;
use hale_control::raft::{ControlClient, ControlPlane};
use hale_control::{
    Cause, Change, ControlAuth, LeaseRequest, LeaseResponse, LeaseTiming, Origin, ReleaseReason,
};
use hale_keyring::Keyring;

use crate::raft::{cluster_key, cluster_with, until, Server};

fn auth() -> ControlAuth {
    ControlAuth::sealed(Keyring::new(cluster_key(), vec![]))
}

/// A client that asks server `x` only.
fn client_of(x: &Server) -> ControlClient {
    ControlClient::new(&BTreeMap::from([(x.cp.id, x.addr)]), auth())
}

/// What `client` reads of `role`'s history once it holds `n` changes.
async fn history_of(client: &ControlClient, role: &str, n: usize) -> Vec<Change> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(Some(h)) = client.history(role, None).await {
            if h.len() >= n {
                return h;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the history of {role} never held {n} changes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls `f` until the control plane answers (any answer).
async fn until_answered<F: std::future::Future<Output = Result<LeaseResponse, Refusal>>>(
    mut f: impl FnMut() -> F,
) -> LeaseResponse {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(r) = f().await {
            return r;
        }
        assert!(tokio::time::Instant::now() < deadline, "no answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asks `cp` for `role` for `holder` with acquisition attempt `attempt`
/// until it is granted: an answer lost on a loaded host is granted again
/// (the same attempt), never twice.
async fn acquire(cp: &ControlPlane, role: &str, holder: &str, attempt: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(LeaseResponse::Granted { epoch }) = cp.acquire(role, holder, 0, attempt).await {
            return epoch;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{holder} never granted {role}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_shows_an_expired_holders_successor_and_a_release_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let s = cluster_with(dir.path(), [auth(), auth(), auth()]).await;
    let started = hale_seal::unix_ms();
    assert_eq!(acquire(&s[0].cp, "db", "node-a", 1).await, 1);
    // node-a renews a few times (a renewal lost on a loaded host only
    // ends its lease sooner), then goes silent (its host died).
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "node-a".into(),
        epoch: 1,
        mark: None,
    };
    for _ in 0..3 {
        tokio::time::sleep(LeaseTiming::default().renew_every).await;
        let _ = s[1].cp.write(renew.clone()).await;
    }
    // A lease later, node-b gets it.
    assert_eq!(acquire(&s[1].cp, "db", "node-b", 1).await, 2);
    // node-b's service fails its checks: it releases, saying so (asked
    // again if its answer is lost: then refused, applied once).
    let release = LeaseRequest::Release {
        role: "db".into(),
        holder: "node-b".into(),
        epoch: 2,
        next: None,
        reason: Some(ReleaseReason::ServiceFailing),
        origin: Origin::default(),
    };
    let c = client_of(&s[2]);
    until_answered(|| c.write(&release, Duration::from_secs(3))).await;
    assert_eq!(acquire(&s[2].cp, "db", "node-c", 1).await, 3);
    let ended = hale_seal::unix_ms();
    let expected = [
        (1, Some("node-a"), Cause::FirstGrant),
        (
            2,
            Some("node-b"),
            Cause::LeaseExpired {
                previous: "node-a".into(),
            },
        ),
        (
            2,
            None,
            Cause::Released {
                previous: "node-b".into(),
                reason: Some(ReleaseReason::ServiceFailing),
                next: None,
            },
        ),
        (
            3,
            Some("node-c"),
            Cause::AfterRelease {
                previous: Some("node-b".into()),
                named: None,
            },
        ),
    ];
    for x in &s {
        let h = history_of(&client_of(x), "db", expected.len()).await;
        let got: Vec<_> = h
            .iter()
            .map(|c| (c.epoch, c.holder.as_deref(), c.cause.clone()))
            .collect();
        assert_eq!(got, expected, "as server {} has it", x.cp.id);
        assert_eq!(h.iter().map(|c| c.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
        // Each stamped by the leader's wall clock as it proposed it.
        let times: Vec<u64> = h.iter().map(|c| c.at_unix_ms.unwrap()).collect();
        assert!(
            times.windows(2).all(|w| w[0] <= w[1]) && times[0] >= started && times[3] <= ended,
            "{times:?} not within {started}..={ended}"
        );
    }
    // The last two only, and a role the table does not have.
    let c = client_of(&s[0]);
    let last = c.history("db", Some(2)).await.unwrap().unwrap();
    assert_eq!(last.iter().map(|c| c.seq).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(c.history("nope", None).await, Ok(None));
    for x in s {
        x.cp.shutdown().await;
        x.task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_previous_releases_log_replays_into_a_history_with_its_causes_and_no_times() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("control");
    crate::versions::previous_release_store(&store);
    let cp = ControlPlane::start(1, &store, LeaseTiming::default(), auth())
        .await
        .unwrap();
    // Its grant of db to node-a (attempt 7) and its pause of web.
    let both = until("the old log is applied", Duration::from_secs(10), || {
        let db = cp.history("db", 100).filter(|h| !h.is_empty())?;
        Some((db, cp.history("web", 100)?))
    })
    .await;
    assert_eq!(
        both,
        (
            vec![Change {
                seq: 1,
                epoch: 1,
                holder: Some("node-a".into()),
                at_unix_ms: None,
                cause: Cause::FirstGrant,
            }],
            vec![Change {
                seq: 1,
                epoch: 0,
                holder: None,
                at_unix_ms: None,
                cause: Cause::Paused { by: None },
            }]
        )
    );
    cp.shutdown().await;
}
