//! The phases of a candidacy, and what each owns.
//!
//! What only means something in some phases lives in those phases'
//! variants, so that a combination the rules exclude cannot be written
//! down: an acquisition, an adoption, the next standby poll and a hold-off
//! exist only while a candidate ([`Candidacy`]); renewals in flight, the
//! next renewal and the watchdog only while an epoch is held ([`Tenure`]);
//! a keep awaiting its confirmation only while holding; a lease refused by
//! the control plane is never also held ([`Claim`]); a demote's failures
//! only while it runs again or waits to ([`Step`]); the release that is a
//! stopping agent's last word only once the holding is over.

use std::collections::BTreeMap;
use std::time::Duration;

use hale_core::Time;

use super::io::{HookExit, HookId, HookOutcome, RequestId, StepDownReason};
use crate::lease::HeldLease;

/// Where the candidacy stands, and what only that phase knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    /// Not holding: asking for the role when eligible, or adopting a
    /// paused role an earlier run kept.
    Candidate(Candidacy),
    /// Granted, promote hook running.
    Promoting {
        lease: HeldLease,
        tenure: Tenure,
        run: Run,
        /// A handover asked for meanwhile (taken when promoted).
        handover: Handover,
    },
    /// Promoted.
    Holding {
        lease: HeldLease,
        tenure: Tenure,
        /// The agent is stopping while the role is paused: the keep, until
        /// a renewal sent since the stop confirms or refutes the pause.
        keep: Option<Keep>,
    },
    /// Giving the role up.
    SteppingDown {
        epoch: u64,
        tenure: Tenure,
        /// Whether the lease is still held, asked back, or refused.
        claim: Claim,
        reason: StepDownReason,
        /// The node a handover names.
        next: Option<String>,
        /// How the promote hook ended, once it has (if it ran).
        promote: Option<HookOutcome>,
        step: Step,
    },
    /// The agent is stopping and the holding is over: the release `id` is
    /// its last word. Stopped once it is answered (or given up on), so that
    /// the table does not show a holding the next run would take for kept.
    Releasing { id: RequestId },
    /// The agent's stop has been carried out
    /// ([`HolderEvent::Stopped`](super::HolderEvent::Stopped) reported):
    /// nothing more happens.
    Stopped,
}

/// What a candidate (not holding) knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Candidacy {
    /// The acquisition request in flight, and when it was sent.
    pub(super) acquiring: Option<(RequestId, Time)>,
    /// The next standby poll (acquisition).
    pub(super) next_poll: Time,
    /// Not asking for the role before this instant (after a handover or a
    /// failed promotion: the next candidate takes it).
    pub(super) hold_off_until: Option<Time>,
    /// A paused role this node holds in the control plane's table, being
    /// adopted by a renewal ([`Holder::handle_adopt`](super::Holder::handle_adopt)).
    /// An acquisition sent before it may still be in flight.
    pub(super) adopting: Option<Adopting>,
}

impl Candidacy {
    /// A candidate that polls at `now`, not held off.
    pub(super) fn new(now: Time) -> Candidacy {
        Candidacy {
            acquiring: None,
            next_poll: now,
            hold_off_until: None,
            adopting: None,
        }
    }
}

/// What every phase that holds an epoch (promoting, holding, stepping
/// down) keeps, from the grant (or adoption) until the step-down ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Tenure {
    /// The next renewal (while a lease is held or asked back).
    pub(super) next_renewal: Time,
    /// Renewals in flight, each with when it was sent (all of this
    /// tenure's epoch).
    pub(super) renewals: BTreeMap<RequestId, Time>,
    /// The watchdog process, if one runs.
    pub(super) watchdog: Watchdog,
}

impl Tenure {
    /// A tenure whose first renewal is due at `next_renewal`, with its
    /// watchdog in state `watchdog`.
    pub(super) fn new(next_renewal: Time, watchdog: Watchdog) -> Tenure {
        Tenure {
            next_renewal,
            renewals: BTreeMap::new(),
            watchdog,
        }
    }
}

