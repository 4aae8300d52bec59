//! The fencing watchdog as a real process, talked to as the agent talks to
//! it: it keeps its deadline through a step-down, and the demote runs once
//! per holding whichever of the agent and the watchdog reaches for it.

use hale_agent::watchdog::{Disarmed, Order};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{hale_bin, log_dir, wait_until};

/// A demote command that appends `what` to `log`, takes `secs`, and
/// appends `done`.
fn demote(log: &Path, what: &str, secs: f64) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo {what} >> {l}; sleep {secs}; echo done >> {l}",
            l = log.display()
        ),
    ]
}

fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Kills the child (and reaps it) when dropped, even if the test fails.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn watchdog(deadline_ms: u64, claim: &Path, fence: &[String]) -> Reaped {
    Reaped(
        Command::new(hale_bin())
            .arg("watchdog")
            .arg("--deadline-ms")
            .arg(deadline_ms.to_string())
            .arg("--claim")
            .arg(claim)
            .arg("--")
            .args(fence)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

fn say(w: &mut Reaped, order: Order) {
    let stdin = w.0.stdin.as_mut().unwrap();
    writeln!(stdin, "{}", order.line()).unwrap();
    stdin.flush().unwrap();
}

fn answer(w: &mut Reaped) -> Disarmed {
    let mut line = String::new();
    BufReader::new(w.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    serde_json::from_str(line.trim()).unwrap()
}

fn demote_once(claim: &Path, cmd: &[String]) -> Reaped {
    Reaped(
        Command::new(hale_bin())
            .arg("demote-once")
            .arg("--claim")
            .arg(claim)
            .arg("--")
            .args(cmd)
            .process_group(0)
            .spawn()
            .unwrap(),
    )
}

#[test]
fn an_agent_frozen_between_disarming_its_watchdog_and_starting_its_demote_is_still_fenced() {
    let dir = log_dir("watchdog_gap");
    let log = dir.path().join("log");
    let claim = dir.path().join("claim");
    let mut w = watchdog(800, &claim, &demote(&log, "fence", 0.0));
    say(&mut w, Order::Disarm);
    assert_eq!(answer(&mut w), Disarmed::Disarmed);
    // The agent says nothing more (frozen): the deadline still holds.
    wait_until(Duration::from_secs(10), "the watchdog's fence", || {
        lines(&log) == ["fence", "done"]
    });
    // Resumed, the agent starts its own demote: it finds the claim taken
    // and runs nothing.
    let mut d = demote_once(&claim, &demote(&log, "agent", 0.0));
    assert!(d.0.wait().unwrap().success());
    assert_eq!(lines(&log), ["fence", "done"]);
    say(&mut w, Order::Stop);
    assert_eq!(w.0.wait().unwrap().code(), Some(3), "it says it fenced");
    assert!(
        !claim.exists(),
        "the watchdog removes the claim when it exits"
    );
}

#[test]
fn the_demote_runs_once_when_the_watchdogs_deadline_passes_during_the_agents_demote() {
    let dir = log_dir("watchdog_claim");
    let log = dir.path().join("log");
    let claim = dir.path().join("claim");
    let mut w = watchdog(300, &claim, &demote(&log, "fence", 0.0));
    say(&mut w, Order::Disarm);
    assert_eq!(answer(&mut w), Disarmed::Disarmed);
    // The agent's demote takes a second: the deadline passes meanwhile.
    let mut d = demote_once(&claim, &demote(&log, "agent", 1.0));
    assert!(d.0.wait().unwrap().success());
    // The watchdog waited for it, then found it done.
    say(&mut w, Order::Stop);
    w.0.wait().unwrap();
    assert_eq!(lines(&log), ["agent", "done"]);
}

#[test]
fn a_demote_killed_midway_is_run_by_the_watchdog() {
    let dir = log_dir("watchdog_killed");
    let log = dir.path().join("log");
    let claim = dir.path().join("claim");
    let mut w = watchdog(60_000, &claim, &demote(&log, "fence", 0.0));
    let d = demote_once(&claim, &demote(&log, "agent", 30.0));
    wait_until(Duration::from_secs(10), "the agent's demote starts", || {
        lines(&log) == ["agent"]
    });
    // The agent kills its demote's process group (a timed-out hook)...
    let pgid = nix::unistd::Pid::from_raw(d.0.id() as i32);
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL).unwrap();
    drop(d);
    // ...and dies: the watchdog fences at once, and the demote runs again.
    drop(w.0.stdin.take());
    wait_until(Duration::from_secs(10), "the watchdog's fence", || {
        lines(&log) == ["agent", "fence", "done"]
    });
    assert_eq!(w.0.wait().unwrap().code(), Some(3));
}

#[test]
fn a_fence_that_fails_is_tried_again_until_it_succeeds_and_the_agent_is_told_it_is_not_fenced_meanwhile(
) {
    let dir = log_dir("watchdog_fence_fails");
    let log = dir.path().join("log");
    let claim = dir.path().join("claim");
    // The fence fails (exit 1) on its first three runs (a second apart:
    // time enough to ask), then succeeds.
    let fence = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo try >> {l}; [ $(grep -c try {l}) -ge 4 ] && echo fenced >> {l}",
            l = log.display()
        ),
    ];
    let mut w = watchdog(100, &claim, &fence);
    wait_until(Duration::from_secs(10), "the first failed fence", || {
        !lines(&log).is_empty()
    });
    // Meanwhile the agent asks: not fenced, so it must demote itself.
    say(&mut w, Order::Disarm);
    assert_eq!(answer(&mut w), Disarmed::Disarmed);
    wait_until(Duration::from_secs(10), "the fence, tried again", || {
        lines(&log) == ["try", "try", "try", "try", "fenced"]
    });
    say(&mut w, Order::Disarm);
    assert_eq!(answer(&mut w), Disarmed::Fenced);
    say(&mut w, Order::Stop);
    assert!(w.0.wait().unwrap().code().is_some());
}

#[test]
fn a_watchdog_killed_while_its_fence_runs_leaves_the_fence_to_finish_and_the_agent_runs_nothing() {
    let dir = log_dir("watchdog_killed_fencing");
    let log = dir.path().join("log");
    let claim = dir.path().join("claim");
    let mut w = watchdog(100, &claim, &demote(&log, "fence", 1.0));
    wait_until(
        Duration::from_secs(10),
        "the watchdog's fence starts",
        || lines(&log) == ["fence"],
    );
    // The watchdog dies (SIGKILL) while its fence runs: the fence goes on.
    w.0.kill().unwrap();
    w.0.wait().unwrap();
    // The agent's demote waits for the fence to end and finds it done.
    let mut d = demote_once(&claim, &demote(&log, "agent", 0.0));
    assert!(d.0.wait().unwrap().success());
    assert_eq!(lines(&log), ["fence", "done"]);
}
