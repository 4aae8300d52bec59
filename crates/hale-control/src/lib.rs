//! # hale-control
//!
//! The control plane's safety core for roles and failover: role leases with
//! strictly increasing fencing epochs ([`lease`]), and the history checker
//! that proves from promote/demote timelines that no two nodes ever acted as
//! holder of a role at once ([`history`]).
//!
//! Everything here is deterministic and takes time as an argument; the
//! replicated log that orders [`lease::LeaseRequest`]s (openraft) and the
//! agent-side hooks and watchdog build on it.

#![forbid(unsafe_code)]

pub mod auth;
pub mod history;
pub mod holder;
pub mod lease;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod raft;

pub use auth::ControlAuth;
pub use history::{check, HistoryViolation, HookEvent, HookKind};
pub use holder::{
    Action, ControlRequest, Holder, HolderConfig, HolderEvent, HookExit, HookId, HookOutcome,
    RequestId, RoleState, ServiceStatus, StepDownReason,
};
pub use lease::{
    AppendClock, GrantDelay, Grantor, HeldLease, LeaseRejection, LeaseRequest, LeaseResponse,
    LeaseTable, LeaseTiming, RoleLease,
};
