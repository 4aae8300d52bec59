//! The holder state machine's exact outputs, step by step.

use std::time::Duration;

use hale_control::lease::AcquireRequest;
use hale_control::{
    Action, ControlRequest, Holder, HolderConfig, HolderEvent, HookExit, HookId, HookKind,
    HookOutcome, HookReason, LeaseRequest, LeaseResponse, LeaseTiming, RequestId, RoleState,
    ServiceStatus, StepDownReason,
};
use hale_core::Time;

pub(crate) fn ms(n: u64) -> Time {
    Time::from_millis(n)
}

fn holder() -> Holder {
    holder_with(|_| {})
}

/// [`holder`] with its settings changed by `change`.
pub(crate) fn holder_with(change: impl FnOnce(&mut HolderConfig)) -> Holder {
    let mut h = holder_config();
    change(&mut h);
    Holder::new(h, Time::ZERO)
}

fn holder_config() -> HolderConfig {
    HolderConfig {
        role: "db".into(),
        node: "a".into(),
        priority: 5,
        promotable: true,
        // Renewals every 500 ms keep the exact times below round.
        timing: LeaseTiming {
            lease: Duration::from_secs(2),
            renew_every: Duration::from_millis(500),
            drift_margin: Duration::from_millis(400),
        },
        hook_timeout: Duration::from_secs(10),
        fail_after: Duration::from_secs(3),
        acquire_timeout: Duration::from_millis(1500),
        instance: 7,
        max_lag: None,
        identity: ID.into(),
        after_older_release: false,
    }
}

/// The node's identity in these tests.
const ID: &str = "a@machine:/var/lib/hale";

pub(crate) fn actions(h: &mut Holder) -> Vec<Action> {
    std::iter::from_fn(|| h.poll_action()).collect()
}

pub(crate) const OK: ServiceStatus = ServiceStatus {
    healthy: true,
    ready: true,
    failing_since: None,
};

/// A holder whose promote hook succeeded 100 ms in (its actions taken).
pub(crate) fn holding() -> Holder {
    let mut h = holder();
    let promote = granted(&mut h);
    h.handle_hook_exit(ms(100), promote, HookExit::Succeeded);
    let _ = actions(&mut h);
    h
}

/// A standby that was granted epoch 7 at 0 ms (request sent at 0 ms): its
/// promote hook's id.
fn granted(h: &mut Holder) -> HookId {
    h.handle_checks(ms(0), OK);
    let a = actions(h);
    let Some(Action::Send { id, .. }) = a.last() else {
        panic!("no acquisition in {a:?}")
    };
    h.handle_response(ms(10), *id, Some(LeaseResponse::Granted { epoch: 7 }));
    let a = actions(h);
    let hook = a
        .iter()
        .find_map(|x| match x {
            Action::StartHook { id, .. } => Some(*id),
            _ => None,
        })
        .expect("promote hook started");
    assert_eq!(
        a,
        vec![
            Action::StartWatchdog {
                epoch: 7,
                deadline: ms(1600)
            },
            Action::Event(HolderEvent::Promoting { epoch: 7 }),
            Action::StartHook {
                id: hook,
                kind: HookKind::Promote,
                epoch: 7,
                reason: HookReason::Promote
            },
        ]
    );
    hook
}

pub(crate) fn renew(epoch: u64) -> ControlRequest {
    ControlRequest::Lease(LeaseRequest::Renew {
        role: "db".into(),
        holder: "a".into(),
        epoch,
        mark: None,
    })
}

#[test]
fn a_healthy_standby_asks_for_the_role_and_an_unhealthy_one_does_not() {
    let mut h = holder();
    h.handle_timeout(ms(0));
    assert_eq!(actions(&mut h), vec![]);
    assert_eq!(h.state(), RoleState::Ineligible);
    h.handle_checks(ms(0), OK);
    assert_eq!(
        actions(&mut h),
        vec![
            Action::Event(HolderEvent::Eligible(true)),
            Action::Send {
                id: RequestId(1),
                request: ControlRequest::Acquire(AcquireRequest {
                    role: "db".into(),
                    holder: "a".into(),
                    priority: 5,
                    attempt: 7,
                    standing: None,
                }),
                deadline: ms(1500)
            }
        ]
    );
    assert_eq!(h.state(), RoleState::Standby);
}

#[test]
fn a_holder_keeps_renewing_while_its_promote_hook_runs() {
    let mut h = holder();
    let _hook = granted(&mut h);
    assert_eq!(h.state(), RoleState::Promoting);
    assert_eq!(h.poll_timeout(), Some(ms(510)));
    h.handle_timeout(ms(510));
    let a = actions(&mut h);
    let [Action::Send { id, request, .. }] = a.as_slice() else {
        panic!("{a:?}")
    };
    assert_eq!(*request, renew(7));
    // The renewal commits: the watchdog is re-armed with the renewal's end,
    // the hook is untouched.
    h.handle_response(
        ms(520),
        *id,
        Some(LeaseResponse::Renewed {
            epoch: 7,
            paused: false,
            switchover: None,
        }),
    );
    assert_eq!(
        actions(&mut h),
        vec![Action::ArmWatchdog { deadline: ms(2110) }]
    );
    // Three seconds of promote hook: renewals every 500 ms throughout.
    let mut sent = 0;
    let mut t = 510;
    while t < 3_500 {
        t += 500;
        h.handle_timeout(ms(t));
        for a in actions(&mut h) {
            if let Action::Send { id, request, .. } = a {
                assert_eq!(request, renew(7));
                sent += 1;
                h.handle_response(
                    ms(t + 5),
                    id,
                    Some(LeaseResponse::Renewed {
                        epoch: 7,
                        paused: false,
                        switchover: None,
                    }),
                );
                let _ = actions(&mut h);
            } else {
                panic!("unexpected {a:?} while promoting");
            }
        }
    }
    assert_eq!(sent, 6);
    assert_eq!(h.state(), RoleState::Promoting);
}

