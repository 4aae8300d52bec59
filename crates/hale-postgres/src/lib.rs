//! # hale-postgres
//!
//! PostgreSQL under hale: the operations a role holder and its candidates
//! need, spoken to the server with a real client (`tokio-postgres`) and its
//! own programs (`pg_ctl`, `pg_rewind`, `pg_basebackup`), never by parsing
//! their human output where a query answers.
//!
//! - [`standing()`]: where the local server stands (primary with its
//!   standbys, replica with its replay, or down), for eligibility and the API.
//! - [`check`]: whether it does its job (a primary commits a write, a
//!   replica answers), not only whether it accepts connections.
//! - [`promote`]: make it the primary, never while it is fenced.
//! - [`fence`]: it no longer accepts writes, now or after a restart (fence
//!   marker, `standby.signal`, stopped, killed if hung).
//! - [`rejoin`]: a former primary (or any member) becomes a streaming
//!   replica of the current primary by itself: `pg_rewind`, else a fresh
//!   `pg_basebackup`; the fence marker goes only once it streams.
//! - [`maintain_synchronous`]: quorum commit (`ANY 1 (...)`) over the
//!   streaming standbys the lease table names; none when none streams,
//!   unless strict.
//!
//! Configured by [`PostgresConfig`], the `[role.postgres]` table of
//! `hale.toml`; a configuration outside the data directory (`config_dir`,
//! Debian's and Ubuntu's packaged clusters) is checked before the server is
//! started from it ([`PostgresConfig::check_layout`], [`LayoutError`]). Passwords come from files and are never printed nor put on
//! a command line ([`credentials`](CredentialsError)); TLS between hosts is
//! libpq's `sslmode` ([`tls`]). Linux only (the postmaster is found through `/proc`).

#![forbid(unsafe_code)]

mod check;
mod client;
pub mod config;
mod conninfo;
mod credentials;
mod fence;
mod files;
mod layout;
pub mod lsn;
mod process;
mod promote;
mod rejoin;
mod rewind;
pub mod standing;
mod start;
mod synchronous;
pub mod tls;

pub use check::{check, CheckError, Working};
pub use client::ConnectError;
pub use config::{ConfigError, PostgresConfig, FENCE_MARKER};
pub use credentials::CredentialsError;
pub use fence::{fence, FenceError, Fenced};
pub use layout::LayoutError;
pub use lsn::{format_lsn, lag_bytes, parse_lsn, LsnParseError};
pub use process::{place_servers_in, spawn_tools_with, Spawner, ToolError};
pub use promote::{promote, PromoteError, Promotion};
pub use rejoin::{rejoin, RejoinError, RejoinStep, Rejoined, Upstream};
pub use rewind::crashed_as_primary;
pub use standing::{standing, SenderState, StandbyState, Standing, StandingError};
pub use start::{start_standby, StartError, StartedStandby};
pub use synchronous::{
    maintain_synchronous, quorum_setting, set_synchronous, streaming, wanted_setting, SyncError,
    Waits, NO_STANDBY,
};
pub use tls::{SslMode, TlsError};
