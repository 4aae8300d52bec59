//! Real-process tests of the `hale` binary: agents on loopback, hostile
//! input, hosts in network namespaces, roles with failover, and the
//! dashboard in headless Chromium.

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod bad_input;
mod browser;
mod control_storage;
mod daemon;
mod dashboard;
mod demo;
mod drill;
mod failover;
mod flood;
mod keys;
mod loopback;
mod netns;
mod replay;
mod slow_hooks;
mod support;

/// Reads a promote/demote hook log (`nanos node kind epoch ...` lines).
pub fn failover_history(log: &std::path::Path) -> Vec<hale_control::HookEvent> {
    failover::read_history(log)
}
