//! The fencing watchdog: a small separate process that runs a role's
//! demote command when a holding's lease runs out without a renewal, and
//! the hook runner shared with the agent.
//!
//! The agent starts **one** (`hale watchdog`) for all the roles it holds,
//! when it first holds one, and talks to it over its standard input, one
//! [`Order`] per line (JSON, `{"order": ..., "h": ...}`); `h` names the
//! holding (one role at one epoch) the order is about:
//!
//! * `guard`: start guarding holding `h`: its lease lasts until `until_ns`,
//!   its fence is the role's demote command (run with `env`, under the
//!   holding's `claim`, within `hook_timeout_ms`);
//! * `arm` `until_ns`: the lease now lasts until then (sent only when a
//!   renewal has committed);
//! * `promote` `pgid`: a promote hook runs in process group `pgid`;
//!   `promote-done`: it has exited;
//! * `disarm`: the agent is stepping down itself. The watchdog answers one
//!   [`Answer`] line on standard output, `fenced` if it has already run
//!   the fence (the agent need not demote) or `disarmed`. A fence the
//!   watchdog ran on its own while the agent lives (its deadline passed
//!   before a renewal reached it) is answered `fenced` unasked: the agent
//!   steps down without demoting again. **It keeps the
//!   deadline** (and renewals still re-arm it): an agent frozen between
//!   this answer and the start of its demote is fenced at the deadline all
//!   the same;
//! * `stop`: forget the holding without fencing (the step-down is done).
//!
//! **Deadlines are absolute**, in nanoseconds of the kernel's
//! `CLOCK_MONOTONIC` ([`shared_clock_ns`]), one clock for every process of
//! the host, read past any `LD_PRELOAD` clock shim: the time an order spends
//! in the agent's queue or in the pipe (a busy host, a watchdog frozen for
//! a while) never moves the deadline past the lease's end, as a relative
//! "so many milliseconds from now" did.
//!
//! It fences a holding (kills its promote hook's process group, then runs
//! the demote command) when its deadline passes, and every holding at once
//! when its standard input closes (the agent died; demoting early is always
//! safe), then exits. If the agent is frozen (SIGSTOP), the lines stop and
//! each holding is fenced at its deadline. Each fence runs on a thread of
//! its own: a slow fence never delays another holding's.
//!
//! One process for every holding, not one per holding: at 1,000 roles, a
//! process started per grant (the 123 MB `hale` executable, each time) was
//! what kept the host too busy to renew (see BENCHMARKS.md, "Roles").
//!
//! **The demote runs once per holding.** The agent's own demote (through
//! `hale demote-once`) and the watchdog's fence both take the holding's
//! [claim](run_claimed) first: an exclusive lock on a file that records
//! that the demote ran. Whichever comes second waits for the first to end
//! and then does nothing, but the watchdog's fence waits only until the
//! lease's end: from then on it kills a demote of the agent still holding
//! the claim (its process group, written in the claim) and runs in its
//! place ([`Taking::preempt_at`]). A demote killed midway (its process group, the
//! lock's holder with it), or one that failed, records nothing, so the
//! other side runs it; the watchdog itself tries a failed fence again after
//! 0.1 s, doubling up to every second (and answers a `disarm` meanwhile as
//! not fenced). Were
//! the claim's file impossible to create, both run it: a second demote is
//! better than none.
//!
//! Patroni needs the kernel's softdog for this; a process of our own is
//! enough because the fence is a command, not a reboot. A whole machine
//! frozen and resumed is covered by the fencing epoch, which downstream
//! systems check (see the README).

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};

mod claim;
pub mod presence;
mod signals;
pub mod slots;

