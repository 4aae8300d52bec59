//! What a [`Holder`](super::Holder) takes in and gives out: its settings, the requests
//! and hook runs it asks for, what the service's checks say, and the
//! actions and events it produces.

use std::time::Duration;

use hale_core::Time;
use serde::{Deserialize, Serialize};

use crate::history::HookKind;
use crate::lease::{AcquireRequest, LeaseRequest, LeaseTiming, ReleaseReason};
use crate::replication::Mark;

/// A role candidacy's fixed settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderConfig {
    /// The role.
    pub role: String,
    /// This node's name (the holder name in the lease table).
    pub node: String,
    /// Higher wins among healthy, ready candidates.
    pub priority: i64,
    /// Whether this node may take the role (`promotable` in its
    /// `[[role]]`). A node that may not never asks for it, so that the
    /// control plane never grants it, whatever else asks or does not: it
    /// follows the holder as a standby (its state says
    /// [`RoleState::Standby`] while its checks pass) and gives a grant
    /// that reaches it anyway straight back. A holder retuned to `false`
    /// keeps its holding: the agent hands it over once another node can
    /// take it ([`Holder::handle_handover`](super::Holder::handle_handover)).
    pub promotable: bool,
    /// Lease timing (must match the control plane's).
    pub timing: LeaseTiming,
    /// Hard limit on each hook's run time.
    pub hook_timeout: Duration,
    /// Step down when the service's essential checks fail this long.
    pub fail_after: Duration,
    /// How long an acquisition request may take before it counts as unanswered.
    pub acquire_timeout: Duration,
    /// Distinguishes this run's acquisition attempts from an earlier run's
    /// of the same node (random in the agent): the first attempt's number.
    pub instance: u64,
    /// A replicated role (a database with standbys): the most this
    /// candidate's copy may lag the holder's last mark for it to take the
    /// role (`max_lag_on_failover`, bytes). Its candidate asks only with a
    /// copy ([`DataState::Copy`]); its holder publishes
    /// [`DataState::Primary`]'s mark with its renewals. `None`: the role
    /// does not replicate; priority alone decides.
    pub max_lag: Option<u64>,
    /// This node's identity, beyond its name: what it records when it keeps
    /// a paused role ([`LeaseRequest::Keep`]) and must show again to adopt
    /// it ([`LeaseRequest::Adopt`]). The agent derives it from the host and
    /// the agent's own files, so that another machine (or a rebuilt one)
    /// given the same name does not adopt a holding whose service it does
    /// not run.
    pub identity: String,
    /// This run follows a run of an older release on the same state (the
    /// agent migrated its files): a paused holding that release held was
    /// never recorded as kept (it cannot record keeps), so an adoption
    /// refused as `NotKeeper` is asked again by a plain renewal, as that
    /// release kept it, rather than left unguarded with its service
    /// running (nemesis seed 80025).
    pub after_older_release: bool,
}

/// What a replicated role's service says of its data now
/// ([`crate::replication`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DataState {
    /// Not known (not measured yet, or the service does not answer): its
    /// candidate does not ask for the role.
    #[default]
    Unknown,
    /// A copy, at this position (a standby's replayed WAL position).
    Copy(u64),
    /// The primary's data, published with every renewal. A candidate whose
    /// data says primary does not ask: it must rejoin as a copy first.
    Primary(Mark),
}

/// Identifies one request the holder asked to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// Identifies one hook run the holder asked to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HookId(pub u64);

/// A request for the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRequest {
    /// Ask the leader's grantor for the role (as this node, at its
    /// priority). The candidacy episode's attempt stays the same while it
    /// asks again (an answer lost), so that a grant it did not hear is
    /// answered again at once instead of a lease later at the next epoch.
    Acquire(AcquireRequest),
    /// Write a renewal or release through the leader.
    Lease(LeaseRequest),
}

/// How a hook run ended, as the agent saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookExit {
    /// It exited with status 0 (or there was no command to run).
    Succeeded,
    /// It exited with another status, or was killed by a signal it was not sent by us.
    Failed,
    /// It could not be started.
    NotStarted,
    /// It was killed because we asked ([`Action::KillHook`]).
    Killed,
}

