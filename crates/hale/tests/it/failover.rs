//! Roles and failover with real agent processes on loopback: three agents,
//! each a control-plane server and a candidate for role `db` (priorities
//! 100, 50, 10). Hooks append to one log with the machine's clock; every
//! test ends by running the history checker over it.

use hale_agent::view::MemberState;
use std::time::Duration;

use hale_control::{check, HookEvent, HookKind, RoleState};
use nix::sys::signal::Signal;

use crate::support::{
    demote_claim, descendants, during, hook_history, wait_for, wait_until, Cluster,
};

/// The hook history of a role cluster (its `hooks.log`).
pub(crate) fn history(c: &Cluster) -> Vec<HookEvent> {
    hook_history(&c.path("hooks.log"))
}

pub(crate) fn first_holder(c: &Cluster) -> (String, u64) {
    wait_for(
        Duration::from_secs(30),
        "the best candidate holds db",
        || c.holder().filter(|(h, _)| h == "n0"),
    )
}

/// When `node`'s `kind` hook at `epoch` ran, if it did.
fn hook_time(h: &[HookEvent], node: &str, epoch: u64, kind: HookKind) -> Option<u64> {
    h.iter()
        .find(|e| e.node == node && e.epoch == epoch && e.kind == kind)
        .map(|e| e.at_nanos)
}

fn promote_time(h: &[HookEvent], node: &str, epoch: u64) -> Option<u64> {
    hook_time(h, node, epoch, HookKind::Promote)
}

fn demote_time(h: &[HookEvent], node: &str, epoch: u64) -> Option<u64> {
    hook_time(h, node, epoch, HookKind::Demote)
}

/// The hook history once `node`'s promote hook at `epoch` has run.
fn promoted(c: &Cluster, node: &str, epoch: u64) -> Vec<HookEvent> {
    wait_for(Duration::from_secs(10), "the promote hook ran", || {
        let h = history(c);
        promote_time(&h, node, epoch).map(|_| h)
    })
}

/// The holder and epoch of `db` once another node than `holder` holds it.
pub(crate) fn standby_takes_over(c: &Cluster, holder: &str, secs: u64) -> (String, u64) {
    wait_for(Duration::from_secs(secs), "a standby takes db", || {
        c.holder().filter(|(h, _)| h != holder)
    })
}

#[test]
fn killing_the_holders_agent_fences_it_before_a_standby_is_promoted() {
    let mut c = Cluster::roles("fo-kill", "");
    let (holder, epoch) = first_holder(&c);
    let i = c.index(&holder);
    c.agents[i].kill();
    let (next, e2) = standby_takes_over(&c, &holder, 30);
    assert_eq!(next, "n1", "the next-best healthy candidate");
    assert!(e2 > epoch);
    let h = promoted(&c, &next, e2);
    let fenced =
        demote_time(&h, &holder, epoch).expect("the watchdog fenced the dead agent's service");
    assert!(fenced < promote_time(&h, &next, e2).unwrap());
    check(&h).unwrap();
}

#[test]
fn a_holder_frozen_longer_than_its_lease_is_fenced_and_stays_demoted_after_resuming() {
    let c = Cluster::roles("fo-freeze", "");
    let (holder, epoch) = first_holder(&c);
    let i = c.index(&holder);
    c.signal(i, Signal::SIGSTOP);
    let (next, e2) = standby_takes_over(&c, &holder, 30);
    c.signal(i, Signal::SIGCONT);
    // Back from the freeze, it sees its lease lost and does not act as holder.
    wait_for(Duration::from_secs(10), "the resumed agent answers", || {
        c.agents[i].roles()
    });
    during(Duration::from_secs(2), Duration::from_millis(200), || {
        if let Some(v) = c.agents[i].roles() {
            assert_ne!(v.local[0].state, RoleState::Holder, "{v:?}");
        }
    });
    let h = promoted(&c, &next, e2);
    let fenced = demote_time(&h, &holder, epoch).expect("fenced while frozen");
    assert!(fenced < promote_time(&h, &next, e2).expect("promoted"));
    // Its watchdog fenced while it was frozen; on resuming it must not run
    // the demote hook a second time.
    let demotes = h
        .iter()
        .filter(|e| e.node == holder && e.epoch == epoch && e.kind == HookKind::Demote)
        .count();
    assert_eq!(
        demotes, 1,
        "the lost lease ran the demote hook {demotes} times"
    );
    check(&h).unwrap();
}

