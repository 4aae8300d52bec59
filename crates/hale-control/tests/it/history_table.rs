//! The failover history the lease table keeps per role (`lease/changes.rs`):
//! each change recorded exactly, bounded, the same on every replay, and read
//! from entries and snapshots of servers that keep none.

use std::collections::BTreeMap;

use hale_control::raft::AcquireRequest;
use hale_control::{
    AppendClock, Cause, Change, Grantor, LeaseRequest, LeaseResponse, LeaseTable, LeaseTiming,
    Origin, ReleaseReason, HISTORY_LIMIT,
};
use hale_core::Time;
use serde_json::json;

fn at(ms: u64) -> Origin {
    Origin {
        at_unix_ms: Some(ms),
        by: None,
    }
}

fn asked(by: &str, ms: u64) -> Origin {
    Origin {
        at_unix_ms: Some(ms),
        by: Some(by.into()),
    }
}

fn grant(holder: &str, epoch: u64, attempt: u64, ms: u64) -> LeaseRequest {
    LeaseRequest::Grant {
        role: "db".into(),
        holder: holder.into(),
        epoch,
        attempt,
        origin: at(ms),
    }
}

fn release(
    holder: &str,
    epoch: u64,
    next: Option<&str>,
    reason: Option<ReleaseReason>,
) -> LeaseRequest {
    LeaseRequest::Release {
        role: "db".into(),
        holder: holder.into(),
        epoch,
        next: next.map(str::to_owned),
        reason,
        origin: at(5_000),
    }
}

fn pause(paused: bool, force: bool, by: &str, ms: u64) -> LeaseRequest {
    LeaseRequest::Pause {
        role: "db".into(),
        paused,
        force,
        origin: asked(by, ms),
    }
}

fn order(epoch: u64, to: Option<&str>, due: u64, by: &str) -> LeaseRequest {
    LeaseRequest::Switchover {
        role: "db".into(),
        epoch,
        to: to.map(str::to_owned),
        at_unix_ms: due,
        origin: asked(by, 7_000),
    }
}

fn change(seq: u64, epoch: u64, holder: Option<&str>, ms: Option<u64>, cause: Cause) -> Change {
    Change {
        seq,
        epoch,
        holder: holder.map(str::to_owned),
        at_unix_ms: ms,
        cause,
    }
}

/// The causes of `db`'s changes, oldest first.
fn causes(t: &LeaseTable) -> Vec<Cause> {
    t.history("db").iter().map(|c| c.cause.clone()).collect()
}

fn some(s: &str) -> Option<String> {
    Some(s.to_owned())
}

#[test]
fn a_first_grant_is_recorded_with_its_epoch_holder_leader_time_and_cause() {
    let mut t = LeaseTable::default();
    assert_eq!(
        t.apply(&grant("a", 1, 7, 1_000)),
        LeaseResponse::Granted { epoch: 1 }
    );
    assert_eq!(
        t.history("db"),
        [change(1, 1, Some("a"), Some(1_000), Cause::FirstGrant)]
    );
    assert_eq!(t.history("web"), [], "another role has none");
}

#[test]
fn a_grant_over_a_holder_that_never_released_records_that_its_lease_expired() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1, 1, 1_000));
    t.apply(&grant("b", 2, 1, 2_000));
    // Back to a: b's lease expired in turn; and to b again, from itself
    // (its own lease ran out and it asked again with a new attempt).
    t.apply(&grant("a", 3, 2, 3_000));
    t.apply(&grant("a", 4, 3, 4_000));
    assert_eq!(
        t.history("db"),
        [
            change(1, 1, Some("a"), Some(1_000), Cause::FirstGrant),
            change(
                2,
                2,
                Some("b"),
                Some(2_000),
                Cause::LeaseExpired {
                    previous: "a".into()
                }
            ),
            change(
                3,
                3,
                Some("a"),
                Some(3_000),
                Cause::LeaseExpired {
                    previous: "b".into()
                }
            ),
            change(
                4,
                4,
                Some("a"),
                Some(4_000),
                Cause::LeaseExpired {
                    previous: "a".into()
                }
            ),
        ]
    );
}