hale_core::named_enum! {
    /// How a hook ended, as reported in events.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum HookOutcome {
        /// Exited with status 0.
        Succeeded => "succeeded",
        /// Exited with another status or could not be started.
        Failed => "failed",
        /// Ran past `hook_timeout` and was killed.
        TimedOut => "timed-out",
        /// Killed because the holding ended while it ran.
        Killed => "killed",
        /// Not run by the agent: the watchdog had already fenced.
        FencedByWatchdog => "fenced-by-watchdog",
    }
}

impl HookOutcome {
    /// Whether the hook did its job.
    pub fn ok(self) -> bool {
        matches!(self, HookOutcome::Succeeded | HookOutcome::FencedByWatchdog)
    }
}

hale_core::named_enum! {
    /// Why a holding ended.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum StepDownReason {
        /// The lease ran out on this node's clock (renewals not committed in time).
        LeaseExpired => "lease-expired",
        /// The control plane refused a renewal: another node holds the role.
        Fenced => "fenced",
        /// The service's essential checks failed for `fail_after`.
        ServiceFailing => "service-failing",
        /// An operator asked for a handover.
        Handover => "handover",
        /// The agent is stopping.
        Leaving => "leaving",
        /// The promote hook failed.
        #[serde(rename = "promote-hook-failed")]
        PromoteFailed => "promote-hook-failed",
        /// The promote hook ran past `hook_timeout`.
        #[serde(rename = "promote-hook-timed-out")]
        PromoteTimedOut => "promote-hook-timed-out",
    }
}

/// The reason a release names in the lease table's history: the holder
/// speaks the table's words (the table knows nothing of holders).
impl From<StepDownReason> for ReleaseReason {
    fn from(r: StepDownReason) -> ReleaseReason {
        match r {
            StepDownReason::ServiceFailing => ReleaseReason::ServiceFailing,
            StepDownReason::Handover => ReleaseReason::Handover,
            StepDownReason::Leaving => ReleaseReason::Leaving,
            StepDownReason::PromoteFailed => ReleaseReason::PromoteHookFailed,
            StepDownReason::PromoteTimedOut => ReleaseReason::PromoteHookTimedOut,
            StepDownReason::LeaseExpired => ReleaseReason::LeaseExpired,
            // A fenced holder sends no release.
            StepDownReason::Fenced => ReleaseReason::Other,
        }
    }
}

impl StepDownReason {
    /// Whether the lease may already belong to someone else (the node
    /// stops at once; it cannot wait for its demote before the next
    /// holder's promote).
    pub fn lease_lost(self) -> bool {
        matches!(self, StepDownReason::LeaseExpired | StepDownReason::Fenced)
    }
}

hale_core::named_enum! {
    /// Where a candidacy stands.
    #[derive(
        Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
    )]
    #[serde(rename_all = "kebab-case")]
    pub enum RoleState {
        /// The service is not healthy and ready: not asking for the role.
        #[default]
        Ineligible => "ineligible",
        /// Healthy and ready, asking for the role when it is free (a node
        /// that may not be promoted, [`HolderConfig::promotable`], follows
        /// the holder as a standby without ever asking).
        Standby => "standby",
        /// Granted; the promote hook is running.
        Promoting => "promoting",
        /// Granted and promoted.
        Holder => "holder",
        /// Giving the role up: stopping the promote hook, demoting, releasing.
        Demoting => "demoting",
    }
}

/// Why a hook runs: what its `HALE_REASON` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookReason {
    /// The role was granted: the promote hook.
    Promote,
    /// The holding is ending: the demote hook.
    StepDown(StepDownReason),
}

impl HookReason {
    /// `HALE_REASON`: `promote`, or the step-down reason's stable string.
    pub fn as_str(self) -> &'static str {
        match self {
            HookReason::Promote => "promote",
            HookReason::StepDown(r) => r.as_str(),
        }
    }
}

