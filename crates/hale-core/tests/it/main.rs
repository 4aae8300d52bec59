//! Integration tests of hale-core (one binary).

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod config;
mod direct;
mod isolation;
mod monitor;
mod node;
mod replay;
mod support;
mod sync;
mod targeted;
mod versions;
mod wire;
