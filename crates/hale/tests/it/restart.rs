//! Restarting (or upgrading) the holder's agent with the service untouched:
//! `hale roles pause db`, restart the agent, `hale roles resume db` (the
//! README's maintenance section). Three agents on loopback, each a
//! control-plane server and a candidate for `db`, with hooks that log
//! every run.

use std::time::Duration;

use hale_control::{check, HookKind, RoleState};
use nix::sys::signal::Signal;

use crate::failover::{first_holder, history};
use crate::support::{
    demote_claim, descendants, previous_release, spawn_with_config, wait_for, wait_until, Cluster,
    RoleNode,
};

/// Pauses `db` from agent 1 and waits until agent 0 (its holder) hears of it.
pub(crate) fn pause(c: &Cluster) {
    // The holder's promote hook first: an agent stopped while its
    // promotion is still under way steps down, paused or not (its
    // service was never handed over, so it is not left to the operator).
    wait_until(Duration::from_secs(10), "n0's promote hook ran", || {
        history(c)
            .iter()
            .any(|e| e.node == "n0" && e.kind == HookKind::Promote)
    });
    let out = c.agents[1].cli_ok(&["roles", "pause", "db"]);
    assert!(out.contains("db paused"), "{out}");
    wait_for(
        Duration::from_secs(10),
        "the holder hears of the pause",
        || c.agents[0].roles().filter(|v| v.local[0].paused),
    );
}

/// Sends SIGTERM to agent `i` and waits until it has exited.
pub(crate) fn terminate(c: &mut Cluster, i: usize) {
    c.signal(i, Signal::SIGTERM);
    wait_until(
        Duration::from_secs(15),
        "the agent to exit on SIGTERM",
        || c.agents[i].exited(),
    );
}

/// Starts agent `i` again with its configuration, on its ports.
pub(crate) fn restart(c: &mut Cluster, i: usize) {
    let a = &c.agents[i];
    let name = a.name.clone();
    let config = c.path(&format!("{name}.toml"));
    c.agents[i] = spawn_with_config(c.logs.path(), &name, &config, a.gossip, a.http, None, &[]);
}

/// Waits until the restarted agent 0 adopts `db` at `held`'s epoch,
/// resumes the role, and checks that it stays there and that only the
/// first grant ever ran a hook (`when` ends the messages).
fn adopted_then_resumed(c: &Cluster, held: &(String, u64), when: &str) {
    wait_for(
        Duration::from_secs(30),
        "the new agent adopts db at the same epoch",
        || {
            let v = c.agents[0].roles()?;
            let l = &v.local[0];
            (l.state == RoleState::Holder && l.epoch == Some(held.1)).then_some(())
        },
    );
    let out = c.agents[2].cli_ok(&["roles", "resume", "db"]);
    assert!(out.contains("db resumed"), "{out}");
    c.assert_holder_stays(Duration::from_secs(4), held, when);
    let h = history(c);
    let count = |k: HookKind| h.iter().filter(|e| e.kind == k).count();
    assert_eq!(
        count(HookKind::Promote),
        1,
        "only the first grant promoted: {h:?}"
    );
    assert_eq!(
        count(HookKind::Demote),
        0,
        "nothing demoted, nothing fenced: {h:?}"
    );
    check(&h).unwrap();
}

#[test]
fn restarting_the_holders_agent_while_its_role_is_paused_moves_nothing_and_runs_no_hook() {
    let mut c = Cluster::roles("keep-restart", "");
    let held = first_holder(&c);
    assert_eq!(held.0, "n0");
    wait_for(Duration::from_secs(10), "the promote hook ran", || {
        (!history(&c).is_empty()).then_some(())
    });
    pause(&c);
    terminate(&mut c, 0);
    let log = std::fs::read_to_string(&c.agents[0].log).unwrap();
    assert!(
        log.contains("keeping it"),
        "the agent says it kept db:\n{log}"
    );
    // Down for longer than a lease: the role stays with n0, unfenced.
    c.assert_holder_stays(Duration::from_secs(3), &held, "while n0's agent was down");
    restart(&mut c, 0);
    adopted_then_resumed(&c, &held, "after the restart and resume");
    let events = c.agents[0].events().expect("n0 answers");
    assert!(
        events.iter().any(|e| e.event.kind() == "role-adopted"),
        "a role-adopted event"
    );
}

