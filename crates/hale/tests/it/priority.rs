//! The agent above the processes it starts (`hale_agent::priority`): its
//! threads, and its fencing watchdog, run ten nice levels above the hooks
//! it starts, and its threads real-time, so that hooks and fences that
//! cost CPU cannot starve its heartbeats and renewals (issue 41).

use std::time::Duration;

use crate::support::{descendants, hook_lines, wait_for, Cluster};

/// The nice value of process (or thread) `pid`: field 19 of its `stat`.
fn nice_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from its end.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(16)?.parse().ok()
}

/// The scheduling policy of process (or thread) `pid`: field 41 of its
/// `stat` (0 the normal policy, 2 `SCHED_RR`).
fn policy_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(38)?.parse().ok()
}

/// `SCHED_RR`, as `stat` shows it.
const SCHED_RR: i32 = 2;

/// Every thread of process `pid`, with its name, nice value and policy.
fn threads(pid: i32) -> Vec<(String, i32, i32)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let tid: i32 = e.file_name().to_str()?.parse().ok()?;
            let name = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
            let rest = &stat[stat.rfind(')')? + 2..];
            let field = |n: usize| rest.split(' ').nth(n)?.parse().ok();
            Some((name.trim().to_owned(), field(16)?, field(38)?))
        })
        .collect()
}

#[test]
fn the_agent_runs_real_time_and_it_and_its_watchdog_ten_nice_levels_above_the_hooks_it_starts() {
    let base = nice_of(std::process::id() as i32).unwrap();
    if !nix::unistd::geteuid().is_root() {
        // Raising a nice value needs CAP_SYS_NICE: the agent would say so
        // and run unboosted.
        crate::support::skip("not root: the agent cannot raise its priority");
        return;
    }
    let hook = |i: usize, log: &std::path::Path| {
        let line = |what: &str| {
            format!(
                "echo $(date +%s%N) n{i} {what} $HALE_EPOCH nice=$(cut -d' ' -f19 /proc/$$/stat),policy=$(cut -d' ' -f41 /proc/$$/stat) >> {}",
                log.display()
            )
        };
        Some((line("promote"), line("demote")))
    };
    let c = Cluster::roles_with("priority", 3, hook, |_| String::new(), |_| {});
    let log = c.logs.path().join("hooks.log");
    let promote = wait_for(Duration::from_secs(30), "a promote hook to run", || {
        hook_lines(&log).into_iter().find(|l| l.what == "promote")
    });
    // The hook ran at the priority the agent was started with (the test's),
    // under the normal policy.
    assert_eq!(
        promote.reason,
        format!("nice={base},policy=0"),
        "{promote:?}"
    );
    let holder = c.agents.iter().find(|a| a.name == promote.node).unwrap();
    let raised = (base - 10).max(-20);
    let pid = holder.pid().as_raw();
    // Every thread of the agent but the spawner runs raised and real-time.
    let ts = threads(pid);
    assert!(ts.len() > 2, "{ts:?}");
    for (name, nice, policy) in &ts {
        let want = if name == "hale-spawner" {
            (base, 0)
        } else {
            (raised, SCHED_RR)
        };
        assert_eq!((*nice, *policy), want, "thread {name} of the agent: {ts:?}");
    }
    let watchdog = wait_for(Duration::from_secs(10), "the holder's watchdog", || {
        descendants(pid).into_iter().find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split('\0').any(|w| w == "watchdog"))
        })
    });
    // Its watchdog (a child that outlives hooks) runs raised too, under the
    // normal policy: its fences never delay an agent.
    assert_eq!(
        (nice_of(watchdog), policy_of(watchdog)),
        (Some(raised), Some(0)),
        "the watchdog {watchdog}"
    );
    let ws = threads(watchdog);
    assert!(
        ws.iter()
            .all(|(_, nice, policy)| (*nice, *policy) == (raised, 0)),
        "threads of the watchdog {watchdog}: {ws:?}"
    );
}
