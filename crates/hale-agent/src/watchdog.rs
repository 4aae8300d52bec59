//! The fencing watchdog: a small separate process that runs a role's
//! demote command when the holder's lease runs out without a renewal, and
//! the hook runner shared with the agent.
//!
//! The agent starts one per holding (`hale watchdog`) and talks to it over
//! its standard input, one [`Order`] per line (JSON, `{"order": ...}`):
//!
//! * `arm` `ms`: the lease now lasts `ms` more milliseconds (sent only
//!   when a renewal has committed);
//! * `promote` `pgid`: a promote hook runs in process group `pgid`;
//!   `promote-done`: it has exited;
//! * `disarm`: the agent is stepping down itself. The watchdog answers one
//!   [`Disarmed`] line on standard output, `fenced` if it has already run
//!   the fence (the agent need not demote) or `disarmed`. **It keeps its
//!   deadline** (and renewals still re-arm it): an agent frozen between
//!   this answer and the start of its demote is fenced at the deadline all
//!   the same;
//! * `stop`: exit without fencing (the step-down is done).
//!
//! It fences (kills the promote hook's process group, then runs the demote
//! command) when the deadline passes, or at once when its standard input
//! closes before `stop` (the agent died; demoting early is always safe). If
//! the agent is frozen (SIGSTOP), the lines stop and the watchdog fences at
//! the deadline.
//!
//! **The demote runs once per holding.** The agent's own demote (through
//! `hale demote-once`) and the watchdog's fence both take the holding's
//! [claim](run_claimed) first: an exclusive lock on a file that records
//! that the demote ran. Whichever comes second waits for the first to end
//! and then does nothing. A demote killed midway (its process group, the
//! lock's holder with it), or one that failed, records nothing, so the
//! other side runs it; the watchdog itself tries a failed fence again every
//! second (and answers a `disarm` meanwhile as not fenced). Were
//! the claim's file impossible to create, both run it: a second demote is
//! better than none.
//!
//! Patroni needs the kernel's softdog for this; a process of our own is
//! enough because the fence is a command, not a reboot. A whole machine
//! frozen and resumed is covered by the fencing epoch, which downstream
//! systems check (see the README).

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// What the agent tells its watchdog: one JSON object a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "order", rename_all = "kebab-case")]
pub enum Order {
    /// The lease now lasts `ms` more milliseconds.
    Arm {
        /// Milliseconds from now.
        ms: u64,
    },
    /// A promote hook runs in process group `pgid`.
    Promote {
        /// Its process group.
        pgid: u32,
    },
    /// The promote hook has exited.
    PromoteDone,
    /// The agent steps down itself: answer with [`Disarmed`].
    Disarm,
    /// Exit without fencing.
    Stop,
}

impl Order {
    /// Its line on the pipe (without the newline).
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("an order serialises")
    }
}

/// The watchdog's answer to [`Order::Disarm`]: one JSON string a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Disarmed {
    /// It had already fenced: the agent need not demote.
    Fenced,
    /// It had not: the agent demotes (its deadline still stands).
    Disarmed,
}

/// How the watchdog ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogExit {
    /// Stopped by the agent without fencing.
    Released,
    /// The deadline passed while armed: fenced.
    Expired,
    /// The agent went away: fenced.
    AgentGone,
}

/// Kills a hook's whole process group (the hook and everything it started
/// that did not leave the group). Harmless if it has already exited.
pub fn kill_group(pgid: u32) {
    if let Ok(p) = i32::try_from(pgid) {
        if p > 1 {
            let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
        }
    }
}

/// What a claimed run came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// This side ran the demote: whether it succeeded.
    Ran(bool),
    /// The other side had already run it: nothing was run.
    AlreadyRan,
}

/// The claim file of one holding's demote, shared by the agent (pid
/// `agent_pid`) and the watchdog it starts for `role` at `epoch` (it is
/// handed the path). The name holds a random number drawn once per agent
/// process: the temporary directory is shared, and another local user who
/// could guess the name could create the file first, saying the demote
/// ran, and so stop both the demote and the fence.
pub fn claim_path(agent_pid: u32, role: &str, epoch: u64) -> PathBuf {
    static TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let token = TOKEN.get_or_init(crate::seed::fresh_seed);
    let role: String = role
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    std::env::temp_dir().join(format!(
        "hale-demote-{agent_pid}-{token:016x}-{role}-{epoch}"
    ))
}

