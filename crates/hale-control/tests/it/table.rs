//! The replicated lease table's rules.

use hale_control::{LeaseRejection, LeaseRequest, LeaseResponse, LeaseTable, Origin};

fn grant(holder: &str, epoch: u64) -> LeaseRequest {
    LeaseRequest::Grant {
        role: "db".into(),
        holder: holder.into(),
        epoch,
        attempt: 0,
        origin: Origin::default(),
    }
}

#[test]
fn grants_must_carry_the_next_epoch() {
    let mut t = LeaseTable::default();
    assert_eq!(t.apply(&grant("a", 1)), LeaseResponse::Granted { epoch: 1 });
    assert_eq!(
        t.apply(&grant("b", 1)),
        LeaseResponse::Rejected(LeaseRejection::NotNextEpoch {
            got: 1,
            expected: 2
        })
    );
    assert_eq!(t.role("db").unwrap().holder.as_deref(), Some("a"));
    assert_eq!(t.apply(&grant("b", 2)), LeaseResponse::Granted { epoch: 2 });
}

#[test]
fn only_the_holder_at_its_epoch_renews_or_releases() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1));
    let renew = |h: &str, e| LeaseRequest::Renew {
        role: "db".into(),
        holder: h.into(),
        epoch: e,
        mark: None,
    };
    assert_eq!(
        t.apply(&renew("a", 1)),
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        }
    );
    assert!(matches!(
        t.apply(&renew("b", 1)),
        LeaseResponse::Rejected(_)
    ));
    t.apply(&grant("b", 2));
    assert!(
        matches!(t.apply(&renew("a", 1)), LeaseResponse::Rejected(_)),
        "a fenced holder cannot renew"
    );
    let release = LeaseRequest::Release {
        role: "db".into(),
        holder: "b".into(),
        epoch: 2,
        next: None,
        reason: None,
        origin: Origin::default(),
    };
    assert_eq!(t.apply(&release), LeaseResponse::Released);
    assert_eq!(t.role("db").unwrap().holder, None);
    assert_eq!(
        t.role("db").unwrap().epoch,
        2,
        "the epoch survives a release"
    );
}

#[test]
fn the_same_acquisition_attempt_is_granted_the_same_epoch_again_and_no_other_is() {
    let mut t = LeaseTable::default();
    let attempt = |holder: &str, epoch: u64, attempt: u64| LeaseRequest::Grant {
        role: "db".into(),
        holder: holder.into(),
        epoch,
        attempt,
        origin: Origin::default(),
    };
    assert_eq!(
        t.apply(&attempt("a", 1, 7)),
        LeaseResponse::Granted { epoch: 1 }
    );
    // Its answer was lost: the same attempt again gets the same epoch.
    assert_eq!(
        t.apply(&attempt("a", 1, 7)),
        LeaseResponse::Granted { epoch: 1 }
    );
    // Another attempt (a later candidacy), or another node, does not.
    assert!(matches!(
        t.apply(&attempt("a", 1, 8)),
        LeaseResponse::Rejected(LeaseRejection::NotNextEpoch { .. })
    ));
    assert!(matches!(
        t.apply(&attempt("b", 1, 7)),
        LeaseResponse::Rejected(LeaseRejection::NotNextEpoch { .. })
    ));
    // Released, the attempt is over.
    t.apply(&LeaseRequest::Release {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        next: None,
        reason: None,
        origin: Origin::default(),
    });
    assert!(matches!(
        t.apply(&attempt("a", 1, 7)),
        LeaseResponse::Rejected(_)
    ));
}

#[test]
fn the_grantor_answers_a_holders_own_attempt_at_once_and_makes_any_other_wait_a_lease() {
    use hale_control::{AppendClock, Grantor, LeaseTiming};
    use hale_core::Time;
    let timing = LeaseTiming::default();
    let mut g = Grantor::new(timing);
    let mut clock = AppendClock::new(Time::ZERO);
    let mut t = LeaseTable::default();
    let first = LeaseRequest::Grant {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        attempt: 7,
        origin: Origin::default(),
    };
    t.apply(&first);
    let at = Time::from_millis(10_000);
    clock.appended(&first, at);
    let soon = Time::from_millis(10_100);
    let ask = |holder: &str, attempt: u64| hale_control::raft::AcquireRequest {
        role: "db".into(),
        holder: holder.into(),
        priority: 0,
        attempt,
        standing: None,
    };
    assert_eq!(
        g.contend(&t, &clock, &ask("a", 7), soon),
        Ok(first.clone()),
        "the same attempt: the same grant, at once"
    );
    assert!(
        g.contend(&t, &clock, &ask("a", 8), soon).is_err(),
        "a new attempt waits for the lease like anyone"
    );
    assert!(g.contend(&t, &clock, &ask("b", 7), soon).is_err());
}

