//! Whether a previous run's watchdog still runs: a new run of the agent
//! does not start its roles while one does.
//!
//! After the agent crashed (or was restarted without pausing), its
//! watchdog outlives it to fence what it held, and that fence may take a
//! while (a demote hook that hangs until its timeout, then is retried). A
//! new run started meanwhile could be granted the same role again and run
//! its promote hook while the old fence still stops the service. Under the
//! shipped systemd unit the new run finds the old watchdog in its cgroup
//! leaf (`crate::host::cgroup`); everywhere, each watchdog holds a shared lock on
//! a presence file for its whole life ([`announce`]), and the agent waits
//! until it can lock that file exclusively, or [`PREDECESSOR_WAIT`] has
//! passed, before its roles start ([`await_predecessors`]). Its own
//! watchdog starts later, when it first holds something.
//!
//! The file is `watchdog.presence` in the agent's `state_dir` (the
//! packaged service sets one); an agent without a `state_dir` has no
//! directory of its own to keep it in, and does not wait (outside systemd's
//! cgroup, set a `state_dir` to get this).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment variable that names the presence file to a watchdog.
pub const ENV: &str = "HALE_WATCHDOG_PRESENCE";

/// How long a new run waits for a previous run's watchdog.
pub const PREDECESSOR_WAIT: Duration = Duration::from_secs(60);

/// The presence file of the agent whose state lives in `state_dir`.
pub fn presence_path(state_dir: &Path) -> PathBuf {
    state_dir.join("watchdog.presence")
}

fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

/// In a watchdog: holds a shared lock on the presence file its agent named
/// ([`ENV`]) until the process exits (keep what is returned). Closed on
/// exec: the fences it starts do not hold it (a demote hook that starts a
/// standby would hold it for good). `None` when none was
/// named or it cannot be locked (the wait then does not see this one).
pub fn announce() -> Option<File> {
    let path = std::env::var_os(ENV)?;
    let file = open(Path::new(&path)).ok()?;
    file.lock_shared().ok()?;
    Some(file)
}

/// In the agent, before its roles start: waits while a watchdog holds the
/// presence file at `path` locked, at most [`PREDECESSOR_WAIT`]. Logs what
/// it waited for.
pub async fn await_predecessors(path: &Path) {
    let started = tokio::time::Instant::now();
    let mut told = false;
    loop {
        let free = match open(path) {
            Ok(f) => f.try_lock().is_ok(), // unlocked when dropped
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot open the watchdogs' presence file: {e}");
                return;
            }
        };
        if free {
            if told {
                tracing::info!(waited = ?started.elapsed(), "the previous run's watchdog is done");
            }
            return;
        }
        if !told {
            tracing::warn!(
                path = %path.display(),
                "a previous run's watchdog still runs (it fences what that run held): \
                 the roles start once it is done"
            );
            told = true;
        }
        if started.elapsed() >= PREDECESSOR_WAIT {
            tracing::error!("a previous run's watchdog still runs after {PREDECESSOR_WAIT:?}: starting the roles anyway");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    #[tokio::test]
    async fn the_agent_waits_while_a_watchdog_holds_the_presence_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = presence_path(dir.path());
        // Nobody: at once.
        tokio::time::timeout(Duration::from_secs(1), await_predecessors(&path))
            .await
            .unwrap();
        // A watchdog's shared lock: waits until it is gone.
        let held = open(&path).unwrap();
        held.lock_shared().unwrap();
        let waiting = tokio::spawn({
            let path = path.clone();
            async move { await_predecessors(&path).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "did not wait for the watchdog");
        drop(held);
        tokio::time::timeout(Duration::from_secs(2), waiting)
            .await
            .unwrap()
            .unwrap();
    }
}