pub use claim::{
    claim_dir, claim_path, run_claimed, run_claimed_with, sweep_stale_claims, Claimed, Taking,
};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// What the agent tells its watchdog: one JSON object a line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "order", rename_all = "kebab-case")]
pub enum Order {
    /// Start guarding holding `h`.
    Guard {
        /// The holding.
        h: u64,
        /// Its lease's end ([`shared_clock_ns`]).
        until_ns: u64,
        /// The fence's time limit, in milliseconds.
        hook_timeout_ms: u64,
        /// The claim the fence runs under, shared with the agent's demote.
        claim: PathBuf,
        /// The fence (the role's demote command and its arguments).
        fence: Vec<String>,
        /// Environment for the fence (`HALE_ROLE`, `HALE_EPOCH`, ...).
        env: Vec<(String, String)>,
    },
    /// Holding `h`'s lease now lasts until `until_ns`.
    Arm {
        /// The holding.
        h: u64,
        /// Its lease's end ([`shared_clock_ns`]).
        until_ns: u64,
    },
    /// A promote hook of holding `h` runs in process group `pgid`.
    Promote {
        /// The holding.
        h: u64,
        /// Its process group.
        pgid: u32,
    },
    /// Holding `h`'s promote hook has exited.
    PromoteDone {
        /// The holding.
        h: u64,
    },
    /// The agent steps down from holding `h` itself: answer with an
    /// [`Answer`].
    Disarm {
        /// The holding.
        h: u64,
    },
    /// Forget holding `h` without fencing it.
    Stop {
        /// The holding.
        h: u64,
    },
    /// The agent stops but keeps holding `h`'s paused role, for its next
    /// run to adopt: forget the holding without fencing it (as `stop`).
    Keep {
        /// The holding.
        h: u64,
    },
}

impl Order {
    /// Its line on the pipe (without the newline).
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("an order serialises")
    }
}

/// The watchdog's answer to [`Order::Disarm`]: one JSON object a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The holding.
    pub h: u64,
    /// Whether it had already fenced it.
    pub disarmed: Disarmed,
}

/// Whether the watchdog had fenced a holding the agent disarms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Disarmed {
    /// It had already fenced: the agent need not demote.
    Fenced,
    /// It had not: the agent demotes (its deadline still stands).
    Disarmed,
}

impl Answer {
    /// Its line on the pipe (without the newline).
    pub fn line(&self) -> String {
        serde_json::to_string(self).expect("an answer serialises")
    }
}

/// How the watchdog ended (its agent gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogExit {
    /// Nothing was left to guard: nothing fenced since the last holding.
    Released,
    /// It fenced at least one holding.
    Fenced,
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

/// The longest the watchdog waits before trying a fence that failed again.
const FENCE_RETRY: Duration = Duration::from_secs(1);
/// The first wait before trying a failed fence again, doubled after each
/// failure up to [`FENCE_RETRY`]: the next holder may be promoted a drift
/// margin after the lease's end, so a fence that failed there (its hook
/// killed, say) is tried again at once rather than a second later (nemesis
/// seed 90056: the retry came 0.36 s after the next promote).
const FENCE_RETRY_FIRST: Duration = Duration::from_millis(100);

/// The wait before the next try of a fence that has failed `failures`
/// times in a row (at least once).
fn fence_retry(failures: u32) -> Duration {
    let doubled = FENCE_RETRY_FIRST.saturating_mul(1 << failures.saturating_sub(1).min(10));
    doubled.min(FENCE_RETRY)
}

/// Now, in nanoseconds of the kernel's `CLOCK_MONOTONIC`: the clock the
/// agent and its watchdog share for deadlines. Read through the vDSO
/// (rustix), not the C library's `clock_gettime`, so that a clock shim
/// preloaded into these processes (libfaketime, as the clock tests and the
/// nemesis use, whose rates count from each process's own start) cannot
/// make them disagree.
pub fn shared_clock_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// The instant `left` from now on the shared clock ([`shared_clock_ns`]).
pub fn shared_deadline(left: Duration) -> u64 {
    shared_clock_ns().saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
}

/// How long until `until_ns` on the shared clock (zero once passed).
fn shared_left(until_ns: u64) -> Duration {
    Duration::from_nanos(until_ns.saturating_sub(shared_clock_ns()))
}

/// How often the watchdog looks for input while a deadline is pending.
const DEADLINE_POLL: Duration = Duration::from_millis(10);