#[test]
fn an_unanswered_renewal_is_retried_after_a_fifth_of_the_interval() {
    // A control-plane election answers "no leader" at once; the new leader
    // is known about a second after the old one died, which leaves too
    // little of the 1.6 s lease for the next regular renewal.
    let mut h = holder();
    let _hook = granted(&mut h);
    h.handle_timeout(ms(510));
    let a = actions(&mut h);
    let [Action::Send { id, .. }] = a.as_slice() else {
        panic!("{a:?}")
    };
    h.handle_response(ms(515), *id, None);
    assert_eq!(actions(&mut h), vec![]);
    assert_eq!(h.poll_timeout(), Some(ms(615)));
    h.handle_timeout(ms(615));
    let a = actions(&mut h);
    let [Action::Send { id, request, .. }] = a.as_slice() else {
        panic!("{a:?}")
    };
    assert_eq!(*request, renew(7));
    // Answered: back to the regular interval, on the grid every holder of
    // the agent shares (its renewals travel in one batch).
    h.handle_response(
        ms(620),
        *id,
        Some(LeaseResponse::Renewed {
            epoch: 7,
            paused: false,
            switchover: None,
        }),
    );
    assert_eq!(
        actions(&mut h),
        vec![Action::ArmWatchdog { deadline: ms(2215) }]
    );
    assert_eq!(h.poll_timeout(), Some(ms(1000)));
}

#[test]
fn a_promotion_that_completes_makes_the_node_holder() {
    let mut h = holder();
    let hook = granted(&mut h);
    h.handle_hook_exit(ms(300), hook, HookExit::Succeeded);
    assert_eq!(
        actions(&mut h),
        vec![Action::Event(HolderEvent::Promoted { epoch: 7 })]
    );
    assert_eq!(h.state(), RoleState::Holder);
}

#[test]
fn a_lease_lost_during_a_promotion_kills_the_promote_hook_before_the_demote_starts() {
    let mut h = holder();
    let promote = granted(&mut h);
    // Renewals go unanswered: the lease ends at 1600 ms.
    let mut t = 0;
    while t < 1_600 {
        t = h.poll_timeout().expect("a deadline").as_nanos() / 1_000_000;
        h.handle_timeout(ms(t));
        let a = actions(&mut h);
        if t < 1_600 {
            assert!(a.iter().all(|x| matches!(x, Action::Send { .. })), "{a:?}");
        } else {
            assert_eq!(
                a,
                vec![
                    Action::Event(HolderEvent::SteppingDown {
                        epoch: 7,
                        reason: StepDownReason::LeaseExpired
                    }),
                    Action::KillHook { id: promote },
                    // The lost lease asked back at once (seed 120226).
                    Action::Send {
                        id: RequestId(6),
                        request: renew(7),
                        deadline: ms(2_100)
                    },
                ]
            );
        }
    }
    assert_eq!(h.state(), RoleState::Demoting);
    // Nothing else until the promote hook's exit is reported.
    h.handle_timeout(ms(1_700));
    assert_eq!(actions(&mut h), vec![]);
    h.handle_hook_exit(ms(1_701), promote, HookExit::Killed);
    assert_eq!(actions(&mut h), vec![Action::DisarmWatchdog]);
    h.handle_watchdog_released(ms(1_702), false);
    let a = actions(&mut h);
    let [Action::StartHook {
        id: demote,
        kind: HookKind::Demote,
        epoch: 7,
        reason: HookReason::StepDown(StepDownReason::LeaseExpired),
    }] = a.as_slice()
    else {
        panic!("{a:?}")
    };
    h.handle_hook_exit(ms(2_500), *demote, HookExit::Succeeded);
    let a = actions(&mut h);
    assert_eq!(a[0], Action::StopWatchdog);
    assert!(matches!(
        &a[1],
        Action::Send {
            request: ControlRequest::Lease(LeaseRequest::Release {
                epoch: 7,
                reason: Some(hale_control::ReleaseReason::LeaseExpired),
                ..
            }),
            ..
        }
    ));
    assert_eq!(
        a[2],
        Action::Event(HolderEvent::Demoted {
            epoch: 7,
            reason: StepDownReason::LeaseExpired,
            promote: Some(HookOutcome::Killed),
            demote: HookOutcome::Succeeded,
        })
    );
}

/// The watchdog answers the step-down's `disarm` at `at`: it had fenced.
/// The holding ends as fenced by it, with no demote of the agent's own.
fn released_fenced_without_a_second_demote(h: &mut Holder, at: Time) {
    h.handle_watchdog_released(at, true);
    let a = actions(h);
    assert!(
        !a.iter().any(|x| matches!(x, Action::StartHook { .. })),
        "a second demote: {a:?}"
    );
    assert!(a.contains(&Action::Event(HolderEvent::Demoted {
        epoch: 7,
        reason: StepDownReason::LeaseExpired,
        promote: None,
        demote: HookOutcome::FencedByWatchdog,
    })));
}

#[test]
fn a_holder_whose_watchdog_already_fenced_does_not_demote_again() {
    let mut h = holder();
    let promote = granted(&mut h);
    h.handle_hook_exit(ms(100), promote, HookExit::Succeeded);
    let _ = actions(&mut h);
    // Frozen from 100 ms to 5 s: on resuming, the lease has run out.
    h.handle_timeout(ms(5_000));
    let a = actions(&mut h);
    assert_eq!(
        a,
        vec![
            Action::Event(HolderEvent::SteppingDown {
                epoch: 7,
                reason: StepDownReason::LeaseExpired
            }),
            Action::Send {
                id: RequestId(3),
                request: renew(7),
                deadline: ms(5_500)
            },
            Action::DisarmWatchdog,
        ]
    );
    released_fenced_without_a_second_demote(&mut h, ms(5_001));
}

#[test]
fn a_holding_its_watchdog_fenced_unasked_steps_down_at_once_without_a_second_demote() {
    let mut h = holding();
    // Renewing fine, but the watchdog, frozen past its deadline, fenced.
    h.handle_watchdog_fenced(ms(600));
    assert_eq!(
        actions(&mut h),
        vec![
            Action::Event(HolderEvent::SteppingDown {
                epoch: 7,
                reason: StepDownReason::LeaseExpired
            }),
            Action::Send {
                id: RequestId(3),
                request: renew(7),
                deadline: ms(1_100)
            },
            Action::DisarmWatchdog,
        ]
    );
    released_fenced_without_a_second_demote(&mut h, ms(601));
    // Stopping now (the role paused) keeps nothing: it holds nothing.
    assert_eq!(h.state(), RoleState::Standby);
    // A notice for a holding already gone changes nothing.
    h.handle_watchdog_fenced(ms(700));
    assert!(actions(&mut h)
        .iter()
        .all(|a| !matches!(a, Action::Event(HolderEvent::SteppingDown { .. }))));
}