/// What the holder reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderEvent {
    /// The node became (un)able to hold the role.
    Eligible(bool),
    /// The role was granted at `epoch`; the promote hook starts.
    Promoting {
        /// The fencing epoch.
        epoch: u64,
    },
    /// The promote hook succeeded: the node is the holder.
    Promoted {
        /// The fencing epoch.
        epoch: u64,
    },
    /// The holding is ending.
    SteppingDown {
        /// The fencing epoch.
        epoch: u64,
        /// Why.
        reason: StepDownReason,
    },
    /// The node no longer acts as holder: its demote hook has ended (or the
    /// watchdog's fence did).
    Demoted {
        /// The fencing epoch.
        epoch: u64,
        /// Why.
        reason: StepDownReason,
        /// How the promote hook ended, if it ran.
        promote: Option<HookOutcome>,
        /// How the demote hook ended.
        demote: HookOutcome,
    },
    /// The demote hook did not succeed: the holding is not released; the
    /// demote is tried again in `retry_in` (the lease is kept meanwhile,
    /// when it still is), and the watchdog fences at the lease's end as
    /// armed before the step-down began, should the demote still fail.
    DemoteFailed {
        /// The fencing epoch.
        epoch: u64,
        /// Why the holding is ending.
        reason: StepDownReason,
        /// How this run ended.
        outcome: HookOutcome,
        /// How many runs have failed so far.
        failures: u32,
        /// When the next run starts.
        retry_in: Duration,
    },
    /// The agent is stopping and the role is paused: it is kept, not given
    /// up (no demote, no release; the watchdog exits without fencing), for
    /// the agent's next run to adopt.
    Kept {
        /// The fencing epoch.
        epoch: u64,
    },
    /// A paused role this node held when its agent last stopped was
    /// adopted: held again at the same epoch, without a promote hook.
    Adopted {
        /// The fencing epoch.
        epoch: u64,
    },
    /// The table says this node holds the paused role at `epoch`, but the
    /// holding was not kept by this node's identity: its previous run
    /// demoted it (and stopped before its release committed) or crashed
    /// (its watchdog fenced), or another machine kept it under this name.
    /// Nothing is adopted or demoted; a resume moves the role as any
    /// lease that ran out.
    NotAdopted {
        /// The epoch the table names.
        epoch: u64,
    },
    /// A committed renewal said the role is now paused (`true`: failing
    /// checks no longer make this holder step down) or resumed.
    Paused(bool),
    /// The agent's stop has been carried out: nothing runs, the role is
    /// released (or kept: [`HolderEvent::Kept`]).
    Stopped,
}

/// Something the agent must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send `request` to the control plane; report its answer (or `None`
    /// when no server answered by `deadline`) with
    /// [`Holder::handle_response`](super::Holder::handle_response).
    Send {
        /// Echo it back.
        id: RequestId,
        /// The request.
        request: ControlRequest,
        /// Give up at this instant.
        deadline: Time,
    },
    /// Start a hook in a process group of its own with `HALE_ROLE`,
    /// `HALE_EPOCH`, `HALE_NODE` and `HALE_REASON` set; report its exit
    /// with [`Holder::handle_hook_exit`](super::Holder::handle_hook_exit).
    StartHook {
        /// Echo it back.
        id: HookId,
        /// Promote or demote.
        kind: HookKind,
        /// The fencing epoch.
        epoch: u64,
        /// Why it runs (`HALE_REASON`).
        reason: HookReason,
    },
    /// Kill the hook's whole process group now; its exit is still reported.
    KillHook {
        /// Which run.
        id: HookId,
    },
    /// Start the fencing watchdog for `epoch`, to fence at `deadline` unless re-armed.
    StartWatchdog {
        /// The fencing epoch.
        epoch: u64,
        /// The lease's end on this node's clock.
        deadline: Time,
    },
    /// Tell the watchdog the lease now lasts until `deadline`.
    ArmWatchdog {
        /// The lease's end on this node's clock.
        deadline: Time,
    },
    /// Disarm the watchdog (it must not fence at its deadline any more, but
    /// still fences if the agent dies before [`Action::StopWatchdog`]);
    /// report whether it had already fenced with
    /// [`Holder::handle_watchdog_released`](super::Holder::handle_watchdog_released).
    DisarmWatchdog,
    /// End the disarmed watchdog without fencing: the step-down is done.
    StopWatchdog,
    /// The agent stops keeping its paused role: the watchdog must forget
    /// the holding without fencing it, and exit with the agent.
    KeepWatchdog,
    /// Publish an event.
    Event(HolderEvent),
}

/// What the service's checks say now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServiceStatus {
    /// Essential checks pass.
    pub healthy: bool,
    /// Ready to serve.
    pub ready: bool,
    /// Since when essential checks have been failing, if they are.
    pub failing_since: Option<Time>,
}
