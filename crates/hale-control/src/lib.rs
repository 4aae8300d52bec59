//! # hale-control
//!
//! The control plane for roles and failover, in two layers:
//!
//! * **The deterministic safety core**, sans IO, time passed in: role
//!   leases with strictly increasing fencing epochs and the grantor
//!   ([`lease`]), each role's failover history kept in the table
//!   ([`lease::changes`]), one candidacy's logic as a state machine
//!   ([`holder`]), and the history checker that proves from
//!   promote/demote timelines that no two nodes ever acted as holder of a
//!   role at once ([`history`]).
//! * **The replicated service around it**, with IO: openraft over HTTP
//!   with a redb store ordering [`lease::LeaseRequest`]s, its axum routes
//!   and its typed client ([`raft`]: [`raft::ControlPlane`],
//!   [`raft::ControlClient`], the contract in [`raft::api`]), and the
//!   control plane's use of the sealed request/answer layer below it,
//!   `hale-seal` ([`auth`]: its body limits), and the protocol versions
//!   every request and RPC carries, so that releases side by side in a
//!   rolling upgrade understand each other ([`protocol`]).

#![forbid(unsafe_code)]

pub mod auth;
pub mod election;
pub mod history;
pub mod holder;
pub mod lease;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod protocol;
pub mod raft;
pub mod replication;
pub mod switchover;

pub use auth::ControlAuth;
pub use history::{check, HistoryViolation, HookEvent, HookKind};
pub use holder::{
    Action, ControlRequest, DataState, Holder, HolderConfig, HolderEvent, HookExit, HookId,
    HookOutcome, HookReason, RequestId, RoleState, ServiceStatus, StepDownReason,
};
pub use lease::{
    AppendClock, Cause, Change, GrantDelay, Grantor, HeldLease, LeaseRejection, LeaseRequest,
    LeaseResponse, LeaseTable, LeaseTiming, Origin, ReleaseReason, ResumeRefused, RoleLease,
    TimingError, HISTORY_LIMIT, MIN_COMMIT_SLACK,
};
pub use protocol::{OLDEST_PROTOCOL, PROTOCOL};
pub use replication::{Mark, Standing};
pub use switchover::Switchover;
