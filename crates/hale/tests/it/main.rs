//! Integration tests of the `hale` binary: real agent processes (one binary).

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod failover;