#[test]
fn a_batch_applies_each_request_in_order_and_refuses_a_batch_inside_it() {
    let mut t = LeaseTable::default();
    let renew = |e| LeaseRequest::Renew {
        role: "db".into(),
        holder: "a".into(),
        epoch: e,
        mark: None,
    };
    let batch = LeaseRequest::Batch(vec![
        renew(1),
        grant("a", 1),
        renew(1),
        LeaseRequest::Batch(vec![grant("b", 2)]),
    ]);
    let LeaseResponse::Batch(r) = t.apply(&batch) else {
        panic!("not a batch answer")
    };
    assert!(matches!(
        r[0],
        LeaseResponse::Rejected(LeaseRejection::NotHolder { .. })
    ));
    assert_eq!(r[1], LeaseResponse::Granted { epoch: 1 });
    assert_eq!(
        r[2],
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        }
    );
    assert_eq!(r[3], LeaseResponse::Rejected(LeaseRejection::NestedBatch));
    assert_eq!(t.role("db").unwrap().holder.as_deref(), Some("a"));
}

#[test]
fn renewals_of_many_roles_answer_role_by_role() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1));
    let renewals = LeaseRequest::Renewals {
        holder: "a".into(),
        leases: vec![("db".into(), 1), ("db".into(), 2), ("cache".into(), 1)],
        marks: Vec::new(),
    };
    let LeaseResponse::Batch(r) = t.apply(&renewals) else {
        panic!("not a batch answer")
    };
    assert_eq!(
        r[0],
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        }
    );
    assert!(matches!(
        r[1],
        LeaseResponse::Rejected(LeaseRejection::NotHolder { epoch: 2, .. })
    ));
    assert!(matches!(
        r[2],
        LeaseResponse::Rejected(LeaseRejection::NotHolder { .. })
    ));
}

#[test]
fn renewing_or_releasing_a_role_never_granted_is_refused_and_leaves_the_table_as_it_was() {
    let mut t = LeaseTable::default();
    let not_holder = LeaseResponse::Rejected(LeaseRejection::NotHolder {
        holder: "a".into(),
        epoch: 0,
    });
    let renewals = LeaseRequest::Renewals {
        holder: "a".into(),
        leases: vec![("db".into(), 0)],
        marks: Vec::new(),
    };
    assert_eq!(
        t.apply(&renewals),
        LeaseResponse::Batch(vec![not_holder.clone()])
    );
    let release = LeaseRequest::Release {
        role: "db".into(),
        holder: "a".into(),
        epoch: 0,
        next: None,
        reason: None,
        origin: Origin::default(),
    };
    assert_eq!(t.apply(&release), not_holder);
    assert_eq!(t, LeaseTable::default());
    assert!(t.role("db").is_none());
}

#[test]
fn a_paused_role_is_granted_to_nobody_its_renewals_say_so_and_resuming_lifts_it() {
    use hale_control::{AppendClock, GrantDelay, Grantor, LeaseTiming};
    use hale_core::Time;
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1));
    let pause = |paused| LeaseRequest::Pause {
        force: false,
        role: "db".into(),
        paused,
        origin: Origin::default(),
    };
    assert_eq!(t.apply(&pause(true)), LeaseResponse::Paused(true));
    let renew = LeaseRequest::Renew {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        mark: None,
    };
    assert_eq!(
        t.apply(&renew),
        LeaseResponse::Renewed {
            epoch: 1,
            paused: true,
            switchover: None,
        }
    );
    // Long after a's last renewal, b still may not take it.
    let mut g = Grantor::new(LeaseTiming::default());
    let clock = AppendClock::new(Time::ZERO);
    let late = Time::from_millis(600_000);
    assert_eq!(g.may_grant(&t, &clock, "db", late), Err(GrantDelay::Paused));
    let ask = hale_control::raft::AcquireRequest {
        role: "db".into(),
        holder: "b".into(),
        priority: 0,
        attempt: 1,
        standing: None,
    };
    assert_eq!(g.contend(&t, &clock, &ask, late), Err(GrantDelay::Paused));
    assert_eq!(t.apply(&pause(false)), LeaseResponse::Paused(false));
    assert_eq!(g.may_grant(&t, &clock, "db", late), Ok(()));
    assert_eq!(
        t.apply(&renew),
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        }
    );
}

