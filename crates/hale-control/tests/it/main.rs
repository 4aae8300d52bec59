//! Integration tests of hale-control (one binary).

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod auth;
mod checker;
mod elections;
mod history_raft;
mod history_table;
mod holder;
mod lease_histories;
mod prevote;
mod promotable;
mod raft;
mod replication;
mod table;
mod versions;
