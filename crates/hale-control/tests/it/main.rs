//! Integration tests of hale-control (one binary).

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod auth;
mod checker;
mod elections;
mod holder;
mod lease_histories;
mod prevote;
mod raft;
mod replication;
mod table;
mod versions;