fn order(epoch: u64, to: Option<&str>, at: u64) -> LeaseRequest {
    LeaseRequest::Switchover {
        role: "db".into(),
        epoch,
        to: to.map(str::to_owned),
        at_unix_ms: at,
        origin: Origin::default(),
    }
}

fn renew_db(holder: &str, epoch: u64) -> LeaseRequest {
    LeaseRequest::Renew {
        role: "db".into(),
        holder: holder.into(),
        epoch,
        mark: None,
    }
}

#[test]
fn a_switchover_order_reaches_the_holder_in_its_renewals_until_cancelled() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1));
    let ordered = hale_control::Switchover {
        to: "b".into(),
        at_unix_ms: 5_000,
    };
    assert_eq!(
        t.apply(&order(1, Some("b"), 5_000)),
        LeaseResponse::SwitchoverOrdered(Some(ordered.clone()))
    );
    assert_eq!(
        t.apply(&renew_db("a", 1)),
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: Some(ordered),
        }
    );
    assert_eq!(
        t.apply(&order(1, None, 0)),
        LeaseResponse::SwitchoverOrdered(None)
    );
    assert_eq!(
        t.apply(&renew_db("a", 1)),
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None,
        }
    );
}

#[test]
fn a_switchover_order_dies_with_its_holding_and_never_moves_the_next_holder() {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1));
    t.apply(&order(1, Some("b"), 0));
    t.apply(&LeaseRequest::Release {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        next: Some("b".into()),
        reason: None,
        origin: Origin::default(),
    });
    assert_eq!(t.role("db").unwrap().switchover, None);
    t.apply(&grant("b", 2));
    assert_eq!(
        t.apply(&renew_db("b", 2)),
        LeaseResponse::Renewed {
            epoch: 2,
            paused: false,
            switchover: None,
        }
    );
    // An order for the holding that is over changes nothing.
    let before = t.clone();
    assert_eq!(
        t.apply(&order(1, Some("c"), 0)),
        LeaseResponse::Rejected(LeaseRejection::NotHeld { epoch: 1 })
    );
    assert_eq!(t, before);
    // A grant over an expired lease clears an order too.
    t.apply(&order(2, Some("c"), 0));
    t.apply(&grant("c", 3));
    assert_eq!(t.role("db").unwrap().switchover, None);
}

#[test]
fn a_paused_role_takes_no_switchover_order_and_a_role_never_held_takes_none() {
    let mut t = LeaseTable::default();
    assert_eq!(
        t.apply(&order(0, Some("b"), 0)),
        LeaseResponse::Rejected(LeaseRejection::NotHeld { epoch: 0 })
    );
    assert_eq!(t, LeaseTable::default());
    t.apply(&grant("a", 1));
    t.apply(&LeaseRequest::Pause {
        role: "db".into(),
        paused: true,
        force: false,
        origin: Origin::default(),
    });
    let before = t.clone();
    assert_eq!(
        t.apply(&order(1, Some("b"), 0)),
        LeaseResponse::Rejected(LeaseRejection::Paused)
    );
    assert_eq!(t, before);
}

#[test]
fn resuming_a_paused_role_is_refused_once_its_holder_has_been_silent_for_longer_than_a_lease() {
    use hale_control::lease::resume_check;
    use hale_control::{AppendClock, ResumeRefused};
    use hale_core::Time;
    use std::time::Duration;
    let lease = hale_control::LeaseTiming::default();
    let mut t = LeaseTable::default();
    let mut clock = AppendClock::new(Time::ZERO);
    let g = grant("a", 1);
    t.apply(&g);
    clock.appended(&g, Time::from_millis(100));
    // Not paused: nothing to check.
    assert_eq!(
        resume_check(&t, &clock, "db", Time::from_secs(60), lease, false, false),
        Ok(())
    );
    t.apply(&LeaseRequest::Pause {
        role: "db".into(),
        paused: true,
        force: false,
        origin: Origin::default(),
    });
    // The holder renewed within a lease: resumed at once.
    assert_eq!(
        resume_check(
            &t,
            &clock,
            "db",
            Time::from_millis(2100),
            lease,
            false,
            false
        ),
        Ok(())
    );
    // Silent for longer: refused, naming the holder and the silence.
    let refused = resume_check(
        &t,
        &clock,
        "db",
        Time::from_millis(5100),
        lease,
        false,
        false,
    )
    .unwrap_err();
    assert_eq!(
        refused,
        ResumeRefused::HolderSilent {
            holder: "a".into(),
            silent: Duration::from_secs(5),
        }
    );
    let said = refused.to_string();
    assert!(
        said.contains("a holds the role") && said.contains("5.0 s"),
        "{said}"
    );
    assert!(said.contains("--force"), "{said}");
    // Forced: the operator says the service is stopped.
    assert_eq!(
        resume_check(
            &t,
            &clock,
            "db",
            Time::from_millis(5100),
            lease,
            true,
            false
        ),
        Ok(())
    );
    // Once every server records keeps, a silent holding that is not kept
    // is a dead one (crashed and fenced, or its host died): resumed.
    assert_eq!(
        resume_check(
            &t,
            &clock,
            "db",
            Time::from_millis(5100),
            lease,
            false,
            true
        ),
        Ok(())
    );
    // Released meanwhile (its holder stepped down): nobody to fence.
    t.apply(&LeaseRequest::Release {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        next: None,
        reason: None,
        origin: Origin::default(),
    });
    assert_eq!(
        resume_check(&t, &clock, "db", Time::from_secs(60), lease, false, false),
        Ok(())
    );
}

