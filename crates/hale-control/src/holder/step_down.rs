//! Giving a role up: the promote hook stopped, the watchdog asked whether it
//! fenced, the demote run (and run again while it fails), the release.

use std::time::Duration;

use hale_core::Time;

use super::phase::{Candidacy, Claim, Failures};
use super::{
    Action, HeldLease, Holder, HolderEvent, HookKind, HookOutcome, HookReason, Phase, Run, Step,
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

    /// Sends the step-down's renewal of its epoch, on the renewal grid.
    pub(super) fn reclaim(&mut self, now: Time) {
        let Phase::SteppingDown { epoch, tenure, .. } = &self.phase else {
            return;
        };
        if now >= tenure.next_renewal {
            let epoch = *epoch;
            self.send_renewal(now, epoch, now + self.cfg.timing.renew_every);
        }
    }

    /// A renewal sent at `sent` committed: a step-down without a lease has
    /// it back (unless it would already have run out), and so the role
    /// stays with this node until its demote succeeds.
    pub(super) fn reclaimed(&mut self, now: Time, sent: Time) {
        let (timing, role) = (self.cfg.timing, &self.cfg.role);
        if let Phase::SteppingDown {
            epoch,
            claim: claim @ Claim::Reclaiming,
            ..
        } = &mut self.phase
        {
            let back = HeldLease::granted(timing, role, *epoch, sent);
            if !back.expired(now) {
                *claim = Claim::Leased(back);
            }
        }
    }

    /// Ends a promotion or a holding: kill the promote hook if it runs,
    /// then release the watchdog, then demote.
    pub(super) fn step_down(&mut self, now: Time, reason: StepDownReason, next: Option<String>) {
        let (lease, tenure, run) = match &mut self.phase {
            Phase::Promoting {
                lease, tenure, run, ..
            } => (lease.clone(), std::mem::take(tenure), Some(*run)),
            Phase::Holding { lease, tenure, .. } => (lease.clone(), std::mem::take(tenure), None),
            _ => return,
        };
        let epoch = lease.epoch;
        let claim = if reason == StepDownReason::Fenced {
            Claim::Refused
        } else if reason.lease_lost() || lease.expired(now) {
            Claim::Reclaiming
        } else {
            Claim::Leased(lease)
        };
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
            tenure,
            claim,
            reason,
            next,
            promote: None,
            step,
        };
        // A lost lease is asked back at once (see `Claim::Reclaiming`).
        if self.reclaiming() {
            if let Some(tenure) = self.phase.tenure_mut() {
                tenure.next_renewal = now;
            }
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
        let Phase::Promoting { lease, tenure, .. } = &mut self.phase else {
            return;
        };
        let epoch = lease.epoch;
        let claim = if lease.expired(now) {
            Claim::Reclaiming
        } else {
            Claim::Leased(lease.clone())
        };
        let tenure = std::mem::take(tenure);
        self.event(HolderEvent::SteppingDown { epoch, reason });
        self.phase = Phase::SteppingDown {
            epoch,
            tenure,
            claim,
            reason,
            next: None,
            promote: Some(out),
            step: Step::DisarmingWatchdog,
        };
        self.after_promote_stopped(now);
    }

    /// The promote hook is not running (any more): release the watchdog.
    pub(super) fn after_promote_stopped(&mut self, now: Time) {
        if let Phase::SteppingDown { step, .. } = &mut self.phase {
            *step = Step::DisarmingWatchdog;
        }
        if self.phase.tenure().map(|t| t.watchdog) == Some(Watchdog::Armed) {
            self.actions.push_back(Action::DisarmWatchdog);
        } else {
            self.handle_watchdog_released(now, false);
        }
    }

    /// The demote (or the watchdog's fence) is done: release the role and
    /// become a candidate again (or, stopping, say the last word).
    pub(super) fn finish(&mut self, now: Time, demote: HookOutcome) {
        let Phase::SteppingDown {
            epoch,
            reason,
            next,
            promote,
            tenure,
            ..
        } = &mut self.phase
        else {
            return;
        };
        let (epoch, reason, next, promote) = (*epoch, *reason, next.take(), *promote);
        if tenure.watchdog != Watchdog::None {
            tenure.watchdog = Watchdog::None;
            self.actions.push_back(Action::StopWatchdog);
        }
        // A new candidacy episode: a grant for the last one is not this one's.
        self.attempt = self.attempt.wrapping_add(1).max(1);
        let said = reason.into();
        let release =
            (reason != StepDownReason::Fenced).then(|| self.send_release(now, epoch, next, said));
        self.event(HolderEvent::Demoted {
            epoch,
            reason,
            promote,
            demote,
        });
        if self.stopping() {
            // Stopped once the release is answered (at most its 500 ms).
            return match release {
                Some(id) => self.phase = Phase::Releasing { id },
                None => self.stop_done(),
            };
        }
        let mut candidacy = Candidacy::new(now);
        if matches!(
            reason,
            StepDownReason::Handover
                | StepDownReason::PromoteFailed
                | StepDownReason::PromoteTimedOut
        ) {
            // Stand aside so that the next candidate takes the role.
            candidacy.hold_off_until = Some(now + self.cfg.timing.lease);
        }
        self.phase = Phase::Candidate(candidacy);
        self.handle_timeout(now);
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
        *step = Step::Demoting {
            run: Run::new(id, now),
            failing: step.failing(),
        };
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
            ..
        } = &mut self.phase
        else {
            return;
        };
        let Failures { count, since } = step.failing().unwrap_or(Failures {
            count: 0,
            since: now,
        });
        let count = count.saturating_add(1);
        let retry_in = demote_backoff(count);
        *step = Step::RetryingDemote {
            at: now + retry_in,
            failing: Failures { count, since },
        };
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
        let Some(tenure) = self.phase.tenure() else {
            return false;
        };
        match (&self.phase, tenure.watchdog) {
            (_, Watchdog::Armed) => true,
            (_, Watchdog::None) => false,
            (Phase::SteppingDown { step, .. }, Watchdog::Disarmed) => step
                .failing()
                .is_none_or(|f| now.saturating_since(f.since) < self.cfg.hook_timeout),
            (_, Watchdog::Disarmed) => false,
        }
    }
}
