//! The control-plane store's format version (`control.redb`).
//!
//! * **Format 1**, the previous release's (commit 67c6e85): tables `logs`
//!   (index → JSON entry) and `meta` (`vote`, `committed`, `purged`,
//!   `snapshot`: JSON), and no record of its format.
//! * **Format 2** (this build, [`STORE_FORMAT`]): the same, plus `format`
//!   in `meta` (a JSON number). Nothing else changed, so the previous
//!   release opens a format-2 store as it is (it reads only the keys it
//!   knows): a downgrade keeps working.
//!
//! On open, a store without the record is format 1 and is migrated: the
//! record is written, and the migration logged (`migrated <file> from
//! format 1 to 2`); a new, empty store gets the record at once. A store in
//! a newer format than this build reads is refused ([`StoreError::Future`],
//! naming the file and both formats) and the server does not start: a
//! newer release wrote it, and this one could misread it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, TableDefinition};

/// The newest store format this build reads and the one it writes.
pub const STORE_FORMAT: u16 = 2;
/// The store's file name in the server's data directory.
pub const STORE_FILE: &str = "control.redb";

const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const FORMAT_KEY: &str = "format";

/// Why the control-plane store could not be opened. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another server of this process holds it open (one stopping: try
    /// again in a moment).
    #[error("the control-plane store {0} is in use")]
    InUse(PathBuf),
    /// The file could not be created or opened as a redb database.
    #[error("cannot open the control-plane store {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: redb::DatabaseError,
    },
    /// Reading or writing its format record failed.
    #[error("cannot read or write the format of the control-plane store {path}: {why}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (redb's words).
        why: String,
    },
    /// Its format record is not a format number.
    #[error("the control-plane store {path} has a format record that is not a number: {found:?}")]
    BadFormat {
        /// The file.
        path: PathBuf,
        /// What the record holds (lossy text).
        found: String,
    },
    /// A newer release wrote it, in a format this build does not read.
    #[error(
        "the control-plane store {path} is in format {found}, newer than this build reads (up \
         to {supported}): it was written by a newer release of hale; run that release again, or \
         move the file away to start this server with an empty store (it then catches up from \
         the other servers)"
    )]
    Future {
        /// The file.
        path: PathBuf,
        /// Its format.
        found: u16,
        /// The newest this build reads.
        supported: u16,
    },
}

/// A file brought forward to the current format: one type for every
/// file hale migrates (the keyring file's crate, below every other, owns it).
pub use hale_keyring::versioned::Migrated;

/// Opens (or creates) the store in `dir`, migrated to [`STORE_FORMAT`]:
/// the database, and the migration if there was one (the caller logs it).
pub fn open_store(dir: &Path) -> Result<(Arc<Database>, Option<Migrated>), StoreError> {
    let path = dir.join(STORE_FILE);
    let open = |source| StoreError::Open {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| open(redb::DatabaseError::Storage(e.into())))?;
    let existed = path.exists();
    let db = match Database::create(&path) {
        Ok(db) => db,
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(StoreError::InUse(path)),
        Err(e) => return Err(open(e)),
    };
    let found = read_format(&db, &path)?;
    match found {
        Some(f) if f > STORE_FORMAT => {
            return Err(StoreError::Future {
                path,
                found: f,
                supported: STORE_FORMAT,
            })
        }
        Some(STORE_FORMAT) => return Ok((Arc::new(db), None)),
        _ => {}
    }
    write_format(&db, &path)?;
    // A file that was there without the record is the previous release's
    // store; a file just created is a new one (nothing to migrate).
    let from = found.unwrap_or(1);
    let migrated = (existed || found.is_some()).then_some(Migrated {
        file: path,
        from,
        to: STORE_FORMAT,
    });
    Ok((Arc::new(db), migrated))
}

/// The store's format record: `None` when it has none (format 1, or new).
fn read_format(db: &Database, path: &Path) -> Result<Option<u16>, StoreError> {
    let io = |e: &dyn std::fmt::Display| StoreError::Io {
        path: path.to_owned(),
        why: e.to_string(),
    };
    let tx = db.begin_read().map_err(|e| io(&e))?;
    let table = match tx.open_table(META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(io(&e)),
    };
    let Some(v) = table.get(FORMAT_KEY).map_err(|e| io(&e))? else {
        return Ok(None);
    };
    let raw = v.value();
    match serde_json::from_slice::<u16>(raw) {
        Ok(f) if f >= 1 => Ok(Some(f)),
        _ => Err(StoreError::BadFormat {
            path: path.to_owned(),
            found: String::from_utf8_lossy(&raw[..raw.len().min(64)]).into_owned(),
        }),
    }
}