/// The next input, or `Timeout` once `until_ns` has passed on the shared
/// clock. Not `Receiver::recv_timeout`: the standard library turns a
/// timeout into an absolute instant of the C library's clock, and under a
/// clock shim that runs that clock at another rate (libfaketime's
/// `x1.05`, which scales from boot) the kernel's wait ran seconds, even
/// minutes, past the deadline: a watchdog under it fenced only when the
/// agent next wrote (nemesis seed 10026). Short sleeps made by the system
/// call itself (rustix) and the shared clock keep it within
/// [`DEADLINE_POLL`] of the deadline.
fn recv_until<T>(rx: &mpsc::Receiver<T>, until_ns: u64) -> Result<T, mpsc::RecvTimeoutError> {
    loop {
        match rx.try_recv() {
            Ok(x) => return Ok(x),
            Err(mpsc::TryRecvError::Disconnected) => {
                return Err(mpsc::RecvTimeoutError::Disconnected)
            }
            Err(mpsc::TryRecvError::Empty) => {}
        }
        let left = shared_left(until_ns);
        if left.is_zero() {
            return Err(mpsc::RecvTimeoutError::Timeout);
        }
        let nap = left.min(DEADLINE_POLL);
        let ts = rustix::time::Timespec {
            tv_sec: nap.as_secs() as _,
            tv_nsec: nap.subsec_nanos() as _,
        };
        let _ = rustix::thread::nanosleep(&ts);
    }
}

/// `hale demote-once`: the agent's demote command, run under the claim
/// at `path` in this process's group (the agent kills the group to kill
/// it), which it announces in the claim; with `preempt_at` (the
/// watchdog's fence), a demote still holding the claim then is killed
/// ([`Taking`]). Exit status: the command's, or 0 when the other side
/// already ran it.
pub fn demote_once(
    path: &Path,
    preempt_at: Option<u64>,
    argv: &[String],
) -> std::process::ExitCode {
    let taking = Taking {
        announce_group: true,
        preempt_at,
    };
    let outcome = run_claimed_with(path, taking, || {
        let Some((prog, args)) = argv.split_first() else {
            return true;
        };
        let mut cmd = Command::new(prog);
        cmd.args(args).stdin(Stdio::null());
        stdout_to_stderr(&mut cmd);
        cmd.status().is_ok_and(|s| s.success())
    });
    match outcome {
        Claimed::Ran(true) | Claimed::AlreadyRan => std::process::ExitCode::SUCCESS,
        Claimed::Ran(false) => std::process::ExitCode::FAILURE,
    }
}

/// The executable this process runs, even once a package upgrade has
/// replaced or removed its file: `/proc/self/exe` where there is one (it
/// opens the running file, deleted or not), else the path it was started
/// from.
pub fn own_exe() -> std::io::Result<std::path::PathBuf> {
    let proc_exe = Path::new("/proc/self/exe");
    if proc_exe.exists() {
        return Ok(proc_exe.to_path_buf());
    }
    std::env::current_exe()
}

/// `exe`, or [`own_exe`] when `exe` is the very file this process runs
/// (same device and inode): what starts a watchdog or a `demote-once` of
/// this release whatever later happens to the file.
pub fn same_release(exe: std::path::PathBuf) -> std::path::PathBuf {
    use std::os::unix::fs::MetadataExt;
    let (Ok(own), Ok(file)) = (own_exe(), std::fs::metadata(&exe)) else {
        return exe;
    };
    match std::fs::metadata(&own) {
        Ok(m) if m.dev() == file.dev() && m.ino() == file.ino() => own,
        _ => exe,
    }
}

/// The command line of `hale demote-once` (the `hale` executable `exe`)
/// running `demote` under the claim at `claim`, killing a demote that
/// still holds the claim from `preempt_at` on (the watchdog's fence).
pub fn demote_once_argv(
    exe: &Path,
    claim: &Path,
    preempt_at: Option<u64>,
    demote: &[String],
) -> Vec<String> {
    let mut argv = vec![exe.display().to_string(), "demote-once".into()];
    argv.extend(["--claim".into(), claim.display().to_string()]);
    if let Some(at) = preempt_at {
        argv.extend(["--preempt-at".into(), at.to_string()]);
    }
    argv.push("--".into());
    argv.extend_from_slice(demote);
    argv
}

/// One holding the watchdog guards.
struct Guarded {
    /// The lease's end on the shared clock (none once fenced, or while a
    /// fence runs).
    deadline: Option<u64>,
    /// Its running promote hook's process group.
    promote: Option<u32>,
    /// Its fence ran and succeeded.
    fenced: bool,
    /// A fence of it runs now (on a thread of its own).
    fencing: bool,
    /// A renewal that came while the fence ran: the deadline if it fails.
    rearmed: Option<u64>,
    /// A `disarm` waits for the running fence's outcome.
    asked: bool,
    /// Its fence's failures in a row (the wait before the next try).
    failures: u32,
    /// The agent said `stop` or `keep` while its fence ran: forgotten (and
    /// its claim removed) once that fence ends, never fenced again.
    forgotten: bool,
    fence: Fence,
}