#[test]
fn a_hung_essential_service_hands_the_role_over() {
    let c = Cluster::roles("fo-hung", "");
    let (holder, epoch) = first_holder(&c);
    std::fs::remove_file(c.path(&format!("healthy-{holder}"))).unwrap();
    let (next, e2) = standby_takes_over(&c, &holder, 30);
    assert_eq!(next, "n1");
    let h = promoted(&c, &next, e2);
    assert!(demote_time(&h, &holder, epoch).unwrap() < promote_time(&h, &next, e2).unwrap());
    check(&h).unwrap();
}

#[test]
fn a_standby_with_failing_checks_is_never_promoted() {
    let c = Cluster::roles("fo-failing", "");
    let (holder, _) = first_holder(&c);
    std::fs::remove_file(c.path("healthy-n1")).unwrap();
    wait_for(Duration::from_secs(10), "n1 is ineligible", || {
        c.agents[1]
            .roles()
            .filter(|v| v.local[0].state == RoleState::Ineligible)
    });
    std::fs::remove_file(c.path(&format!("healthy-{holder}"))).unwrap();
    let (next, _) = standby_takes_over(&c, &holder, 20);
    assert_eq!(next, "n2", "n1 is unhealthy, so n2 takes over");
    check(&history(&c)).unwrap();
}

#[test]
fn a_hanging_non_essential_service_changes_nothing() {
    let extra = r#"
[[service]]
name = "sentry"
essential = false
[[service.check]]
command = ["sleep", "5"]
timeout = "200ms"
"#;
    let c = Cluster::roles("fo-nonessential", extra);
    let (holder, epoch) = first_holder(&c);
    during(Duration::from_secs(4), Duration::from_millis(200), || {
        if let Some(now) = c.holder() {
            assert_eq!(
                now,
                (holder.clone(), epoch),
                "no failover for a non-essential service"
            );
        }
    });
    let members = c.agents[0].members().unwrap();
    assert!(
        members.iter().all(|m| m.state == MemberState::Alive),
        "{members:?}"
    );
    // Both show in the holder's metrics: the role held, the hanging sink reported.
    let i = c.index(&holder);
    let text = c.agents[i].metrics().unwrap();
    let node = format!("node=\"{holder}\"");
    let m = |name: &str, labels: &[&str]| crate::support::metric(&text, name, labels);
    let (db, sentry, pg) = ("role=\"db\"", "service=\"sentry\"", "service=\"pg\"");
    assert_eq!(m("hale_role_holder", &[&node, db]), 1.0, "{text}");
    assert_eq!(m("hale_service_healthy", &[&node, sentry]), 0.0, "{text}");
    assert_eq!(m("hale_service_healthy", &[&node, pg]), 1.0, "{text}");
    assert!(m("hale_role_renewals_total", &[&node]) > 0.0, "{text}");
    let sentry_failures = m("hale_check_failures_total", &[&node, sentry]);
    assert!(sentry_failures > 0.0, "{text}");
    check(&history(&c)).unwrap();
}

#[test]
fn an_operator_handover_goes_to_the_named_standby() {
    let c = Cluster::roles("fo-handover", "");
    let (holder, epoch) = first_holder(&c);
    let i = c.index(&holder);
    // n2 has the lowest priority; named, it still gets the role.
    c.agents[i].cli_ok(&["roles", "handover", "db", "--to", "n2"]);
    let (next, e2) = wait_for(Duration::from_secs(20), "n2 takes db", || {
        c.holder().filter(|(h, _)| h == "n2")
    });
    assert!(e2 > epoch);
    let h = promoted(&c, &next, e2);
    assert!(demote_time(&h, &holder, epoch).unwrap() < promote_time(&h, &next, e2).unwrap());
    check(&h).unwrap();
    // The old holding's demote claim went with it (a claim left behind
    // keeps a page of /dev/shm until reboot).
    let pid = c.agents[i].pid().as_raw() as u32;
    wait_until(
        Duration::from_secs(10),
        "the old holding's claim removed",
        || demote_claim(pid, epoch).is_none(),
    );
}