/// Records [`STORE_FORMAT`] in the store, durably.
fn write_format(db: &Database, path: &Path) -> Result<(), StoreError> {
    let io = |e: &dyn std::fmt::Display| StoreError::Io {
        path: path.to_owned(),
        why: e.to_string(),
    };
    let tx = db.begin_write().map_err(|e| io(&e))?;
    {
        let mut t = tx.open_table(META).map_err(|e| io(&e))?;
        let v = STORE_FORMAT.to_string();
        t.insert(FORMAT_KEY, v.as_bytes()).map_err(|e| io(&e))?;
    }
    tx.commit().map_err(|e| io(&e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const LOGS: TableDefinition<u64, &[u8]> = TableDefinition::new("logs");

    /// A store as the previous release left it: a vote and a log entry,
    /// no format record.
    fn previous_release_store(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        let db = Database::create(dir.join(STORE_FILE)).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let mut meta = tx.open_table(META).unwrap();
            let vote = br#"{"leader_id":{"term":3,"node_id":1},"committed":true}"#;
            meta.insert("vote", vote.as_slice()).unwrap();
            let mut logs = tx.open_table(LOGS).unwrap();
            logs.insert(1, b"{}".as_slice()).unwrap();
        }
        tx.commit().unwrap();
    }

    fn set_format(dir: &Path, raw: &[u8]) {
        let db = Database::create(dir.join(STORE_FILE)).unwrap();
        let tx = db.begin_write().unwrap();
        tx.open_table(META)
            .unwrap()
            .insert(FORMAT_KEY, raw)
            .unwrap();
        tx.commit().unwrap();
    }

    fn format_of(db: &Database) -> Option<u16> {
        read_format(db, Path::new("x")).unwrap()
    }

    #[test]
    fn a_store_of_the_previous_format_is_migrated_and_keeps_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        previous_release_store(dir.path());
        let (db, migrated) = open_store(dir.path()).unwrap();
        let m = migrated.unwrap();
        let file = dir.path().join(STORE_FILE);
        assert_eq!((m.from, m.to), (1, 2));
        assert_eq!(
            m.to_string(),
            format!("migrated {} from format 1 to 2", file.display())
        );
        assert_eq!(format_of(&db), Some(STORE_FORMAT));
        let tx = db.begin_read().unwrap();
        assert!(tx.open_table(META).unwrap().get("vote").unwrap().is_some());
        assert!(tx.open_table(LOGS).unwrap().get(1).unwrap().is_some());
        drop(tx);
        drop(db);
        // Opened again: nothing left to migrate.
        let (_, again) = open_store(dir.path()).unwrap();
        assert_eq!(again, None);
    }

    #[test]
    fn a_new_store_is_written_in_the_current_format_without_a_migration() {
        let dir = tempfile::tempdir().unwrap();
        let (db, migrated) = open_store(&dir.path().join("new")).unwrap();
        assert_eq!(migrated, None);
        assert_eq!(format_of(&db), Some(STORE_FORMAT));
    }

    #[test]
    fn a_store_of_a_future_format_is_refused_naming_the_file_and_both_formats() {
        let dir = tempfile::tempdir().unwrap();
        previous_release_store(dir.path());
        set_format(dir.path(), b"3");
        let e = open_store(dir.path()).err().unwrap();
        assert!(
            matches!(
                &e,
                StoreError::Future {
                    found: 3,
                    supported: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        let text = e.to_string();
        let file = dir.path().join(STORE_FILE).display().to_string();
        assert!(text.contains(&file), "{text}");
        assert!(
            text.contains("format 3") && text.contains("up to 2"),
            "{text}"
        );
        // Refused, not rewritten.
        let db = Database::create(dir.path().join(STORE_FILE)).unwrap();
        assert_eq!(format_of(&db), Some(3));
    }

    #[test]
    fn a_store_whose_format_record_is_not_a_number_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        previous_release_store(dir.path());
        for raw in [b"\"two\"".as_slice(), b"0", b"-1", b"70000", b""] {
            set_format(dir.path(), raw);
            let e = open_store(dir.path()).err().unwrap();
            assert!(matches!(e, StoreError::BadFormat { .. }), "{raw:?}: {e:?}");
        }
    }

    #[test]
    fn a_store_held_open_elsewhere_in_this_process_is_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let (_db, _) = open_store(dir.path()).unwrap();
        let e = open_store(dir.path()).err().unwrap();
        assert!(matches!(e, StoreError::InUse(_)), "{e:?}");
    }
}
