//! The fencing watchdog: a small separate process that runs a role's
//! demote command when the holder's lease runs out without a renewal.
//!
//! The agent starts one per held role and re-arms it at every renewal by
//! writing `arm <milliseconds>` lines to its standard input. If the agent
//! is frozen (SIGSTOP) or stuck, the lines stop and the watchdog fences at
//! the deadline; if the agent dies, its standard input closes and the
//! watchdog fences at once (demoting early is always safe). `release` ends
//! the watchdog without fencing (the agent demoted itself).
//!
//! Patroni needs the kernel's softdog for this; a process of our own is
//! enough because the fence is a command, not a reboot. A whole machine
//! frozen and resumed is covered by the fencing epoch, which downstream
//! systems check (see the README).

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the watchdog was told, or why it fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogExit {
    /// Released by the agent: no fence.
    Released,
    /// The deadline passed without a renewal: fenced.
    Expired,
    /// The agent went away: fenced.
    AgentGone,
}

/// Runs the watchdog on this process's standard input until it fences or
/// is released. `fence` is the demote command; `env` is passed to it.
pub fn run(
    first_deadline: Duration,
    fence: &[String],
    env: &[(String, String)],
    hook_timeout: Duration,
) -> WatchdogExit {
    let (tx, rx) = mpsc::channel::<Option<String>>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(Some(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.send(None);
    });
    let mut deadline = Instant::now() + first_deadline;
    let exit = loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Some(line)) => {
                let line = line.trim();
                if line == "release" {
                    break WatchdogExit::Released;
                }
                if let Some(ms) = line
                    .strip_prefix("arm ")
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    deadline = Instant::now() + Duration::from_millis(ms);
                }
            }
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => break WatchdogExit::AgentGone,
            Err(mpsc::RecvTimeoutError::Timeout) => break WatchdogExit::Expired,
        }
    };
    if exit != WatchdogExit::Released {
        let reason = if exit == WatchdogExit::Expired {
            "watchdog-expired"
        } else {
            "watchdog-agent-gone"
        };
        run_hook(fence, env, reason, hook_timeout);
    }
    exit
}

/// Runs a hook command synchronously under a timeout (killed when it runs over).
pub fn run_hook(
    argv: &[String],
    env: &[(String, String)],
    reason: &str,
    timeout: Duration,
) -> bool {
    let Some((prog, args)) = argv.split_first() else {
        return true;
    };
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .env("HALE_REASON", reason);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}
