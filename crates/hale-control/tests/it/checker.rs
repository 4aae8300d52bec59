//! The history checker catches what it must, and only that.

use hale_control::{check, HistoryViolation, HookEvent, HookKind};

fn ev(at: u64, node: &str, epoch: u64, kind: HookKind) -> HookEvent {
    HookEvent {
        at_nanos: at,
        node: node.to_owned(),
        role: "db".to_owned(),
        epoch,
        kind,
    }
}

#[test]
fn a_clean_failover_passes() {
    let h = [
        ev(10, "a", 1, HookKind::Promote),
        ev(50, "a", 1, HookKind::Demote),
        ev(60, "b", 2, HookKind::Promote),
    ];
    check(&h).unwrap();
}

#[test]
fn a_demote_and_a_promote_at_the_same_instant_do_not_overlap() {
    let h = [
        ev(10, "a", 1, HookKind::Promote),
        ev(50, "b", 2, HookKind::Promote),
        ev(50, "a", 1, HookKind::Demote),
    ];
    check(&h).unwrap();
}

#[test]
fn a_planted_overlap_is_caught() {
    let h = [
        ev(10, "a", 1, HookKind::Promote),
        ev(40, "b", 2, HookKind::Promote),
        ev(50, "a", 1, HookKind::Demote),
    ];
    let e = check(&h).unwrap_err();
    assert!(
        matches!(
            e,
            HistoryViolation::Overlap { ref first, ref second, at_nanos: 40, .. } if first == "a" && second == "b"
        ),
        "{e}"
    );
}

#[test]
fn an_epoch_that_does_not_increase_is_caught() {
    let h = [
        ev(10, "a", 2, HookKind::Promote),
        ev(20, "a", 2, HookKind::Demote),
        ev(30, "b", 2, HookKind::Promote),
    ];
    assert!(matches!(
        check(&h),
        Err(HistoryViolation::EpochNotIncreasing {
            epoch: 2,
            previous: 2,
            ..
        })
    ));
}

#[test]
fn roles_are_checked_independently() {
    let mut other = ev(15, "b", 1, HookKind::Promote);
    other.role = "auth".to_owned();
    let h = [ev(10, "a", 1, HookKind::Promote), other];
    check(&h).unwrap();
}
