//! Durable Raft log and state machine on redb.
//!
//! One database file per server (`control.redb` in the data directory):
//! the log entries, the vote, the committed and purged log ids, the last
//! snapshot of the lease table, and the store's format (`super::format`). The state machine itself lives in
//! memory and is rebuilt on start from the snapshot plus the log.

// openraft's storage traits fix `StorageError` (large) as the error type; our helpers return
// the same type so that `?` works across them. Boxing would only move the allocation.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::format::StoreError;
use super::types::TypeConfig;
use crate::lease::{LeaseRequest, LeaseResponse, LeaseTable};

const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

type SErr = StorageError<u64>;

fn read_err(e: impl std::error::Error + 'static) -> SErr {
    StorageIOError::read(AnyError::new(&e)).into()
}

fn write_err(e: impl std::error::Error + 'static) -> SErr {
    StorageIOError::write(AnyError::new(&e)).into()
}

/// Opens (or creates) the control plane's database in `dir`, in the
/// current format: a store of the previous format is migrated (and the
/// migration logged), one of a newer format refused (see
/// [`super::format`]).
pub fn open_db(dir: &Path) -> Result<Arc<Database>, StoreError> {
    let (db, migrated) = super::format::open_store(dir)?;
    if let Some(m) = migrated {
        tracing::info!(file = %m.file.display(), from = m.from, to = m.to, "{m}");
    }
    Ok(db)
}

fn get_meta<T: for<'a> Deserialize<'a>>(db: &Database, key: &str) -> Result<Option<T>, SErr> {
    let tx = db.begin_read().map_err(read_err)?;
    let table = match tx.open_table(META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    match table.get(key).map_err(read_err)? {
        Some(v) => Ok(Some(serde_json::from_slice(v.value()).map_err(read_err)?)),
        None => Ok(None),
    }
}

/// What the agent's disk drills do to this server's durable writes of its
/// Raft log and vote ([`crate::raft::ControlPlane::slow_disk`],
/// [`crate::raft::ControlPlane::stall_disk`]): each takes a fixed time
/// longer (a disk saturated by another writer), and none finishes while
/// the disk is held (a disk that stops answering for a moment).
#[derive(Debug, Clone, Default)]
pub struct DiskStall {
    extra_ms: Arc<AtomicU64>,
    held: Arc<AtomicBool>,
    /// Durable writes under way, and since when one has been.
    busy: Arc<std::sync::Mutex<(usize, Option<std::time::Instant>)>>,
}

impl DiskStall {
    /// Makes every durable log write take `extra` longer (zero: restore).
    pub fn set(&self, extra: Duration) {
        let ms = u64::try_from(extra.as_millis()).unwrap_or(u64::MAX);
        self.extra_ms.store(ms, Ordering::Relaxed);
    }

    /// Holds every durable log write until `hold(false)`.
    pub fn hold(&self, held: bool) {
        self.held.store(held, Ordering::Relaxed);
    }

    /// How long this server's durable writes have been under way without
    /// a pause (zero when none is): a server whose own disk is stuck does
    /// not hear its leader for that reason, and must not campaign for it.
    pub fn busy_for(&self) -> Duration {
        let b = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.1.map_or(Duration::ZERO, |t| t.elapsed())
    }

    fn begin(&self) {
        let mut b = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.0 += 1;
        b.1.get_or_insert_with(std::time::Instant::now);
    }

    fn end(&self) {
        let mut b = self
            .busy
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        b.0 = b.0.saturating_sub(1);
        if b.0 == 0 {
            b.1 = None;
        }
    }

    fn wait(&self) {
        let ms = self.extra_ms.load(Ordering::Relaxed);
        if ms > 0 {
            std::thread::sleep(Duration::from_millis(ms));
        }
        while self.held.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Runs one write transaction on the blocking pool, never on the runtime's
/// threads: a commit waits for `fsync`, which on a loaded or stalling disk
/// takes from milliseconds to seconds, and the agent's membership node, its
/// Raft heartbeats and its role managers share those threads. Durable
/// (after `durable`'s stall, if any) unless `durable` is `None` (redb
/// persists such a commit with the next durable one).
async fn write(
    db: &Arc<Database>,
    durable: Option<&DiskStall>,
    f: impl FnOnce(&redb::WriteTransaction) -> Result<(), SErr> + Send + 'static,
) -> Result<(), SErr> {
    let db = Arc::clone(db);
    let stall = durable.cloned();
    if let Some(s) = &stall {
        s.begin();
    }
    let run = move || {
        let done = || {
            let mut tx = db.begin_write().map_err(write_err)?;
            match &stall {
                Some(s) => s.wait(),
                None => tx.set_durability(redb::Durability::None),
            }
            f(&tx)?;
            tx.commit().map_err(write_err)
        };
        let r = done();
        if let Some(s) = &stall {
            s.end();
        }
        r
    };
    match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::task::spawn_blocking(run)
            .await
            .map_err(|e| write_err(std::io::Error::other(e.to_string())))?,
        // No runtime (a test driving the store by hand): here and now.
        Err(_) => run(),
    }
}

async fn put_meta<T: Serialize>(
    db: &Arc<Database>,
    key: &'static str,
    v: &T,
    durable: Option<&DiskStall>,
) -> Result<(), SErr> {
    let bytes = serde_json::to_vec(v).map_err(write_err)?;
    write(db, durable, move |tx| {
        let mut t = tx.open_table(META).map_err(write_err)?;
        t.insert(key, bytes.as_slice()).map_err(write_err)?;
        Ok(())
    })
    .await
}

/// Called when lease requests reach this server's log: `Some(req)` for each
/// entry appended, `None` when a snapshot installed entries this server never
/// appended itself. Feeds the [`AppendClock`](crate::lease::AppendClock).
pub type AppendHook = Arc<dyn Fn(Option<&crate::lease::LeaseRequest>) + Send + Sync>;

/// The Raft log.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    on_append: Option<AppendHook>,
    stall: DiskStall,
}

impl std::fmt::Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").finish_non_exhaustive()
    }
}

