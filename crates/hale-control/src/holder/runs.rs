//! Hook runs: what moves a [`Run`]'s `hook_timeout` clock (the run
//! waited for a hook slot, or the node was stopped).

use std::time::Duration;

use hale_core::Time;

use super::phase::Run;
use super::{Holder, HookId, Phase, Step};

impl Holder {
    /// Hook run `id` started `now`: it had waited for one of the agent's
    /// hook slots since its `StartHook`, time that does not count against
    /// its `hook_timeout` (a promote queued behind a burst of other roles'
    /// hooks on a busy host timed out before it ran, and its role moved).
    /// The lease is not extended: it runs on real time.
    pub fn handle_hook_started(&mut self, now: Time, id: HookId) {
        if let Some(run) = self.hook_running().filter(|r| r.id == id && !r.killed) {
            run.started = run.started.max(now);
            run.queued = false;
        }
    }

    /// Hook run `id` waits for one of the agent's hook slots: its
    /// `hook_timeout` begins only at [`Holder::handle_hook_started`],
    /// however long the wait (a backlog of promotions after a host died
    /// held some for longer than the timeout, and each abandoned one moved
    /// its role and started two more hooks). A driver that starts hooks at
    /// once never calls it. The lease is not extended: it runs on real time.
    pub fn handle_hook_queued(&mut self, id: HookId) {
        if let Some(run) = self.hook_running().filter(|r| r.id == id && !r.killed) {
            run.queued = true;
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
                step: Step::Demoting { run, .. },
                ..
            } => Some(run),
            _ => None,
        }
    }
}
