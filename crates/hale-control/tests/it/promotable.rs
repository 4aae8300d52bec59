//! A node that may not be promoted (`promotable = false`): the holder
//! state machine's exact outputs, and the grantor's choice when the
//! holder's mark leaves a standby out (never synchronous).

use std::time::Duration;

use hale_control::raft::AcquireRequest;
use hale_control::{
    Action, ControlRequest, GrantDelay, Grantor, HolderEvent, HookExit, LeaseRequest,
    LeaseResponse, LeaseTiming, Mark, Origin, ReleaseReason, RoleState, Standing,
};

use crate::holder::{actions, holder_with, holding, ms, renew, sends, OK};
use crate::replication::held_by_a;

fn acquisitions(a: &[Action]) -> usize {
    sends(a)
        .iter()
        .filter(|(_, r)| matches!(r, ControlRequest::Acquire(_)))
        .count()
}

#[test]
fn a_node_that_may_not_be_promoted_stands_by_with_passing_checks_and_never_asks_for_the_role() {
    let mut h = holder_with(|c| c.promotable = false);
    h.handle_checks(ms(0), OK);
    assert_eq!(
        actions(&mut h),
        vec![Action::Event(HolderEvent::Eligible(true))],
        "its checks pass, and it asks for nothing"
    );
    assert_eq!(h.state(), RoleState::Standby);
    assert_eq!(h.poll_timeout(), None, "no poll is ever due");
    // A minute of checks and timeouts, as the agent gives them: nothing.
    for t in (100..60_000).step_by(100) {
        h.handle_checks(ms(t), OK);
        h.handle_timeout(ms(t));
    }
    assert_eq!(actions(&mut h), vec![]);
    assert_eq!((h.state(), h.epoch()), (RoleState::Standby, None));
}

#[test]
fn a_grant_answering_an_ask_made_before_the_node_was_retuned_not_promotable_is_given_straight_back()
{
    let mut h = holder_with(|_| {});
    h.handle_checks(ms(0), OK);
    let asked = sends(&actions(&mut h));
    let [(id, ControlRequest::Acquire(_))] = asked.as_slice() else {
        panic!("no acquisition: {asked:?}")
    };
    h.retune(5, false, Duration::from_secs(10), Duration::from_secs(3));
    assert_eq!(actions(&mut h), vec![], "a retune does nothing by itself");
    h.handle_response(ms(10), *id, Some(LeaseResponse::Granted { epoch: 7 }));
    let a = actions(&mut h);
    assert_eq!(
        sends(&a).into_iter().map(|(_, r)| r).collect::<Vec<_>>(),
        vec![ControlRequest::Lease(LeaseRequest::Release {
            role: "db".into(),
            holder: "a".into(),
            epoch: 7,
            next: None,
            reason: Some(ReleaseReason::Unused),
            origin: Origin::default(),
        })],
        "released, and nothing else: {a:?}"
    );
    assert!(
        !a.iter().any(|x| matches!(x, Action::StartHook { .. })),
        "no promote hook: {a:?}"
    );
    assert_eq!(h.state(), RoleState::Standby);
}

#[test]
fn a_holder_retuned_not_promotable_keeps_renewing_until_handed_over_and_never_asks_again() {
    let mut h = holding();
    h.retune(5, false, Duration::from_secs(10), Duration::from_secs(3));
    assert_eq!(actions(&mut h), vec![], "no step-down comes of a retune");
    assert_eq!((h.state(), h.epoch()), (RoleState::Holder, Some(7)));
    h.handle_timeout(ms(510));
    let a = actions(&mut h);
    assert!(
        matches!(sends(&a).as_slice(), [(_, r)] if *r == renew(7)),
        "it keeps renewing: {a:?}"
    );
    // The agent hands it over to b (a node that may be promoted).
    h.handle_handover(ms(600), Some("b".into()));
    let _ = actions(&mut h);
    h.handle_watchdog_released(ms(610), false);
    let demote = actions(&mut h)
        .into_iter()
        .find_map(|a| match a {
            Action::StartHook { id, .. } => Some(id),
            _ => None,
        })
        .expect("the demote hook");
    h.handle_hook_exit(ms(700), demote, HookExit::Succeeded);
    let a = actions(&mut h);
    assert!(
        sends(&a).iter().any(|(_, r)| matches!(r,
            ControlRequest::Lease(LeaseRequest::Release { epoch: 7, next: Some(n), .. }) if n == "b")),
        "released to b: {a:?}"
    );
    // Long after its hold-off: a standby that never asks.
    for t in (800..20_000).step_by(100) {
        h.handle_checks(ms(t), OK);
        h.handle_timeout(ms(t));
    }
    let a = actions(&mut h);
    assert_eq!(acquisitions(&a), 0, "{a:?}");
    assert_eq!((h.state(), h.epoch()), (RoleState::Standby, None));
}

#[test]
fn a_node_retuned_promotable_again_asks_at_its_next_poll() {
    let mut h = holder_with(|c| c.promotable = false);
    h.handle_checks(ms(0), OK);
    let _ = actions(&mut h);
    h.retune(5, true, Duration::from_secs(10), Duration::from_secs(3));
    h.handle_checks(ms(100), OK);
    assert_eq!(acquisitions(&actions(&mut h)), 1);
}

const MAX_LAG: u64 = 1 << 20;

fn ask(holder: &str, priority: i64, position: u64) -> AcquireRequest {
    AcquireRequest {
        role: "db".into(),
        holder: holder.into(),
        priority,
        attempt: 1,
        standing: Some(Standing {
            position,
            max_lag: MAX_LAG,
        }),
    }
}

#[test]
fn a_standby_the_holders_mark_leaves_out_is_never_ranked_synchronous_however_far_its_copy() {
    // c never synchronous: the holder's mark names b only, although c
    // streamed, further than b and at a higher priority.
    let (t, clock, free) = held_by_a(Some(Mark {
        position: 50 << 20,
        synchronous: vec!["b".into()],
        strict: false,
    }));
    let mut g = Grantor::new(LeaseTiming::default());
    let (b, c) = (ask("b", 10, (50 << 20) - 100), ask("c", 100, 50 << 20));
    let _ = g.contend(&t, &clock, &b, free);
    let _ = g.contend(&t, &clock, &c, free);
    let later = free + LeaseTiming::default().renew_every * 2;
    assert_eq!(
        g.contend(&t, &clock, &c, later),
        Err(GrantDelay::BetterCandidate("b".into()))
    );
    assert!(matches!(
        g.contend(&t, &clock, &b, later),
        Ok(LeaseRequest::Grant { holder, epoch: 2, .. }) if holder == "b"
    ));
}

#[test]
fn under_strict_durability_a_standby_the_mark_leaves_out_need_not_be_heard_for_a_failover() {
    // c (never synchronous, or never promoted) is silent: b, the one
    // standby the primary waited for, is proven without it.
    let (t, clock, free) = held_by_a(Some(Mark {
        position: 50 << 20,
        synchronous: vec!["b".into()],
        strict: true,
    }));
    let mut g = Grantor::new(LeaseTiming::default());
    let b = ask("b", 10, 50 << 20);
    let _ = g.contend(&t, &clock, &b, free);
    let later = free + LeaseTiming::default().renew_every * 2;
    assert!(matches!(
        g.contend(&t, &clock, &b, later),
        Ok(LeaseRequest::Grant { holder, .. }) if holder == "b"
    ));
}