#[test]
fn resuming_a_role_whose_holders_agent_never_came_back_is_refused_unless_forced() {
    let mut c = Cluster::roles("keep-silent", "");
    let held = first_holder(&c);
    pause(&c);
    terminate(&mut c, 0);
    // Its agent stays down longer than a lease.
    c.assert_holder_stays(Duration::from_secs(3), &held, "while n0's agent was down");
    let out = c.agents[1].cli(&["roles", "resume", "db"]);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("n0 kept the role") && err.contains("--force"),
        "{err}"
    );
    c.assert_holder_stays(Duration::from_secs(1), &held, "after a refused resume");
    // Forced (the operator stopped n0's service by hand): a standby takes over.
    let out = c.agents[1].cli_ok(&["roles", "resume", "db", "--force"]);
    assert!(out.contains("db resumed"), "{out}");
    let next = wait_for(Duration::from_secs(20), "a standby takes db", || {
        c.holder().filter(|(h, _)| h != "n0")
    });
    assert!(next.1 > held.1);
    let h = history(&c);
    assert!(
        !h.iter()
            .any(|e| e.node == "n0" && e.kind == HookKind::Demote),
        "n0's service was left to the operator: {h:?}"
    );
}

#[test]
fn upgrading_the_holders_agent_from_the_previous_release_moves_nothing_and_runs_no_hook() {
    let prev = previous_release();
    let c = Cluster::roles_of("keep-upgrade", 3, &prev.exe);
    upgrade_holder_from_previous(c, &prev.exe);
}

/// The holder's agent upgraded last, when every other control-plane server
/// already runs this release: they record keeps, but the previous release
/// could not keep, so the adoption is first refused as never kept. The new
/// agent, whose files it migrated from the previous release, adopts by a
/// plain renewal as that release kept (nemesis seed 80025 left the service
/// running unguarded, then promoted it again after the resume).
#[test]
fn upgrading_the_holders_agent_from_the_previous_release_last_of_all_adopts_its_role() {
    let prev = previous_release();
    let mut nodes = RoleNode::loopback(3);
    nodes[0].exe = Some(prev.exe.clone());
    let c = Cluster::roles_on(
        "keep-upgrade-last",
        nodes,
        |_, _| None,
        |_| String::new(),
        |dir| {
            // A state_dir for n0: its generation file says which release ran.
            let config = dir.join("n0.toml");
            let text = std::fs::read_to_string(&config).unwrap();
            let state = dir.join("state-n0");
            let line = format!("[agent]\nstate_dir = \"{}\"\n", state.display());
            std::fs::write(&config, text.replacen("[agent]\n", &line, 1)).unwrap();
        },
    );
    upgrade_holder_from_previous(c, &prev.exe);
}

