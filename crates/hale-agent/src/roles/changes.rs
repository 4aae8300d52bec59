//! What the roles room reports and is told: a role manager's changes
//! ([`RoleChange`], reported through [`OnRoleChange`]) and the agent's
//! orders to a running manager ([`RoleOrder`]). A leaf: the room's other
//! files import these from here, so that none of them imports the room's
//! root (`roles.rs`) and the room's import graph stays a tree of short
//! cycles.

use std::sync::Arc;

use crate::config::RoleSpec;
use crate::view::AgentEvent;

/// What a role manager reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleChange {
    /// This node became (un)able to hold `role`: its published candidacy
    /// changes, no event is published.
    Eligible {
        /// The role.
        role: String,
        /// Whether it may hold it now.
        eligible: bool,
    },
    /// An event to publish (`promoting`, `promoted`, `demoting`, `demoted`).
    Event(AgentEvent),
}

/// Reports role changes.
pub type OnRoleChange = Arc<dyn Fn(RoleChange) + Send + Sync>;

/// What the agent asks of a running role manager besides handovers (a
/// configuration reload). Neither ever demotes or promotes.
#[derive(Debug)]
pub enum RoleOrder {
    /// New settings for the candidacy: its priority and tags
    /// (`promotable`, `load_balance`, `synchronous_standby`) at once; its service,
    /// hooks, `hook_timeout` and `fail_after` at once when this node holds
    /// no lease of the role, else when its holding has ended (its watchdog
    /// fences with the demote hook the holding started with).
    Retune(Box<RoleSpec>),
    /// Stop being a candidate, unless this node holds a lease of the role
    /// now: answers whether the manager stopped.
    Retire(tokio::sync::oneshot::Sender<bool>),
}