#[test]
fn losing_the_control_plane_leader_during_a_failover_still_promotes_a_standby() {
    let mut c = Cluster::roles("fo-leader", "");
    let (holder, epoch) = first_holder(&c);
    let leader = wait_for(
        Duration::from_secs(10),
        "the control-plane leader is known",
        || c.agents[0].roles()?.leader,
    );
    let leader_node = (leader - 1) as usize;
    // The holder's service hangs (a handover starts) and, at once, the
    // control-plane leader's host dies (it may be the holder's own).
    std::fs::remove_file(c.path(&format!("healthy-{holder}"))).unwrap();
    c.agents[leader_node].kill();
    let gone = c.agents[leader_node].name.clone();
    let (next, e2) = wait_for(Duration::from_secs(30), "a standby takes db", || {
        c.holder().filter(|(h, _)| *h != holder && *h != gone)
    });
    assert!(e2 > epoch);
    let h = promoted(&c, &next, e2);
    check(&h).unwrap();
}

#[test]
fn a_holder_whose_watchdog_is_killed_gets_another_that_still_fences_it_when_frozen() {
    let c = Cluster::roles("fo-watchdog-killed", "");
    let (holder, epoch) = first_holder(&c);
    let i = c.index(&holder);
    let agent = c.agents[i].pid().as_raw();
    let watchdogs = || watchdogs_of(agent);
    let first = wait_for(Duration::from_secs(10), "the holder's watchdog", || {
        watchdogs().first().copied()
    });
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), Signal::SIGKILL).unwrap();
    wait_for(Duration::from_secs(10), "another watchdog", || {
        watchdogs().into_iter().find(|p| *p != first)
    });
    // Frozen now: the new watchdog must fence it.
    frozen_holder_is_fenced_before_a_standby_promotes(&c, &holder, epoch);
}

/// Freezes `holder` (SIGSTOP) until a standby takes `db`, then thaws it:
/// its watchdog fenced it (its demote at `epoch` ran) before the new
/// holder's promote hook, and the history passes the checker.
fn frozen_holder_is_fenced_before_a_standby_promotes(c: &Cluster, holder: &str, epoch: u64) {
    let i = c.index(holder);
    c.signal(i, Signal::SIGSTOP);
    let (next, e2) = standby_takes_over(c, holder, 30);
    c.signal(i, Signal::SIGCONT);
    let h = promoted(c, &next, e2);
    let fenced = demote_time(&h, holder, epoch).expect("fenced by the new watchdog");
    assert!(fenced < promote_time(&h, &next, e2).expect("promoted"));
    check(&h).unwrap();
}

/// The watchdog processes among `agent`'s descendants.
fn watchdogs_of(agent: i32) -> Vec<i32> {
    descendants(agent)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|w| w == b"watchdog"))
        })
        .collect()
}

#[test]
fn a_watchdog_restarted_after_an_upgrade_replaced_the_executable_is_of_the_agents_release_and_fences(
) {
    // The agents run a copy of hale that a "package upgrade" then replaces
    // under them (renamed over, as dpkg does) by a program that only
    // leaves a mark: a watchdog or `demote-once` started from the path
    // would be of another release.
    let bin = crate::support::log_dir("fo-replaced-exe-bin");
    let exe = bin.path().join("hale");
    std::fs::copy(crate::support::hale_bin(), &exe).unwrap();
    let c = Cluster::roles_of("fo-replaced-exe", 3, &exe);
    let (holder, epoch) = first_holder(&c);
    let i = c.index(&holder);
    let agent = c.agents[i].pid().as_raw();
    let first = wait_for(Duration::from_secs(10), "the holder's watchdog", || {
        watchdogs_of(agent).first().copied()
    });
    let mark = bin.path().join("the-new-file-ran");
    let new = bin.path().join("hale.dpkg-new");
    std::fs::write(
        &new,
        format!("#!/bin/sh\ntouch '{}'\nexit 3\n", mark.display()),
    )
    .unwrap();
    std::fs::set_permissions(&new, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::rename(&new, &exe).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), Signal::SIGKILL).unwrap();
    let second = wait_for(Duration::from_secs(10), "another watchdog", || {
        watchdogs_of(agent).into_iter().find(|p| *p != first)
    });
    let runs = std::fs::read_link(format!("/proc/{second}/exe")).unwrap();
    assert!(
        runs.to_string_lossy().ends_with("(deleted)"),
        "the new watchdog runs the agent's own (now replaced) executable, not {runs:?}"
    );
    // Frozen now: the new watchdog fences it, through this release's
    // `demote-once`.
    frozen_holder_is_fenced_before_a_standby_promotes(&c, &holder, epoch);
    assert!(!mark.exists(), "the replacing file never ran");
}