/// Agent 0 of `c`, the holder, runs the previous release (`prev`): pauses
/// `db`, SIGKILLs that agent with its watchdog (the README's procedure from
/// the previous release), starts this release on the same configuration,
/// and checks that it adopts the role and that nothing moved.
fn upgrade_holder_from_previous(mut c: Cluster, prev: &std::path::Path) {
    let held = first_holder(&c);
    assert_eq!(held.0, "n0");
    wait_for(Duration::from_secs(10), "the promote hook ran", || {
        (!history(&c).is_empty()).then_some(())
    });
    let out = c.agents[1].cli_ok(&["roles", "pause", "db"]);
    assert!(out.contains("db paused"), "{out}");
    wait_until(Duration::from_secs(10), "the pause is committed", || {
        c.agents[0]
            .roles()
            .and_then(|v| v.leases)
            .is_some_and(|l| l.get("db").is_some_and(|l| l.paused))
    });
    // The previous release steps down on SIGTERM even when paused: its
    // agent and its watchdog are killed together (the README's procedure).
    let pid = c.agents[0].pid();
    let mut all = descendants(pid.as_raw());
    all.push(pid.as_raw());
    for p in all {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
    }
    wait_until(Duration::from_secs(10), "the old agent is gone", || {
        c.agents[0].exited()
    });
    // The new release's agent and watchdog, on the same configuration.
    let config = c.path("n0.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let new_exe = crate::support::hale_bin().display().to_string();
    std::fs::write(&config, text.replace(&prev.display().to_string(), &new_exe)).unwrap();
    restart(&mut c, 0);
    adopted_then_resumed(&c, &held, "after the upgrade and resume");
}

/// An agent SIGKILLed together with everything it started while its
/// watchdog fences (`systemctl kill -s KILL`, a test's teardown) leaves the
/// holding's claim in /dev/shm, one tmpfs page until reboot: its next
/// start removes it.
#[test]
fn a_claim_left_by_an_agent_killed_with_its_watchdog_mid_fence_is_removed_when_it_starts_again() {
    claim_left_mid_fence_is_swept("claim-sweep", None);
}

/// The same when the agent killed was the previous release's (it names and
/// locks its claims the same way), and what starts next is this release:
/// an upgrade done with SIGKILL, as the README's procedure for 0.1.0 has it.
#[test]
fn a_claim_the_previous_release_left_mid_fence_is_removed_when_this_release_starts() {
    let prev = previous_release();
    claim_left_mid_fence_is_swept("claim-sweep-upgrade", Some(&prev.exe));
}

/// Runs n0 (with `first`, or this release) as the holder of `db` with a
/// demote that outlasts the test, kills n0's agent, waits for its watchdog
/// to fence, kills the watchdog and its fence, and starts n0 again on this
/// release: the fence's claim must be gone.
fn claim_left_mid_fence_is_swept(test: &str, first: Option<&std::path::Path>) {
    let mut nodes = RoleNode::loopback(3);
    nodes[0].exe = first.map(std::path::Path::to_path_buf);
    let mut c = Cluster::roles_on(
        test,
        nodes,
        |i, log| {
            let line = |what: &str| {
                let log = log.display();
                format!("echo $(date +%s%N) n{i} {what} $HALE_EPOCH $HALE_REASON >> {log}")
            };
            // n0's demote (its watchdog's fence) outlasts the test.
            let slow = if i == 0 { "; sleep 120" } else { "" };
            Some((line("promote"), format!("{}{slow}", line("demote"))))
        },
        |_| String::new(),
        |_| {},
    );
    let (_, epoch) = first_holder(&c);
    let pid = c.agents[0].pid().as_raw();
    let watchdogs = descendants(pid);
    assert!(!watchdogs.is_empty(), "n0 runs a watchdog");
    c.agents[0].kill();
    // Its watchdog fences under the holding's claim.
    wait_until(Duration::from_secs(10), "n0's fence runs", || {
        history(&c)
            .iter()
            .any(|e| e.node == "n0" && e.epoch == epoch && e.kind == HookKind::Demote)
    });
    let claim = demote_claim(pid as u32, epoch).expect("the fence's claim");
    // The watchdog and its fence are killed too, before the fence ends.
    let started: Vec<i32> = watchdogs
        .iter()
        .flat_map(|&w| std::iter::once(w).chain(descendants(w)))
        .collect();
    for p in started {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), Signal::SIGKILL);
    }
    let left = std::fs::read(&claim).expect("the claim is left behind");
    assert!(
        !left.starts_with(b"ran"),
        "the fence never finished: {:?}",
        String::from_utf8_lossy(&left)
    );
    if let Some(old) = first {
        // This release's agent and watchdog, on the same configuration.
        let config = c.path("n0.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        let new_exe = crate::support::hale_bin().display().to_string();
        std::fs::write(&config, text.replace(&old.display().to_string(), &new_exe)).unwrap();
    }
    restart(&mut c, 0);
    wait_until(
        Duration::from_secs(30),
        "the restarted agent removes the dead agent's claim",
        || !claim.exists(),
    );
    // Which agent removed it is not asked: every agent sweeps the host's
    // claims as it starts, and another test's agent starting meanwhile may
    // be first (this test then failed on n0's log). The claim is gone only
    // through a sweep: nothing else removes a dead agent's claim.
}
