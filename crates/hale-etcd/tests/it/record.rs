//! The role's record on etcd, changed by the lease table's own rules: the
//! failover history with its causes, pauses, renewals' marks only while
//! held, the whole table read back from its parts.

use std::time::{Duration, Instant};

use hale_control::{Cause, LeaseRequest, LeaseResponse, Origin, ReleaseReason};
use hale_etcd::{GrantError, Holding, UpdateError};

use crate::cluster::{skip_reason, Etcd};

const LEASE: Duration = Duration::from_secs(2);

fn causes(table: &hale_control::LeaseTable, role: &str) -> Vec<String> {
    table
        .history(role)
        .iter()
        .map(|c| format!("{:?}", c.cause))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_records_a_first_grant_a_release_and_a_grant_after_a_lease_ran_out() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/history", LEASE).await;
    let b = etcd.store("/hale/history", LEASE).await;
    assert_eq!(a.grant("db", "a", 7).await, Ok(1));
    a.release("db", "a", 1, Some("b"), Some(ReleaseReason::Handover))
        .await
        .unwrap();
    assert_eq!(b.grant("db", "b", 0).await, Ok(2));
    // b goes silent: its etcd lease runs out, the record still names it.
    let deadline = Instant::now() + Duration::from_secs(15);
    while a.holding("db").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "b's holding never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(a.grant("db", "a", 0).await, Ok(3));
    let (table, _) = a.record("db").await.unwrap();
    let got = causes(&table, "db");
    assert_eq!(got.len(), 4, "{got:?}");
    let h = table.history("db");
    assert!(matches!(h[0].cause, Cause::FirstGrant), "{got:?}");
    let handed = matches!(&h[1].cause,
        Cause::Released { reason: Some(ReleaseReason::Handover), next: Some(n), .. } if n == "b");
    assert!(handed, "{got:?}");
    assert!(matches!(h[2].cause, Cause::AfterRelease { .. }), "{got:?}");
    let expired = matches!(&h[3].cause, Cause::LeaseExpired { previous } if previous == "b");
    assert!(expired, "{got:?}");
    assert_eq!(table.role("db").map(|r| r.epoch), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_role_is_granted_to_nobody_until_it_is_resumed() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/pause", LEASE).await;
    let pause = |paused: bool| LeaseRequest::Pause {
        role: "db".into(),
        paused,
        force: false,
        origin: Origin::default(),
    };
    a.update("db", &pause(true), None, false).await.unwrap();
    assert_eq!(a.grant("db", "a", 0).await, Err(GrantError::Paused));
    a.update("db", &pause(false), None, false).await.unwrap();
    assert_eq!(a.grant("db", "a", 0).await, Ok(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_changes_the_record_only_while_its_holding_lasts() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/renewal", LEASE).await;
    assert_eq!(a.grant("db", "a", 0).await, Ok(1));
    let renew = |epoch: u64| LeaseRequest::Renew {
        role: "db".into(),
        holder: "a".into(),
        epoch,
        mark: None,
    };
    let held = Holding {
        holder: "a".into(),
        epoch: 1,
    };
    let answer = a.update("db", &renew(1), Some(&held), false).await.unwrap();
    assert!(
        matches!(answer, LeaseResponse::Renewed { epoch: 1, .. }),
        "{answer:?}"
    );
    // Another epoch is refused by the table's rule, nothing written.
    let (_, rev) = a.record("db").await.unwrap();
    let answer = a.update("db", &renew(2), Some(&held), false).await.unwrap();
    assert!(matches!(answer, LeaseResponse::Rejected(_)), "{answer:?}");
    assert_eq!(a.record("db").await.unwrap().1, rev, "nothing written");
    // Silent past its lease, a's holding is gone though the record still
    // names a as its last holder: a renewal needs the holding itself.
    let deadline = Instant::now() + Duration::from_secs(15);
    while a.holding("db").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "a's holding never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        a.update("db", &renew(1), Some(&held), false).await,
        Err(UpdateError::NotHeld)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_read_back_holds_every_roles_record() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/table", LEASE).await;
    for role in ["db", "web", "cache"] {
        assert_eq!(a.grant(role, "a", 0).await, Ok(1));
    }
    a.release("web", "a", 1, None, None).await.unwrap();
    assert_eq!(a.grant("web", "a", 0).await, Ok(2));
    let table = a.table().await.unwrap();
    let roles: Vec<(String, u64)> = table.roles().map(|(r, l)| (r.clone(), l.epoch)).collect();
    assert_eq!(
        roles,
        vec![("cache".into(), 1), ("db".into(), 1), ("web".into(), 2)]
    );
    assert_eq!(table.history("web").len(), 3, "{:?}", causes(&table, "web"));
}