/// What a holding's fence runs.
#[derive(Clone)]
struct Fence {
    argv: Vec<String>,
    claim: PathBuf,
    env: Vec<(String, String)>,
    timeout: Duration,
}

impl Fence {
    /// Kills the promote hook's group, then runs the demote under the
    /// claim, killing the agent's demote if it still holds the claim at
    /// `preempt_at` (the lease's end); true when it succeeded or the
    /// agent's demote had already run.
    fn run(&self, promote: Option<u32>, why: &str, preempt_at: u64) -> bool {
        if let Some(pgid) = promote {
            kill_group(pgid);
        }
        // The fence runs as `hale demote-once` in a process group of its
        // own: the claim is taken and recorded by that process, so a
        // watchdog killed while its fence runs leaves the fence to finish
        // and record itself, and the agent's demote then finds it done.
        // (Run inside this process, a fence that had done its work was
        // run again by the agent: nemesis seed 7081.)
        // This release's own executable, even after an upgrade replaced
        // its file (`current_exe` would name the new file, or a deleted one).
        match own_exe() {
            Ok(exe) => {
                let argv = demote_once_argv(&exe, &self.claim, Some(preempt_at), &self.argv);
                // Its time waiting for the claim is not the hook's: a
                // preempted demote of the agent may have held it until the
                // lease's end.
                let wait = shared_left(preempt_at);
                run_hook(&argv, &self.env, why, self.timeout + wait)
            }
            Err(_) => matches!(
                run_claimed_with(
                    &self.claim,
                    Taking {
                        announce_group: false,
                        preempt_at: Some(preempt_at)
                    },
                    || run_hook(&self.argv, &self.env, why, self.timeout)
                ),
                Claimed::Ran(true) | Claimed::AlreadyRan
            ),
        }
    }
}

/// What reaches the watchdog's loop.
enum Input {
    /// A line from the agent.
    Line(String),
    /// The agent's pipe closed: it is gone.
    AgentGone,
    /// A fence of holding `.0` ended: whether it succeeded.
    Fenced(u64, bool),
}

/// The watchdog's state: every holding it guards.
struct Watch {
    holdings: BTreeMap<u64, Guarded>,
    /// Fences running at once, at most (`slots.rs`).
    slots: std::sync::Arc<slots::FenceSlots>,
    tx: mpsc::Sender<Input>,
    /// The agent is gone: every holding is fenced until it succeeds.
    gone: bool,
    fenced_any: bool,
}

/// Runs the watchdog on this process's standard input and output until its
/// agent is gone and every holding it still guarded has been fenced.
pub fn run() -> WatchdogExit {
    // First thing: a hang-up or an interrupt must not end a watchdog before
    // it fences. An agent run in a terminal shares its process group with
    // its watchdog, so the terminal's ctrl-c and hang-up reach both; and
    // when the agent dies while the host is frozen, the kernel sends SIGHUP
    // (then SIGCONT) to the orphaned, stopped group, which killed the
    // watchdog unfenced (nemesis seeds 170047, 170078, 170089, when it ran in
    // a group of its own). Both only set a flag now; a fence's command gets
    // the default dispositions back when it starts (`exec` resets handlers).
    signals::ignore_hang_up_and_interrupt();
    // Started from a real-time agent thread: back to the normal policy at
    // the agent's nice value before any thread or fence starts, so that
    // fences never delay an agent (see `crate::host::priority`).
    if !crate::host::priority::leave_realtime() {
        eprintln!("hale watchdog: cannot leave the real-time policy");
    }
    // Into its own cgroup leaf before any order is read (its fences start
    // there); the agent's journal gets why not.
    if let Err(e) = crate::host::cgroup::enter_named_leaf() {
        eprintln!("hale watchdog: it stays in the agent's cgroup: {e}");
    }
    // Held until this process exits: the agent's next run waits for it.
    let _presence = presence::announce();
    let (tx, rx) = mpsc::channel::<Input>();
    let lines = tx.clone();
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines().map_while(Result::ok) {
            if lines.send(Input::Line(l)).is_err() {
                return;
            }
        }
        let _ = lines.send(Input::AgentGone);
    });
    let mut w = Watch {
        holdings: BTreeMap::new(),
        slots: std::sync::Arc::new(slots::FenceSlots::from_env()),
        tx,
        gone: false,
        fenced_any: false,
    };
    loop {
        if w.gone && w.holdings.values().all(|g| g.fenced) {
            for g in w.holdings.values() {
                let _ = std::fs::remove_file(&g.fence.claim);
            }
            return if w.fenced_any {
                WatchdogExit::Fenced
            } else {
                WatchdogExit::Released
            };
        }
        let next = w.holdings.values().filter_map(|g| g.deadline).min();
        let input = match next {
            Some(d) => recv_until(&rx, d),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match input {
            Ok(Input::Line(line)) => {
                if let Ok(order) = serde_json::from_str::<Order>(line.trim()) {
                    w.order(order);
                }
            }
            Ok(Input::AgentGone) => {
                w.gone = true;
                w.fence_where(|g| !g.fenced && !g.fencing);
            }
            Ok(Input::Fenced(h, ok)) => w.fenced(h, ok),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = shared_clock_ns();
                w.fence_where(|g| g.deadline.is_some_and(|d| d <= now));
            }
            // Unreachable: the loop holds a sender itself.
            Err(mpsc::RecvTimeoutError::Disconnected) => return WatchdogExit::Released,
        }
    }
}

