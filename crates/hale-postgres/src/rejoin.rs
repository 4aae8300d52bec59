//! Rejoin: the local server becomes a streaming replica of an upstream by
//! itself, by `pg_rewind` when it can, by a fresh `pg_basebackup` when it
//! cannot. The fence marker stays until it streams.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::client::{connect, poll_until, ConnectError};
use crate::config::{slot_chars, ConfigError, PostgresConfig};
use crate::fence::{fence, mark, FenceError};
use crate::files::{conninfo_value, set_auto_conf, LocalFiles};
use crate::process::{postmaster, remove_synced, run_blocking, ToolError, Tools};
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

/// Why a rejoin did not complete. In every case but `Invalid` and
/// `BadSlotName` the data directory carries the fence marker (or is empty).
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
///   files are put back, its replication slots removed, the replication
///   settings written to
///   `postgresql.auto.conf`, the server started as a standby; once it streams,
///   the fence marker is removed (`Streaming`).
///
/// Everything is bounded by `rejoin_timeout`.
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
    let started = Instant::now();
    let deadline = started + cfg.rejoin_timeout;
    let tools = Tools::new(cfg)?;
    let now = if postmaster(&cfg.data_dir).is_some() {
        standing(cfg).await?
    } else {
        Standing::Down
    };
    let conninfo = format!(
        "host={} port={} user={} application_name={}",
        conninfo_value(&upstream.host),
        upstream.port,
        conninfo_value(&cfg.replication_user),
        conninfo_value(application_name),
    );
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
        match repoint(cfg, &conninfo, slot).await {
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
    let local = LocalFiles::read(&cfg.data_dir)
        .await
        .map_err(files(&cfg.data_dir))?;
    let is_cluster = ["PG_VERSION", "global/pg_control"]
        .iter()
        .all(|f| cfg.data_dir.join(f).is_file());
    let mut how = if is_cluster {
        match rewind(cfg, &tools, upstream, fenced.clean(), deadline).await {
            Ok(how) => how,
            Err(err) if cfg.reclone_on_rewind_failure => {
                tracing::warn!(%err, "rewind failed; re-cloning");
                // Not when the upstream has gone meanwhile: the directory
                // would be emptied for a clone that cannot be made.
                timeline = prepare_upstream(cfg, upstream, slot).await?;
                reclone(cfg, &tools, upstream, slot, deadline).await?
            }
            Err(err) => return Err(RejoinError::Rewind(err)),
        }
    } else if cfg.reclone_on_rewind_failure {
        reclone(cfg, &tools, upstream, slot, deadline).await?
    } else {
        return Err(RejoinError::NotACluster {
            data_dir: cfg.data_dir.clone(),
        });
    };
    let standby = StandbyOf {
        upstream,
        timeline,
        conninfo: &conninfo,
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
        how = reclone(cfg, &tools, upstream, slot, deadline).await?;
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

fn remaining(deadline: Instant) -> Duration {
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

/// Runs the crash recovery of a (stopped, fenced) cluster that did not shut
/// down cleanly, unreachable and not streaming, and stops it cleanly, so
/// that `pg_rewind` reads where its WAL really ends:
///
/// * It crashed as a primary (`in production`): recovered as a primary,
///   `standby.signal` set aside meanwhile (the fence marker stays). Its
///   shutdown checkpoint then follows the last record it wrote. Recovered
///   as a standby instead, its control file would say where its WAL ends
///   only by `minRecoveryPoint`, which a last record that touches no page
///   (a commit) does not move: `pg_rewind` would see nothing to rewind
///   while its WAL runs past the new primary's fork, and the server would
///   never follow the new timeline ("forked off ... before current recovery
///   point").
/// * It crashed as a standby: recovered as one. All its WAL came from an
///   upstream; ending its recovery would write a checkpoint of its own.
async fn recover(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    deadline: Instant,
) -> Result<(), ToolError> {
    let was_primary = ran_as_primary(cfg, tools, deadline).await?;
    let signal = cfg.data_dir.join("standby.signal");
    let file = |source| ToolError::File {
        path: signal.clone(),
        source,
    };
    let mut options =
        "-c listen_addresses= -c primary_conninfo= -c primary_slot_name= -c hot_standby=on"
            .to_owned();
    if was_primary {
        // Nobody but its OS user may connect (no TCP; PostgreSQL needs one
        // socket), and no commit waits for a synchronous standby.
        options.push_str(" -c unix_socket_permissions=0700 -c synchronous_standby_names=");
        remove_synced(&signal).await.map_err(file)?;
    }
    let ran = async {
        tools
            .start(remaining(deadline).min(cfg.start_timeout), Some(&options))
            .await?;
        tools
            .stop("fast", remaining(deadline).min(cfg.stop_timeout))
            .await
    }
    .await;
    if was_primary {
        crate::process::write_owned(&signal, Vec::new(), tools.user())
            .await
            .map_err(file)?;
    }
    ran
}

/// Whether the stopped server's control file says it went down while it ran
/// as a primary (`in production`, or `in crash recovery` from that): its
/// WAL may run past what any standby received. A server that is not the
/// role's last holder with such a data directory must rejoin, never offer
/// its copy ([`crate::fence`] it).
pub async fn crashed_as_primary(cfg: &PostgresConfig) -> Result<bool, ToolError> {
    let tools = Tools::new(cfg)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    ran_as_primary(cfg, &tools, deadline).await
}

/// Whether the cluster's state, as its control file says, is `in
/// production` or `in crash recovery` (`pg_controldata`'s "Database cluster
/// state"; others: `shut down`, `shut down in recovery`, `in archive
/// recovery`, ...). A stopped server answers no query: the tool is the only
/// way to ask.
async fn ran_as_primary(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    deadline: Instant,
) -> Result<bool, ToolError> {
    let out = tools
        .run(
            "pg_controldata",
            ["-D".as_ref(), cfg.data_dir.as_os_str()],
            remaining(deadline).min(Duration::from_secs(10)),
        )
        .await?;
    let state = parse_cluster_state(&String::from_utf8_lossy(&out.stdout));
    Ok(matches!(
        state.as_str(),
        "in production" | "in crash recovery"
    ))
}

/// The value of `Database cluster state:` in `pg_controldata`'s output
/// (run with `LC_ALL=C`); empty when it is missing.
pub(crate) fn parse_cluster_state(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("Database cluster state:"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}

/// Rewinds the (stopped, fenced) cluster onto the upstream's timeline.
/// `pg_rewind` needs a cleanly shut down target and cannot recover one itself
/// while `standby.signal` exists (single-user mode refuses standby mode), so
/// after an unclean stop the server first runs its crash recovery
/// ([`recover`]) and is stopped cleanly.
async fn rewind(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    upstream: &Upstream,
    clean: bool,
    deadline: Instant,
) -> Result<Rejoined, ToolError> {
    if !clean {
        recover(cfg, tools, deadline).await?;
    }
    let label = cfg.data_dir.join("backup_label");
    let had_label = label.exists();
    let source = format!(
        "host={} port={} user={} dbname={} connect_timeout={}",
        conninfo_value(&upstream.host),
        upstream.port,
        conninfo_value(&cfg.user),
        conninfo_value(&cfg.database),
        cfg.connect_timeout.as_secs().max(2),
    );
    let mut target = std::ffi::OsString::from("--target-pgdata=");
    target.push(&cfg.data_dir);
    let source = format!("--source-server={source}");
    tools
        .run(
            "pg_rewind",
            [target.as_os_str(), source.as_ref()],
            remaining(deadline),
        )
        .await?;
    // pg_rewind writes a backup_label only when it rewound something ("no
    // rewind required" leaves the directory alone).
    Ok(if !had_label && label.exists() {
        Rejoined::Rewound
    } else {
        Rejoined::Restarted
    })
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

/// Empties the data directory and clones it from the upstream.
async fn reclone(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    upstream: &Upstream,
    slot: &str,
    deadline: Instant,
) -> Result<Rejoined, RejoinError> {
    empty(&cfg.data_dir).await?;
    let port = upstream.port.to_string();
    let args: [&std::ffi::OsStr; 15] = [
        "-D".as_ref(),
        cfg.data_dir.as_os_str(),
        "-h".as_ref(),
        upstream.host.as_ref(),
        "-p".as_ref(),
        port.as_ref(),
        "-U".as_ref(),
        cfg.replication_user.as_ref(),
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
    fn the_cluster_state_is_read_from_pg_controldata_and_missing_is_empty() {
        let out = "pg_control version number:            1300\n\
                   Database cluster state:               in production\n\
                   pg_control last modified:             Thu Dec  3 07:02:18 2026\n";
        assert_eq!(parse_cluster_state(out), "in production");
        assert_eq!(
            parse_cluster_state("Database cluster state:  shut down in recovery"),
            "shut down in recovery"
        );
        assert_eq!(parse_cluster_state("garbage"), "");
    }

    #[test]
    fn sql_literals_survive_quotes_and_backslashes() {
        assert_eq!(sql_literal(r"host='a\b'"), r"E'host=''a\\b'''");
    }
}