#[test]
fn a_release_records_the_holders_reason_and_successor_and_the_next_grant_names_both() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1, 1, 1_000));
    let failing = Some(ReleaseReason::ServiceFailing);
    assert_eq!(
        t.apply(&release("a", 1, None, failing)),
        LeaseResponse::Released
    );
    t.apply(&grant("b", 2, 1, 6_000));
    // b hands over to c (an operator's handover) but a asks first.
    t.apply(&release("b", 2, Some("c"), Some(ReleaseReason::Handover)));
    t.apply(&grant("a", 3, 2, 6_500));
    // a hands over to c, which takes it.
    t.apply(&release("a", 3, Some("c"), Some(ReleaseReason::Handover)));
    t.apply(&grant("c", 4, 1, 8_000));
    let released = |previous: &str, reason, next: Option<&str>| Cause::Released {
        previous: previous.into(),
        reason,
        next: next.map(str::to_owned),
    };
    let after = |previous: &str, named: Option<&str>| Cause::AfterRelease {
        previous: some(previous),
        named: named.map(str::to_owned),
    };
    let handover = Some(ReleaseReason::Handover);
    assert_eq!(
        t.history("db"),
        [
            change(1, 1, Some("a"), Some(1_000), Cause::FirstGrant),
            change(2, 1, None, Some(5_000), released("a", failing, None)),
            change(3, 2, Some("b"), Some(6_000), after("a", None)),
            change(4, 2, None, Some(5_000), released("b", handover, Some("c"))),
            change(5, 3, Some("a"), Some(6_500), after("b", Some("c"))),
            change(6, 3, None, Some(5_000), released("a", handover, Some("c"))),
            change(7, 4, Some("c"), Some(8_000), after("a", Some("c"))),
        ]
    );
}

#[test]
fn a_switchover_is_recorded_when_ordered_cancelled_and_done_with_who_asked() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1, 1, 1_000));
    t.apply(&order(1, Some("b"), 9_000, "n3"));
    // The same order again changes nothing: no change recorded.
    t.apply(&order(1, Some("b"), 9_000, "n3"));
    t.apply(&order(1, None, 0, "n2"));
    // Nothing to cancel: nothing recorded.
    t.apply(&order(1, None, 0, "n2"));
    t.apply(&order(1, Some("b"), 0, "n1"));
    // The holder carries it out: a handover to the order's target.
    t.apply(&release("a", 1, Some("b"), Some(ReleaseReason::Handover)));
    t.apply(&grant("b", 2, 1, 8_000));
    assert_eq!(
        causes(&t),
        [
            Cause::FirstGrant,
            Cause::SwitchoverOrdered {
                to: "b".into(),
                at_unix_ms: 9_000,
                by: some("n3")
            },
            Cause::SwitchoverCancelled {
                to: "b".into(),
                by: some("n2")
            },
            Cause::SwitchoverOrdered {
                to: "b".into(),
                at_unix_ms: 0,
                by: some("n1")
            },
            Cause::Released {
                previous: "a".into(),
                reason: Some(ReleaseReason::Switchover),
                next: some("b"),
            },
            Cause::SwitchoverDone {
                previous: "a".into()
            },
        ]
    );
    let orders: Vec<_> = t.history("db")[1..4]
        .iter()
        .map(|c| (c.epoch, c.holder.as_deref(), c.at_unix_ms))
        .collect();
    assert_eq!(
        orders,
        [(1, Some("a"), Some(7_000)); 3],
        "orders keep the holding they are for"
    );
}

