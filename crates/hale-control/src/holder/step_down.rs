//! Giving a role up: the promote hook stopped, the watchdog asked whether it
//! fenced, the demote run (and run again while it fails), the release.

use std::time::Duration;

use hale_core::Time;

use super::{
    Action, Holder, HolderEvent, HookKind, HookOutcome, HookReason, Phase, Run, Step,
    StepDownReason, Watchdog,
};

/// The first wait before a failed demote runs again; it doubles with each
/// failure up to [`DEMOTE_RETRY_MAX`].
pub const DEMOTE_RETRY_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two runs of a failing demote.
pub const DEMOTE_RETRY_MAX: Duration = Duration::from_secs(5);

/// How long to wait after the `failures`-th failed demote.
pub(super) fn demote_backoff(failures: u32) -> Duration {
    let doubled = DEMOTE_RETRY_FIRST.saturating_mul(1 << failures.saturating_sub(1).min(16));
    doubled.min(DEMOTE_RETRY_MAX)
}

impl Holder {
    /// The watchdog fenced this holding on its own, unasked (its deadline
    /// passed before a renewal reached it: it, or this agent, was frozen):
    /// the service is demoted. Step down as after a lease that ran out:
    /// the `disarm` is answered `fenced`, so nothing is demoted again, and
    /// nothing kept for a next run to adopt (nemesis seed 120055: a
    /// holding fenced so, then kept at a stop and adopted, was demoted a
    /// second time by the adopting run's watchdog).
    pub fn handle_watchdog_fenced(&mut self, now: Time) {
        if matches!(self.phase, Phase::Holding { .. } | Phase::Promoting { .. }) {
            self.step_down(now, StepDownReason::LeaseExpired, None);
        }
    }

    /// Whether this step-down, without a lease, asks to renew its epoch
    /// anyway (see `Phase::SteppingDown::refused`).
    pub(super) fn reclaiming(&self) -> bool {
        matches!(
            self.phase,
            Phase::SteppingDown {
                lease: None,
                refused: false,
                ..
            }
        )
    }

    /// Sends the step-down's renewal of its epoch, on the renewal grid.
    pub(super) fn reclaim(&mut self, now: Time) {
        let Phase::SteppingDown { epoch, .. } = self.phase else {
            return;
        };
        if now >= self.next_renewal {
            self.send_renewal(now, epoch, now + self.cfg.timing.renew_every);
        }
    }

    /// A renewal sent at `sent` committed: a step-down without a lease has
    /// it back (unless it would already have run out), and so the role
    /// stays with this node until its demote succeeds.
    pub(super) fn reclaimed(&mut self, now: Time, sent: Time) {
        if !self.reclaiming() {
            return;
        }
        let (timing, role) = (self.cfg.timing, self.cfg.role.clone());
        if let Phase::SteppingDown { epoch, lease, .. } = &mut self.phase {
            let back = crate::lease::HeldLease::granted(timing, &role, *epoch, sent);
            if !back.expired(now) {
                *lease = Some(back);
            }
        }
    }

