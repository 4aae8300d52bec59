//! Rejoin: the local server becomes a streaming replica of an upstream by
//! itself, by `pg_rewind` when it can, by a fresh `pg_basebackup` when it
//! cannot. The fence marker stays until it streams.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::client::{connect, poll_until, ConnectError};
use crate::config::{slot_chars, ConfigError, PostgresConfig};
use crate::conninfo::Sources;
use crate::credentials::{libpq_passfile, CredentialsError};
use crate::fence::{fence, mark, FenceError};
use crate::files::{set_auto_conf, LocalFiles};
use crate::layout::LayoutError;
use crate::process::{postmaster, remove_synced, run_blocking, ToolError, Tools};
use crate::rewind::rewind;
use crate::standing::{standing, Standing, StandingError};

/// The server a replica streams from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Upstream {
    /// Its host name or address, as the replica reaches it.
    pub host: String,
    /// Its port.
    pub port: u16,
}

/// A step of a rejoin, reported as it is reached (the events `rejoining`,
/// `rewound`, `recloned`, `streaming`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RejoinStep {
    /// The rejoin started: the server is fenced (and stopped, unless only its
    /// upstream changes).
    Rejoining,
    /// `pg_rewind` rewound its diverged timeline onto the upstream's.
    Rewound,
    /// Its data directory was cloned afresh from the upstream.
    Recloned,
    /// It streams from the upstream; the fence marker is gone.
    Streaming,
}

impl RejoinStep {
    /// The step's name, as in events: `rejoining`, `rewound`, `recloned`,
    /// `streaming`.
    pub fn as_str(self) -> &'static str {
        match self {
            RejoinStep::Rejoining => "rejoining",
            RejoinStep::Rewound => "rewound",
            RejoinStep::Recloned => "recloned",
            RejoinStep::Streaming => "streaming",
        }
    }
}

/// How a rejoin got the server streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejoined {
    /// It streamed from the upstream already; nothing was done.
    AlreadyStreaming,
    /// A running replica was pointed at the upstream (`ALTER SYSTEM`, reload).
    Repointed,
    /// It was restarted as a standby of the upstream; no rewind was needed.
    Restarted,
    /// It was rewound (`pg_rewind`) and restarted as a standby.
    Rewound,
    /// It was cloned afresh (`pg_basebackup`) and started as a standby.
    Recloned,
}