#[test]
fn a_release_to_an_ordered_target_by_a_holder_that_says_no_reason_is_that_switchover() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1, 1, 1_000));
    t.apply(&order(1, Some("b"), 0, "n1"));
    t.apply(&release("a", 1, Some("b"), None));
    t.apply(&grant("c", 2, 1, 2_000));
    assert_eq!(
        causes(&t)[2..],
        [
            Cause::Released {
                previous: "a".into(),
                reason: Some(ReleaseReason::Switchover),
                next: some("b"),
            },
            // Another candidate got it: not the switchover's target.
            Cause::AfterRelease {
                previous: some("a"),
                named: some("b")
            },
        ]
    );
}

#[test]
fn pausing_and_resuming_are_recorded_once_each_with_who_asked() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1, 1, 1_000));
    t.apply(&pause(true, false, "n2", 2_000));
    t.apply(&pause(true, false, "n3", 2_100));
    t.apply(&pause(false, true, "n3", 3_000));
    t.apply(&pause(false, false, "n1", 3_100));
    assert_eq!(
        t.history("db")[1..],
        [
            change(
                2,
                1,
                Some("a"),
                Some(2_000),
                Cause::Paused { by: some("n2") }
            ),
            change(
                3,
                1,
                Some("a"),
                Some(3_000),
                Cause::Resumed {
                    by: some("n3"),
                    forced: true
                }
            ),
        ]
    );
}

#[test]
fn a_grant_answering_the_same_attempt_again_and_refused_requests_record_nothing() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1, 7, 1_000));
    let once = t.clone();
    // Its answer was lost: the same attempt again.
    assert_eq!(
        t.apply(&grant("a", 1, 7, 1_500)),
        LeaseResponse::Granted { epoch: 1 }
    );
    // Refused: a stale epoch, a release or order by no holder, renewals.
    assert!(matches!(
        t.apply(&grant("b", 1, 1, 2_000)),
        LeaseResponse::Rejected(_)
    ));
    assert!(matches!(
        t.apply(&release("b", 1, None, None)),
        LeaseResponse::Rejected(_)
    ));
    assert!(matches!(
        t.apply(&order(2, Some("b"), 0, "n1")),
        LeaseResponse::Rejected(_)
    ));
    let renew = LeaseRequest::Renewals {
        holder: "a".into(),
        leases: vec![("db".into(), 1)],
        marks: Vec::new(),
    };
    assert!(matches!(t.apply(&renew), LeaseResponse::Batch(_)));
    assert_eq!(t, once);
    assert_eq!(t.history("db").len(), 1);
}

#[test]
fn a_roles_history_keeps_its_last_hundred_changes_and_numbers_on() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1, 1, 1_000));
    for i in 0..150 {
        t.apply(&pause(i % 2 == 0, false, "n1", 2_000 + i));
    }
    let h = t.history("db");
    assert_eq!(h.len(), HISTORY_LIMIT);
    assert_eq!((h[0].seq, h[HISTORY_LIMIT - 1].seq), (52, 151));
    assert_eq!(h[HISTORY_LIMIT - 1].at_unix_ms, Some(2_149));
    assert_eq!(
        h[HISTORY_LIMIT - 1].cause,
        Cause::Resumed {
            by: some("n1"),
            forced: false
        }
    );
    // Snapshotted, it stays bounded and whole.
    let back: LeaseTable = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
    assert_eq!(back, t);
}

/// Entries of every kind the history records, in a batch and alone.
fn incident() -> Vec<LeaseRequest> {
    let renew = LeaseRequest::Renewals {
        holder: "a".into(),
        leases: vec![("db".into(), 1)],
        marks: Vec::new(),
    };
    vec![
        LeaseRequest::Batch(vec![renew.clone(), grant("a", 1, 1, 1_000)]),
        renew,
        order(1, Some("b"), 0, "n2"),
        release("a", 1, Some("b"), Some(ReleaseReason::Handover)),
        LeaseRequest::Batch(vec![grant("b", 2, 4, 2_000), grant("b", 2, 4, 2_001)]),
        pause(true, false, "n3", 3_000),
        pause(false, true, "n3", 4_000),
        grant("c", 3, 1, 5_000),
        release("c", 3, None, Some(ReleaseReason::Leaving)),
        grant("a", 4, 2, 6_000),
    ]
}

