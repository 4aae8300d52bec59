//! A role's tags with real agent processes on loopback (three agents, each
//! a control-plane server and a candidate for `db`, priorities 100, 50,
//! 10): a node set `promotable = false` never holds the role, whatever
//! happens to the others or whoever names it; one set `load_balance =
//! false` answers 503 to the load balancers' read checks; a holder set
//! `promotable = false` by a reload hands the role over once another node
//! can take it, never before. Every test ends by running the history
//! checker over the hook log.

use std::path::Path;
use std::time::Duration;

use hale_agent::view::RoleView;
use hale_control::{check, HookKind, RoleState};

use crate::failover::{first_holder, history};
use crate::support::{call, during, wait_for, wait_until, AgentProc, Cluster};

/// `a`'s own view of role `db`.
fn db(a: &AgentProc) -> Option<RoleView> {
    a.roles()?.local.into_iter().find(|r| r.role == "db")
}

/// Runs `hale` with `args` beside `a`: whether it succeeded, and what it
/// printed.
fn hale(a: &AgentProc, args: &[&str]) -> (bool, String) {
    let out = a.cli(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Whether `node` ever ran its promote hook.
fn ever_promoted(c: &Cluster, node: &str) -> bool {
    history(c)
        .iter()
        .any(|e| e.node == node && e.kind == HookKind::Promote)
}

/// The service check of `node` fails from now on (its file removed).
fn fail_checks(c: &Cluster, node: &str) {
    std::fs::remove_file(c.path(&format!("healthy-{node}"))).unwrap();
}

/// The service check of `node` passes again.
fn pass_checks(c: &Cluster, node: &str) {
    std::fs::write(c.path(&format!("healthy-{node}")), "").unwrap();
}

/// `path` with `line` appended (the `[[role]]` is the file's last table).
fn append(path: &Path, line: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, format!("{text}\n{line}\n")).unwrap();
}

#[test]
fn a_node_that_may_not_be_promoted_never_holds_the_role_even_as_the_last_healthy_candidate() {
    let mut c = Cluster::roles_with(
        "tags-alone",
        3,
        |_, _| None,
        |i| {
            if i == 2 {
                "promotable = false".into()
            } else {
                String::new()
            }
        },
        |_| {},
    );
    first_holder(&c);
    let n2 = wait_for(Duration::from_secs(10), "n2 standing by", || {
        db(&c.agents[2]).filter(|v| v.state == RoleState::Standby)
    });
    assert!(!n2.tags.promotable, "{n2:?}");
    // n1's checks fail, then the holder's agent dies: n2, the one healthy
    // candidate left, may not take the role.
    fail_checks(&c, "n1");
    wait_until(Duration::from_secs(10), "n1 ineligible", || {
        db(&c.agents[1]).is_some_and(|v| v.state == RoleState::Ineligible)
    });
    c.agents[0].kill();
    wait_until(
        Duration::from_secs(30),
        "the cluster view says why nobody holds db",
        || {
            let Ok(v) = call(c.agents[2].api().cluster_roles()) else {
                return false;
            };
            let why = v
                .roles
                .iter()
                .find(|r| r.role == "db")
                .and_then(|r| r.unheld.clone());
            why.is_some_and(|w| {
                w.contains("n2 may not be promoted (promotable = false)")
                    && w.contains("n1's checks fail")
            })
        },
    );
    during(Duration::from_secs(6), Duration::from_millis(200), || {
        let v = db(&c.agents[2]).expect("n2 answers");
        assert_eq!(v.state, RoleState::Standby, "{v:?}");
        if let Some((h, _)) = c.holder() {
            assert_ne!(h, "n2", "n2 was granted db");
        }
    });
    let (ok, status) = hale(&c.agents[2], &["status"]);
    assert!(ok, "{status}");
    assert!(
        status.contains("NO HOLDER") && status.contains("n2 may not be promoted"),
        "{status}"
    );
    assert!(
        status.contains("never promoted (promotable = false)"),
        "{status}"
    );
    // n1 healthy again: it takes the role, n2 still never.
    pass_checks(&c, "n1");
    wait_for(Duration::from_secs(30), "n1 holds db", || {
        c.holder().filter(|(h, _)| h == "n1")
    });
    assert!(!ever_promoted(&c, "n2"), "{:?}", history(&c));
    check(&history(&c)).unwrap();
}

#[test]
fn a_higher_priority_node_that_may_not_be_promoted_is_passed_over_refused_by_name_and_kept_from_reads(
) {
    // n1 (priority 50) may not be promoted and takes no load-balanced
    // reads; n2 (priority 10) is an ordinary standby.
    let mut c = Cluster::roles_with(
        "tags-passed-over",
        3,
        |_, _| None,
        |i| match i {
            1 => "promotable = false\nload_balance = false".into(),
            _ => String::new(),
        },
        |_| {},
    );
    let held = first_holder(&c);
    wait_until(Duration::from_secs(10), "n1 and n2 standing by", || {
        [1, 2]
            .iter()
            .all(|&i| db(&c.agents[i]).is_some_and(|v| v.state == RoleState::Standby))
    });
    // The load balancers' read checks: n1 says no, and why; n2 yes.
    let replica = |c: &Cluster, i: usize| call(c.agents[i].api().replica("db")).unwrap();
    let read_only = |c: &Cluster, i: usize| call(c.agents[i].api().read_only("db")).unwrap();
    let (status, body) = replica(&c, 1);
    assert_eq!(status, 503, "{body:?}");
    assert!(
        body.reason
            .as_deref()
            .is_some_and(|r| r.contains("load_balance = false")),
        "{body:?}"
    );
    assert_eq!(read_only(&c, 1).0, 503);
    assert_eq!((replica(&c, 2).0, read_only(&c, 2).0), (200, 200));
    // (The holder's own check: 200 once its promote hook has succeeded.)
    wait_until(Duration::from_secs(10), "n0 answering /primary", || {
        call(c.agents[0].api().primary("db")).is_ok_and(|(s, _)| s == 200)
    });

    // A switchover or handover naming n1 is refused, saying why, and
    // changes nothing.
    let (ok, out) = hale(&c.agents[2], &["roles", "switchover", "db", "--to", "n1"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("n1 may not be promoted (promotable = false"),
        "{out}"
    );
    let (ok, out) = hale(&c.agents[0], &["roles", "handover", "db", "--to", "n1"]);
    assert!(!ok, "{out}");
    assert!(out.contains("n1 may not be promoted"), "{out}");
    let lease = c.agents[1].roles().unwrap().leases.unwrap()["db"].clone();
    assert!(lease.switchover.is_none(), "{lease:?}");
    c.assert_holder_stays(Duration::from_secs(2), &held, "after the refusals");

    // The holder dies: n2 takes the role over n1's higher priority.
    c.agents[0].kill();
    let (next, _) = wait_for(Duration::from_secs(30), "a standby takes db", || {
        c.holder().filter(|(h, _)| h != "n0")
    });
    assert_eq!(next, "n2");
    assert!(!ever_promoted(&c, "n1"), "{:?}", history(&c));

    // A reload lets n1 take reads again, its role untouched.
    let config = c.path("n1.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("load_balance = false", "")).unwrap();
    let before = db(&c.agents[1]).unwrap();
    let (ok, out) = hale(&c.agents[1], &["reload"]);
    assert!(ok && out.contains("role[db].load_balance"), "{out}");
    wait_until(Duration::from_secs(10), "n1 answering /replica", || {
        replica(&c, 1).0 == 200
    });
    let after = db(&c.agents[1]).unwrap();
    assert_eq!(
        (after.state, after.promotions, after.demotions),
        (before.state, before.promotions, before.demotions)
    );
    check(&history(&c)).unwrap();
}

#[test]
fn a_holder_reloaded_not_promotable_keeps_the_role_while_nobody_can_take_it_then_hands_it_over() {
    let c = Cluster::roles("tags-reload-holder", "");
    let held = first_holder(&c);
    wait_until(Duration::from_secs(10), "n0 has promoted", || {
        db(&c.agents[0]).is_some_and(|v| v.state == RoleState::Holder)
    });
    for n in ["n1", "n2"] {
        fail_checks(&c, n);
    }
    wait_until(Duration::from_secs(10), "n1 and n2 ineligible", || {
        [1, 2]
            .iter()
            .all(|&i| db(&c.agents[i]).is_some_and(|v| v.state == RoleState::Ineligible))
    });
    append(&c.path("n0.toml"), "promotable = false");
    let (ok, out) = hale(&c.agents[0], &["reload"]);
    assert!(ok && out.contains("role[db].promotable"), "{out}");
    // Nobody else may take it: n0 keeps it, saying why.
    wait_until(Duration::from_secs(10), "n0 says why it keeps db", || {
        db(&c.agents[0]).is_some_and(|v| {
            !v.tags.promotable
                && v.handover_waits
                    .as_deref()
                    .is_some_and(|w| w.contains("no other live candidate may take the role"))
        })
    });
    during(Duration::from_secs(3), Duration::from_millis(250), || {
        let v = db(&c.agents[0]).expect("n0 answers");
        assert_eq!(
            (v.state, v.epoch),
            (RoleState::Holder, Some(held.1)),
            "{v:?}"
        );
        assert_eq!(
            c.holder(),
            Some(held.clone()),
            "while nobody else may take it"
        );
    });
    // n1 healthy again: n0 hands the role over to it, demoting first.
    pass_checks(&c, "n1");
    let (next, epoch) = wait_for(Duration::from_secs(30), "n1 takes db", || {
        c.holder().filter(|(h, _)| h != "n0")
    });
    assert_eq!(next, "n1");
    let h = wait_for(Duration::from_secs(10), "n1's promote hook ran", || {
        let h = history(&c);
        h.iter()
            .any(|e| e.node == "n1" && e.epoch == epoch && e.kind == HookKind::Promote)
            .then_some(h)
    });
    let at = |node: &str, e: u64, kind: HookKind| {
        h.iter()
            .find(|x| x.node == node && x.epoch == e && x.kind == kind)
            .map(|x| x.at_nanos)
    };
    let demoted = at("n0", held.1, HookKind::Demote).expect("n0 demoted");
    assert!(demoted < at("n1", epoch, HookKind::Promote).unwrap());
    let log = std::fs::read_to_string(c.path("hooks.log")).unwrap();
    assert!(
        log.contains(&format!("n0 demote {} handover", held.1)),
        "{log}"
    );
    // n0 never asks again, even as the one healthy node.
    fail_checks(&c, "n1");
    during(Duration::from_secs(5), Duration::from_millis(250), || {
        let v = db(&c.agents[0]).expect("n0 answers");
        assert!(
            !matches!(v.state, RoleState::Holder | RoleState::Promoting),
            "{v:?}"
        );
    });
    check(&history(&c)).unwrap();
}
