//! Replicated roles: the holder's mark in the table, and the grantor's
//! choice among candidates by how far their copies lag it.

use hale_control::raft::AcquireRequest;
use hale_control::{
    AppendClock, GrantDelay, Grantor, LeaseRequest, LeaseResponse, LeaseTable, LeaseTiming, Mark,
    Origin, Standing,
};
use hale_core::Time;

const MAX_LAG: u64 = 1 << 20;

fn mark(position: u64, sync: &[&str]) -> Mark {
    Mark {
        position,
        synchronous: sync.iter().map(|s| s.to_string()).collect(),
        strict: false,
    }
}

fn strict(position: u64, sync: &[&str]) -> Mark {
    Mark {
        strict: true,
        ..mark(position, sync)
    }
}

fn renew(holder: &str, epoch: u64, mark: Option<Mark>) -> LeaseRequest {
    LeaseRequest::Renew {
        role: "db".into(),
        holder: holder.into(),
        epoch,
        mark,
    }
}

fn ask(holder: &str, priority: i64, position: Option<u64>) -> AcquireRequest {
    AcquireRequest {
        role: "db".into(),
        holder: holder.into(),
        priority,
        attempt: 1,
        standing: position.map(|position| Standing {
            position,
            max_lag: MAX_LAG,
        }),
    }
}

/// `a` held `db` at epoch 1 and last renewed at 10 s with `last`; returns
/// the table, its append clock and the first instant the role may move.
pub(crate) fn held_by_a(last: Option<Mark>) -> (LeaseTable, AppendClock, Time) {
    let mut t = LeaseTable::default();
    let mut clock = AppendClock::new(Time::ZERO);
    let grant = LeaseRequest::Grant {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        attempt: 1,
        origin: Origin::default(),
    };
    t.apply(&grant);
    clock.appended(&grant, Time::from_millis(9_000));
    let r = renew("a", 1, last);
    assert_eq!(
        t.apply(&r),
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        }
    );
    clock.appended(&r, Time::from_millis(10_000));
    let free = Time::from_millis(10_000) + LeaseTiming::default().lease;
    (t, clock, free)
}

/// Every candidate in `asks` asks at `free` and again one settling period
/// later, the second time in reverse order (so that the ones listed later
/// hear the grantor's choice before it grants the role and forgets the
/// contest); returns each one's answer to its second ask, in `asks`' order.
fn contend(
    t: &LeaseTable,
    clock: &AppendClock,
    free: Time,
    asks: &[AcquireRequest],
) -> Vec<Result<LeaseRequest, GrantDelay>> {
    let mut g = Grantor::new(LeaseTiming::default());
    for a in asks {
        let _ = g.contend(t, clock, a, free);
    }
    let later = free + LeaseTiming::default().renew_every * 2;
    let mut answers: Vec<_> = asks
        .iter()
        .rev()
        .map(|a| g.contend(t, clock, a, later))
        .collect();
    answers.reverse();
    answers
}

#[test]
fn a_holders_mark_is_kept_by_its_renewals_and_survives_its_release_but_a_refused_renewal_keeps_none(
) {
    let (mut t, _, _) = held_by_a(Some(mark(1000, &["b"])));
    assert_eq!(t.role("db").unwrap().mark, Some(mark(1000, &["b"])));
    assert!(matches!(
        t.apply(&renew("b", 1, Some(mark(5, &[])))),
        LeaseResponse::Rejected(_)
    ));
    assert_eq!(t.role("db").unwrap().mark, Some(mark(1000, &["b"])));
    let many = LeaseRequest::Renewals {
        holder: "a".into(),
        leases: vec![("db".into(), 1), ("other".into(), 1)],
        marks: vec![
            ("db".into(), mark(2000, &[])),
            ("other".into(), mark(9, &[])),
        ],
    };
    assert!(matches!(t.apply(&many), LeaseResponse::Batch(_)));
    assert_eq!(t.role("db").unwrap().mark, Some(mark(2000, &[])));
    assert!(
        t.role("other").is_none(),
        "a refused renewal creates nothing"
    );
    t.apply(&LeaseRequest::Release {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        next: None,
        reason: None,
        origin: Origin::default(),
    });
    assert_eq!(t.role("db").unwrap().mark, Some(mark(2000, &[])));
}

