//! Operator commands at the worst time, and hooks that fail: the two-holder
//! paths issue 40 found, closed. Three agents on loopback, each a
//! control-plane server and a candidate for `db`, with hooks that log every
//! run on one clock.

use std::time::Duration;

use hale_control::{check, HookKind};

use crate::failover::{first_holder, history};
use crate::restart::{pause, restart, terminate};
use crate::support::{hook_lines, wait_for, wait_until, Cluster};

#[test]
fn a_resume_as_soon_as_the_kept_holders_agent_exited_is_refused_and_never_makes_two_holders() {
    let mut c = Cluster::roles("resume-early", "");
    let held = first_holder(&c);
    assert_eq!(held.0, "n0");
    pause(&c);
    terminate(&mut c, 0);
    // At once, from another member: refused, naming what to do.
    let out = c.agents[1].cli(&["roles", "resume", "db"]);
    assert!(!out.status.success(), "the resume was accepted: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("n0 kept the role") && err.contains("Start hale on n0"),
        "{err}"
    );
    // Forced before a lease and the drift margin: refused too.
    let out = c.agents[2].cli(&["roles", "resume", "db", "--force"]);
    assert!(
        !out.status.success(),
        "a forced resume at once was accepted: {out:?}"
    );
    // `hale roles` says the holding is kept (its agent down).
    let roles = c.agents[1].cli_ok(&["roles"]);
    assert!(roles.contains("KEPT"), "{roles}");
    let v = c.agents[2].roles().expect("n2 answers");
    assert!(v.leases.expect("a lease table")["db"].kept);
    // The agent stays down 10 s: nobody else is promoted, and a resume
    // asked again meanwhile is still refused.
    c.assert_holder_stays(Duration::from_secs(5), &held, "while n0's agent was down");
    let out = c.agents[1].cli(&["roles", "resume", "db"]);
    assert!(!out.status.success(), "{out:?}");
    c.assert_holder_stays(Duration::from_secs(5), &held, "while n0's agent was down");
    // Started again: it adopts the role, and `hale roles` shows it held.
    restart(&mut c, 0);
    wait_until(
        Duration::from_secs(30),
        "n0 adopts db (no longer kept)",
        || {
            c.agents[1]
                .roles()
                .and_then(|v| v.leases)
                .is_some_and(|l| l["db"].holder.as_deref() == Some("n0") && !l["db"].kept)
        },
    );
    let out = c.agents[1].cli_ok(&["roles", "resume", "db"]);
    assert!(out.contains("db resumed"), "{out}");
    c.assert_holder_stays(
        Duration::from_secs(2),
        &held,
        "after the adoption and resume",
    );
    let h = history(&c);
    assert_eq!(
        h.iter().filter(|e| e.kind == HookKind::Promote).count(),
        1,
        "only the first grant promoted: {h:?}"
    );
    check(&h).expect("never two holders in the hook logs");
}

