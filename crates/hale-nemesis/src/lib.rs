//! The nemesis harness: random faults on real `hale` agents in network
//! namespaces, checked like Jepsen.
//!
//! One seed draws a [`schedule::Schedule`] of faults; [`run::run_one`]
//! builds five hosts ([`lab`]), starts a fenced [`register`] and an agent
//! on each ([`cluster`]), writes through whichever register is primary
//! ([`client`]), carries the schedule out ([`nemesis`]), heals, and checks
//! the recorded [`history`] with the independent [`check`]er. The binary,
//! `hale-nemesis`, is a thin command line over this library; it also serves
//! the register and runs the role's hooks inside each host.

pub mod action;
pub mod check;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod history;
pub mod hook;
pub mod lab;
pub mod nemesis;
pub mod operator;
pub mod register;
pub mod run;
pub mod schedule;
pub mod script;
pub mod summary;
