//! Integration tests of hale-sim: one test binary, one module per subject.

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod isolation;
mod membership;
mod scenarios;