/// The watchdog process, as the holder knows it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Watchdog {
    /// None runs (a step-down after a refused adoption: the previous run's
    /// watchdog exited with it).
    #[default]
    None,
    /// Fences at its deadline; re-armed by renewals.
    Armed,
    /// Asked not to fence at its deadline (the step-down is under way).
    Disarmed,
}

/// A step-down's hold on its epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Claim {
    /// The lease is still valid (a voluntary step-down keeps renewing it).
    Leased(HeldLease),
    /// The lease was lost or ran out, but the control plane has not refused
    /// the epoch: the step-down asks to renew it anyway, and takes the
    /// lease back if that commits. While the table still names this node,
    /// nobody else is granted the role, so a demote that fails (and is
    /// retried) never leaves two holders (nemesis seed 120226: a lease
    /// lost to a slow network, the demote failing, the next holder
    /// promoted beside the old service for 7 s).
    Reclaiming,
    /// The control plane refused the epoch (another node holds the role):
    /// nothing is renewed or asked back.
    Refused,
}

/// The steps of giving a role up, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// The promote hook is being killed; waiting for its exit.
    StoppingPromote(Run),
    /// Waiting for the watchdog to say whether it fenced.
    DisarmingWatchdog,
    /// The demote hook runs (again, if earlier runs failed).
    Demoting { run: Run, failing: Option<Failures> },
    /// The demote hook failed: it runs again at `at`.
    RetryingDemote { at: Time, failing: Failures },
}

impl Step {
    /// The demote's failures so far, if it has failed.
    pub(super) fn failing(&self) -> Option<Failures> {
        match self {
            Step::Demoting { failing, .. } => *failing,
            Step::RetryingDemote { failing, .. } => Some(*failing),
            Step::StoppingPromote(_) | Step::DisarmingWatchdog => None,
        }
    }
}

/// How many runs of the demote hook have failed so far, and since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Failures {
    pub(super) count: u32,
    /// The first failure.
    pub(super) since: Time,
}

/// A handover asked for while the promote hook runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum Handover {
    /// None.
    #[default]
    NotAsked,
    /// To the best other candidate.
    ToBest,
    /// To this one.
    To(String),
}

impl Phase {
    /// The fencing epoch held (while promoting, holding or stepping down).
    pub(super) fn epoch(&self) -> Option<u64> {
        match self {
            Phase::Promoting { lease, .. } | Phase::Holding { lease, .. } => Some(lease.epoch),
            Phase::SteppingDown { epoch, .. } => Some(*epoch),
            Phase::Candidate(_) | Phase::Releasing { .. } | Phase::Stopped => None,
        }
    }

    /// The lease, while one is valid as far as this node knows.
    pub(super) fn lease(&self) -> Option<&HeldLease> {
        match self {
            Phase::Promoting { lease, .. } | Phase::Holding { lease, .. } => Some(lease),
            Phase::SteppingDown {
                claim: Claim::Leased(lease),
                ..
            } => Some(lease),
            _ => None,
        }
    }

    /// [`Phase::lease`], to renew it.
    pub(super) fn lease_mut(&mut self) -> Option<&mut HeldLease> {
        match self {
            Phase::Promoting { lease, .. } | Phase::Holding { lease, .. } => Some(lease),
            Phase::SteppingDown {
                claim: Claim::Leased(lease),
                ..
            } => Some(lease),
            _ => None,
        }
    }

    /// The tenure, while an epoch is held.
    pub(super) fn tenure(&self) -> Option<&Tenure> {
        match self {
            Phase::Promoting { tenure, .. }
            | Phase::Holding { tenure, .. }
            | Phase::SteppingDown { tenure, .. } => Some(tenure),
            Phase::Candidate(_) | Phase::Releasing { .. } | Phase::Stopped => None,
        }
    }