fn keep_req(identity: &str) -> LeaseRequest {
    LeaseRequest::Keep {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        identity: identity.into(),
    }
}

fn adopt_req(identity: &str) -> LeaseRequest {
    adopt_by(identity, 1)
}

/// An adoption by run `run` of the node `identity`.
fn adopt_by(identity: &str, run: u64) -> LeaseRequest {
    LeaseRequest::Adopt {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        identity: identity.into(),
        run,
    }
}

fn paused_and_held() -> LeaseTable {
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1));
    t.apply(&LeaseRequest::Pause {
        role: "db".into(),
        paused: true,
        force: false,
        origin: Origin::default(),
    });
    t
}

#[test]
fn a_keep_is_recorded_only_while_the_role_is_paused_and_only_its_keeper_adopts_it() {
    // Not paused: the keep is answered as a renewal that says so, and
    // nothing is recorded (the holder steps down instead).
    let mut t = LeaseTable::default();
    t.apply(&grant("a", 1));
    assert_eq!(
        t.apply(&keep_req("a@m1")),
        LeaseResponse::Renewed {
            epoch: 1,
            paused: false,
            switchover: None
        }
    );
    assert_eq!(t.role("db").unwrap().kept, None);
    // Paused: recorded.
    let mut t = paused_and_held();
    assert!(matches!(
        t.apply(&keep_req("a@m1")),
        LeaseResponse::Renewed { paused: true, .. }
    ));
    assert_eq!(t.role("db").unwrap().kept.as_deref(), Some("a@m1"));
    // Another identity under the same name cannot adopt it; nothing changes.
    let before = t.clone();
    assert_eq!(
        t.apply(&adopt_req("a@m2")),
        LeaseResponse::Rejected(LeaseRejection::NotKeeper { epoch: 1 })
    );
    assert_eq!(t, before);
    // Its keeper does, and the holding is no longer kept.
    assert!(matches!(
        t.apply(&adopt_req("a@m1")),
        LeaseResponse::Renewed { paused: true, .. }
    ));
    assert_eq!(t.role("db").unwrap().kept, None);
    // The same adoption asked again (its answer lost) is answered again;
    // another identity still is not.
    assert!(matches!(
        t.apply(&adopt_req("a@m1")),
        LeaseResponse::Renewed { paused: true, .. }
    ));
    assert_eq!(
        t.apply(&adopt_req("a@m2")),
        LeaseResponse::Rejected(LeaseRejection::NotKeeper { epoch: 1 })
    );
    // A later run of the same node is not that adoption: the run that
    // adopted crashed holding it (not kept), and its watchdog fences it.
    let before = t.clone();
    assert_eq!(
        t.apply(&adopt_by("a@m1", 2)),
        LeaseResponse::Rejected(LeaseRejection::NotKeeper { epoch: 1 })
    );
    assert_eq!(t, before);
}

#[test]
fn a_holding_never_kept_cannot_be_adopted() {
    // Its agent crashed while the role was paused: its watchdog fenced the
    // service, so a later run must not take the holding back as running.
    let mut t = paused_and_held();
    assert_eq!(
        t.apply(&adopt_req("a@m1")),
        LeaseResponse::Rejected(LeaseRejection::NotKeeper { epoch: 1 })
    );
}

#[test]
fn a_grant_or_a_release_ends_a_kept_holding() {
    let mut t = paused_and_held();
    t.apply(&keep_req("a@m1"));
    t.apply(&LeaseRequest::Release {
        role: "db".into(),
        holder: "a".into(),
        epoch: 1,
        next: None,
        reason: None,
        origin: Origin::default(),
    });
    assert_eq!(t.role("db").unwrap().kept, None);
}