#[test]
fn the_same_entries_applied_again_give_the_same_history_and_its_snapshot_reads_back_whole() {
    let apply = |entries: &[LeaseRequest]| {
        let mut t = LeaseTable::default();
        for e in entries {
            t.apply(e);
        }
        t
    };
    let (one, two) = (apply(&incident()), apply(&incident()));
    assert_eq!(one, two);
    assert_eq!(one.history("db").len(), 9);
    let seqs: Vec<u64> = one.history("db").iter().map(|c| c.seq).collect();
    assert_eq!(seqs, (1..=9).collect::<Vec<_>>());
    // A snapshot of the first half, read back, then the rest applied:
    // what a restarted server or a follower installing it ends with.
    let entries = incident();
    let half = apply(&entries[..5]);
    let mut resumed: LeaseTable =
        serde_json::from_slice(&serde_json::to_vec(&half).unwrap()).unwrap();
    for e in &entries[5..] {
        resumed.apply(e);
    }
    assert_eq!(resumed, one);
}

#[test]
fn the_leader_stamps_its_time_on_the_entries_the_history_records_and_on_no_other() {
    let mut batch = LeaseRequest::Batch(incident());
    batch.stamp(42);
    let LeaseRequest::Batch(reqs) = &batch else {
        panic!("not a batch");
    };
    let mut t = LeaseTable::default();
    for r in reqs {
        t.apply(r);
    }
    assert!(t.history("db").iter().all(|c| c.at_unix_ms == Some(42)));
    // Who asked is kept; renewals carry nothing.
    assert_eq!(t.history("db")[4].cause, Cause::Paused { by: some("n3") });
    let json = serde_json::to_value(&reqs[1]).unwrap();
    assert_eq!(
        json,
        json!({"Renewals": {"holder": "a", "leases": [["db", 1]]}})
    );
}

#[test]
fn the_table_served_to_readers_leaves_the_history_out_and_keeps_every_role() {
    let mut t = LeaseTable::default();
    for e in incident() {
        t.apply(&e);
    }
    let plain = t.without_history();
    assert_eq!(plain.history("db"), []);
    assert_eq!(plain.role("db"), t.role("db"));
    let json = serde_json::to_value(&plain).unwrap();
    assert_eq!(
        json.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["roles"]
    );
}

#[test]
fn the_grantors_grants_record_a_first_grant_an_expiry_and_grants_after_releases() {
    let timing = LeaseTiming::default();
    let mut g = Grantor::new(timing);
    let mut clock = AppendClock::new(Time::ZERO);
    let mut t = LeaseTable::default();
    let ask = |holder: &str, attempt: u64| AcquireRequest {
        role: "db".into(),
        holder: holder.into(),
        priority: 0,
        attempt,
        standing: None,
    };
    // Asks at `ms` and one settling period later: the grant it proposes,
    // applied and appended then.
    let granted = |g: &mut Grantor,
                   t: &mut LeaseTable,
                   clock: &mut AppendClock,
                   holder: &str,
                   attempt: u64,
                   ms: u64| {
        let _ = g.contend(t, clock, &ask(holder, attempt), Time::from_millis(ms));
        let later = Time::from_millis(ms) + timing.renew_every * 2;
        let grant = g.contend(t, clock, &ask(holder, attempt), later).unwrap();
        assert!(matches!(t.apply(&grant), LeaseResponse::Granted { .. }));
        clock.appended(&grant, later);
    };
    granted(&mut g, &mut t, &mut clock, "a", 1, 1_000);
    // a goes silent: a lease later, b.
    granted(&mut g, &mut t, &mut clock, "b", 1, 5_000);
    // b hands over to c: the grantor prefers c (as the server's apply
    // hook tells it); c is granted at once.
    t.apply(&release("b", 2, Some("c"), Some(ReleaseReason::Handover)));
    g.prefer("db", "c", Time::from_millis(9_000));
    let grant = g
        .contend(&t, &clock, &ask("c", 1), Time::from_millis(9_100))
        .unwrap();
    t.apply(&grant);
    clock.appended(&grant, Time::from_millis(9_100));
    // c's checks fail: it releases, and a takes it.
    t.apply(&release("c", 3, None, Some(ReleaseReason::ServiceFailing)));
    granted(&mut g, &mut t, &mut clock, "a", 2, 12_000);
    let grants: Vec<_> = t
        .history("db")
        .iter()
        .filter(|c| c.holder.is_some())
        .map(|c| (c.epoch, c.holder.clone().unwrap(), c.cause.clone()))
        .collect();
    assert_eq!(
        grants,
        [
            (1, "a".into(), Cause::FirstGrant),
            (
                2,
                "b".into(),
                Cause::LeaseExpired {
                    previous: "a".into()
                }
            ),
            (
                3,
                "c".into(),
                Cause::AfterRelease {
                    previous: some("b"),
                    named: some("c")
                }
            ),
            (
                4,
                "a".into(),
                Cause::AfterRelease {
                    previous: some("c"),
                    named: None
                }
            ),
        ]
    );
}