    /// [`Phase::tenure`], to change it.
    pub(super) fn tenure_mut(&mut self) -> Option<&mut Tenure> {
        match self {
            Phase::Promoting { tenure, .. }
            | Phase::Holding { tenure, .. }
            | Phase::SteppingDown { tenure, .. } => Some(tenure),
            Phase::Candidate(_) | Phase::Releasing { .. } | Phase::Stopped => None,
        }
    }

    /// Whether this is a step-down asking its lost lease back (see
    /// [`Claim::Reclaiming`]).
    pub(super) fn reclaiming(&self) -> bool {
        matches!(
            self,
            Phase::SteppingDown {
                claim: Claim::Reclaiming,
                ..
            }
        )
    }
}

/// An adoption under way (a candidate's); `keep.rs` drives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Adopting {
    /// The epoch the table says this node holds.
    pub(super) epoch: u64,
    /// The table records the holding as kept ([`LeaseRequest::Keep`](crate::lease::LeaseRequest::Keep)):
    /// every server applied a protocol-3 entry, so a `too-new` refusal of
    /// the adoption is a leader that has not heard every server yet, and
    /// the adoption is asked again as it is, never by a plain renewal.
    pub(super) kept: bool,
    /// Since when the adoption has been refused as too new, if it has: a
    /// plain renewal is used only once that has lasted `keep::TOO_NEW_FOR`. A
    /// leader refuses as too new only on hearing an older server (one it
    /// has not heard is waited for: `crate::protocol`); this is a second
    /// guard (nemesis seed 40003, where an adoption by renewal took a
    /// holding its crashed predecessor's watchdog had fenced).
    pub(super) too_new_since: Option<Time>,
    /// A control-plane server of an older release refused the
    /// [`LeaseRequest::Adopt`](crate::lease::LeaseRequest::Adopt) (protocol 3), or the previous run was of
    /// an older release: this adoption goes by plain renewals, as 0.2.0's
    /// did.
    pub(super) by_renewal: bool,
    /// The renewal in flight, and when it was sent.
    pub(super) request: Option<(RequestId, Time)>,
    /// When to send the next one.
    pub(super) next: Time,
}

impl Adopting {
    /// When the adoption's next renewal is due (none while one is in flight).
    pub(super) fn due(&self) -> Option<Time> {
        self.request.is_none().then_some(self.next)
    }
}

/// A holding being kept as its agent stops (the role paused), until a
/// renewal sent since the stop confirms the pause; `keep.rs` drives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Keep {
    /// The instant of the stop: the first renewal sent since then that
    /// commits decides. Still paused, the role is kept
    /// ([`HolderEvent::Kept`](super::HolderEvent::Kept)); resumed meanwhile, it steps down as usual.
    pub(super) since: Time,
    /// A control-plane server of an older release refused a
    /// [`LeaseRequest::Keep`](crate::lease::LeaseRequest::Keep) (protocol 3): this keep goes by plain
    /// renewals, as 0.2.0's did.
    pub(super) by_renewal: bool,
}

/// One run of a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Run {
    pub(super) id: HookId,
    pub(super) started: Time,
    pub(super) killed: bool,
    pub(super) timed_out: bool,
    /// Waiting for one of the agent's hook slots: its `hook_timeout` has
    /// not begun ([`Holder::handle_hook_queued`](super::Holder::handle_hook_queued)).
    pub(super) queued: bool,
}

impl Run {
    /// A run started `now`.
    pub(super) fn new(id: HookId, now: Time) -> Run {
        Run {
            id,
            started: now,
            killed: false,
            timed_out: false,
            queued: false,
        }
    }

    /// When its `timeout` is up: never while it waits for a slot or once
    /// it was killed.
    pub(super) fn times_out_at(&self, timeout: Duration) -> Option<Time> {
        (!self.killed && !self.queued).then(|| self.started + timeout)
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
