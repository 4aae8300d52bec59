//! The disk spool: one file per envelope, named so that names sort oldest
//! first (`{unix_ms:016}-{seq:010}-{category}.env`). A file is written under
//! a temporary name and renamed into place, so a crash leaves either the
//! whole envelope or a temporary file (deleted at the next start); the file
//! and then the directory are synced, so an envelope reported stored
//! survives a power loss, not only a crash. Bounded
//! in bytes (oldest evicted first) and in age (expired files deleted).
//!
//! All calls are blocking file I/O: the worker runs them on its own thread,
//! never on a caller's.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::counters::Category;
use crate::envelope::Envelope;

/// Why the spool could not be opened. The relay did not start.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The directory could not be created or listed.
    #[error("spool directory {dir}: {source}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

#[derive(Debug)]
struct Entry {
    name: String,
    bytes: u64,
    ms: u64,
    category: Category,
    /// Read back and in flight: not to be read again or evicted.
    out: bool,
}

/// What a push did besides storing the envelope.
#[derive(Debug, Default)]
pub(crate) struct Pushed {
    /// Whether the envelope is now on disk.
    pub(crate) stored: bool,
    /// Categories of older envelopes evicted to make room.
    pub(crate) evicted: Vec<Category>,
}

/// The spool.
#[derive(Debug)]
pub(crate) struct Spool {
    dir: PathBuf,
    cap: u64,
    ttl: Duration,
    entries: VecDeque<Entry>,
    bytes: u64,
    seq: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

fn parse_name(name: &str) -> Option<(u64, Category)> {
    let stem = name.strip_suffix(".env")?;
    let mut parts = stem.splitn(3, '-');
    let ms = parts.next()?.parse().ok()?;
    let _seq: u64 = parts.next()?.parse().ok()?;
    let cat = Category::parse(parts.next()?)?;
    Some((ms, cat))
}

impl Spool {
    /// Opens (creating) `dir`, deleting leftovers of interrupted writes and
    /// indexing the envelopes already there.
    pub(crate) fn open(dir: &Path, cap: u64, ttl: Duration) -> Result<Spool, SpoolError> {
        let err = |source| SpoolError::Dir {
            dir: dir.to_owned(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(err)? {
            let entry = entry.map_err(err)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".tmp-") {
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            let Some((ms, category)) = parse_name(&name) else {
                continue;
            };
            let bytes = entry.metadata().map(|m| m.len()).unwrap_or(0);
            found.push(Entry {
                name,
                bytes,
                ms,
                category,
                out: false,
            });
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        let bytes = found.iter().map(|e| e.bytes).sum();
        Ok(Spool {
            dir: dir.to_owned(),
            cap,
            ttl,
            entries: found.into(),
            bytes,
            seq: 0,
        })
    }

    /// Bytes on disk.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Envelopes on disk.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Envelopes on disk not in flight.
    pub(crate) fn ready(&self) -> usize {
        self.entries.iter().filter(|e| !e.out).count()
    }

    /// Stores an envelope, evicting the oldest ones (not in flight) to stay
    /// under the cap. An envelope larger than the cap, or one that cannot
    /// be written, is not stored.
    pub(crate) fn push(&mut self, body: &[u8], category: Category) -> Pushed {
        let mut out = Pushed::default();
        let len = body.len() as u64;
        if len > self.cap {
            return out;
        }
        while self.bytes + len > self.cap {
            let Some(i) = self.entries.iter().position(|e| !e.out) else {
                return out;
            };
            if let Some(e) = self.entries.remove(i) {
                let _ = std::fs::remove_file(self.dir.join(&e.name));
                self.bytes -= e.bytes;
                out.evicted.push(e.category);
            }
        }
        self.seq += 1;
        let ms = now_ms();
        let name = format!("{ms:016}-{:010}-{}.env", self.seq, category.as_str());
        let tmp = self.dir.join(format!(".tmp-{name}"));
        if write_durably(&self.dir, &tmp, &self.dir.join(&name), body).is_err() {
            let _ = std::fs::remove_file(&tmp);
            return out;
        }
        // Names sort by time then sequence; a clock step back still appends.
        self.entries.push_back(Entry {
            name,
            bytes: len,
            ms,
            category,
            out: false,
        });
        self.bytes += len;
        out.stored = true;
        out
    }

    /// Deletes envelopes older than the time to live (not in flight);
    /// returns their categories.
    pub(crate) fn expire(&mut self) -> Vec<Category> {
        let limit = now_ms().saturating_sub(self.ttl.as_millis() as u64);
        let mut gone = Vec::new();
        self.entries.retain(|e| {
            if e.out || e.ms >= limit {
                return true;
            }
            let _ = std::fs::remove_file(self.dir.join(&e.name));
            self.bytes -= e.bytes;
            gone.push(e.category);
            false
        });
        gone
    }

    /// Reads the oldest envelope not in flight and marks it in flight. An
    /// unreadable file is deleted and reported as `Err(category)`.
    pub(crate) fn take_oldest(&mut self) -> Option<Result<Envelope, Category>> {
        let i = self.entries.iter().position(|e| !e.out)?;
        let e = &mut self.entries[i];
        match std::fs::read(self.dir.join(&e.name)) {
            Ok(body) => {
                e.out = true;
                let mut env = Envelope::new(Bytes::from(body), e.category);
                env.spool_name = Some(e.name.clone());
                Some(Ok(env))
            }
            Err(_) => {
                let cat = e.category;
                let name = e.name.clone();
                self.remove(&name);
                Some(Err(cat))
            }
        }
    }

    /// An envelope read back was not delivered: it may be read again.
    pub(crate) fn put_back(&mut self, name: &str) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.name == name) {
            e.out = false;
        }
    }

    /// Deletes an envelope (delivered, or dropped for good).
    pub(crate) fn remove(&mut self, name: &str) {
        let i = self.entries.iter().position(|e| e.name == name);
        if let Some(e) = i.and_then(|i| self.entries.remove(i)) {
            let _ = std::fs::remove_file(self.dir.join(&e.name));
            self.bytes -= e.bytes;
        }
    }
}

/// Writes `body` to `tmp`, syncs it, renames it to `to` and syncs `dir`
/// (the rename is durable only once the directory is).
fn write_durably(dir: &Path, tmp: &Path, to: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, to)?;
    std::fs::File::open(dir)?.sync_all()
}
