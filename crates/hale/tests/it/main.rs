// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]
//! Real-process tests of the `hale` binary: agents on loopback, hostile
//! input, and hosts in network namespaces.

mod bad_input;
mod loopback;
mod netns;
mod support;