#[test]
fn a_kept_holding_is_resumed_only_with_force_and_only_a_lease_and_the_drift_margin_after_its_last_renewal(
) {
    use hale_control::lease::resume_check;
    use hale_control::{AppendClock, ResumeRefused};
    use hale_core::Time;
    use std::time::Duration;
    let timing = hale_control::LeaseTiming::default();
    let mut t = paused_and_held();
    let mut clock = AppendClock::new(Time::ZERO);
    let keep = keep_req("a@m1");
    t.apply(&keep);
    clock.appended(&keep, Time::from_millis(1000));
    // 0.5 s after the keep (the agent has just exited): refused, even
    // though the holder is not yet silent for a lease.
    let at = |ms| Time::from_millis(ms);
    let refused = resume_check(&t, &clock, "db", at(1500), timing, false, true).unwrap_err();
    assert_eq!(
        refused,
        ResumeRefused::Kept {
            holder: "a".into(),
            silent: Duration::from_millis(500),
            force_in: Duration::from_millis(1900),
        }
    );
    let said = refused.to_string();
    assert!(
        said.contains("Start hale on a") && said.contains("--force"),
        "{said}"
    );
    // Forced too early: refused, saying when it will be accepted.
    assert!(resume_check(&t, &clock, "db", at(1500), timing, true, true).is_err());
    // Not forced, however long it waits: refused.
    assert!(resume_check(&t, &clock, "db", at(60_000), timing, false, true).is_err());
    // Forced a lease plus the drift margin (2.4 s) after the keep: accepted.
    assert!(resume_check(&t, &clock, "db", at(3399), timing, true, true).is_err());
    assert_eq!(
        resume_check(&t, &clock, "db", at(3400), timing, true, true),
        Ok(())
    );
    // Adopted by its keeper: resumed at once, as any renewing holder.
    let adopt = adopt_req("a@m1");
    t.apply(&adopt);
    clock.appended(&adopt, Time::from_millis(4000));
    assert_eq!(
        resume_check(&t, &clock, "db", at(4100), timing, false, true),
        Ok(())
    );
}

#[test]
fn while_the_churn_breaker_is_open_a_run_out_role_goes_back_to_its_living_holder_not_to_a_better_candidate(
) {
    use hale_control::{AppendClock, GrantDelay, Grantor, LeaseTiming};
    use hale_core::Time;
    let timing = LeaseTiming::default();
    let ask = |holder: &str, priority: i64| hale_control::raft::AcquireRequest {
        role: "db".into(),
        holder: holder.into(),
        priority,
        attempt: 1,
        standing: None,
    };
    let granted_at = Time::from_millis(10_000);
    let setup = |elected: Time| {
        let mut t = LeaseTable::default();
        let mut clock = AppendClock::new(Time::ZERO);
        let first = grant("a", 1);
        t.apply(&first);
        clock.appended(&first, granted_at);
        (Grantor::elected_at(timing, elected), t, clock)
    };
    // The lease of `a` ran out at 12 s; a leader elected at 11.5 s (the
    // stall that elected it cost `a` its renewals) still hears `a`.
    let (mut g, t, clock) = setup(Time::from_millis(11_500));
    let now = Time::from_millis(12_100);
    g.heard("a", now);
    let held = g.contend(&t, &clock, &ask("b", 100), now);
    assert!(
        matches!(&held, Err(GrantDelay::Stabilizing { holder, .. }) if holder == "a"),
        "{held:?}"
    );
    let back = g.contend(&t, &clock, &ask("a", 1), Time::from_millis(12_300));
    let granted = |holder: &str| LeaseRequest::Grant {
        role: "db".into(),
        holder: holder.into(),
        epoch: 2,
        attempt: 1,
        origin: Origin::default(),
    };
    assert_eq!(
        back,
        Ok(granted("a")),
        "back to its last holder, whatever its priority"
    );
    // The same with a leader in office for long, no burst: the better
    // candidate wins as always.
    let (mut g, t, clock) = setup(Time::ZERO);
    g.heard("a", now);
    let _ = g.contend(&t, &clock, &ask("b", 100), now);
    let _ = g.contend(&t, &clock, &ask("a", 1), now);
    let later = now + timing.renew_every * 2;
    assert!(
        matches!(g.contend(&t, &clock, &ask("a", 1), later), Err(GrantDelay::BetterCandidate(b)) if b == "b")
    );
    assert_eq!(
        g.contend(&t, &clock, &ask("b", 100), later),
        Ok(granted("b"))
    );
}
