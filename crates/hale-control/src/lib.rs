//! # hale-control
//!
//! The control plane for roles and failover, in two layers:
//!
//! * **The deterministic safety core**, sans IO, time passed in: role
//!   leases with strictly increasing fencing epochs and the grantor
//!   ([`lease`]), one candidacy's logic as a state machine ([`holder`]),
//!   and the history checker that proves from promote/demote timelines
//!   that no two nodes ever acted as holder of a role at once
//!   ([`history`]).
//! * **The replicated service around it**, with IO: openraft over HTTP
//!   with a redb store ordering [`lease::LeaseRequest`]s, its axum routes
//!   and its typed client ([`raft`]: [`raft::ControlPlane`],
//!   [`raft::ControlClient`], the contract in [`raft::api`]), and the
//!   control plane's use of the sealed request/answer layer below it,
//!   `hale-seal` ([`auth`]: its body limits).

#![forbid(unsafe_code)]

/// Declares a field-less enum whose variants each have one fixed name (on
/// the wire, in metrics and in text), and gives it `ALL` (the variants in
/// order), `as_str`, `parse` and a `Display` that writes the name (padded
/// to the width asked for, as `{:<8}`). Defined before the modules, which
/// use it by name. (`hale_relay::named_enum!` is the same macro for crates
/// that depend on the relay.)
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident $(= $disc:literal)? => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant $(= $disc)?, )+
        }

        impl $name {
            /// Every variant, in a fixed order.
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// Its name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The variant with this name, if any.
            pub fn parse(s: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

pub mod auth;
pub mod election;
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
    HookReason, RequestId, RoleState, ServiceStatus, StepDownReason,
};
pub use lease::{
    AppendClock, GrantDelay, Grantor, HeldLease, LeaseRejection, LeaseRequest, LeaseResponse,
    LeaseTable, LeaseTiming, RoleLease, TimingError, MIN_COMMIT_SLACK,
};
