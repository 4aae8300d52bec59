//! Integration tests of hale-sim (one binary).

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod membership;
