//! Integration tests of hale-core (one binary).

mod config;
mod node;
mod support;
mod wire;