#[test]
fn entries_an_older_leader_wrote_apply_and_record_what_they_say() {
    // As the previous release writes them: no origin, no reason.
    let entries = [
        json!({"Grant": {"role": "db", "holder": "a", "epoch": 1, "attempt": 7}}),
        json!({"Pause": {"role": "db", "paused": true}}),
        json!({"Pause": {"role": "db", "paused": false}}),
        json!({"Switchover": {"role": "db", "epoch": 1, "to": "b", "at_unix_ms": 0}}),
        json!({"Release": {"role": "db", "holder": "a", "epoch": 1, "next": "b"}}),
        json!({"Grant": {"role": "db", "holder": "b", "epoch": 2, "attempt": 1}}),
        json!({"Grant": {"role": "db", "holder": "c", "epoch": 3, "attempt": 1}}),
    ];
    let mut t = LeaseTable::default();
    for e in entries {
        let req: LeaseRequest = serde_json::from_value(e).unwrap();
        assert!(!matches!(t.apply(&req), LeaseResponse::Rejected(_)));
    }
    assert_eq!(
        t.history("db"),
        [
            change(1, 1, Some("a"), None, Cause::FirstGrant),
            change(2, 1, Some("a"), None, Cause::Paused { by: None }),
            change(
                3,
                1,
                Some("a"),
                None,
                Cause::Resumed {
                    by: None,
                    forced: false
                }
            ),
            change(
                4,
                1,
                Some("a"),
                None,
                Cause::SwitchoverOrdered {
                    to: "b".into(),
                    at_unix_ms: 0,
                    by: None
                }
            ),
            change(
                5,
                1,
                None,
                None,
                Cause::Released {
                    previous: "a".into(),
                    reason: Some(ReleaseReason::Switchover),
                    next: some("b"),
                }
            ),
            change(
                6,
                2,
                Some("b"),
                None,
                Cause::SwitchoverDone {
                    previous: "a".into()
                }
            ),
            change(
                7,
                3,
                Some("c"),
                None,
                Cause::LeaseExpired {
                    previous: "b".into()
                }
            ),
        ]
    );
}

