//! Real-process tests of the `hale` binary: agents on loopback, hostile
//! input, hosts in network namespaces, roles with failover, and the
//! dashboard in headless Chromium.

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod bad_input;
mod browser;
mod busy_host;
mod clocks;
mod control_storage;
mod daemon;
mod dashboard;
mod demo;
mod drill;
#[path = "../../src/drill_report.rs"]
#[allow(dead_code)] // The report's types; the test reads what `hale drill` wrote.
mod drill_report;
mod failover;
mod failover_history;
mod flood;
mod junk_flood;
mod keys;
mod loopback;
mod netns;
mod operator;
mod postgres;
mod priority;
mod reload;
mod replay;
mod restart;
mod slow_hooks;
mod support;
mod systemd;
mod tags;
mod versions;
mod watchdog;