/// Why a rejoin did not complete. In every case but `Invalid`,
/// `BadSlotName` and `Layout` the data directory carries the fence marker
/// (or is empty).
#[derive(Debug, thiserror::Error)]
pub enum RejoinError {
    /// The configuration is invalid; nothing was done.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// Not a valid replication slot name (1 to 63 of `a-z`, `0-9`, `_`);
    /// nothing was done.
    #[error("{slot:?} is not a valid replication slot name (1 to 63 of a-z, 0-9 and _)")]
    BadSlotName {
        /// The name.
        slot: String,
    },
    /// The configuration directory (`config_dir`) names another data
    /// directory, or the distribution would start the cluster at boot;
    /// nothing was done.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The local server answered but its standing could not be read; nothing
    /// was done.
    #[error("reading the local server's standing: {0}")]
    Local(#[from] StandingError),
    /// The local server could not be fenced and stopped.
    #[error("fencing the local server: {0}")]
    Fence(#[from] FenceError),
    /// The upstream could not be reached, or refused the replication slot or
    /// the checkpoint; the local server is fenced (stopped, unless it was a
    /// running replica).
    #[error("readying the upstream {host}:{port}: {reason}")]
    Upstream {
        /// The upstream's host.
        host: String,
        /// The upstream's port.
        port: u16,
        /// Why.
        reason: String,
    },
    /// `pg_rewind` (or the crash recovery before it) failed and
    /// `reclone_on_rewind_failure` is off: the data directory was not
    /// re-cloned; it is fenced and stopped. (`pg_rewind` checks what it needs
    /// before it changes anything; one that fails midway leaves a directory
    /// only a re-clone can repair.)
    #[error("rewinding failed and re-cloning is off (reclone_on_rewind_failure = false); the data directory is fenced and untouched: {0}")]
    Rewind(ToolError),
    /// The data directory holds no valid cluster and re-cloning is off;
    /// nothing in it was changed but for the fence marker and
    /// `standby.signal`.
    #[error("{data_dir} holds no valid cluster and re-cloning is off (reclone_on_rewind_failure = false)")]
    NotACluster {
        /// The data directory.
        data_dir: PathBuf,
    },
    /// Re-cloning failed: the data directory is empty but for the fence
    /// marker and `standby.signal` (no cluster that could be started or
    /// promoted).
    #[error("re-cloning with pg_basebackup failed; the data directory is empty: {0}")]
    Reclone(ToolError),
    /// A file in the data directory could not be read or written; the server
    /// is fenced and stopped.
    #[error("{path}: {source}")]
    Files {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server did not start as a standby; it is fenced and stopped.
    #[error("starting as a standby: {0}")]
    Start(ToolError),
    /// It runs as a standby but did not stream from the upstream in time; it is
    /// fenced.
    #[error("not streaming from {host}:{port} after {waited:?}; the server stays fenced")]
    NotStreaming {
        /// The upstream's host.
        host: String,
        /// The upstream's port.
        port: u16,
        /// How long the rejoin took.
        waited: Duration,
    },
    /// The OS user could not be found; nothing was done.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// A password file or the passfile could not be used (or the passfile
    /// for PostgreSQL's programs written); nothing was done.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
}

/// How long a repointed replica may take to stream from its new upstream
/// before it is restarted (and rewound) instead: its WAL receiver reconnects
/// within `wal_retrieve_retry_interval` (5 s by default). A replica that
/// cannot follow the upstream's timeline (an old primary started as a
/// standby, its WAL past the fork) never will: the benchmark's 20
/// consecutive failovers showed such a wait costing 30 s when it was a
/// quarter of `rejoin_timeout`.
const REPOINT_WAIT: Duration = Duration::from_secs(8);

/// How long a server restarted without a rewind ("no rewind required") may
/// take to stream on the upstream's timeline before it is re-cloned.
const RESTART_WAIT: Duration = Duration::from_secs(30);

/// Makes the local server a streaming replica of `upstream`, using the
/// replication slot `slot` there (created when missing) and announcing itself
/// as `application_name`. `progress` hears each step as it is reached.
///
/// - Already streaming from `upstream`: nothing to do, `[Streaming]`.
/// - A running replica of another upstream: repointed (`primary_conninfo`,
///   `primary_slot_name` by `ALTER SYSTEM`, reloaded), `[Rejoining,
///   Streaming]`; if it does not stream within 8 s (`REPOINT_WAIT`; its
///   timeline diverged), as below.
/// - Otherwise: fenced and stopped; after an unclean stop, run once as a
///   standby for its crash recovery (not reachable over the network, not
///   streaming) and stopped cleanly; `pg_rewind` from the upstream
///   (`Rewound` when it rewound something); if that fails or the directory
///   holds no valid cluster, re-cloned with `pg_basebackup` (`Recloned`) when
///   `reclone_on_rewind_failure`, else an error; the node's own configuration
///   files are put back (with `config_dir`, those the upstream's data
///   directory held are removed from this one: `config_dir` is never
///   written), its replication slots removed, the replication
///   settings written to
///   `postgresql.auto.conf`, the server started as a standby; once it streams,
///   the fence marker is removed (`Streaming`).
///
/// Refused, with nothing done, for a configuration directory that fails
/// [`PostgresConfig::check_layout`]. Everything is bounded by
/// `rejoin_timeout`.
pub async fn rejoin(
    cfg: &PostgresConfig,
    upstream: &Upstream,
    slot: &str,
    application_name: &str,
    mut progress: impl FnMut(RejoinStep),
) -> Result<Rejoined, RejoinError> {
    cfg.validate()?;
    if !slot_chars(slot, 63) {
        return Err(RejoinError::BadSlotName {
            slot: slot.to_owned(),
        });
    }
    cfg.check_layout().await?;
    let started = Instant::now();
    let deadline = started + cfg.rejoin_timeout;
    let tools = Tools::new(cfg)?;
    // Before anything is changed: a bad secret file stops the rejoin here.
    let passfile = libpq_passfile(cfg, tools.user()).await?;
    let now = if postmaster(&cfg.data_dir).is_some() {
        standing(cfg).await?
    } else {
        Standing::Down
    };
    let source = Sources::new(cfg, upstream, passfile.as_deref(), application_name);
    let conninfo = source.stream.as_str();
    if now.streams_from(&upstream.host, upstream.port) {
        unfence(cfg).await?;
        progress(RejoinStep::Streaming);
        return Ok(Rejoined::AlreadyStreaming);
    }
    progress(RejoinStep::Rejoining);
    // A copy (a replica, running or stopped, that hale never fenced) is
    // marked fenced only once the upstream has answered: with the upstream
    // unreachable, every standby that tried to follow it would otherwise
    // end up fenced, and when the upstream then died no copy could be
    // promoted. (A server that ran as a primary is fenced first, whatever
    // the upstream says: it must stop taking writes.)
    let copy = is_unfenced_copy(cfg, &now);
    if matches!(now, Standing::Replica { .. }) {
        let timeline = prepare_upstream(cfg, upstream, slot).await?;
        mark(cfg, &tools).await?;
        let repoint_deadline = deadline.min(Instant::now() + REPOINT_WAIT);
        match repoint(cfg, conninfo, slot).await {
            Ok(()) if wait_streaming(cfg, upstream, timeline, repoint_deadline).await => {
                unfence(cfg).await?;
                progress(RejoinStep::Streaming);
                return Ok(Rejoined::Repointed);
            }
            Ok(()) => tracing::warn!("repointed replica does not stream; restarting it"),
            Err(err) => tracing::warn!(%err, "repointing failed; restarting it"),
        }
    }
    ensure_data_dir(cfg, &tools).await?;
    if copy {
        prepare_upstream(cfg, upstream, slot).await?;
    }
    let fenced = fence(cfg).await?;
    let mut timeline = prepare_upstream(cfg, upstream, slot).await?;
    let local = LocalFiles::read(cfg).await.map_err(files(&cfg.data_dir))?;
    let is_cluster = ["PG_VERSION", "global/pg_control"]
        .iter()
        .all(|f| cfg.data_dir.join(f).is_file());
    let mut how = if is_cluster {
        match rewind(cfg, &tools, &source.rewind, fenced.clean(), deadline).await {
            Ok(how) => how,
            Err(err) if cfg.reclone_on_rewind_failure => {
                tracing::warn!(%err, "rewind failed; re-cloning");
                // Not when the upstream has gone meanwhile: the directory
                // would be emptied for a clone that cannot be made.
                timeline = prepare_upstream(cfg, upstream, slot).await?;
                reclone(cfg, &tools, &source.clone, slot, deadline).await?
            }
            Err(err) => return Err(RejoinError::Rewind(err)),
        }
    } else if cfg.reclone_on_rewind_failure {
        reclone(cfg, &tools, &source.clone, slot, deadline).await?
    } else {
        return Err(RejoinError::NotACluster {
            data_dir: cfg.data_dir.clone(),
        });
    };
    let standby = StandbyOf {
        upstream,
        timeline,
        conninfo,
        slot,
        local: &local,
    };
    if !standby
        .start(cfg, &tools, how, &mut progress, deadline)
        .await?
    {
        let not_streaming = || RejoinError::NotStreaming {
            host: upstream.host.clone(),
            port: upstream.port,
            waited: started.elapsed(),
        };
        // pg_rewind saw nothing to rewind, yet the server does not follow
        // the upstream's timeline: its WAL runs past the fork in a way
        // the control file does not show. Only a fresh copy helps.
        if how != Rejoined::Restarted || !cfg.reclone_on_rewind_failure {
            return Err(not_streaming());
        }
        tracing::warn!(
            "nothing was rewound, yet it does not follow the upstream's timeline; re-cloning"
        );
        fence(cfg).await?;
        let timeline = prepare_upstream(cfg, upstream, slot).await?;
        how = reclone(cfg, &tools, &source.clone, slot, deadline).await?;
        let standby = StandbyOf {
            timeline,
            ..standby
        };
        if !standby
            .start(cfg, &tools, how, &mut progress, deadline)
            .await?
        {
            return Err(not_streaming());
        }
    }
    unfence(cfg).await?;
    progress(RejoinStep::Streaming);
    Ok(how)
}

/// Whether the local data directory is a copy that hale never fenced: a
/// running replica, or a stopped one (`standby.signal` without the fence
/// marker). Such a copy stays promotable until its upstream has answered.
fn is_unfenced_copy(cfg: &PostgresConfig, now: &Standing) -> bool {
    let marked = cfg.fence_marker().exists();
    match now {
        Standing::Replica { .. } => !marked,
        Standing::Down => !marked && cfg.data_dir.join("standby.signal").exists(),
        Standing::Primary { .. } => false,
    }
}

/// How a rewound or re-cloned (stopped, fenced) data directory is started as
/// a standby of the upstream.
#[derive(Clone, Copy)]
struct StandbyOf<'a> {
    upstream: &'a Upstream,
    timeline: Option<u32>,
    conninfo: &'a str,
    slot: &'a str,
    local: &'a LocalFiles,
}

impl StandbyOf<'_> {
    /// Marks it fenced again (rewind and re-clone remove the marker), drops
    /// its own slots, puts its own files back, writes the replication
    /// settings, starts it and waits until it streams on the upstream's
    /// timeline: false if it does not by `deadline` (still fenced).
    async fn start(
        &self,
        cfg: &PostgresConfig,
        tools: &Tools<'_>,
        how: Rejoined,
        progress: &mut impl FnMut(RejoinStep),
        deadline: Instant,
    ) -> Result<bool, RejoinError> {
        mark(cfg, tools).await?;
        drop_local_slots(&cfg.data_dir).await?;
        match how {
            Rejoined::Rewound => progress(RejoinStep::Rewound),
            Rejoined::Recloned => progress(RejoinStep::Recloned),
            _ => {}
        }
        self.local
            .restore(tools.user())
            .await
            .map_err(|(path, source)| RejoinError::Files { path, source })?;
        let settings = [
            ("primary_conninfo", self.conninfo),
            ("primary_slot_name", self.slot),
        ];
        set_auto_conf(&cfg.data_dir, &settings, tools.user())
            .await
            .map_err(|(path, source)| RejoinError::Files { path, source })?;
        tools
            .start(remaining(deadline).min(cfg.start_timeout), None)
            .await
            .map_err(RejoinError::Start)?;
        // Nothing rewound: it streams on the upstream's timeline at once or
        // never (then it is re-cloned); rewound or cloned, it may first
        // replay what it copied.
        let deadline = match how {
            Rejoined::Restarted => deadline.min(Instant::now() + RESTART_WAIT),
            _ => deadline,
        };
        Ok(wait_streaming(cfg, self.upstream, self.timeline, deadline).await)
    }
}

pub(crate) fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_secs(1))
}

