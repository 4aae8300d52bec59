//! The manager's executor: control-plane requests, hooks (each in a
//! process group of its own, waiting for one of the agent's hook slots,
//! a demote under its holding's claim) and the fencing watchdog, as the
//! role's state machine asks; and what they report back.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use hale_control::{Action, Holder, HookExit, HookId, HookKind, HookReason};
use hale_core::Time;

use super::{Input, RoleManager};
use crate::roles::slots;
use crate::roles::watchdog::demote_once_argv;

/// How long a step-down waits for the watchdog's answer to its `disarm`
/// before it demotes anyway: well inside the lease's drift margin (400 ms
/// by default), which the demote must start within.
pub(super) const DISARM_WAIT: Duration = Duration::from_millis(100);

/// A hook run: its process group once it has started, whether it is the
/// promote hook, whether a kill was asked (before it started, it is
/// killed as it starts), and the claim a demote runs under.
struct HookRun {
    pgid: Option<u32>,
    promote: bool,
    /// It starts stopped (a promote hook a watchdog guards): it runs once
    /// the watchdog has been told of its process group.
    held: bool,
    kill: bool,
    claim: Option<PathBuf>,
}

/// How a promote hook starts when a watchdog guards the holding: stopped by
/// its own hand, so that it does nothing before the agent has told the
/// watchdog its process group (`hook_started`) and let it go on. Told only
/// after it ran, a promote hook started by an agent that died in between
/// was unknown to the watchdog and ran after the watchdog's fence (a
/// promoted service behind its own fence: the failover suite's history
/// checker caught it once under load). An agent that dies before letting
/// it go leaves a stopped process group without a parent in its session:
/// the kernel sends it SIGHUP, and it ends without having run.
fn held_argv(argv: &[String]) -> Vec<String> {
    let mut held = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        r#"kill -STOP $$ && exec "$@""#.to_owned(),
        "hale-promote".to_owned(),
    ];
    held.extend(argv.iter().cloned());
    held
}

/// The environment variable that makes the agent abort right after it
/// started a promote hook, before its watchdog hears of it: a fault for the
/// tests (the race [`held_argv`] closes). Never set it in production.
const DIE_AT_PROMOTE: &str = "HALE_FAULT_DIE_AT_PROMOTE";

/// How much of its lease a holding must have left for its held promote
/// hook to be let go (the watchdog reads the order telling it of the hook
/// well within it).
const HOLD_MARGIN: Duration = Duration::from_millis(250);

/// How long a held hook may take to stop itself before it counts as not
/// started.
const HOLD_WAIT: Duration = Duration::from_secs(5);

