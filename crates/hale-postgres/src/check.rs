//! Whether the local server does its job, not only whether it accepts
//! connections: the check a `[[service.check]] postgres = "<role>"` runs.
//!
//! A half-dead server passes `pg_isready`: a hung postmaster whose socket
//! still accepts, backends stuck on a stalled disk, a full `pg_wal` whose
//! next write will PANIC. So on a primary the check **commits a write**: a
//! transaction that writes a WAL record commits and flushes it to the
//! server's own disk
//! (`synchronous_commit = local`: the check judges this server, not its
//! standbys, which the quorum covers, and never waits on a strict
//! primary's missing standby). No table: the write is a transactional WAL
//! message (`pg_logical_emit_message(true, 'hale', 'check')`, a few dozen
//! bytes; logical decoding consumers see it under the prefix `hale`). A
//! transaction that only takes an id writes no WAL but its commit record,
//! which PostgreSQL does not flush (an asynchronous commit): it passes on
//! a frozen disk, so it would not do. On a
//! replica it reads where its WAL receive and replay stand, through a
//! backend: a hung or stopped replica does not answer. How far its replay
//! lags is the grantor's to judge ([`crate::standing`] positions), not a
//! liveness check's. On both, the filesystems of the data directory and of
//! `pg_wal` must have `min_free_bytes` free: a commit into a WAL segment
//! already allocated succeeds on a full disk, and the next segment or
//! checkpoint PANICs the server.
//!
//! The caller bounds the whole check in time (the check's `timeout`): a
//! commit that does not return in time is a failing check.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::{connect, ConnectError};
use crate::config::{ConfigError, PostgresConfig};

/// What a passing check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Working {
    /// A primary that committed and flushed a write in `commit`.
    Primary {
        /// How long the commit took.
        commit: Duration,
    },
    /// A replica whose backends answer.
    Replica,
}

impl std::fmt::Display for Working {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Working::Primary { commit } => {
                write!(f, "primary: a write committed in {} ms", commit.as_millis())
            }
            Working::Replica => f.write_str("replica: answers"),
        }
    }
}

/// Why a check failed. It changed nothing on the server (a failed commit
/// wrote at most a transaction id).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No session: the server does not answer or refused it.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A query or the commit failed (a full disk, a server shutting down).
    #[error("PostgreSQL answered but did not do its job: {0}")]
    Query(#[from] tokio_postgres::Error),
    /// A filesystem the server writes to has less free space than
    /// `min_free_bytes` (or cannot be measured).
    #[error("{path}: {free} bytes free, less than min_free_bytes ({min})")]
    DiskFull {
        /// The directory measured.
        path: std::path::PathBuf,
        /// Its filesystem's free space (for an unprivileged user).
        free: u64,
        /// The least allowed.
        min: u64,
    },
}

/// The free space of the filesystems the server writes to (its data
/// directory, its `pg_wal`, which may be a link to another disk), each at
/// least `cfg.min_free_bytes`.
fn enough_space(cfg: &PostgresConfig) -> Result<(), CheckError> {
    if cfg.min_free_bytes == 0 {
        return Ok(());
    }
    for path in [cfg.data_dir.clone(), cfg.data_dir.join("pg_wal")] {
        // Not measurable (not there yet, no permission): no finding.
        let Ok(fs) = nix::sys::statvfs::statvfs(&path) else {
            continue;
        };
        #[allow(clippy::unnecessary_cast)] // the field types differ by platform
        let free = (fs.blocks_available() as u64).saturating_mul(fs.fragment_size() as u64);
        if free < cfg.min_free_bytes {
            return Err(CheckError::DiskFull {
                path,
                free,
                min: cfg.min_free_bytes,
            });
        }
    }
    Ok(())
}

/// Checks that the local server does its job (see the module's
/// documentation). Unbounded in time: the caller's timeout bounds it.
pub async fn check(cfg: &PostgresConfig) -> Result<Working, CheckError> {
    cfg.validate()?;
    // Off the runtime's threads: a filesystem that hangs must only make
    // this check time out.
    let measured = cfg.clone();
    tokio::task::spawn_blocking(move || enough_space(&measured))
        .await
        .unwrap_or(Ok(()))?;
    let client = connect(cfg, &cfg.host, cfg.port).await?;
    let in_recovery: bool = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .get(0);
    if in_recovery {
        client
            .query_one(
                "SELECT pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()",
                &[],
            )
            .await?;
        return Ok(Working::Replica);
    }
    let start = Instant::now();
    client
        .batch_execute(
            "BEGIN; SET LOCAL synchronous_commit = local; \
             SELECT pg_logical_emit_message(true, 'hale', 'check'); COMMIT",
        )
        .await?;
    Ok(Working::Primary {
        commit: start.elapsed(),
    })
}
