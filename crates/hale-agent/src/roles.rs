//! Room: roles. This node's candidacies, held through leases from the
//! control plane, and everything that acts on them: the role managers
//! (`manager.rs`, one per role), the PostgreSQL keeper ([`postgres`]), the
//! fencing watchdog ([`watchdog`], a process of its own, and the agent's
//! handle on it, [`Watchdogs`]) and its claims, hook slots ([`slots`]),
//! services and their checks ([`services`]), kept roles ([`kept`]).
//!
//! Contract: the agent starts, retunes, retires and stops candidacies
//! through the [`RoleSet`], which is the one owner of the role views
//! ([`views`]): other rooms read them through a [`RoleViews`] snapshot
//! receiver (`RoleSet::views`), and ask for handovers through
//! `RoleSet::handover`. Role changes go out through [`OnRoleChange`]. This
//! room imports the membership runtime, configuration and the API's
//! shapes ([`crate::view`]), never the HTTP surface.
//!
//! Each role this node is a candidate for has a manager task that carries
//! out what the role's [`Holder`](hale_control::Holder) state machine (in
//! `hale-control`) asks: control-plane requests (each on a task of its
//! own, so that renewals never wait for anything, carried in the agent's
//! batches: `requests.rs`), hooks (each in a process group of its own,
//! killed as a group), and the fencing watchdog process. The decisions —
//! when to ask for the role, renew, give it up, kill a hook, demote — are
//! the state machine's, and the lease-history model checks them. A failing
//! non-essential service never moves a role.

mod changes;
pub mod identity;
pub mod kept;
mod manager;
mod peers;
pub mod postgres;
mod requests;
pub mod services;
mod set;
pub mod slots;
pub mod switchover;
pub mod views;
pub mod watchdog;
mod watchdogs;
pub use changes::{OnRoleChange, RoleChange, RoleOrder};
pub use manager::RoleManager;
pub use requests::LeaseRequests;
pub use set::{RoleContext, RoleSet, StillHeld};
pub use views::{RoleViewMap, RoleViews};
pub use watchdogs::Watchdogs;
