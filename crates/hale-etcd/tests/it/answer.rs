//! The agent's own requests answered on etcd in the embedded control
//! plane's vocabulary: who gets a free role, a lost answer, renewals with a
//! mark, a lagging copy, a release.

use std::time::Duration;

use hale_control::lease::AcquireRequest;
use hale_control::raft::api::{BatchItem, Refusal};
use hale_control::replication::Mark;
use hale_control::{LeaseRejection, LeaseRequest, LeaseResponse, Standing};

use crate::cluster::{skip_reason, Etcd};

const LEASE: Duration = Duration::from_secs(2);

fn acquire(name: &str, priority: i64, attempt: u64, standing: Option<Standing>) -> BatchItem {
    BatchItem::Acquire(AcquireRequest {
        role: "db".into(),
        holder: name.into(),
        priority,
        attempt,
        standing,
    })
}

fn renew(name: &str, epoch: u64, mark: Option<Mark>) -> BatchItem {
    BatchItem::Write(LeaseRequest::Renew {
        role: "db".into(),
        holder: name.into(),
        epoch,
        mark,
    })
}

fn release(name: &str, epoch: u64) -> BatchItem {
    BatchItem::Write(LeaseRequest::Release {
        role: "db".into(),
        holder: name.into(),
        epoch,
        next: None,
        reason: None,
        origin: Default::default(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_role_goes_to_the_best_candidate_published_and_the_others_are_told_not_yet() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let c = etcd.store("/hale/arbiter", LEASE).await;
    let a = etcd.store("/hale/arbiter", LEASE).await;
    let b = etcd.store("/hale/arbiter", LEASE).await;
    assert_eq!(
        c.answer(&acquire("c", 1, 1, None)).await,
        Ok(LeaseResponse::Granted { epoch: 1 })
    );
    // While c holds it, a and b ask (and so publish their candidacies).
    for (s, name, prio) in [(&a, "a", 10), (&b, "b", 100)] {
        let got = s.answer(&acquire(name, prio, 1, None)).await;
        assert!(matches!(got, Err(Refusal::NotYet(_))), "{got:?}");
    }
    assert_eq!(
        c.answer(&release("c", 1)).await,
        Ok(LeaseResponse::Released)
    );
    let got = a.answer(&acquire("a", 10, 1, None)).await;
    assert!(
        matches!(&got, Err(Refusal::NotYet(why)) if why.contains("b is a better candidate")),
        "{got:?}"
    );
    assert_eq!(
        b.answer(&acquire("b", 100, 1, None)).await,
        Ok(LeaseResponse::Granted { epoch: 2 })
    );
    // b's answer lost: the same attempt gets the same grant again.
    assert_eq!(
        b.answer(&acquire("b", 100, 1, None)).await,
        Ok(LeaseResponse::Granted { epoch: 2 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_the_holders_mark_and_a_copy_too_far_behind_it_is_refused() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/mark", LEASE).await;
    let b = etcd.store("/hale/mark", LEASE).await;
    assert_eq!(
        a.answer(&acquire("a", 1, 1, None)).await,
        Ok(LeaseResponse::Granted { epoch: 1 })
    );
    let mark = Mark {
        position: 10_000_000,
        synchronous: vec![],
        strict: false,
    };
    let got = a.answer(&renew("a", 1, Some(mark.clone()))).await;
    assert!(
        matches!(got, Ok(LeaseResponse::Renewed { epoch: 1, .. })),
        "{got:?}"
    );
    let batch = BatchItem::Write(LeaseRequest::Renewals {
        holder: "a".into(),
        leases: vec![("db".into(), 1)],
        marks: vec![],
    });
    let got = a.answer(&batch).await;
    assert!(
        matches!(&got, Ok(LeaseResponse::Batch(v)) if matches!(v[..], [LeaseResponse::Renewed { epoch: 1, .. }])),
        "{got:?}"
    );
    assert_eq!(
        a.record("db").await.unwrap().0.role("db").unwrap().mark,
        Some(mark),
        "the mark kept"
    );
    assert_eq!(
        a.answer(&release("a", 1)).await,
        Ok(LeaseResponse::Released)
    );
    // A renewal after the release is the table's stale renewal.
    assert_eq!(
        a.answer(&renew("a", 1, None)).await,
        Ok(LeaseResponse::Rejected(LeaseRejection::NotHolder {
            holder: "a".into(),
            epoch: 1
        }))
    );
    // b's copy lags the mark by 9 MB, more than it may: never granted.
    // (a asked last a moment ago: b's priority is higher.)
    let behind = Standing {
        position: 1_000_000,
        max_lag: 1 << 20,
    };
    let got = b.answer(&acquire("b", 2, 1, Some(behind))).await;
    assert!(matches!(got, Err(Refusal::Lagging { .. })), "{got:?}");
    let level = Standing {
        position: 10_000_000,
        max_lag: 1 << 20,
    };
    assert_eq!(
        b.answer(&acquire("b", 2, 2, Some(level))).await,
        Ok(LeaseResponse::Granted { epoch: 2 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_better_candidate_that_stops_asking_is_passed_over_a_lease_later() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let c = etcd.store("/hale/stale", LEASE).await;
    let a = etcd.store("/hale/stale", LEASE).await;
    let b = etcd.store("/hale/stale", LEASE).await;
    assert!(c.answer(&acquire("c", 1, 1, None)).await.is_ok());
    // a (priority 100) asks once, then fails its checks and asks no more.
    assert!(a.answer(&acquire("a", 100, 1, None)).await.is_err());
    c.answer(&release("c", 1)).await.unwrap();
    let got = b.answer(&acquire("b", 1, 1, None)).await;
    assert!(
        matches!(&got, Err(Refusal::NotYet(why)) if why.contains("a is a better candidate")),
        "{got:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match b.answer(&acquire("b", 1, 1, None)).await {
            Ok(LeaseResponse::Granted { epoch }) => {
                assert_eq!(epoch, 2);
                break;
            }
            other => assert!(
                std::time::Instant::now() < deadline,
                "a's candidacy never lapsed: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_renews_every_holding_with_one_keep_alive_and_after_a_lapse_renews_none() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/batch", LEASE).await;
    for role in ["db", "web"] {
        let got = a
            .answer(&BatchItem::Acquire(AcquireRequest {
                role: role.into(),
                holder: "a".into(),
                priority: 1,
                attempt: 1,
                standing: None,
            }))
            .await;
        assert_eq!(got, Ok(LeaseResponse::Granted { epoch: 1 }));
    }
    let renew = |role: &str| {
        BatchItem::Write(LeaseRequest::Renew {
            role: role.into(),
            holder: "a".into(),
            epoch: 1,
            mark: None,
        })
    };
    let batch = [renew("db"), renew("web")];
    for got in a.answer_all(&batch).await {
        assert!(
            matches!(got, Ok(LeaseResponse::Renewed { epoch: 1, .. })),
            "{got:?}"
        );
    }
    // Silent past its lease: the holdings are gone, and the batch's
    // renewals are refused, every one.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while a.holding("db").await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "never lapsed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for got in a.answer_all(&batch).await {
        assert!(
            matches!(
                got,
                Err(Refusal::NotYet(_)) | Ok(LeaseResponse::Rejected(_))
            ),
            "{got:?}"
        );
    }
}