#[test]
fn a_paused_role_stays_with_its_failing_holder_and_moves_once_resumed() {
    let c = Cluster::roles("fo-pause", "");
    let (holder, epoch) = first_holder(&c);
    // Paused from a member that does not hold it.
    let out = c.agents[2].cli_ok(&["roles", "pause", "db"]);
    assert!(out.contains("db paused"), "{out}");
    wait_for(
        Duration::from_secs(10),
        "the holder hears of the pause",
        || c.agents[0].roles().filter(|v| v.local[0].paused),
    );
    let shown = c.agents[1].cli_ok(&["roles"]);
    assert!(shown.contains("PAUSED"), "{shown}");
    // Its service fails well past fail_after (1 s): nothing moves, no hook runs.
    std::fs::remove_file(c.path(&format!("healthy-{holder}"))).unwrap();
    let hooks = history(&c).len();
    during(Duration::from_secs(4), Duration::from_millis(200), || {
        if let Some(now) = c.holder() {
            assert_eq!(now, (holder.clone(), epoch), "a paused role does not move");
        }
        assert_eq!(history(&c).len(), hooks, "no hook runs while paused");
    });
    // Resumed: the failing holder steps down and a standby takes over.
    let out = c.agents[1].cli_ok(&["roles", "resume", "db"]);
    assert!(out.contains("db resumed"), "{out}");
    let (next, e2) = standby_takes_over(&c, &holder, 20);
    let h = promoted(&c, &next, e2);
    assert!(demote_time(&h, &holder, epoch).unwrap() < promote_time(&h, &next, e2).unwrap());
    check(&h).unwrap();
    // Pausing a role nobody ever heard of is refused, and creates nothing.
    let typo = c.agents[1].cli(&["roles", "pause", "dbb"]);
    assert!(!typo.status.success());
    assert!(String::from_utf8_lossy(&typo.stderr).contains("no role \"dbb\""));
}

#[test]
fn an_agent_that_dies_as_it_starts_a_promote_hook_leaves_no_promotion_behind_its_fence() {
    // n0 (the best candidate) aborts right after starting its promote hook,
    // before its watchdog hears of the hook: the watchdog fences the
    // holding, and the hook, held until the watchdog knows its group, never
    // runs (it ran after the fence when it was told only once started).
    let mut c = Cluster::roles_with_env("fo-die-at-promote", 3, |i| {
        if i == 0 {
            vec![("HALE_FAULT_DIE_AT_PROMOTE".to_owned(), "1".to_owned())]
        } else {
            Vec::new()
        }
    });
    let (next, epoch) = wait_for(Duration::from_secs(30), "another node takes db", || {
        c.holder().filter(|(h, _)| h != "n0")
    });
    promoted(&c, &next, epoch);
    // Absence, not a condition to wait for: a hook left behind and let go
    // would have written its line within this second.
    std::thread::sleep(Duration::from_secs(1));
    let h = history(&c);
    assert!(
        h.iter()
            .all(|e| !(e.node == "n0" && e.kind == HookKind::Promote)),
        "n0's promote hook ran: {h:?}"
    );
    check(&h).unwrap();
    assert!(c.agents[0].exited(), "n0's agent aborted");
}
