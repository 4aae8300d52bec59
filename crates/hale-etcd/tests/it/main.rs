//! Integration tests of hale-etcd against real etcd servers (Debian's
//! `etcd-server`), started and killed by the tests (one binary).

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod answer;
mod cluster;
mod leases;
mod record;