#[test]
fn renewals_and_asks_written_before_marks_existed_still_read() {
    let old: LeaseRequest =
        serde_json::from_str(r#"{"Renew":{"role":"db","holder":"a","epoch":3}}"#).unwrap();
    assert_eq!(old, renew("a", 3, None));
    let old: AcquireRequest =
        serde_json::from_str(r#"{"role":"db","holder":"a","priority":1,"attempt":2}"#).unwrap();
    assert_eq!(old.standing, None);
    assert_eq!(
        serde_json::to_string(&renew("a", 3, None)).unwrap(),
        r#"{"Renew":{"role":"db","holder":"a","epoch":3}}"#,
        "a role that does not replicate writes what it wrote before"
    );
}

#[test]
fn the_synchronous_standby_is_granted_the_role_over_a_higher_priority_asynchronous_one() {
    let (t, clock, free) = held_by_a(Some(mark(50 << 20, &["b"])));
    let answers = contend(
        &t,
        &clock,
        free,
        &[ask("b", 10, Some(50 << 20)), ask("c", 100, Some(50 << 20))],
    );
    assert!(
        matches!(&answers[0], Ok(LeaseRequest::Grant { holder, epoch: 2, .. }) if holder == "b")
    );
    assert_eq!(answers[1], Err(GrantDelay::BetterCandidate("b".into())));
}

#[test]
fn a_standby_lagging_past_max_lag_is_refused_with_its_lag_and_the_other_takes_the_role() {
    let (t, clock, free) = held_by_a(Some(mark(50 << 20, &[])));
    let behind = (50 << 20) - (16 << 20);
    let answers = contend(
        &t,
        &clock,
        free,
        &[ask("b", 10, Some(50 << 20)), ask("c", 100, Some(behind))],
    );
    assert!(matches!(&answers[0], Ok(LeaseRequest::Grant { holder, .. }) if holder == "b"));
    assert_eq!(
        answers[1],
        Err(GrantDelay::Lagging {
            lag: 16 << 20,
            max_lag: MAX_LAG
        })
    );
    assert!(answers[1]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("lags the last primary position by 16777216 bytes"));
}

#[test]
fn with_every_standby_lagging_nobody_is_granted_the_role() {
    let (t, clock, free) = held_by_a(Some(mark(50 << 20, &["b"])));
    let answers = contend(&t, &clock, free, &[ask("c", 100, Some(30 << 20))]);
    assert!(matches!(answers[0], Err(GrantDelay::Lagging { .. })));
    // And again much later: still nobody.
    let mut g = Grantor::new(LeaseTiming::default());
    let much_later = free + std::time::Duration::from_secs(600);
    assert!(matches!(
        g.contend(&t, &clock, &ask("c", 100, Some(30 << 20)), much_later),
        Err(GrantDelay::Lagging { .. })
    ));
}

#[test]
fn without_a_mark_or_for_a_role_that_does_not_replicate_priority_alone_decides() {
    let (t, clock, free) = held_by_a(None);
    let answers = contend(
        &t,
        &clock,
        free,
        &[ask("b", 10, Some(0)), ask("c", 100, Some(0))],
    );
    assert!(matches!(&answers[1], Ok(LeaseRequest::Grant { holder, .. }) if holder == "c"));
    let (t, clock, free) = held_by_a(Some(mark(50 << 20, &["b"])));
    let answers = contend(&t, &clock, free, &[ask("b", 10, None), ask("c", 100, None)]);
    assert!(matches!(&answers[1], Ok(LeaseRequest::Grant { holder, .. }) if holder == "c"));
}

#[test]
fn among_quorum_standbys_the_furthest_copy_is_granted_the_role_over_a_higher_priority_one() {
    // ANY 1 (b, c): a commit acknowledged by c alone is only on c.
    let (t, clock, free) = held_by_a(Some(mark(50 << 20, &["b", "c"])));
    let answers = contend(
        &t,
        &clock,
        free,
        &[
            ask("c", 10, Some(50 << 20)),
            ask("b", 100, Some((50 << 20) - 10)),
        ],
    );
    assert!(matches!(&answers[0], Ok(LeaseRequest::Grant { holder, .. }) if holder == "c"));
    assert_eq!(answers[1], Err(GrantDelay::BetterCandidate("c".into())));
}

#[test]
fn under_strict_durability_nobody_is_granted_the_role_while_a_synchronous_standby_is_unheard() {
    let (t, clock, free) = held_by_a(Some(strict(50 << 20, &["b", "c"])));
    // c died with the primary: b, level with the mark, may still lack a
    // commit c acknowledged after it. And d, asynchronous, is never proven.
    let answers = contend(
        &t,
        &clock,
        free,
        &[ask("b", 100, Some(50 << 20)), ask("d", 10, Some(60 << 20))],
    );
    assert_eq!(answers[0], Err(GrantDelay::Unproven(vec!["c".into()])));
    assert_eq!(answers[1], Err(GrantDelay::BetterCandidate("b".into())));
    assert!(answers[0]
        .as_ref()
        .unwrap_err()
        .to_string()
        .contains("strict durability"));
    // c is heard from, behind b: b is proven and granted the role.
    let answers = contend(
        &t,
        &clock,
        free,
        &[
            ask("b", 100, Some(50 << 20)),
            ask("c", 10, Some((50 << 20) - 1)),
        ],
    );
    assert!(matches!(&answers[0], Ok(LeaseRequest::Grant { holder, .. }) if holder == "b"));
}

#[test]
fn a_strict_mark_reads_back_and_a_mark_that_is_not_strict_writes_what_it_wrote_before() {
    assert_eq!(
        serde_json::to_string(&mark(5, &["b"])).unwrap(),
        r#"{"position":5,"synchronous":["b"]}"#
    );
    let json = serde_json::to_string(&strict(5, &["b"])).unwrap();
    assert_eq!(json, r#"{"position":5,"synchronous":["b"],"strict":true}"#);
    assert_eq!(
        serde_json::from_str::<Mark>(&json).unwrap(),
        strict(5, &["b"])
    );
}

#[test]
fn under_strict_durability_a_copy_reported_before_the_last_holding_ended_proves_nothing() {
    let (t, clock, free) = held_by_a(Some(strict(50 << 20, &["b", "c"])));
    let mut g = Grantor::new(LeaseTiming::default());
    // c reported while a could still commit (its copy may have grown
    // since), then its database hung: it asks no more.
    let before = Time::from_nanos(free.as_nanos() - 100_000_000);
    let _ = g.contend(&t, &clock, &ask("c", 10, Some((50 << 20) - 5)), before);
    let _ = g.contend(&t, &clock, &ask("b", 100, Some(50 << 20)), free);
    let later = free + LeaseTiming::default().renew_every * 2;
    assert_eq!(
        g.contend(&t, &clock, &ask("b", 100, Some(50 << 20)), later),
        Err(GrantDelay::Unproven(vec!["c".into()]))
    );
}

#[test]
fn under_strict_durability_copies_reported_after_a_release_prove_at_once() {
    let (mut t, mut clock, _) = held_by_a(Some(strict(50 << 20, &["b", "c"])));
    // a hands the role back (its demote has run) at 10.5 s: the holding
    // ended then, not a lease later.
    let release = LeaseRequest::Release {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        next: None,
        reason: None,
        origin: Origin::default(),
    };
    t.apply(&release);
    let at = Time::from_millis(10_500);
    clock.appended(&release, at);
    let after = Time::from_millis(10_600);
    let answers = contend(
        &t,
        &clock,
        after,
        &[
            ask("b", 100, Some(50 << 20)),
            ask("c", 10, Some((50 << 20) - 1)),
        ],
    );
    assert!(matches!(&answers[0], Ok(LeaseRequest::Grant { holder, .. }) if holder == "b"));
}