impl Watch {
    /// Fences every holding `which` picks.
    fn fence_where(&mut self, which: impl Fn(&Guarded) -> bool) {
        let picked: Vec<u64> = self
            .holdings
            .iter()
            .filter(|(_, g)| which(g))
            .map(|(h, _)| *h)
            .collect();
        for h in picked {
            self.fence(h);
        }
    }

    fn order(&mut self, order: Order) {
        let ms = Duration::from_millis;
        match order {
            Order::Guard {
                h,
                until_ns,
                hook_timeout_ms,
                claim,
                fence,
                env,
            } => {
                let fence = Fence {
                    argv: fence,
                    claim,
                    env,
                    timeout: ms(hook_timeout_ms),
                };
                let g = Guarded {
                    deadline: Some(until_ns),
                    promote: None,
                    fenced: false,
                    fencing: false,
                    rearmed: None,
                    asked: false,
                    failures: 0,
                    forgotten: false,
                    fence,
                };
                self.holdings.insert(h, g);
            }
            Order::Arm { h, until_ns } => match self.holdings.get_mut(&h) {
                Some(g) if g.fencing => g.rearmed = Some(until_ns),
                Some(g) if !g.fenced => g.deadline = Some(until_ns),
                _ => {}
            },
            Order::Promote { h, pgid } => match self.holdings.get_mut(&h) {
                Some(g) if !g.fenced && !g.fencing => g.promote = Some(pgid),
                // Told of a promote hook once the holding's fence began, or
                // after it was forgotten (an agent frozen past its lease
                // lets its held hook go only after telling): it must never
                // run behind the fence.
                _ => kill_group(pgid),
            },
            Order::PromoteDone { h } => {
                if let Some(g) = self.holdings.get_mut(&h) {
                    g.promote = None;
                }
            }
            // The deadline stays: see the module's doc.
            Order::Disarm { h } => match self.holdings.get_mut(&h) {
                Some(g) if g.fencing => g.asked = true,
                g => answer(h, g.is_some_and(|g| g.fenced)),
            },
            // A fence already running keeps the holding, and its claim,
            // until it ends: removed now, the claim that says the agent's
            // demote ran would be gone before the fence opened it, and the
            // fence would run the demote a second time (nemesis seeds
            // 100167, 100218: the agent's demote done, its `stop` read just
            // after the deadline had started the fence).
            Order::Stop { h } | Order::Keep { h } => match self.holdings.get_mut(&h) {
                Some(g) if g.fencing => {
                    g.forgotten = true;
                    g.rearmed = None;
                }
                Some(_) => {
                    if let Some(g) = self.holdings.remove(&h) {
                        let _ = std::fs::remove_file(&g.fence.claim);
                    }
                }
                None => {}
            },
        }
    }