#[test]
fn a_handover_whose_demote_fails_three_times_promotes_nobody_before_that_demote_succeeded() {
    // n0's demote exits 1 on its first three runs (the service refused to
    // stop), then succeeds; every run is logged.
    let c = Cluster::roles_with(
        "demote-fails",
        3,
        |i, log| {
            let log = log.display();
            let hook = |kind: &str| {
                format!("echo $(date +%s%N) n{i} {kind} $HALE_EPOCH $HALE_REASON >> {log}")
            };
            (i == 0).then(|| {
                let count = format!("{log}.n0-demotes");
                let demote = format!(
                    "n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}; \
                     if [ $n -le 3 ]; then {}; exit 1; fi; {}",
                    hook("demote-failed"),
                    hook("demote")
                );
                (hook("promote"), demote)
            })
        },
        |_| String::new(),
        |_| {},
    );
    let held = first_holder(&c);
    wait_until(Duration::from_secs(10), "n0's promote hook ran", || {
        history(&c)
            .iter()
            .any(|e| e.node == "n0" && e.kind == HookKind::Promote)
    });
    let out = c.agents[0].cli_ok(&["roles", "handover", "db"]);
    assert!(out.contains("handing db over"), "{out}");
    let next = wait_for(Duration::from_secs(30), "another node holds db", || {
        c.holder().filter(|(h, _)| h != "n0")
    });
    assert!(next.1 > held.1);
    wait_until(
        Duration::from_secs(10),
        "the new holder's promote ran",
        || {
            history(&c)
                .iter()
                .any(|e| e.node == next.0 && e.kind == HookKind::Promote)
        },
    );
    let lines = hook_lines(&c.path("hooks.log"));
    let failed: Vec<u64> = lines
        .iter()
        .filter(|l| l.what == "demote-failed")
        .map(|l| l.at)
        .collect();
    assert_eq!(failed.len(), 3, "{lines:?}");
    let demoted = lines
        .iter()
        .find(|l| l.node == "n0" && l.what == "demote")
        .map(|l| l.at)
        .expect("n0's demote succeeded in the end");
    let promoted = lines
        .iter()
        .find(|l| l.node == next.0 && l.what == "promote")
        .map(|l| l.at)
        .expect("the new holder promoted");
    assert!(
        promoted > demoted,
        "{} promoted {} ms before n0's demote succeeded",
        next.0,
        (demoted - promoted) / 1_000_000
    );
    // The three failures are events (and a metric).
    let events = c.agents[0].events().expect("n0 answers");
    let failures = events
        .iter()
        .filter(|e| e.event.kind() == "demote-failed")
        .count();
    assert_eq!(failures, 3, "three demote-failed events");
    let metrics = c.agents[0].metrics().expect("n0's metrics");
    assert!(
        metrics.contains("hale_role_demote_failures_total{node=\"n0\",role=\"db\"} 3"),
        "{metrics}"
    );
    check(&history(&c)).expect("never two holders in the hook logs");
}

/// A holder's watchdog frozen (SIGSTOP) when it is asked to step down: the
/// step-down does not wait for the watchdog's answer past a moment (it
/// demotes under the holding's claim), so the handover goes on, and the
/// demote runs once when the watchdog thaws and reaches for its fence
/// (nemesis seed 70114: an isolated holder demoted only at the thaw).
#[test]
fn a_handover_goes_on_while_the_holders_watchdog_is_frozen_and_demotes_once() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let c = Cluster::roles("watchdog-frozen", "");
    let held = first_holder(&c);
    assert_eq!(held.0, "n0");
    // The table names n0 as soon as the grant commits; n0's agent starts
    // its watchdog once the grant's answer reaches it, a moment later.
    let watchdogs: Vec<i32> = crate::support::wait_for(
        std::time::Duration::from_secs(10),
        "n0 runs a watchdog",
        || {
            let w: Vec<i32> = crate::support::descendants(c.agents[0].pid().as_raw())
                .into_iter()
                .filter(|&p| {
                    std::fs::read(format!("/proc/{p}/cmdline"))
                        .is_ok_and(|b| b.split(|&x| x == 0).nth(1) == Some(b"watchdog".as_slice()))
                })
                .collect();
            (!w.is_empty()).then_some(w)
        },
    );
    let signal = |s| {
        for &p in &watchdogs {
            let _ = kill(Pid::from_raw(p), s);
        }
    };
    signal(Signal::SIGSTOP);
    let out = c.agents[0].cli_ok(&["roles", "handover", "db"]);
    assert!(out.contains("handing db over"), "{out}");
    let next = wait_for(Duration::from_secs(20), "another node holds db", || {
        c.holder().filter(|(h, _)| h != "n0")
    });
    // Thawed, the watchdog sees its deadline gone: its fence finds the
    // agent's demote done.
    signal(Signal::SIGCONT);
    c.assert_holder_stays(Duration::from_secs(3), &next, "after the thaw");
    let h = history(&c);
    let demotes = h
        .iter()
        .filter(|e| e.node == "n0" && e.epoch == held.1 && e.kind == HookKind::Demote)
        .count();
    assert_eq!(demotes, 1, "{h:?}");
    check(&h).expect("never two holders in the hook logs");
}
