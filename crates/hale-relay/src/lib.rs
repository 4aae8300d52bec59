//! # hale-relay
//!
//! Keeps an error-reporting sink (Sentry) from taking a service down with
//! it. Two ways in, one way out:
//!
//! * [`Reporter`] — in-process, for Rust services: `report()` never blocks,
//!   never does I/O or serialisation on the caller's thread, and never
//!   allocates when it refuses.
//! * [`Relay`] — a Sentry-compatible ingestion endpoint (an axum
//!   [`axum::Router`] the hale agent mounts) for services in any language:
//!   it answers at once after queueing.
//!
//! Both feed a [`Pipeline`]: a byte-capped queue (drop newest when full),
//! and a worker thread with its own runtime that batches, serialises and
//! sends upstream with hard timeouts (connect 1 s, total 5 s), a few
//! requests in flight, a circuit breaker per upstream (5 failures or 2 s
//! without progress; jittered half-open probes), failover to a standby,
//! `429`/`Retry-After`/`X-Sentry-Rate-Limits`, an optional disk spool, exact
//! drop counters per reason, and client reports of the drops once the
//! upstream is back. `flush` and `close` return by their deadline whatever
//! the upstream does. A hale membership verdict on the member hosting an
//! upstream opens its breaker at once ([`Pipeline::member_dead`], through
//! a [`Relay`] or a [`Reporter`]).

#![forbid(unsafe_code)]

pub mod breaker;
pub mod counters;
pub mod dsn;
pub mod envelope;
#[cfg(feature = "fake")]
pub mod fake;
pub mod limits;
pub mod pipeline;
mod queue;
pub mod relay;
pub mod reporter;
mod spool;
mod worker;

pub use breaker::BreakerConfig;
pub use counters::{BreakerGauge, Category, Counters, DropReason, UpstreamRole};
pub use dsn::{Dsn, DsnError};
pub use envelope::{Envelope, EnvelopeError};
pub use pipeline::{
    CloseError, FlushError, Payload, Pipeline, PipelineConfig, Rejected, SpoolConfig, StartError,
    UpstreamConfig,
};
pub use relay::{decode_body, BodyError, Relay, RelayConfig};
pub use reporter::{Event, Level, Reporter};
pub use spool::SpoolError;