fn files(path: &Path) -> impl FnOnce(std::io::Error) -> RejoinError + '_ {
    move |source| RejoinError::Files {
        path: path.to_owned(),
        source,
    }
}

/// Removes the fence marker: only once the server streams.
async fn unfence(cfg: &PostgresConfig) -> Result<(), RejoinError> {
    let marker = cfg.fence_marker();
    remove_synced(&marker).await.map_err(files(&marker))
}

/// Creates the data directory (0700, owned by the OS user) when it is missing.
async fn ensure_data_dir(cfg: &PostgresConfig, tools: &Tools<'_>) -> Result<(), RejoinError> {
    let dir = cfg.data_dir.clone();
    let owner = tools.user().map(|u| (u.uid.as_raw(), u.gid.as_raw()));
    run_blocking(move || {
        use std::os::unix::fs::DirBuilderExt;
        if dir.is_dir() {
            return Ok(());
        }
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
        }
        Ok(())
    })
    .await
    .map_err(files(&cfg.data_dir))
}

/// Readies the upstream: creates the physical replication slot unless it
/// exists (reserving WAL from now on), and, when the upstream was promoted
/// since its last checkpoint, checkpoints it: until then its control file
/// names its former timeline and PostgreSQL 15's `pg_rewind` would see
/// nothing to rewind.
async fn prepare_upstream(
    cfg: &PostgresConfig,
    upstream: &Upstream,
    slot: &str,
) -> Result<Option<u32>, RejoinError> {
    let failed = |reason: String| RejoinError::Upstream {
        host: upstream.host.clone(),
        port: upstream.port,
        reason,
    };
    let client = connect(cfg, &upstream.host, upstream.port)
        .await
        .map_err(|err: ConnectError| failed(err.to_string()))?;
    client
        .execute(
            "SELECT pg_create_physical_replication_slot($1, true) \
             WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
            &[&slot],
        )
        .await
        .map_err(|err| failed(format!("creating the replication slot {slot:?}: {err}")))?;
    // CASE: pg_walfile_name() fails during recovery, and only CASE fixes
    // the order of evaluation.
    let row = client
        .query_one(
            "SELECT c.timeline_id, CASE WHEN pg_is_in_recovery() THEN NULL ELSE \
                    ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int \
                    END \
             FROM pg_control_checkpoint() c",
            &[],
        )
        .await
        .map_err(|err| failed(format!("reading its timeline: {err}")))?;
    let checkpointed: i32 = row.get(0);
    let current: Option<i32> = row.get(1);
    if current.is_some_and(|c| c != checkpointed) {
        client
            .batch_execute("CHECKPOINT")
            .await
            .map_err(|err| failed(format!("checkpointing: {err}")))?;
    }
    Ok(current.and_then(|c| u32::try_from(c).ok()))
}