/// The `Send` actions among `a`: (id, request).
pub(crate) fn sends(a: &[Action]) -> Vec<(RequestId, ControlRequest)> {
    a.iter()
        .filter_map(|x| match x {
            Action::Send { id, request, .. } => Some((*id, request.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_lost_lease_whose_demote_fails_renews_its_epoch_and_holds_the_role_until_the_demote_succeeds() {
    let mut h = holding();
    // Renewals stop getting through: the lease runs out at 1.6 s.
    h.handle_timeout(ms(1_600));
    let a = actions(&mut h);
    assert!(a.contains(&Action::Event(HolderEvent::SteppingDown {
        epoch: 7,
        reason: StepDownReason::LeaseExpired
    })));
    // Without a lease it still asks to renew its epoch, at once.
    let asked = sends(&a);
    assert_eq!(
        asked.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(),
        vec![renew(7)]
    );
    h.handle_watchdog_released(ms(1_601), false);
    let a = actions(&mut h);
    let demote = a
        .iter()
        .find_map(|x| match x {
            Action::StartHook {
                id,
                kind: HookKind::Demote,
                ..
            } => Some(*id),
            _ => None,
        })
        .expect("the demote starts");
    // The demote fails (the service refused to stop): it is retried.
    h.handle_hook_exit(ms(1_700), demote, HookExit::Failed);
    let _ = actions(&mut h);
    // The renewal commits (the table still names this node): the lease is
    // back, renewed on from then, so nobody else is granted the role.
    h.handle_response(
        ms(1_710),
        asked[0].0,
        Some(LeaseResponse::Renewed {
            epoch: 7,
            paused: false,
            switchover: None,
        }),
    );
    let _ = actions(&mut h);
    h.handle_timeout(ms(2_000));
    let a = actions(&mut h);
    assert_eq!(
        sends(&a).into_iter().map(|(_, r)| r).collect::<Vec<_>>(),
        vec![renew(7)]
    );
    assert_eq!(h.state(), RoleState::Demoting);
    // Refused (another node holds it now): it stops asking.
    let (id, _) = sends(&a)[0].clone();
    h.handle_response(
        ms(2_010),
        id,
        Some(LeaseResponse::Rejected(
            hale_control::LeaseRejection::NotHolder {
                holder: "a".into(),
                epoch: 7,
            },
        )),
    );
    let _ = actions(&mut h);
    h.handle_timeout(ms(2_600));
    let a = actions(&mut h);
    assert!(sends(&a).is_empty(), "{a:?}");
}

#[test]
fn a_promote_hook_that_outlives_its_timeout_is_killed_and_the_role_released() {
    let mut h = holder();
    let promote = granted(&mut h);
    // Renewals commit; the hook runs on past 10 s.
    let mut reason = None;
    let killed = run_renewing(&mut h, 10_010, |a| match a {
        Action::ArmWatchdog { .. } => false,
        Action::Event(HolderEvent::SteppingDown { reason: r, .. }) => {
            reason = Some(*r);
            false
        }
        Action::KillHook { id } => {
            assert_eq!(*id, promote);
            true
        }
        other => panic!("unexpected {other:?}"),
    });
    assert_eq!(
        (killed, reason),
        (Some(10_010), Some(StepDownReason::PromoteTimedOut))
    );
    let _ = actions(&mut h);
    h.handle_hook_exit(ms(10_011), promote, HookExit::Killed);
    assert_eq!(actions(&mut h), vec![Action::DisarmWatchdog]);
    h.handle_watchdog_released(ms(10_012), false);
    let Some(Action::StartHook { id: demote, .. }) = h.poll_action() else {
        panic!("no demote")
    };
    h.handle_hook_exit(ms(10_100), demote, HookExit::Succeeded);
    let a = actions(&mut h);
    assert!(a.contains(&Action::Event(HolderEvent::Demoted {
        epoch: 7,
        reason: StepDownReason::PromoteTimedOut,
        promote: Some(HookOutcome::TimedOut),
        demote: HookOutcome::Succeeded,
    })));
    // It stands aside for one lease so that another candidate takes the role.
    assert_eq!(h.state(), RoleState::Standby);
    h.handle_timeout(ms(11_000));
    assert_eq!(actions(&mut h), vec![]);
    assert_eq!(h.poll_timeout(), Some(ms(12_100)));
}

#[test]
fn a_promote_hook_that_waited_for_a_hook_slot_is_timed_from_when_it_started() {
    let mut h = holder();
    let promote = granted(&mut h);
    // Queued behind other roles' hooks: it starts 4 s after it was asked.
    h.handle_hook_started(ms(4_000), promote);
    // A start reported for another run changes nothing.
    h.handle_hook_started(ms(6_000), HookId(999));
    let timed_out = run_renewing(&mut h, 20_000, |a| {
        matches!(
            a,
            Action::Event(HolderEvent::SteppingDown {
                reason: StepDownReason::PromoteTimedOut,
                ..
            })
        )
    });
    // 10 s of running, not 10 s since the StartHook.
    assert_eq!(timed_out, Some(14_000));
}

#[test]
fn a_promote_hook_queued_for_a_slot_longer_than_its_timeout_is_not_abandoned_before_it_runs() {
    // A backlog of promotions after a host died: this one waits 12 s for a
    // slot, past its 10 s `hook_timeout`. Its lease is renewed meanwhile;
    // its timeout begins when it starts.
    let mut h = holder();
    let promote = granted(&mut h);
    h.handle_hook_queued(promote);
    // A queued mark for another run changes nothing.
    h.handle_hook_queued(HookId(999));
    let step_down = |a: &Action| matches!(a, Action::Event(HolderEvent::SteppingDown { .. }));
    assert_eq!(run_renewing(&mut h, 12_000, step_down), None);
    assert_eq!(h.state(), RoleState::Promoting);
    h.handle_hook_started(ms(12_000), promote);
    let timed_out = run_renewing(&mut h, 30_000, |a| {
        matches!(
            a,
            Action::Event(HolderEvent::SteppingDown {
                reason: StepDownReason::PromoteTimedOut,
                ..
            })
        )
    });
    assert_eq!(timed_out, Some(22_000));
}

#[test]
fn a_handover_asked_during_a_promotion_is_taken_once_it_completes_and_keeps_the_lease_until_demoted(
) {
    let mut h = holder();
    let promote = granted(&mut h);
    h.handle_handover(ms(50), Some("b".into()));
    assert_eq!(actions(&mut h), vec![]);
    h.handle_hook_exit(ms(100), promote, HookExit::Succeeded);
    let a = actions(&mut h);
    assert_eq!(
        a,
        vec![
            Action::Event(HolderEvent::Promoted { epoch: 7 }),
            Action::Event(HolderEvent::SteppingDown {
                epoch: 7,
                reason: StepDownReason::Handover
            }),
            Action::DisarmWatchdog,
        ]
    );
    h.handle_watchdog_released(ms(101), false);
    let Some(Action::StartHook { id: demote, .. }) = h.poll_action() else {
        panic!("no demote")
    };
    // The demote takes 2 s: the lease is still renewed meanwhile.
    h.handle_timeout(ms(510));
    let a = actions(&mut h);
    assert!(
        matches!(a.as_slice(), [Action::Send { request, .. }] if *request == renew(7)),
        "{a:?}"
    );
    h.handle_hook_exit(ms(2_100), demote, HookExit::Succeeded);
    let a = actions(&mut h);
    assert!(
        a.iter().any(|x| matches!(x, Action::Send {
            request: ControlRequest::Lease(LeaseRequest::Release {
                epoch: 7,
                next: Some(n),
                reason: Some(hale_control::ReleaseReason::Handover),
                ..
            }),
            ..
        } if n == "b")),
        "no handover's release naming b: {a:?}"
    );
}

#[test]
fn states_reasons_and_outcomes_are_written_in_json_as_their_stable_strings() {
    let json = |v: serde_json::Value| v.as_str().unwrap().to_owned();
    for s in [
        RoleState::Ineligible,
        RoleState::Standby,
        RoleState::Promoting,
        RoleState::Holder,
        RoleState::Demoting,
    ] {
        assert_eq!(json(serde_json::to_value(s).unwrap()), s.as_str());
        assert_eq!(
            serde_json::from_value::<RoleState>(s.as_str().into()).unwrap(),
            s
        );
    }
    for r in [
        StepDownReason::LeaseExpired,
        StepDownReason::Fenced,
        StepDownReason::ServiceFailing,
        StepDownReason::Handover,
        StepDownReason::Leaving,
        StepDownReason::PromoteFailed,
        StepDownReason::PromoteTimedOut,
    ] {
        assert_eq!(json(serde_json::to_value(r).unwrap()), r.as_str());
    }
    for o in [
        HookOutcome::Succeeded,
        HookOutcome::Failed,
        HookOutcome::TimedOut,
        HookOutcome::Killed,
        HookOutcome::FencedByWatchdog,
    ] {
        assert_eq!(json(serde_json::to_value(o).unwrap()), o.as_str());
    }
}

#[test]
fn renewals_fall_on_the_grid_every_holder_of_the_agent_shares() {
    // Granted at 10 ms: the first renewal is one interval after the grant,
    // the next ones at whole multiples of the interval from time zero,
    // where every other holder of the agent renews too (one batch).
    let mut h = holder();
    let _hook = granted(&mut h);
    assert_eq!(h.poll_timeout(), Some(ms(510)));
    let mut sent = Vec::new();
    let mut t = ms(510);
    while t < ms(2600) {
        h.handle_timeout(t);
        for a in actions(&mut h) {
            if let Action::Send { id, request, .. } = a {
                assert_eq!(request, renew(7));
                sent.push(t.as_nanos() / 1_000_000);
                h.handle_response(
                    t,
                    id,
                    Some(LeaseResponse::Renewed {
                        epoch: 7,
                        paused: false,
                        switchover: None,
                    }),
                );
                let _ = actions(&mut h);
            }
        }
        t = h.poll_timeout().expect("a next renewal");
    }
    assert_eq!(sent, vec![510, 1000, 1500, 2000, 2500]);
}

#[test]
fn a_pause_of_the_host_does_not_count_against_a_running_hooks_timeout() {
    // Granted at 10 ms, promote hook timeout 10 s (due at 10,010 ms). The
    // host freezes for 4 s: the hook ran 4 s less, so it is killed 4 s later.
    let mut h = holder();
    let _promote = granted(&mut h);
    h.handle_pause(Duration::from_secs(4));
    // The first action after the renewals that every step answers: the kill.
    assert_eq!(
        run_renewing(&mut h, 15_000, |a| matches!(a, Action::KillHook { .. })),
        Some(14_010)
    );
}

/// Runs `h` from one deadline to the next, answering every renewal, until
/// `stop(action)` holds for an action (its time in ms) or `until_ms`.
fn run_renewing(
    h: &mut Holder,
    until_ms: u64,
    mut stop: impl FnMut(&Action) -> bool,
) -> Option<u64> {
    let mut t = 0;
    while t < until_ms {
        t = h.poll_timeout().expect("a deadline").as_nanos() / 1_000_000;
        h.handle_timeout(ms(t));
        for a in actions(h) {
            if let Action::Send { id, .. } = a {
                h.handle_response(
                    ms(t),
                    id,
                    Some(LeaseResponse::Renewed {
                        epoch: 7,
                        paused: false,
                        switchover: None,
                    }),
                );
            } else if stop(&a) {
                return Some(t);
            }
        }
    }
    None
}

/// A candidacy for a replicated role (`max_lag` 1 MiB).
fn replicated() -> Holder {
    let mut cfg = holder().config().clone();
    cfg.max_lag = Some(1 << 20);
    Holder::new(cfg, Time::ZERO)
}

#[test]
fn a_replicated_roles_candidate_asks_only_with_a_copy_and_asks_with_its_position() {
    use hale_control::{DataState, Mark, Standing};
    let mut h = replicated();
    h.handle_checks(ms(0), OK);
    assert_eq!(
        actions(&mut h),
        vec![Action::Event(HolderEvent::Eligible(true))],
        "healthy, but its data not measured yet: it does not ask"
    );
    assert_eq!(h.state(), RoleState::Ineligible);
    h.handle_data(ms(100), DataState::Primary(Mark::default()));
    assert_eq!(
        actions(&mut h),
        vec![],
        "a primary that is not the holder must rejoin first"
    );
    h.handle_data(ms(200), DataState::Copy(4096));
    assert_eq!(
        actions(&mut h),
        vec![Action::Send {
            id: RequestId(1),
            request: ControlRequest::Acquire(AcquireRequest {
                role: "db".into(),
                holder: "a".into(),
                priority: 5,
                attempt: 7,
                standing: Some(Standing {
                    position: 4096,
                    max_lag: 1 << 20
                }),
            }),
            deadline: ms(1700)
        }]
    );
    assert_eq!(h.state(), RoleState::Standby);
}

#[test]
fn a_replicated_roles_holder_publishes_its_mark_with_each_renewal() {
    use hale_control::{DataState, Mark};
    let mut h = replicated();
    h.handle_data(ms(0), DataState::Copy(0));
    let _hook = granted(&mut h);
    let m = Mark {
        position: 1 << 30,
        synchronous: vec!["b".into()],
        strict: false,
    };
    h.handle_data(ms(100), DataState::Primary(m.clone()));
    let _ = actions(&mut h);
    h.handle_timeout(ms(510));
    let a = actions(&mut h);
    let [Action::Send { request, .. }] = a.as_slice() else {
        panic!("{a:?}")
    };
    assert_eq!(
        *request,
        ControlRequest::Lease(LeaseRequest::Renew {
            role: "db".into(),
            holder: "a".into(),
            epoch: 7,
            mark: Some(m),
        })
    );
}

#[test]
fn a_paused_holder_keeps_its_role_while_its_checks_fail_and_steps_down_once_resumed() {
    let mut h = holding();
    // A renewal says the role is paused.
    h.handle_timeout(ms(510));
    let a = actions(&mut h);
    let [Action::Send { id, .. }] = a.as_slice() else {
        panic!("{a:?}")
    };
    h.handle_response(
        ms(520),
        *id,
        Some(LeaseResponse::Renewed {
            epoch: 7,
            paused: true,
            switchover: None,
        }),
    );
    assert!(actions(&mut h).contains(&Action::Event(HolderEvent::Paused(true))));
    // Checks fail for far longer than fail_after (3 s): it keeps renewing.
    let failing = ServiceStatus {
        healthy: false,
        ready: false,
        failing_since: Some(ms(600)),
    };
    let mut t = 600;
    let mut last = None;
    while t < 6_000 {
        t += 100;
        h.handle_checks(ms(t), failing);
        for a in actions(&mut h) {
            match a {
                Action::Send { id, .. } => {
                    h.handle_response(
                        ms(t + 5),
                        id,
                        Some(LeaseResponse::Renewed {
                            epoch: 7,
                            paused: t < 5_000,
                            switchover: None,
                        }),
                    );
                    last = Some(t);
                }
                Action::ArmWatchdog { .. } | Action::Event(HolderEvent::Eligible(_)) => {}
                Action::Event(HolderEvent::Paused(false)) => assert!(t >= 5_000),
                Action::Event(HolderEvent::SteppingDown {
                    reason: StepDownReason::ServiceFailing,
                    ..
                }) => {
                    assert!(t >= 5_000, "stepped down while paused, at {t} ms");
                    assert_eq!(h.state(), RoleState::Demoting);
                    return;
                }
                other => {
                    if t < 5_000 {
                        panic!("unexpected {other:?} while paused at {t} ms");
                    }
                }
            }
        }
    }
    panic!("never stepped down once resumed (last renewal at {last:?})");
}

/// A holder whose last committed renewal (sent at 510 ms) said the role is
/// paused.
fn holding_paused() -> Holder {
    let mut h = holding();
    h.handle_timeout(ms(510));
    let a = actions(&mut h);
    let [Action::Send { id, .. }] = a.as_slice() else {
        panic!("{a:?}")
    };
    h.handle_response(ms(520), *id, Some(renewed(7, true)));
    assert!(actions(&mut h).contains(&Action::Event(HolderEvent::Paused(true))));
    h
}

fn renewed(epoch: u64, paused: bool) -> LeaseResponse {
    LeaseResponse::Renewed {
        epoch,
        paused,
        switchover: None,
    }
}

/// The one renewal among `a`: its id.
fn sent_renewal(a: &[Action], epoch: u64) -> RequestId {
    sent(a, &renew(epoch))
}

/// The one request among `a`, which must be `request`: its id.
fn sent(a: &[Action], request: &ControlRequest) -> RequestId {
    match a {
        [Action::Send { id, request: r, .. }] if r == request => *id,
        _ => panic!("expected one {request:?} in {a:?}"),
    }
}

/// A keep of `db` at `epoch` by this node's identity.
fn keep(epoch: u64) -> ControlRequest {
    ControlRequest::Lease(LeaseRequest::Keep {
        role: "db".into(),
        holder: "a".into(),
        epoch,
        identity: ID.into(),
    })
}

/// The refusal of an adoption of a holding at `epoch` never kept by this identity.
fn not_keeper(epoch: u64) -> Option<LeaseResponse> {
    Some(LeaseResponse::Rejected(
        hale_control::LeaseRejection::NotKeeper { epoch },
    ))
}

/// An adoption of `db` at `epoch` by this node's identity.
fn adopt(epoch: u64) -> ControlRequest {
    ControlRequest::Lease(LeaseRequest::Adopt {
        role: "db".into(),
        holder: "a".into(),
        epoch,
        identity: ID.into(),
        run: 7,
    })
}

#[test]
fn a_holder_stopping_while_its_role_is_paused_keeps_it_once_a_renewal_confirms_the_pause() {
    let mut h = holding_paused();
    h.handle_stop(ms(600));
    // It renews at once, a keep that the table records, and does nothing
    // else until that answers.
    let id = sent(&actions(&mut h), &keep(7));
    assert!(!h.is_stopped());
    h.handle_response(ms(610), id, Some(renewed(7, true)));
    assert_eq!(
        actions(&mut h),
        vec![
            Action::ArmWatchdog { deadline: ms(2200) },
            Action::KeepWatchdog,
            Action::Event(HolderEvent::Kept { epoch: 7 }),
            Action::Event(HolderEvent::Stopped),
        ],
        "no demote hook, no release"
    );
    assert!(h.is_stopped());
    assert_eq!(h.poll_timeout(), None);
}

#[test]
fn a_holder_stopping_as_its_role_is_resumed_steps_down_as_usual() {
    let mut h = holding_paused();
    h.handle_stop(ms(600));
    let id = sent(&actions(&mut h), &keep(7));
    h.handle_response(ms(610), id, Some(renewed(7, false)));
    let a = actions(&mut h);
    assert!(
        a.contains(&Action::Event(HolderEvent::SteppingDown {
            epoch: 7,
            reason: StepDownReason::Leaving
        })),
        "{a:?}"
    );
    assert!(a.contains(&Action::DisarmWatchdog), "{a:?}");
    assert!(!a.contains(&Action::KeepWatchdog), "{a:?}");
}

#[test]
fn a_holding_that_ends_before_its_keep_is_confirmed_is_demoted_and_never_recorded_as_kept() {
    let mut h = holding_paused();
    h.handle_stop(ms(600));
    let _ = sent(&actions(&mut h), &keep(7));
    // The control plane does not answer: the lease runs out at 2.11 s (its
    // last committed renewal was sent at 510 ms).
    h.handle_timeout(ms(2_110));
    let a = actions(&mut h);
    assert!(
        a.contains(&Action::Event(HolderEvent::SteppingDown {
            epoch: 7,
            reason: StepDownReason::LeaseExpired
        })),
        "{a:?}"
    );
    // The step-down asks its epoch back by a plain renewal: a keep would
    // record in the table a holding whose service is being demoted, for
    // the next run to adopt as promoted.
    assert_eq!(
        sends(&a).into_iter().map(|(_, r)| r).collect::<Vec<_>>(),
        vec![renew(7)]
    );
}

#[test]
fn a_holder_stopping_while_its_role_is_not_paused_steps_down_at_once() {
    let mut h = holding();
    h.handle_stop(ms(600));
    let a = actions(&mut h);
    assert_eq!(
        a.first(),
        Some(&Action::Event(HolderEvent::SteppingDown {
            epoch: 7,
            reason: StepDownReason::Leaving
        })),
        "{a:?}"
    );
}

#[test]
fn an_adopted_role_is_held_at_its_epoch_without_a_promote_hook() {
    let mut h = holder();
    h.handle_adopt(ms(0), 7, true);
    let id = sent(&actions(&mut h), &adopt(7));
    assert!(h.is_adopting());
    // Its checks pass meanwhile: it does not ask for the role.
    h.handle_checks(ms(5), OK);
    assert_eq!(
        actions(&mut h),
        vec![Action::Event(HolderEvent::Eligible(true))]
    );
    h.handle_response(ms(20), id, Some(renewed(7, true)));
    assert_eq!(
        actions(&mut h),
        vec![
            Action::StartWatchdog {
                epoch: 7,
                deadline: ms(1600)
            },
            Action::Event(HolderEvent::Adopted { epoch: 7 }),
            Action::Event(HolderEvent::Paused(true)),
        ]
    );
    assert_eq!(h.state(), RoleState::Holder);
    assert_eq!(h.epoch(), Some(7));
    // It renews on the grid like any holder, and the watchdog is re-armed.
    assert_eq!(h.poll_timeout(), Some(ms(500)));
    h.handle_timeout(ms(500));
    let id = sent_renewal(&actions(&mut h), 7);
    h.handle_response(ms(510), id, Some(renewed(7, true)));
    assert_eq!(
        actions(&mut h),
        vec![Action::ArmWatchdog { deadline: ms(2100) }]
    );
}

#[test]
fn an_adoption_the_control_plane_refuses_runs_the_demote_hook_and_releases_nothing() {
    let mut h = holder();
    h.handle_adopt(ms(0), 7, true);
    let id = sent(&actions(&mut h), &adopt(7));
    h.handle_response(
        ms(20),
        id,
        Some(LeaseResponse::Rejected(
            hale_control::LeaseRejection::NotHolder {
                holder: "a".into(),
                epoch: 7,
            },
        )),
    );
    let a = actions(&mut h);
    let demote = match a.as_slice() {
        [Action::Event(HolderEvent::SteppingDown {
            epoch: 7,
            reason: StepDownReason::Fenced,
        }), Action::StartHook {
            id,
            kind: HookKind::Demote,
            epoch: 7,
            reason: HookReason::StepDown(StepDownReason::Fenced),
        }] => *id,
        _ => panic!("{a:?}"),
    };
    h.handle_hook_exit(ms(100), demote, HookExit::Succeeded);
    let a = actions(&mut h);
    assert!(
        a.iter().all(|x| !matches!(
            x,
            Action::Send {
                request: ControlRequest::Lease(LeaseRequest::Release { .. }),
                ..
            }
        )),
        "a fenced holding releases nothing: {a:?}"
    );
    assert!(a.contains(&Action::Event(HolderEvent::Demoted {
        epoch: 7,
        reason: StepDownReason::Fenced,
        promote: None,
        demote: HookOutcome::Succeeded,
    })));
    assert!(!h.is_adopting());
}

#[test]
fn an_unanswered_adoption_is_asked_again_after_a_fifth_of_the_interval() {
    let mut h = holder();
    h.handle_adopt(ms(0), 7, true);
    let id = sent(&actions(&mut h), &adopt(7));
    h.handle_response(ms(1500), id, None);
    assert_eq!(actions(&mut h), vec![]);
    assert_eq!(h.poll_timeout(), Some(ms(1600)));
    h.handle_timeout(ms(1600));
    let id = sent(&actions(&mut h), &adopt(7));
    h.handle_response(ms(1610), id, Some(renewed(7, true)));
    assert_eq!(h.state(), RoleState::Holder);
    assert_eq!(h.lease_valid_until(), Some(ms(3200)));
}

#[test]
fn a_retuned_holder_keeps_its_holding_and_asks_with_the_new_priority_next_time() {
    let mut h = holding();
    h.retune(9, true, Duration::from_secs(4), Duration::from_secs(1));
    assert_eq!(actions(&mut h), vec![], "a retune does nothing by itself");
    assert_eq!((h.state(), h.epoch()), (RoleState::Holder, Some(7)));
    assert_eq!(h.config().priority, 9);
    // Handed over, it stands aside one lease, then asks at its new priority.
    h.handle_handover(ms(200), None);
    let _ = actions(&mut h);
    h.handle_watchdog_released(ms(210), false);
    let demote = actions(&mut h)
        .into_iter()
        .find_map(|a| match a {
            Action::StartHook { id, .. } => Some(id),
            _ => None,
        })
        .expect("the demote hook");
    h.handle_hook_exit(ms(300), demote, HookExit::Succeeded);
    let _ = actions(&mut h);
    h.handle_checks(ms(2400), OK);
    let asked = actions(&mut h).into_iter().find_map(|a| match a {
        Action::Send {
            request: ControlRequest::Acquire(r),
            ..
        } => Some(r.priority),
        _ => None,
    });
    assert_eq!(asked, Some(9));
}

#[test]
fn a_keep_and_an_adoption_refused_as_too_new_go_by_plain_renewals_as_the_previous_release_did() {
    // A server of the previous release: Keep is refused as too new.
    let mut h = holding_paused();
    h.handle_stop(ms(600));
    let id = sent(&actions(&mut h), &keep(7));
    h.handle_too_new(ms(605), id);
    assert_eq!(h.poll_timeout(), Some(ms(705)));
    h.handle_timeout(ms(705));
    let id = sent_renewal(&actions(&mut h), 7);
    h.handle_response(ms(710), id, Some(renewed(7, true)));
    assert!(actions(&mut h).contains(&Action::Event(HolderEvent::Kept { epoch: 7 })));
    // Its next run (the table records no keep): Adopt refused as too new,
    // asked again as an adoption for 5 s (a new leader may not have heard
    // every server yet), then adopted by a renewal.
    let mut h = holder();
    h.handle_adopt(ms(0), 7, false);
    let mut id = sent(&actions(&mut h), &adopt(7));
    let mut t = 0;
    loop {
        h.handle_too_new(ms(t + 5), id);
        t += 100;
        h.handle_timeout(ms(t + 5));
        let a = actions(&mut h);
        if a.iter()
            .any(|x| matches!(x, Action::Send { request, .. } if *request == renew(7)))
        {
            id = sent(&a, &renew(7));
            break;
        }
        id = sent(&a, &adopt(7));
        assert!(t < 6_000, "never fell back to a renewal");
    }
    assert!(t >= 5_000, "fell back after {t} ms, before 5 s");
    h.handle_response(ms(t + 10), id, Some(renewed(7, true)));
    assert_eq!(h.state(), RoleState::Holder);
}

/// A holding handed over at 200 ms: the demote hook's id (the watchdog
/// released, not fenced).
fn handing_over(h: &mut Holder) -> HookId {
    h.handle_handover(ms(200), None);
    let a = actions(h);
    assert!(a.contains(&Action::DisarmWatchdog), "{a:?}");
    h.handle_watchdog_released(ms(201), false);
    match actions(h).as_slice() {
        [Action::StartHook {
            id,
            kind: HookKind::Demote,
            ..
        }] => *id,
        a => panic!("no demote in {a:?}"),
    }
}

fn releases(a: &[Action]) -> bool {
    a.iter().any(|x| {
        matches!(
            x,
            Action::Send {
                request: ControlRequest::Lease(LeaseRequest::Release { .. }),
                ..
            }
        )
    })
}

#[test]
fn a_demote_that_fails_is_retried_with_backoff_and_the_role_is_released_only_once_it_succeeds() {
    let mut h = holding();
    let mut demote = handing_over(&mut h);
    // Three failures, each an event, retried after 0.5, 1 and 2 s; the
    // lease is renewed all along, and nothing is released.
    let mut now = 300;
    for (failures, wait) in [(1u32, 500u64), (2, 1000), (3, 2000)] {
        h.handle_hook_exit(ms(now), demote, HookExit::Failed);
        let a = actions(&mut h);
        assert_eq!(
            a,
            vec![Action::Event(HolderEvent::DemoteFailed {
                epoch: 7,
                reason: StepDownReason::Handover,
                outcome: HookOutcome::Failed,
                failures,
                retry_in: Duration::from_millis(wait),
            })]
        );
        assert_eq!(h.state(), RoleState::Demoting);
        // Renewals go on until the retry is due.
        let retry = now + wait;
        let mut started = None;
        while started.is_none() {
            let t = h.poll_timeout().expect("a deadline");
            assert!(t <= ms(retry), "{t:?} after the retry at {retry}");
            h.handle_timeout(t);
            for x in actions(&mut h) {
                match x {
                    Action::Send { id, request, .. } => {
                        assert_eq!(request, renew(7), "only renewals while demoting");
                        h.handle_response(t, id, Some(renewed(7, false)));
                        assert!(!releases(&actions(&mut h)));
                    }
                    Action::StartHook {
                        id,
                        kind: HookKind::Demote,
                        epoch: 7,
                        reason: HookReason::StepDown(StepDownReason::Handover),
                    } => started = Some((t, id)),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        let (t, id) = started.expect("the demote ran again");
        assert_eq!(t, ms(retry), "retried at its backoff");
        (now, demote) = (retry + 100, id);
    }
    assert!(h.lease_valid_until().is_some(), "the lease is kept");
    h.handle_hook_exit(ms(now), demote, HookExit::Succeeded);
    let a = actions(&mut h);
    assert!(releases(&a), "released once the demote succeeded: {a:?}");
    assert!(a.contains(&Action::Event(HolderEvent::Demoted {
        epoch: 7,
        reason: StepDownReason::Handover,
        promote: None,
        demote: HookOutcome::Succeeded,
    })));
}

#[test]
fn the_backoff_of_a_failing_demote_doubles_up_to_five_seconds() {
    let mut h = holding();
    let mut demote = handing_over(&mut h);
    let mut now = 300;
    let mut waits = Vec::new();
    for _ in 0..6 {
        h.handle_hook_exit(ms(now), demote, HookExit::Failed);
        let Some(Action::Event(HolderEvent::DemoteFailed { retry_in, .. })) = h.poll_action()
        else {
            panic!("no demote-failed event")
        };
        waits.push(retry_in.as_millis() as u64);
        now += retry_in.as_millis() as u64;
        // Only the retry matters here: renewals are answered.
        loop {
            h.handle_timeout(ms(now));
            let a = actions(&mut h);
            if let Some(id) = a.iter().find_map(|x| match x {
                Action::StartHook { id, .. } => Some(*id),
                _ => None,
            }) {
                demote = id;
                break;
            }
            for x in a {
                if let Action::Send { id, .. } = x {
                    h.handle_response(ms(now), id, Some(renewed(7, false)));
                }
            }
        }
    }
    assert_eq!(waits, vec![500, 1000, 2000, 4000, 5000, 5000]);
}

#[test]
fn a_renewal_answered_after_the_lease_ended_changes_nothing() {
    let mut h = holding();
    // A renewal sent at 510 ms, answered only at 1,700 ms: the lease (from
    // the grant's request at 0 ms) ended at 1,600 ms.
    h.handle_timeout(ms(510));
    let id = sent_renewal(&actions(&mut h), 7);
    h.handle_response(ms(1_700), id, Some(renewed(7, false)));
    let a = actions(&mut h);
    assert!(
        !a.iter().any(|x| matches!(x, Action::ArmWatchdog { .. })),
        "the watchdog is not re-armed: {a:?}"
    );
    assert_eq!(
        a.first(),
        Some(&Action::Event(HolderEvent::SteppingDown {
            epoch: 7,
            reason: StepDownReason::LeaseExpired
        })),
        "{a:?}"
    );
    assert_eq!(h.lease_valid_until(), None);
}

#[test]
fn a_demote_failing_for_longer_than_the_hook_timeout_stops_rearming_the_watchdog_so_that_it_fences()
{
    let mut h = holding();
    let first = handing_over(&mut h);
    h.handle_hook_exit(ms(300), first, HookExit::Failed);
    let _ = actions(&mut h);
    // Drive it for 12 s: every renewal answered, every demote run failing.
    let (mut armed_before, mut armed_after) = (false, false);
    while let Some(t) = h.poll_timeout().filter(|t| *t < ms(12_000)) {
        h.handle_timeout(t);
        for x in actions(&mut h) {
            match x {
                Action::Send { id, .. } => {
                    h.handle_response(t, id, Some(renewed(7, false)));
                    let rearmed = actions(&mut h)
                        .iter()
                        .any(|a| matches!(a, Action::ArmWatchdog { .. }));
                    // The first failure was at 300 ms; the hook timeout is 10 s.
                    if t < ms(10_300) {
                        armed_before |= rearmed;
                    } else {
                        armed_after |= rearmed;
                    }
                }
                Action::StartHook { id, .. } => h.handle_hook_exit(t, id, HookExit::Failed),
                _ => {}
            }
        }
        let _ = actions(&mut h);
    }
    assert!(
        armed_before,
        "renewals re-arm the watchdog while the demote is retried"
    );
    assert!(
        !armed_after,
        "past the bound the watchdog's deadline stands"
    );
    assert!(
        h.lease_valid_until().is_some(),
        "the lease is still renewed"
    );
    assert_eq!(h.state(), RoleState::Demoting);
}

#[test]
fn an_adoption_of_a_kept_holding_refused_as_too_new_is_asked_again_as_an_adoption() {
    // The table records the keep: every server applied a protocol-3 entry,
    // so the refusal is a new leader that has not heard them all yet.
    let mut h = holder();
    h.handle_adopt(ms(0), 7, true);
    let id = sent(&actions(&mut h), &adopt(7));
    h.handle_too_new(ms(5), id);
    h.handle_timeout(ms(105));
    let id = sent(&actions(&mut h), &adopt(7));
    h.handle_response(ms(110), id, Some(renewed(7, true)));
    assert_eq!(h.state(), RoleState::Holder);
}

#[test]
fn a_stopping_holder_stops_only_once_its_release_is_answered() {
    let mut h = holding();
    h.handle_stop(ms(600));
    let _ = actions(&mut h);
    h.handle_watchdog_released(ms(601), false);
    let demote = match actions(&mut h).as_slice() {
        [Action::StartHook { id, .. }] => *id,
        a => panic!("{a:?}"),
    };
    h.handle_hook_exit(ms(700), demote, HookExit::Succeeded);
    let a = actions(&mut h);
    let release = a
        .iter()
        .find_map(|x| match x {
            Action::Send {
                id,
                request: ControlRequest::Lease(LeaseRequest::Release { .. }),
                ..
            } => Some(*id),
            _ => None,
        })
        .expect("a release");
    assert!(!a.contains(&Action::Event(HolderEvent::Stopped)), "{a:?}");
    assert!(!h.is_stopped());
    h.handle_response(ms(720), release, Some(LeaseResponse::Released));
    assert_eq!(actions(&mut h), vec![Action::Event(HolderEvent::Stopped)]);
    assert!(h.is_stopped());
}

#[test]
fn an_adoption_of_a_holding_this_node_never_kept_adopts_and_demotes_nothing() {
    let mut h = holder();
    h.handle_adopt(ms(0), 7, false);
    let id = sent(&actions(&mut h), &adopt(7));
    h.handle_response(ms(20), id, not_keeper(7));
    assert_eq!(
        actions(&mut h),
        vec![Action::Event(HolderEvent::NotAdopted { epoch: 7 })]
    );
    assert!(!h.is_adopting());
    assert_eq!(h.epoch(), None);
}

#[test]
fn after_an_older_release_a_holding_never_recorded_as_kept_is_adopted_by_a_plain_renewal() {
    // The previous run was 0.1.0 (the agent migrated its files): it kept
    // the paused role by renewals alone and could not record the keep.
    let mut h = holder_with(|c| c.after_older_release = true);
    h.handle_adopt(ms(0), 7, false);
    let id = sent(&actions(&mut h), &adopt(7));
    h.handle_response(ms(20), id, not_keeper(7));
    // No event, no hook: asked again at once, the way that release kept it.
    let id = sent_renewal(&actions(&mut h), 7);
    assert!(h.is_adopting());
    h.handle_response(ms(30), id, Some(renewed(7, true)));
    assert_eq!(
        actions(&mut h),
        vec![
            Action::StartWatchdog {
                epoch: 7,
                deadline: ms(1620)
            },
            Action::Event(HolderEvent::Adopted { epoch: 7 }),
            Action::Event(HolderEvent::Paused(true)),
        ]
    );
    assert_eq!(h.epoch(), Some(7));
}
