//! Room: the agent's place on its host. Scheduling (the agent's threads
//! above the processes it starts: [`priority`]), the cgroup a service
//! manager delegated ([`cgroup`]) and readiness for systemd ([`systemd`]).
//!
//! Contract: leaf helpers for every other room (processes are started
//! through [`priority::spawn`]); it imports no other room.

pub mod cgroup;
pub mod priority;
pub mod systemd;
