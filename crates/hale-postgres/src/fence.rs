//! Fencing: the local server no longer accepts writes, now or after any
//! restart, and hale never promotes it until it has rejoined.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, PostgresConfig, FENCE_MARKER};
use crate::process::{self, kill_postmaster, postmaster, wait_gone, ToolError, Tools};

/// How a fence left the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fenced {
    /// It was not running.
    WasDown,
    /// `pg_ctl stop -m fast`: a clean shutdown.
    StoppedFast,
    /// `pg_ctl stop -m immediate`: no shutdown checkpoint, it will run crash
    /// recovery at its next start.
    StoppedImmediate,
    /// It did not stop (hung, stopped by a signal): its postmaster and
    /// children were killed with SIGKILL.
    Killed,
}

impl Fenced {
    /// True when the server was shut down cleanly by this fence.
    pub fn clean(self) -> bool {
        self == Fenced::StoppedFast
    }
}

/// Why a fence did not complete.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// The configuration is invalid; nothing was done.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The OS user could not be found; nothing was done.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The fence marker or `standby.signal` could not be written; the server
    /// was left running as it was.
    #[error("cannot write {path}: {source}; the server was not stopped")]
    Mark {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server was killed, but a lock file naming it (`postmaster.pid`, its
    /// socket's `.lock`) could not be removed: it is fenced and will not start
    /// until the file is gone or its zombie reaped.
    #[error("the server was killed but {path} could not be removed: {source}")]
    LockFile {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server is marked fenced but its postmaster survived SIGKILL (a
    /// process in uninterruptible sleep): it may still accept writes.
    #[error("the postmaster (pid {pid}) is still alive after SIGKILL; it is marked fenced")]
    StillRunning {
        /// Its pid.
        pid: i32,
    },
}

/// Fences the local server: writes the fence marker and `standby.signal`
/// (owned by `os_user`, synced), so that it boots only as a standby and is
/// never promoted, then stops it: `pg_ctl stop -m fast`, else `-m immediate`,
/// else SIGKILL of the postmaster and its children (at once when the
/// postmaster is stopped by a signal). Idempotent.
pub async fn fence(cfg: &PostgresConfig) -> Result<Fenced, FenceError> {
    cfg.validate()?;
    let tools = Tools::new(cfg)?;
    mark(cfg, &tools).await?;
    let Some(pid) = postmaster(&cfg.data_dir) else {
        return Ok(Fenced::WasDown);
    };
    let hung = matches!(process::process_state(pid.as_raw()), Some('T') | Some('t'));
    if !hung {
        match tools.stop("fast", cfg.stop_timeout).await {
            Ok(()) => return Ok(Fenced::StoppedFast),
            Err(err) => tracing::warn!(%err, "fast shutdown failed; trying immediate"),
        }
        match tools.stop("immediate", cfg.stop_timeout).await {
            Ok(()) => return Ok(Fenced::StoppedImmediate),
            Err(err) => tracing::warn!(%err, "immediate shutdown failed; killing the postmaster"),
        }
    }
    // pg_ctl may have failed because the server stopped meanwhile.
    if postmaster(&cfg.data_dir).is_none() {
        return Ok(Fenced::StoppedImmediate);
    }
    tracing::warn!(
        pid = pid.as_raw(),
        hung,
        "killing the postmaster and its children"
    );
    let deadline = tokio::time::Instant::now() + cfg.stop_timeout;
    for process in kill_postmaster(pid) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !wait_gone(process, left).await {
            return Err(FenceError::StillRunning {
                pid: process.as_raw(),
            });
        }
    }
    // A killed postmaster may stay a zombie until its parent (often init)
    // reaps it, and PostgreSQL takes a lock file naming a zombie for a live
    // server: it would refuse to start. It and its children are dead, so its
    // lock files go.
    process::remove_dead_locks(&cfg.data_dir, pid)
        .await
        .map_err(|(path, source)| FenceError::LockFile { path, source })?;
    Ok(Fenced::Killed)
}

/// Writes the fence marker and `standby.signal`.
pub(crate) async fn mark(cfg: &PostgresConfig, tools: &Tools<'_>) -> Result<(), FenceError> {
    let marker = cfg.data_dir.join(FENCE_MARKER);
    let contents = b"hale fenced this data directory: it must rejoin before it may be promoted\n";
    for (path, contents) in [
        (marker, contents.to_vec()),
        (cfg.data_dir.join("standby.signal"), Vec::new()),
    ] {
        process::write_owned(&path, contents, tools.user())
            .await
            .map_err(|source| FenceError::Mark { path, source })?;
    }
    Ok(())
}