#[test]
fn a_snapshot_without_history_reads_as_none_recorded_and_the_next_grants_say_what_is_known() {
    // The previous release's table: roles only.
    let old = json!({"roles": {"db": {"holder": null, "epoch": 4, "attempt": 0},
        "web": {"holder": "b", "epoch": 2, "attempt": 3}}});
    let mut t: LeaseTable = serde_json::from_value(old).unwrap();
    assert_eq!(t.history("db"), []);
    t.apply(&grant("a", 5, 1, 1_000));
    let unknown = Cause::AfterRelease {
        previous: None,
        named: None,
    };
    assert_eq!(
        t.history("db"),
        [change(1, 5, Some("a"), Some(1_000), unknown)]
    );
    let web = LeaseRequest::Grant {
        role: "web".into(),
        holder: "c".into(),
        epoch: 3,
        attempt: 1,
        origin: Origin::default(),
    };
    t.apply(&web);
    assert_eq!(
        t.history("web"),
        [change(
            1,
            3,
            Some("c"),
            None,
            Cause::LeaseExpired {
                previous: "b".into()
            }
        )]
    );
}

/// The previous release's lease table and entries (0.1.0, commit 67c6e85,
/// `crates/hale-control/src/lease.rs`), as its servers decode them: no
/// `deny_unknown_fields` anywhere.
#[derive(serde::Deserialize, Debug, PartialEq)]
struct PreviousTable {
    roles: BTreeMap<String, PreviousRole>,
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct PreviousRole {
    holder: Option<String>,
    epoch: u64,
    #[serde(default)]
    attempt: u64,
    #[serde(default)]
    paused: bool,
}

#[derive(serde::Deserialize, Debug, PartialEq)]
#[allow(dead_code)] // Decoded, compared whole.
enum PreviousRequest {
    Grant {
        role: String,
        holder: String,
        epoch: u64,
        #[serde(default)]
        attempt: u64,
    },
    Release {
        role: String,
        holder: String,
        epoch: u64,
        #[serde(default)]
        next: Option<String>,
    },
    Pause {
        role: String,
        paused: bool,
    },
    Switchover {
        role: String,
        epoch: u64,
        to: Option<String>,
        #[serde(default)]
        at_unix_ms: u64,
    },
    Renewals {
        holder: String,
        leases: Vec<(String, u64)>,
    },
    Batch(Vec<PreviousRequest>),
}

#[test]
fn a_server_of_the_previous_release_reads_this_ones_entries_and_snapshot_ignoring_the_history() {
    let mut t = LeaseTable::default();
    let mut batch = LeaseRequest::Batch(incident());
    batch.stamp(42);
    let json = serde_json::to_value(&batch).unwrap();
    let old: PreviousRequest = serde_json::from_value(json).unwrap();
    let PreviousRequest::Batch(old) = old else {
        panic!("not a batch");
    };
    assert_eq!(old.len(), incident().len());
    assert_eq!(
        old[3],
        PreviousRequest::Release {
            role: "db".into(),
            holder: "a".into(),
            epoch: 1,
            next: some("b"),
        }
    );
    for e in incident() {
        t.apply(&e);
    }
    let snapshot: PreviousTable =
        serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
    let db = &snapshot.roles["db"];
    assert_eq!((db.holder.as_deref(), db.epoch), (Some("a"), 4));
}

#[test]
fn a_table_split_into_its_roles_parts_and_absorbed_again_is_the_same_table() {
    // What a store that keeps each role under a key of its own (hale-etcd)
    // writes and reads back: each role's lease and history, nothing else's.
    let mut whole = LeaseTable::default();
    for role in ["db", "web"] {
        let mut g = grant("a", 1, 1, 10);
        if let LeaseRequest::Grant { role: r, .. } = &mut g {
            *r = role.to_owned();
        }
        whole.apply(&g);
    }
    whole.apply(&release("a", 1, None, None));
    let db = whole.part("db");
    assert_eq!(db.roles().count(), 1);
    assert_eq!(db.history("db"), whole.history("db"));
    assert!(
        db.history("web").is_empty(),
        "web's history is not db's part"
    );
    let mut back = LeaseTable::default();
    back.absorb(whole.part("web"));
    back.absorb(db);
    assert_eq!(back, whole);
    assert!(whole.part("nope").roles().next().is_none());
}
