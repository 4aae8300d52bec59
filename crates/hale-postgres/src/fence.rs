//! Fencing: the local server no longer accepts writes, now or after any
//! restart, and hale never promotes it until it has rejoined.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, PostgresConfig, FENCE_MARKER};
use crate::process::{self, kill_postmaster, postmaster, ToolError, Tools};

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
    /// Its disk stalls (the marker was not written within 2 s, `MARK_WAIT`):
    /// it was killed with SIGKILL at once, and the processes waiting in the
    /// kernel on the disk die as their calls return, before any of them
    /// runs again (to answer a client, say). The marker and
    /// `standby.signal` are written by a process left behind, when the disk
    /// answers.
    KilledOnStalledDisk,
}

/// How long a fence waits for the data directory to take its marker
/// before it counts the disk as stalled and kills the server at once.
pub const MARK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long processes killed with SIGKILL are given to die before those
/// still waiting in the kernel with the signal pending count as fenced.
const KILL_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

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
/// postmaster is stopped by a signal, or when the disk stalls: see
/// [`Fenced::KilledOnStalledDisk`]). Idempotent. Never refused for the
/// configuration directory ([`PostgresConfig::check_layout`]): it needs only
/// the data directory.
///
/// The marker is written by a child process: a write to a disk that stalls
/// (frozen, a dead device) waits in the kernel, uninterruptibly, and a
/// thread of this process waiting so would keep it from exiting (the
/// fence is a hook: its exit is its answer).
pub async fn fence(cfg: &PostgresConfig) -> Result<Fenced, FenceError> {
    cfg.validate()?;
    let tools = Tools::new(cfg)?;
    let stalled = !mark_within(cfg, &tools, MARK_WAIT).await?;
    let Some(pid) = postmaster(&cfg.data_dir) else {
        if !stalled {
            // Killed earlier on a stalled disk, its lock files stayed.
            process::remove_stale_locks(&cfg.data_dir)
                .await
                .map_err(|(path, source)| FenceError::LockFile { path, source })?;
        }
        return Ok(Fenced::WasDown);
    };
    if stalled {
        tracing::warn!(
            pid = pid.as_raw(),
            "the data directory took no fence marker within {MARK_WAIT:?}: its disk stalls; killing the server"
        );
        return kill_all(cfg, pid, true).await;
    }
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
    kill_all(cfg, pid, false).await
}

/// Kills postmaster `pid` and its children with SIGKILL and waits (at most
/// `stop_timeout`) until each is gone, or, on a disk that stalls
/// (`stalled`), waits in the kernel with SIGKILL pending: such a process
/// dies when its call returns and never runs again.
async fn kill_all(
    cfg: &PostgresConfig,
    pid: nix::unistd::Pid,
    stalled: bool,
) -> Result<Fenced, FenceError> {
    let start = tokio::time::Instant::now();
    let deadline = start + cfg.stop_timeout;
    let killed = kill_postmaster(pid);
    loop {
        let alive: Vec<_> = killed.iter().filter(|p| !process::gone(**p)).collect();
        let Some(first) = alive.first() else { break };
        if stalled
            && start.elapsed() >= KILL_GRACE
            && alive.iter().all(|p| process::kill_pending(**p))
        {
            return Ok(Fenced::KilledOnStalledDisk);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(FenceError::StillRunning {
                pid: first.as_raw(),
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    if stalled {
        // Dead, but its lock files are on the disk that stalls: they go
        // with the next fence or start, once it answers.
        return Ok(Fenced::KilledOnStalledDisk);
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

/// Writes the fence marker and `standby.signal` (as [`mark`] does) from a
/// child process (`sh`, as `os_user`), waiting `wait` at most: true when
/// written, false when the disk did not take them in time (the child is
/// left to finish when it does).
async fn mark_within(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    wait: std::time::Duration,
) -> Result<bool, FenceError> {
    let marker = cfg.data_dir.join(FENCE_MARKER);
    // Each file through a temporary one, synced, renamed, its directory
    // synced (as `process::write_owned` does in process).
    let script = r#"set -e
umask 077
for f in "$1" "$2"; do
  if [ "$f" = "$1" ]; then printf '%s\n' "$3" > "$f.hale-tmp"; else : > "$f.hale-tmp"; fi
  sync "$f.hale-tmp"
  mv -f "$f.hale-tmp" "$f"
done
sync "$(dirname "$1")""#;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", script, "sh"])
        .arg(&marker)
        .arg(cfg.data_dir.join("standby.signal"))
        .arg(MARKER_TEXT)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .current_dir("/")
        .kill_on_drop(false);
    if let Some(user) = tools.user() {
        cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    }
    let mark_err = |source| FenceError::Mark {
        path: marker.clone(),
        source,
    };
    let child = cmd.spawn().map_err(mark_err)?;
    match tokio::time::timeout(wait, child.wait_with_output()).await {
        Err(_) => Ok(false),
        Ok(Err(source)) => Err(mark_err(source)),
        Ok(Ok(out)) if out.status.success() => Ok(true),
        Ok(Ok(out)) => Err(mark_err(std::io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ))),
    }
}

/// What the fence marker says.
const MARKER_TEXT: &str =
    "hale fenced this data directory: it must rejoin before it may be promoted";

/// Writes the fence marker and `standby.signal` (a rejoin's fence), as
/// [`fence`] does, through the same child process: a disk that does not
/// take them within `stop_timeout` is an error (the child finishes when the
/// disk answers), never a thread of this process waiting on it.
pub(crate) async fn mark(cfg: &PostgresConfig, tools: &Tools<'_>) -> Result<(), FenceError> {
    if mark_within(cfg, tools, cfg.stop_timeout).await? {
        return Ok(());
    }
    Err(FenceError::Mark {
        path: cfg.data_dir.join(FENCE_MARKER),
        source: std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("its disk did not take it within {:?}", cfg.stop_timeout),
        ),
    })
}