/// Points a running replica at a new upstream (PostgreSQL 13 and later
/// reload `primary_conninfo` and `primary_slot_name`).
async fn repoint(cfg: &PostgresConfig, conninfo: &str, slot: &str) -> Result<(), RejoinError> {
    let client = connect(cfg, &cfg.host, cfg.port)
        .await
        .map_err(|err| RejoinError::Local(StandingError::Connect(err)))?;
    // One statement per query: ALTER SYSTEM refuses a transaction block.
    for sql in [
        format!(
            "ALTER SYSTEM SET primary_conninfo = {}",
            sql_literal(conninfo)
        ),
        format!("ALTER SYSTEM SET primary_slot_name = {}", sql_literal(slot)),
        "SELECT pg_reload_conf()".to_owned(),
    ] {
        client
            .batch_execute(&sql)
            .await
            .map_err(|err| RejoinError::Local(err.into()))?;
    }
    Ok(())
}

/// An SQL string literal, whatever `standard_conforming_strings` says.
pub(crate) fn sql_literal(value: &str) -> String {
    format!("E'{}'", value.replace('\\', "\\\\").replace('\'', "''"))
}

/// Polls the local server until it streams from `upstream` on the
/// upstream's `timeline` (when known), or `deadline`. A server whose WAL
/// runs past the upstream's fork connects, streams its old timeline a
/// moment and is cut off, again and again: streaming alone is not enough.
async fn wait_streaming(
    cfg: &PostgresConfig,
    upstream: &Upstream,
    timeline: Option<u32>,
    deadline: Instant,
) -> bool {
    poll_until(deadline, Duration::from_millis(100), || async {
        match standing(cfg).await {
            Ok(now) => (now.streams_from(&upstream.host, upstream.port)
                && timeline.is_none_or(|t| now.timeline() == Some(t)))
            .then_some(()),
            Err(err) => {
                tracing::debug!(%err, "waiting for streaming");
                None
            }
        }
    })
    .await
    .is_some()
}

