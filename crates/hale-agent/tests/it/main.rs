//! Integration tests of hale-agent (one binary).

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

mod api;
mod api_guard;
mod config;
mod dashboard;
mod drill;
mod formats;
mod junk_queries;
mod keyring;
mod keys;
mod openapi;
mod relay;
mod relay_view;
mod reload;
mod seeds;
mod support;
