//! The failover history's shape (`GET /v1/roles/{role}/history`): each
//! change of a role's holding and of what operators asked of it, with its
//! cause, as the control plane records it ([`hale_control::lease::changes`]).

use serde::{Deserialize, Serialize};

/// One change of a role: its epoch, holder after it, when (the
/// control-plane leader's wall clock) and cause.
pub use hale_control::{Cause, Change, ReleaseReason};

/// `GET /v1/roles/{role}/history`: the role's last changes, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HistoryView {
    /// The role.
    pub role: String,
    /// Its changes, oldest first (at most the last 100 are kept; a first
    /// `seq` above 1 means older ones were dropped).
    pub changes: Vec<Change>,
}