/// Runs `demote` under the claim at `path`: takes the file's exclusive
/// lock (waiting while the other side holds it), runs `demote` unless the
/// file says the demote already ran, then records that it did. If the
/// file cannot be opened or locked, `demote` runs anyway.
pub fn run_claimed(path: &Path, demote: impl FnOnce() -> bool) -> Claimed {
    use std::io::{Read, Seek};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path);
    let mut file = match file {
        Ok(f) if f.lock().is_ok() => f,
        _ => return Claimed::Ran(demote()),
    };
    let mut seen = String::new();
    let _ = file.read_to_string(&mut seen);
    if seen.starts_with(RAN) {
        return Claimed::AlreadyRan;
    }
    let ok = demote();
    // Only a demote that succeeded is recorded: one that failed (its hook
    // killed, timed out or exiting non-zero) leaves the claim open, so the
    // other side, or the next attempt, runs it again. An old primary must
    // not stay unfenced because its first fence failed.
    if ok {
        let _ = file.rewind();
        let _ = file.write_all(RAN.as_bytes());
        let _ = file.sync_data();
    }
    Claimed::Ran(ok)
}

/// How long the watchdog waits before trying a fence that failed again.
const FENCE_RETRY: Duration = Duration::from_secs(1);

/// What a claim file holds once its demote ran.
const RAN: &str = "ran\n";

/// `hale demote-once`: the agent's demote command, run under the claim
/// at `path` in this process's group (the agent kills the group to kill
/// it). Exit status: the command's, or 0 when the watchdog already ran it.
pub fn demote_once(path: &Path, argv: &[String]) -> std::process::ExitCode {
    let outcome = run_claimed(path, || {
        let Some((prog, args)) = argv.split_first() else {
            return true;
        };
        Command::new(prog)
            .args(args)
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    match outcome {
        Claimed::Ran(true) | Claimed::AlreadyRan => std::process::ExitCode::SUCCESS,
        Claimed::Ran(false) => std::process::ExitCode::FAILURE,
    }
}

/// The command line of `hale demote-once` (the `hale` executable `exe`)
/// running `demote` under the claim at `claim`.
pub fn demote_once_argv(exe: &Path, claim: &Path, demote: &[String]) -> Vec<String> {
    let mut argv = vec![exe.display().to_string(), "demote-once".into()];
    argv.extend(["--claim".into(), claim.display().to_string(), "--".into()]);
    argv.extend_from_slice(demote);
    argv
}

/// Runs the watchdog on this process's standard input and output until it
/// is stopped (or has fenced and its agent has gone). `fence` is the demote
/// command, run under the claim at `claim`; `env` is passed to it.
pub fn run(
    first_deadline: Duration,
    fence: &[String],
    claim: &Path,
    env: &[(String, String)],
    hook_timeout: Duration,
) -> WatchdogExit {
    let exit = watch(first_deadline, fence, claim, env, hook_timeout);
    let _ = std::fs::remove_file(claim);
    exit
}

fn watch(
    first_deadline: Duration,
    fence: &[String],
    claim: &Path,
    env: &[(String, String)],
    hook_timeout: Duration,
) -> WatchdogExit {
    let (tx, rx) = mpsc::channel::<Option<String>>();
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(Some(l)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
    let answer = |a: Disarmed| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", serde_json::to_string(&a).expect("serialises"));
        let _ = out.flush();
    };
    let mut deadline = Some(Instant::now() + first_deadline);
    let mut promote: Option<u32> = None;
    let mut fenced: Option<WatchdogExit> = None;
    let do_fence = |promote: Option<u32>, why: WatchdogExit| {
        if let Some(pgid) = promote {
            kill_group(pgid);
        }
        let reason = if why == WatchdogExit::Expired {
            "watchdog-expired"
        } else {
            "watchdog-agent-gone"
        };
        // The fence runs as `hale demote-once` in a process group of its
        // own: the claim is taken and recorded by that process, so a
        // watchdog killed while its fence runs leaves the fence to finish
        // and record itself, and the agent's demote then finds it done.
        // (Run inside this process, a fence that had done its work was
        // run again by the agent: nemesis seed 7081.)
        match std::env::current_exe() {
            Ok(exe) => {
                let argv = demote_once_argv(&exe, claim, fence);
                run_hook(&argv, env, reason, hook_timeout)
            }
            Err(_) => matches!(
                run_claimed(claim, || run_hook(fence, env, reason, hook_timeout)),
                Claimed::Ran(true) | Claimed::AlreadyRan
            ),
        }
    };
    loop {
        let msg = match deadline {
            Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match msg {
            Ok(Some(line)) => match serde_json::from_str::<Order>(line.trim()) {
                Ok(Order::Arm { ms }) => {
                    if fenced.is_none() {
                        deadline = Some(Instant::now() + Duration::from_millis(ms));
                    }
                }
                Ok(Order::Promote { pgid }) => promote = Some(pgid),
                Ok(Order::PromoteDone) => promote = None,
                Ok(Order::Disarm) => {
                    // The deadline stays: see the module's doc.
                    answer(if fenced.is_some() {
                        Disarmed::Fenced
                    } else {
                        Disarmed::Disarmed
                    });
                }
                Ok(Order::Stop) => return fenced.unwrap_or(WatchdogExit::Released),
                Err(_) => {}
            },
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                if fenced.is_none() {
                    // Nobody else is left to fence: until it succeeds.
                    let mut group = promote.take();
                    while !do_fence(group.take(), WatchdogExit::AgentGone) {
                        std::thread::sleep(FENCE_RETRY);
                    }
                    return WatchdogExit::AgentGone;
                }
                return fenced.unwrap_or(WatchdogExit::Released);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if do_fence(promote.take(), WatchdogExit::Expired) {
                    deadline = None;
                    fenced = Some(WatchdogExit::Expired);
                } else {
                    // Not fenced: tried again soon, and a `disarm` meanwhile
                    // is told so, so that the agent runs its own demote.
                    deadline = Some(Instant::now() + FENCE_RETRY);
                }
            }
        }
    }
}

/// Starts `argv` in a process group of its own (so that a kill reaches
/// everything it started), standard input closed, `HALE_REASON` and `env`
/// set.
pub fn hook_command(argv: &[String], env: &[(String, String)], reason: &str) -> Option<Command> {
    let (prog, args) = argv.split_first()?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .env("HALE_REASON", reason)
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Some(cmd)
}

/// Runs a hook command synchronously in its own process group under a
/// timeout (the whole group is killed when it runs over). True when it
/// exited with status 0 (or there was nothing to run).
pub fn run_hook(
    argv: &[String],
    env: &[(String, String)],
    reason: &str,
    timeout: Duration,
) -> bool {
    let Some(mut cmd) = hook_command(argv, env, reason) else {
        return true;
    };
    let Ok(mut child) = cmd.spawn() else {
        return false;
    };
    let (mut ran, mut last) = (Duration::ZERO, Instant::now());
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) => {
                let now = Instant::now();
                ran = hook_time(ran, now - last);
                last = now;
                if ran < timeout {
                    std::thread::sleep(HOOK_POLL);
                    continue;
                }
            }
            Err(_) => {}
        }
        kill_group(child.id());
        let _ = child.wait();
        return false;
    }
}