/// Whether process `pid` is stopped (`T` in `/proc/PID/stat`), polled until
/// `HOLD_WAIT`; false if it exited or never stopped.
async fn stopped(pid: u32) -> bool {
    let deadline = Instant::now() + HOLD_WAIT;
    let path = format!("/proc/{pid}/stat");
    while Instant::now() < deadline {
        match std::fs::read_to_string(&path) {
            // The state follows the command name's closing parenthesis.
            Ok(stat) => match stat.rsplit_once(')').map(|(_, rest)| rest.trim_start()) {
                Some(rest) if rest.starts_with('T') => return true,
                Some(rest) if rest.starts_with('Z') || rest.starts_with('X') => return false,
                _ => {}
            },
            Err(_) => return false,
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

/// The executor's own state: running hooks and the watchdog.
pub(super) struct Running {
    pub(super) origin: Instant,
    pub(super) tx: mpsc::UnboundedSender<Input>,
    hooks: BTreeMap<HookId, HookRun>,
    /// The holding the watchdog guards (its id there).
    watchdog: Option<u64>,
    /// A `disarm` awaits its answer.
    disarming: bool,
}

impl Running {
    /// Nothing running yet; times measured from `origin`, news sent on `tx`.
    pub(super) fn new(origin: Instant, tx: mpsc::UnboundedSender<Input>) -> Running {
        Running {
            origin,
            tx,
            hooks: BTreeMap::new(),
            watchdog: None,
            disarming: false,
        }
    }

    /// Now, on the manager's clock.
    pub(super) fn now(&self) -> Time {
        Time::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }

    /// How long until `t`, on the manager's clock.
    pub(super) fn left(&self, t: Time) -> Duration {
        t.saturating_since(self.now())
    }
}

impl RoleManager {
    /// The environment of a hook (and of the watchdog's demote).
    pub(super) fn env(&self, epoch: u64) -> Vec<(String, String)> {
        vec![
            ("HALE_ROLE".into(), self.spec.name.clone()),
            ("HALE_EPOCH".into(), epoch.to_string()),
            ("HALE_NODE".into(), self.ctx.node.clone()),
        ]
    }

    /// Carries out one of the machine's actions.
    pub(super) fn carry_out(&self, run: &mut Running, a: Action) {
        match a {
            Action::Send {
                id,
                request,
                deadline,
            } => {
                let limit = run.left(deadline).max(Duration::from_millis(50));
                let (requests, tx) = (self.ctx.requests.clone(), run.tx.clone());
                tokio::spawn(async move {
                    let r = requests.send(request, limit).await;
                    let _ = tx.send(Input::Response(id, r));
                });
            }
            Action::StartHook {
                id,
                kind,
                epoch,
                reason,
            } => self.start_hook(run, id, kind, epoch, reason),
            Action::KillHook { id } => {
                if let Some(hook) = run.hooks.get_mut(&id) {
                    hook.kill = true;
                    if let Some(pgid) = hook.pgid {
                        crate::roles::watchdog::kill_group(pgid);
                    }
                }
            }
            Action::StartWatchdog { epoch, deadline } => {
                self.forget_watchdog(run, false);
                run.watchdog = Some(self.ctx.watchdogs.guard(
                    run.tx.clone(),
                    self.claim(epoch),
                    self.spec.demote.clone(),
                    self.env(epoch),
                    self.spec.hook_timeout,
                    run.left(deadline),
                ));
            }
            Action::ArmWatchdog { deadline } => {
                if let Some(h) = run.watchdog {
                    self.ctx.watchdogs.arm(h, run.left(deadline));
                }
            }
            Action::DisarmWatchdog => {
                run.disarming = true;
                let asked = run.watchdog.is_some_and(|h| self.ctx.watchdogs.disarm(h));
                if let (true, Some(h)) = (asked, run.watchdog) {
                    let tx = run.tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(DISARM_WAIT).await;
                        let _ = tx.send(Input::DisarmLate(h));
                    });
                }
                if !asked {
                    // None runs, or it is gone (its pipe closed): the agent
                    // demotes itself (the claim keeps a fence the dead one
                    // may have started from running the demote twice).
                    self.forget_watchdog(run, false);
                    let _ = run.tx.send(Input::Watchdog(0, Some(false)));
                }
            }
            Action::StopWatchdog => self.forget_watchdog(run, false),
            Action::KeepWatchdog => self.forget_watchdog(run, true),
            Action::Event(e) => self.event(e),
        }
    }

    /// Stops guarding the holding the watchdog guards, if any (`keep`: the
    /// holding is kept, not released).
    pub(super) fn forget_watchdog(&self, run: &mut Running, keep: bool) {
        if let Some(h) = run.watchdog.take() {
            self.ctx.watchdogs.forget(h, keep);
        }
    }

    pub(super) fn start_hook(
        &self,
        run: &mut Running,
        id: HookId,
        kind: HookKind,
        epoch: u64,
        reason: HookReason,
    ) {
        // A demote runs under the holding's claim, shared with its
        // watchdog's fence, so that it runs once (see `watchdog.rs`).
        let demote = kind == HookKind::Demote && !self.spec.demote.is_empty();
        let claim = demote.then(|| self.claim(epoch));
        let held =
            kind == HookKind::Promote && run.watchdog.is_some() && !self.spec.promote.is_empty();
        let argv = match (&claim, kind) {
            (Some(path), _) => {
                demote_once_argv(self.ctx.watchdogs.exe(), path, None, &self.spec.demote)
            }
            (None, HookKind::Promote) if held => held_argv(&self.spec.promote),
            (None, HookKind::Promote) => self.spec.promote.clone(),
            (None, HookKind::Demote) => self.spec.demote.clone(),
        };
        let tx = run.tx.clone();
        let Some(cmd) =
            crate::roles::watchdog::hook_command(&argv, &self.env(epoch), reason.as_str())
        else {
            let _ = tx.send(Input::HookExit(id, HookExit::Succeeded));
            return;
        };
        run.hooks.insert(
            id,
            HookRun {
                pgid: None,
                promote: kind == HookKind::Promote,
                held,
                kill: false,
                claim,
            },
        );
        let (slots, role) = (self.ctx.hook_slots.clone(), self.spec.name.clone());
        tokio::spawn(async move {
            // Waits for one of the agent's hook slots (`slots.rs`).
            let class = match kind {
                HookKind::Demote => slots::HookClass::Demote,
                HookKind::Promote => slots::HookClass::Promote,
            };
            let _slot = slots.acquire(class).await;
            let mut cmd = tokio::process::Command::from(cmd);
            cmd.kill_on_drop(false);
            // Started below the agent's priority (`priority.rs`).
            let Ok(mut child) = crate::host::priority::spawn(cmd).await else {
                tracing::warn!(%role, ?kind, "cannot start hook {argv:?}");
                let _ = tx.send(Input::HookExit(id, HookExit::NotStarted));
                return;
            };
            let pid = child.id().unwrap_or(0);
            // A test's fault: the agent dies between starting a promote
            // hook and telling its watchdog (`HALE_FAULT_DIE_AT_PROMOTE`).
            if kind == HookKind::Promote && std::env::var_os(DIE_AT_PROMOTE).is_some() {
                tracing::error!(%role, "{DIE_AT_PROMOTE} is set: the agent aborts");
                std::process::abort();
            }
            if held && !stopped(pid).await {
                tracing::warn!(%role, "the promote hook did not start (it never stopped to wait for the watchdog)");
                crate::roles::watchdog::kill_group(pid);
                let _ = child.wait().await;
                let _ = tx.send(Input::HookExit(id, HookExit::NotStarted));
                return;
            }
            let _ = tx.send(Input::HookStarted(id, pid));
            let exit = match child.wait().await {
                Ok(s) if s.success() => HookExit::Succeeded,
                _ => HookExit::Failed,
            };
            let _ = tx.send(Input::HookExit(id, exit));
        });
    }

    /// Hook run `id` has started in process group `pgid`: killed at once if
    /// a kill was asked while it waited for its slot; the watchdog is told
    /// of a promote hook.
    pub(super) fn hook_started(
        &self,
        run: &mut Running,
        id: HookId,
        pgid: u32,
        lease_until: Option<Time>,
    ) {
        let now = run.now();
        let Some(hook) = run.hooks.get_mut(&id) else {
            return;
        };
        hook.pgid = Some(pgid);
        if hook.kill {
            crate::roles::watchdog::kill_group(pgid);
            return;
        }
        if let (true, Some(h)) = (hook.promote, run.watchdog) {
            self.ctx.watchdogs.promote(h, Some(pgid));
        }
        if hook.held {
            // An agent frozen since it started the hook, past (or nearly
            // past) its lease: the watchdog may be fencing; the hook never
            // runs (killed, it fails, and the holder steps down).
            if lease_until.is_none_or(|until| until <= now + HOLD_MARGIN) {
                tracing::warn!(role = %self.spec.name, "the lease ends before the promote hook could run: not run");
                crate::roles::watchdog::kill_group(pgid);
                return;
            }
            // The watchdog knows its group (the order is in its pipe, read
            // before the pipe's end should the agent die now): it may run.
            if let Ok(g) = i32::try_from(pgid) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(g),
                    nix::sys::signal::Signal::SIGCONT,
                );
            }
        }
    }

    /// The claim file this holding's demote and its watchdog's fence share.
    pub(super) fn claim(&self, epoch: u64) -> PathBuf {
        crate::roles::watchdog::claim_path(std::process::id(), &self.spec.name, epoch)
    }

    /// Hook run `id` exited: the watchdog is told a promote hook is gone;
    /// with no watchdog left to remove it (it could not be asked), the
    /// demote's claim is removed here: no fence can come for this holding
    /// any more.
    pub(super) fn on_hook_exit(
        &self,
        sm: &mut Holder,
        run: &mut Running,
        id: HookId,
        exit: HookExit,
    ) {
        let hook = run.hooks.remove(&id);
        if let (
            Some(HookRun {
                promote: true,
                pgid: Some(_),
                ..
            }),
            Some(h),
        ) = (&hook, run.watchdog)
        {
            self.ctx.watchdogs.promote(h, None);
        }
        if let (Some(claim), None) = (hook.and_then(|h| h.claim), run.watchdog) {
            let _ = std::fs::remove_file(claim);
        }
        sm.handle_hook_exit(run.now(), id, exit);
    }

    /// The watchdog's answer to a `disarm` of holding `h` (an answer about
    /// an earlier holding is stale).
    pub(super) fn on_watchdog_answer(
        &self,
        sm: &mut Holder,
        run: &mut Running,
        h: u64,
        answer: Option<bool>,
    ) {
        if h != 0 && run.watchdog != Some(h) {
            return;
        }
        if answer.is_none() {
            run.watchdog = None;
        }
        if std::mem::take(&mut run.disarming) {
            sm.handle_watchdog_released(run.now(), answer.unwrap_or(false));
        }
    }

    /// [`DISARM_WAIT`] has passed since the `disarm` of holding `h`. A
    /// watchdog that does not answer (frozen, starved) must not hold up
    /// the demote past the drift margin: the demote runs under the
    /// holding's claim, so a fence the watchdog runs too, or ran, happens
    /// once (nemesis seed 70114: an isolated holder whose watchdog was
    /// stopped demoted only when it thawed, 0.7 s after the next holder's
    /// promote began).
    pub(super) fn on_disarm_late(&self, sm: &mut Holder, run: &mut Running, h: u64) {
        if run.watchdog == Some(h) && run.disarming {
            tracing::warn!(role = %self.spec.name, "the watchdog did not answer in {DISARM_WAIT:?}: demoting without its answer");
            run.disarming = false;
            sm.handle_watchdog_released(run.now(), false);
        }
    }

    /// The watchdog fenced holding `h` on its own, unasked.
    pub(super) fn on_fenced(&self, sm: &mut Holder, run: &Running, h: u64) {
        if run.watchdog == Some(h) {
            tracing::warn!(role = %self.spec.name, "the watchdog fenced this holding (its deadline passed before a renewal reached it): stepping down");
            sm.handle_watchdog_fenced(run.now());
        }
    }
}
