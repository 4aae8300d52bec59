//! # hale-postgres
//!
//! PostgreSQL under hale: the operations a role holder and its candidates
//! need, spoken to the server with a real client (`tokio-postgres`) and its
//! own programs (`pg_ctl`, `pg_rewind`, `pg_basebackup`), never by parsing
//! their human output where a query answers.
//!
//! - [`standing()`]: where the local server stands (primary with its
//!   standbys, replica with its replay, or down), for eligibility and the API.
//! - [`promote`]: make it the primary, never while it is fenced.
//! - [`fence`]: it no longer accepts writes, now or after a restart (fence
//!   marker, `standby.signal`, stopped, killed if hung).
//! - [`rejoin`]: a former primary (or any member) becomes a streaming
//!   replica of the current primary by itself: `pg_rewind`, else a fresh
//!   `pg_basebackup`; the fence marker goes only once it streams.
//! - [`maintain_synchronous`]: synchronous replication while a standby
//!   streams, none when none does.
//!
//! Configured by [`PostgresConfig`], the `[role.postgres]` table of
//! `hale.toml`. Linux only (the postmaster is found through `/proc`).

#![forbid(unsafe_code)]

mod client;
pub mod config;
mod fence;
mod files;
pub mod lsn;
mod process;
mod promote;
mod rejoin;
pub mod standing;
mod start;
mod synchronous;

pub use client::ConnectError;
pub use config::{ConfigError, PostgresConfig, FENCE_MARKER};
pub use fence::{fence, FenceError, Fenced};
pub use lsn::{format_lsn, lag_bytes, parse_lsn, LsnParseError};
pub use process::{place_servers_in, spawn_tools_with, Spawner, ToolError};
pub use promote::{promote, PromoteError, Promotion};
pub use rejoin::{crashed_as_primary, rejoin, RejoinError, RejoinStep, Rejoined, Upstream};
pub use standing::{standing, SenderState, StandbyState, Standing, StandingError};
pub use start::{start_standby, StartError, StartedStandby};
pub use synchronous::{maintain_synchronous, set_synchronous, SyncError, ANY_STANDBY};