    /// Ends a promotion or a holding: kill the promote hook if it runs,
    /// then release the watchdog, then demote.
    pub(super) fn step_down(&mut self, now: Time, reason: StepDownReason, next: Option<String>) {
        let (epoch, lease, run) = match &self.phase {
            Phase::Promoting { lease, run, .. } => (lease.epoch, lease.clone(), Some(*run)),
            Phase::Holding { lease } => (lease.epoch, lease.clone(), None),
            Phase::Candidate { .. } | Phase::SteppingDown { .. } => return,
        };
        let lease = (!reason.lease_lost() && !lease.expired(now)).then_some(lease);
        self.event(HolderEvent::SteppingDown { epoch, reason });
        let step = match run {
            Some(mut run) => {
                run.killed = true;
                run.timed_out = reason == StepDownReason::PromoteTimedOut;
                self.actions.push_back(Action::KillHook { id: run.id });
                Step::StoppingPromote(run)
            }
            None => Step::DisarmingWatchdog,
        };
        self.phase = Phase::SteppingDown {
            epoch,
            lease,
            reason,
            next,
            promote: None,
            step,
            failures: None,
            refused: reason == StepDownReason::Fenced,
        };
        // A lost lease is asked back at once (see `reclaiming`).
        if self.reclaiming() {
            self.next_renewal = now;
            self.reclaim(now);
        }
        if run.is_none() {
            self.after_promote_stopped(now);
        }
    }
    /// The promote hook ended on its own, unsuccessfully.
    pub(super) fn step_down_after_promote(
        &mut self,
        now: Time,
        reason: StepDownReason,
        out: HookOutcome,
    ) {
        let Phase::Promoting { lease, .. } = &self.phase else {
            return;
        };
        let epoch = lease.epoch;
        let lease = (!lease.expired(now)).then(|| lease.clone());
        self.event(HolderEvent::SteppingDown { epoch, reason });
        self.phase = Phase::SteppingDown {
            epoch,
            lease,
            reason,
            next: None,
            promote: Some(out),
            step: Step::DisarmingWatchdog,
            failures: None,
            refused: false,
        };
        self.after_promote_stopped(now);
    }
    pub(super) fn after_promote_stopped(&mut self, now: Time) {
        if let Phase::SteppingDown { step, .. } = &mut self.phase {
            *step = Step::DisarmingWatchdog;
        }
        if self.watchdog == Watchdog::Armed {
            self.actions.push_back(Action::DisarmWatchdog);
        } else {
            self.handle_watchdog_released(now, false);
        }
    }
    /// The demote (or the watchdog's fence) is done: release the role and
    /// become a candidate again.
    pub(super) fn finish(&mut self, now: Time, demote: HookOutcome) {
        let Phase::SteppingDown {
            epoch,
            reason,
            next,
            promote,
            ..
        } = std::mem::replace(&mut self.phase, Phase::Candidate { acquiring: None })
        else {
            return;
        };
        if self.watchdog != Watchdog::None {
            self.watchdog = Watchdog::None;
            self.actions.push_back(Action::StopWatchdog);
        }
        // A new candidacy episode: a grant for the last one is not this one's.
        self.attempt = self.attempt.wrapping_add(1).max(1);
        let release =
            (reason != StepDownReason::Fenced).then(|| self.send_release(now, epoch, next));
        self.renewals.retain(|_, (_, e)| *e != epoch);
        self.event(HolderEvent::Demoted {
            epoch,
            reason,
            promote,
            demote,
        });
        if matches!(
            reason,
            StepDownReason::Handover
                | StepDownReason::PromoteFailed
                | StepDownReason::PromoteTimedOut
        ) {
            // Stand aside so that the next candidate takes the role.
            self.hold_off_until = Some(now + self.cfg.timing.lease);
        }
        self.next_poll = now;
        if self.stopping() {
            // Stopped once the release is answered (at most its 500 ms).
            match release {
                Some(id) => self.releasing = Some(id),
                None => self.stop_done(),
            }
        } else {
            self.handle_timeout(now);
        }
    }
    /// Starts (or starts again) the demote hook of the step-down under way.
    pub(super) fn start_demote(&mut self, now: Time) {
        let id = self.hook_id();
        let Phase::SteppingDown {
            step,
            epoch,
            reason,
            ..
        } = &mut self.phase
        else {
            return;
        };
        *step = Step::Demoting(Run::new(id, now));
        let (epoch, reason) = (*epoch, *reason);
        self.actions.push_back(Action::StartHook {
            id,
            kind: HookKind::Demote,
            epoch,
            reason: HookReason::StepDown(reason),
        });
    }
    /// The demote hook did not succeed: the holding is not released (its
    /// lease, if still held, is renewed on); the demote runs again after a
    /// backoff. Should it keep failing for longer than `hook_timeout`, the
    /// watchdog is no longer re-armed ([`Holder::rearms_watchdog`]) and
    /// fences at the lease's end, through the same claim: the next run then
    /// finds the demote done.
    pub(super) fn demote_failed(&mut self, now: Time, outcome: HookOutcome) {
        let Phase::SteppingDown {
            step,
            epoch,
            reason,
            failures,
            ..
        } = &mut self.phase
        else {
            return;
        };
        let (count, since) = failures.unwrap_or((0, now));
        let count = count.saturating_add(1);
        *failures = Some((count, since));
        let retry_in = demote_backoff(count);
        *step = Step::RetryingDemote { at: now + retry_in };
        let event = HolderEvent::DemoteFailed {
            epoch: *epoch,
            reason: *reason,
            outcome,
            failures: count,
            retry_in,
        };
        self.event(event);
    }
    /// Whether a committed renewal re-arms the watchdog: while it is armed,
    /// and during a step-down (disarmed, its deadline still the lease's
    /// end) until the demote has been failing for longer than
    /// `hook_timeout`. Past that bound the deadline stands and the
    /// watchdog fences at the lease's end: the escalation of a demote that
    /// keeps failing (the lease itself is still renewed, so no other node
    /// is promoted before the fence or a demote succeeded).
    pub(super) fn rearms_watchdog(&self, now: Time) -> bool {
        match (&self.phase, self.watchdog) {
            (_, Watchdog::Armed) => true,
            (_, Watchdog::None) => false,
            (Phase::SteppingDown { failures, .. }, Watchdog::Disarmed) => failures
                .is_none_or(|(_, since)| now.saturating_since(since) < self.cfg.hook_timeout),
            (_, Watchdog::Disarmed) => false,
        }
    }
}
