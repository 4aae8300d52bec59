//! Room: the membership runtime. The `hale-core` protocol run over a real
//! network, and what this member publishes and notices through it.
//!
//! - [`runtime`]: the driver task that owns the core and its sockets (UDP
//!   probes and gossip, TCP sync, sealing; `runtime/`: wire, seeds,
//!   counters), the [`runtime::Shared`] state and the [`runtime::Command`]s
//!   it answers;
//! - [`meta`] and `published.rs`: the metadata this agent publishes about
//!   itself (candidacies, HTTP address), kept current;
//! - `clocks.rs` (clock-skew events), `holders.rs` (holder events on a
//!   control-plane server), `faults.rs` (the drill faults the driver
//!   reads), [`generation`] (this run's generation), `seed.rs` (fresh
//!   randomness).
//!
//! Contract: the other rooms talk to membership only through
//! [`runtime::Command`] (a channel to the driver, answered by
//! [`runtime::ask`]) and read it through [`runtime::Shared`] (identity,
//! events, counters, drill faults) and [`runtime::Snapshot`]s. It imports
//! no other room but the API's shapes ([`crate::view`]).

pub(crate) mod clocks;
pub(crate) mod faults;
pub mod generation;
pub(crate) mod holders;
pub mod meta;
pub(crate) mod published;
pub mod runtime;
pub(crate) mod seed;