/// Removes the replication slots kept in the (stopped) data directory: a
/// former primary's slots survive `pg_rewind` (which leaves `pg_replslot`
/// alone), and on a replica they would hold its WAL forever. The slots a
/// primary needs are created on it by each standby's rejoin.
async fn drop_local_slots(data_dir: &Path) -> Result<(), RejoinError> {
    let dir = data_dir.join("pg_replslot");
    run_blocking({
        let dir = dir.clone();
        move || {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(err) => return Err(err),
            };
            for entry in entries {
                let entry = entry?;
                if entry.file_type()?.is_dir() {
                    std::fs::remove_dir_all(entry.path())?;
                }
            }
            std::fs::File::open(&dir)?.sync_all()
        }
    })
    .await
    .map_err(files(&dir))
}

/// Empties the data directory and clones it from the upstream (`source`, a
/// connection string).
async fn reclone(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    source: &str,
    slot: &str,
    deadline: Instant,
) -> Result<Rejoined, RejoinError> {
    empty(&cfg.data_dir).await?;
    let args: [&std::ffi::OsStr; 11] = [
        "-D".as_ref(),
        cfg.data_dir.as_os_str(),
        "-d".as_ref(),
        source.as_ref(),
        "-X".as_ref(),
        "stream".as_ref(),
        "-c".as_ref(),
        "fast".as_ref(),
        "-S".as_ref(),
        slot.as_ref(),
        // Never prompt for a password.
        "--no-password".as_ref(),
    ];
    if let Err(err) = tools.run("pg_basebackup", args, remaining(deadline)).await {
        // pg_basebackup cleans up after itself unless it was killed (timeout):
        // leave nothing half-cloned, and the marker.
        if let Err(cleanup) = empty(&cfg.data_dir).await {
            tracing::warn!(%cleanup, "cannot empty the data directory after a failed clone");
        }
        if let Err(marking) = mark(cfg, tools).await {
            tracing::warn!(%marking, "cannot mark the data directory fenced after a failed clone");
        }
        return Err(RejoinError::Reclone(err));
    }
    Ok(Rejoined::Recloned)
}

/// Removes everything in `dir` (symbolic links, to `pg_wal` or tablespaces,
/// are removed, not followed).
async fn empty(dir: &Path) -> Result<(), RejoinError> {
    let owned = dir.to_owned();
    run_blocking(move || {
        for entry in std::fs::read_dir(&owned)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    })
    .await
    .map_err(files(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_named_in_lower_case_as_in_events() {
        for step in [
            RejoinStep::Rejoining,
            RejoinStep::Rewound,
            RejoinStep::Recloned,
            RejoinStep::Streaming,
        ] {
            let json = serde_json::to_string(&step).expect("serializes");
            assert_eq!(json, format!("\"{}\"", step.as_str()));
            assert_eq!(
                serde_json::from_str::<RejoinStep>(&json).expect("parses"),
                step
            );
        }
    }

    #[test]
    fn sql_literals_survive_quotes_and_backslashes() {
        assert_eq!(sql_literal(r"host='a\b'"), r"E'host=''a\\b'''");
    }
}