    /// Starts a fence of holding `h` on a thread of its own. Once the
    /// agent is gone, nobody else is left to fence: it is tried until it
    /// succeeds.
    fn fence(&mut self, h: u64) {
        let Some(g) = self.holdings.get_mut(&h) else {
            return;
        };
        g.fencing = true;
        // A fence before the lease's end (the agent gone) waits for the
        // agent's own demote until then; past it, it kills that demote.
        let preempt_at = g.deadline.take().unwrap_or_else(shared_clock_ns);
        let (fence, mut promote, tx, gone) = (
            g.fence.clone(),
            g.promote.take(),
            self.tx.clone(),
            self.gone,
        );
        let why = if gone {
            "watchdog-agent-gone"
        } else {
            "watchdog-expired"
        };
        let mut failures = g.failures;
        let slots = self.slots.clone();
        std::thread::spawn(move || loop {
            let ok = {
                let _slot = slots.acquire();
                fence.run(promote.take(), why, preempt_at)
            };
            if ok || !gone {
                let _ = tx.send(Input::Fenced(h, ok));
                return;
            }
            failures += 1;
            std::thread::sleep(fence_retry(failures));
        });
    }

    fn fenced(&mut self, h: u64, ok: bool) {
        let gone = self.gone;
        let Some(g) = self.holdings.get_mut(&h) else {
            return;
        };
        g.fencing = false;
        if g.forgotten {
            if std::mem::take(&mut g.asked) {
                answer(h, ok);
            }
            self.fenced_any |= ok;
            if let Some(g) = self.holdings.remove(&h) {
                let _ = std::fs::remove_file(&g.fence.claim);
            }
            return;
        }
        let rearmed = g.rearmed.take();
        if ok {
            g.failures = 0;
            g.fenced = true;
            self.fenced_any = true;
        } else if !gone {
            // Not fenced: tried again soon (or when a renewal that came
            // meanwhile runs out), and a `disarm` meanwhile is told so, so
            // that the agent runs its own demote.
            g.failures += 1;
            let retry = shared_deadline(fence_retry(g.failures));
            g.deadline = Some(rearmed.unwrap_or(retry));
        }
        if std::mem::take(&mut g.asked) {
            answer(h, g.fenced);
        } else if ok && !gone {
            // Unasked: the agent lives (its renewals did not reach this
            // process in time: it, or the agent, was frozen) and must
            // learn that its service was demoted, or it would hold on to a
            // fenced holding, and keep it for its next run to adopt and
            // demote again (nemesis seed 120055).
            answer(h, true);
        }
        if !ok && gone {
            self.fence(h);
        }
    }
}

/// Writes the answer to a `disarm` of holding `h`.
fn answer(h: u64, fenced: bool) {
    let disarmed = if fenced {
        Disarmed::Fenced
    } else {
        Disarmed::Disarmed
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", Answer { h, disarmed }.line());
    let _ = out.flush();
}

/// A hook's standard output goes where its runner's errors go (the
/// agent's log): the watchdog's standard output is its pipe to the agent,
/// which a hook's output would corrupt, and a hook that prints into a pipe
/// closed meanwhile would die of it (found when `hale postgres fence`
/// panicked on a broken pipe).
fn stdout_to_stderr(cmd: &mut Command) {
    use std::os::fd::AsFd;
    if let Ok(err) = std::io::stderr().as_fd().try_clone_to_owned() {
        cmd.stdout(Stdio::from(err));
    }
}

/// Starts `argv` in a process group of its own (so that a kill reaches
/// everything it started), standard input closed, standard output to
/// standard error, `HALE_REASON` and `env` set.
pub fn hook_command(argv: &[String], env: &[(String, String)], reason: &str) -> Option<Command> {
    let (prog, args) = argv.split_first()?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .env("HALE_REASON", reason)
        .process_group(0);
    stdout_to_stderr(&mut cmd);
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
    fn a_failed_fence_is_tried_again_soon_then_every_second() {
        let waits: Vec<u128> = (1..=6).map(|n| fence_retry(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(fence_retry(u32::MAX), FENCE_RETRY);
    }

    #[test]
    fn a_pause_of_the_watchdog_is_not_counted_as_the_hooks_running_time() {
        let ms = Duration::from_millis;
        assert_eq!(hook_time(ms(100), ms(12)), ms(112));
        // Ten seconds frozen between two checks: one poll's worth counts.
        assert_eq!(hook_time(ms(100), Duration::from_secs(10)), ms(110));
    }
}
