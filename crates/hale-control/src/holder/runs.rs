//! Hook runs: one run's bookkeeping ([`Run`]), and what moves its
//! `hook_timeout` clock (the run waited for a hook slot, or the node was
//! stopped).

use std::time::Duration;

use hale_core::Time;

use super::{Holder, HookExit, HookId, HookOutcome, Phase, Step};

/// One run of a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) id: HookId,
    pub(super) started: Time,
    pub(super) killed: bool,
    pub(super) timed_out: bool,
}

impl Run {
    /// A run started `now`.
    pub(super) fn new(id: HookId, now: Time) -> Run {
        Run {
            id,
            started: now,
            killed: false,
            timed_out: false,
        }
    }

    pub(super) fn outcome(&self, exit: HookExit) -> HookOutcome {
        if self.timed_out {
            HookOutcome::TimedOut
        } else if self.killed {
            HookOutcome::Killed
        } else {
            match exit {
                HookExit::Succeeded => HookOutcome::Succeeded,
                HookExit::Failed | HookExit::NotStarted => HookOutcome::Failed,
                HookExit::Killed => HookOutcome::Killed,
            }
        }
    }
}

impl Holder {
    /// Hook run `id` started `now`: it had waited for one of the agent's
    /// hook slots since its `StartHook`, time that does not count against
    /// its `hook_timeout` (a promote queued behind a burst of other roles'
    /// hooks on a busy host timed out before it ran, and its role moved).
    /// The lease is not extended: it runs on real time.
    pub fn handle_hook_started(&mut self, now: Time, id: HookId) {
        if let Some(run) = self.hook_running().filter(|r| r.id == id && !r.killed) {
            run.started = run.started.max(now);
        }
    }

    /// This node was stopped for `length` (its host frozen, the agent
    /// `SIGSTOP`ped): its hooks were stopped as long, so that time does not
    /// count against their `hook_timeout`. (Killing a hook the moment the
    /// host thaws, for time it never ran, fails a demote that had done its
    /// work, and a failed demote runs again.) The lease is not extended: it
    /// runs on real time.
    pub fn handle_pause(&mut self, length: Duration) {
        if let Some(run) = self.hook_running() {
            run.started = run.started + length;
        }
    }

    /// The promote or demote hook run under way, if any.
    fn hook_running(&mut self) -> Option<&mut Run> {
        match &mut self.phase {
            Phase::Promoting { run, .. }
            | Phase::SteppingDown {
                step: Step::Demoting(run),
                ..
            } => Some(run),
            _ => None,
        }
    }
}