/// How often a synchronous hook is checked on.
const HOOK_POLL: Duration = Duration::from_millis(10);
/// A gap between two checks this much longer than [`HOOK_POLL`] means this
/// process was stopped (the host frozen, `SIGSTOP`).
const PAUSE: Duration = Duration::from_millis(500);

/// A hook's running time after `ran`, given the `gap` since the last check:
/// a pause of the watchdog (on a frozen host, the hook was frozen too) is
/// not time the hook ran. Counting it killed a fence that had finished its
/// work the moment the host thawed, and ran it a second time.
fn hook_time(ran: Duration, gap: Duration) -> Duration {
    ran + if gap > PAUSE { HOOK_POLL } else { gap }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_of_the_watchdog_is_not_counted_as_the_hooks_running_time() {
        let ms = Duration::from_millis;
        assert_eq!(hook_time(ms(100), ms(12)), ms(112));
        // Ten seconds frozen between two checks: one poll's worth counts.
        assert_eq!(hook_time(ms(100), Duration::from_secs(10)), ms(110));
    }

    #[test]
    fn a_demote_that_failed_leaves_the_claim_open_and_one_that_succeeded_closes_it() {
        let path = std::env::temp_dir().join(format!("hale-claim-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        assert_eq!(run_claimed(&path, || false), Claimed::Ran(false));
        assert_eq!(run_claimed(&path, || true), Claimed::Ran(true), "run again");
        assert_eq!(run_claimed(&path, || true), Claimed::AlreadyRan);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_claims_name_cannot_be_guessed_from_pid_role_and_epoch() {
        let a = claim_path(42, "db", 7);
        assert_eq!(a, claim_path(42, "db", 7), "stable within the agent");
        let name = a
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        assert_ne!(name, "hale-demote-42-db-7");
        assert!(
            name.starts_with("hale-demote-42-") && name.ends_with("-db-7"),
            "{name}"
        );
        assert_eq!(name.len(), "hale-demote-42--db-7".len() + 16);
    }
}