impl LogStore {
    /// A log store over `db`, telling `on_append` about each lease request
    /// appended.
    pub fn new(db: Arc<Database>, on_append: Option<AppendHook>) -> LogStore {
        LogStore {
            db,
            on_append,
            stall: DiskStall::default(),
        }
    }

    /// The handle that slows this store's durable writes (a drill).
    pub fn stall(&self) -> DiskStall {
        self.stall.clone()
    }

    /// One durable write of nothing that matters (a `disk-probe` key in
    /// the meta table), as a vote's save would be: how a server that is
    /// about to campaign learns whether its own disk answers (see
    /// `prevote.rs`). Goes through the drills like every durable write.
    pub async fn probe_disk(&self) -> Result<(), SErr> {
        put_meta(&self.db, "disk-probe", &(), Some(&self.stall)).await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, SErr> {
        let tx = self.db.begin_read().map_err(read_err)?;
        let table = match tx.open_table(LOGS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(read_err(e)),
        };
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        let rows = table.range(bounds).map_err(read_err)?;
        rows.map(|row| {
            let (_, v) = row.map_err(read_err)?;
            serde_json::from_slice(v.value()).map_err(read_err)
        })
        .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, SErr> {
        let last_purged: Option<LogId<u64>> = get_meta(&self.db, "purged")?;
        let tx = self.db.begin_read().map_err(read_err)?;
        let last = match tx.open_table(LOGS) {
            Ok(t) => {
                let last = t.last().map_err(read_err)?;
                let entry = last.map(|(_, v)| serde_json::from_slice(v.value()));
                let entry: Option<Entry<TypeConfig>> = entry.transpose().map_err(read_err)?;
                entry.map(|e| e.log_id)
            }
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(read_err(e)),
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last.or(last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), SErr> {
        put_meta(&self.db, "vote", vote, Some(&self.stall)).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, SErr> {
        get_meta(&self.db, "vote")
    }

    async fn save_committed(&mut self, committed: Option<LogId<u64>>) -> Result<(), SErr> {
        // Not needed for safety (openraft may lose it and re-learns it from
        // the leader): no fsync of its own, it rides on the next append's.
        put_meta(&self.db, "committed", &committed, None).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, SErr> {
        Ok(get_meta::<Option<LogId<u64>>>(&self.db, "committed")?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        for e in entries {
            // Noted as it arrives, before the write: the entry's sender
            // sent it earlier still, which is all the grantor relies on.
            if let (Some(h), EntryPayload::Normal(req)) = (&self.on_append, &e.payload) {
                h(Some(req));
            }
            rows.push((e.log_id.index, serde_json::to_vec(&e).map_err(write_err)?));
        }
        write(&self.db, Some(&self.stall), move |tx| {
            let mut t = tx.open_table(LOGS).map_err(write_err)?;
            for (index, bytes) in &rows {
                t.insert(*index, bytes.as_slice()).map_err(write_err)?;
            }
            Ok(())
        })
        .await?;
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), SErr> {
        self.retain(move |k| k < log_id.index).await
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), SErr> {
        put_meta(&self.db, "purged", &log_id, Some(&self.stall)).await?;
        self.retain(move |k| k > log_id.index).await
    }
}

impl LogStore {
    /// Deletes the log entries whose index `keep` refuses.
    async fn retain(&self, keep: impl Fn(u64) -> bool + Send + 'static) -> Result<(), SErr> {
        write(&self.db, Some(&self.stall), move |tx| {
            let mut t = tx.open_table(LOGS).map_err(write_err)?;
            t.retain(|k, _| keep(k)).map_err(write_err)
        })
        .await
    }
}

/// The replicated state: the lease table and what Raft needs to know about it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StateData {
    /// The last log entry applied.
    pub last_applied: Option<LogId<u64>>,
    /// The last membership applied.
    pub membership: StoredMembership<u64, BasicNode>,
    /// The leases.
    pub table: LeaseTable,
}

/// Called with each applied response (role changes for the grantor and events).
pub type ApplyHook = Arc<dyn Fn(&crate::lease::LeaseRequest, &LeaseResponse) + Send + Sync>;

/// The state machine: the lease table in memory, snapshots in redb.
#[derive(Clone)]
pub struct StateMachine {
    db: Arc<Database>,
    /// The current state, shared with readers.
    pub data: Arc<Mutex<StateData>>,
    hook: Option<ApplyHook>,
    on_install: Option<AppendHook>,
}

impl std::fmt::Debug for StateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine").finish_non_exhaustive()
    }
}

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<u64, BasicNode>,
    data: Vec<u8>,
}

impl StateMachine {
    /// A state machine over `db`, restored from its last snapshot. `hook`
    /// hears every applied request; `on_install` hears of installed
    /// snapshots (called with `None`).
    pub fn new(
        db: Arc<Database>,
        hook: Option<ApplyHook>,
        on_install: Option<AppendHook>,
    ) -> Result<StateMachine, SErr> {
        let data = match get_meta::<StoredSnapshot>(&db, "snapshot")? {
            Some(s) => serde_json::from_slice(&s.data).map_err(read_err)?,
            None => StateData::default(),
        };
        Ok(StateMachine {
            db,
            data: Arc::new(Mutex::new(data)),
            hook,
            on_install,
        })
    }

    /// Keeps `data`, the lease table at `meta`, as the last snapshot.
    async fn save_snapshot(
        &self,
        meta: SnapshotMeta<u64, BasicNode>,
        data: Vec<u8>,
    ) -> Result<(), SErr> {
        // Off the commit path: durable, never slowed by a drill.
        let never = DiskStall::default();
        put_meta(
            &self.db,
            "snapshot",
            &StoredSnapshot { meta, data },
            Some(&never),
        )
        .await
    }

    /// The state, locked.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, StateData> {
        self.data.lock().expect("state machine lock")
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, SErr> {
        let data = self.lock().clone();
        let bytes = serde_json::to_vec(&data).map_err(write_err)?;
        let id = data.last_applied.map_or_else(
            || "empty".to_owned(),
            |l| format!("{}-{}", l.leader_id, l.index),
        );
        let meta = SnapshotMeta {
            last_log_id: data.last_applied,
            last_membership: data.membership.clone(),
            snapshot_id: id,
        };
        self.save_snapshot(meta.clone(), bytes.clone()).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), SErr> {
        let d = self.lock();
        Ok((d.last_applied, d.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<LeaseResponse>, SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        let mut applied = Vec::new();
        {
            let mut d = self.lock();
            for e in entries {
                d.last_applied = Some(e.log_id);
                match e.payload {
                    EntryPayload::Blank => out.push(LeaseResponse::Released),
                    EntryPayload::Normal(req) => {
                        let r = d.table.apply(&req);
                        applied.push((req, r.clone()));
                        out.push(r);
                    }
                    EntryPayload::Membership(m) => {
                        d.membership = StoredMembership::new(Some(e.log_id), m);
                        out.push(LeaseResponse::Released);
                    }
                }
            }
        }
        if let Some(h) = &self.hook {
            for (req, r) in &applied {
                match (req, r) {
                    // The hook sees a batch's requests one by one.
                    (LeaseRequest::Batch(reqs), LeaseResponse::Batch(rs)) => {
                        for (req, r) in reqs.iter().zip(rs) {
                            h(req, r);
                        }
                    }
                    (req, r) => h(req, r),
                }
            }
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), SErr> {
        let bytes = snapshot.into_inner();
        let data: StateData = serde_json::from_slice(&bytes).map_err(read_err)?;
        self.save_snapshot(meta.clone(), bytes).await?;
        if let Some(h) = &self.on_install {
            h(None);
        }
        *self.lock() = data;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, SErr> {
        Ok(
            get_meta::<StoredSnapshot>(&self.db, "snapshot")?.map(|s| Snapshot {
                meta: s.meta,
                snapshot: Box::new(Cursor::new(s.data)),
            }),
        )
    }
}
