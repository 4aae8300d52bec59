//! # hale-sim
//!
//! A deterministic simulator for `hale-core`: N nodes on one virtual clock,
//! a virtual network with latency, loss, partitions and one-way blocks, and
//! node faults (crash, freeze, stall, slowness, restart, join, leave).
//! Everything derives from one seed: the same seed gives the same run,
//! event for event ([`Observer::digest`]).

#![forbid(unsafe_code)]

mod action;
pub mod check;
pub mod engine;
pub mod id;
pub mod net;
pub mod observe;
pub mod plot;
pub mod report;
pub mod runner;
pub mod scenario;
mod timers;

pub use engine::{Action, Sim, SimConfig, Status, Truth};
pub use id::SimId;
pub use net::Network;
pub use observe::{FalseDeath, FaultKind, FaultRecord, Observer, Sample};
pub use report::{Report, RunReport};
pub use runner::{run, run_many};
pub use scenario::{Scenario, ScenarioError};
