//! The keyring file: where an agent keeps the keys a live rotation gave it,
//! so that a restart comes back with them (Serf's keyring file is the model).
//!
//! Format: one base64 key per line, the primary first; `#` starts a comment.
//! Written to a temporary file in the same directory, flushed to disk, then
//! renamed over the old one (and the directory flushed), with mode 0600: a
//! crash leaves the old file or the new one, never half of one.
//!
//! Format versions, named by the first line:
//!
//! * **1**, the previous release's (commit 67c6e85): no version line.
//! * **2** (this build, [`FORMAT`]): the first line is `# hale keyring,
//!   format 2`; the rest is as in format 1. The version line is a comment
//!   to a format-1 reader, so the previous release reads a format-2 file
//!   as it is: a downgrade keeps working.
//!
//! A file of format 1 is rewritten in format 2 at the agent's start
//! ([`migrate`]); a file of a newer format than this build reads is
//! refused ([`LoadError::Future`], naming the file and both formats): a
//! newer release wrote it.

use std::path::{Path, PathBuf};

use crate::versioned::{self, Format, FormatError};
use crate::{Key, KeyError, Keyring};

/// The newest keyring file format this build reads, and the one it writes.
pub const FORMAT: u16 = 2;
/// The keyring file's kind of versioned file.
const KIND: Format = Format {
    name: "keyring",
    newest: FORMAT,
};

/// Why the keyring file could not be read. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file exists but could not be read.
    #[error("cannot read the keyring file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a key.
    #[error("{path} line {line}: {source}")]
    Key {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        source: KeyError,
    },
    /// The file holds no key.
    #[error("{path} holds no key: delete it to use the keys of the configuration")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The first line names a format, but not with a number.
    #[error("{path} line 1: not a keyring format version: {line:?}")]
    BadFormat {
        /// The file.
        path: PathBuf,
        /// The line.
        line: String,
    },
    /// A newer release wrote it, in a format this build does not read.
    #[error(
        "{path} is in keyring file format {found}, newer than this build reads (up to \
         {supported}): it was written by a newer release of hale; run that release again, or \
         delete the file to use the keys of the configuration"
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

/// A keyring file as read: the keys, and the format the file is in.
#[derive(Debug, Clone)]
pub struct Saved {
    /// The keys (the primary first).
    pub ring: Keyring,
    /// The file's format (1: no version line).
    pub format: u16,
}

/// Why the keyring file could not be brought to the current format.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// It could not be read.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Its keys could not be written back in the current format (the file
    /// is as it was: this build still reads it).
    #[error("cannot rewrite the keyring file {path} in format {FORMAT}: {source}")]
    Save {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A file brought forward to the current format: one type for every file
/// hale migrates ([`versioned::Migrated`]).
pub use crate::versioned::Migrated;

/// Reads the keyring saved at `path`: `Ok(None)` if there is no file.
pub fn load(path: &Path) -> Result<Option<Keyring>, LoadError> {
    Ok(read(path)?.map(|s| s.ring))
}

/// Rewrites the keyring file at `path` in the current format if it is in
/// an older one (same keys, atomically: see [`save`]): the migration, or
/// `None` when there is no file or nothing to do.
pub fn migrate(path: &Path) -> Result<Option<Migrated>, MigrateError> {
    let Some(saved) = read(path)? else {
        return Ok(None);
    };
    if saved.format >= FORMAT {
        return Ok(None);
    }
    save(path, &saved.ring).map_err(|source| MigrateError::Save {
        path: path.to_owned(),
        source,
    })?;
    Ok(Some(Migrated {
        file: path.to_owned(),
        from: saved.format,
        to: FORMAT,
    }))
}

/// The format a file's first line names: 1 when it names none.
fn format_of(path: &Path, first: &str) -> Result<u16, LoadError> {
    KIND.of(first).map_err(|e| match e {
        FormatError::Future { found, supported } => LoadError::Future {
            path: path.to_owned(),
            found,
            supported,
        },
        FormatError::NotAFormat { line } => LoadError::BadFormat {
            path: path.to_owned(),
            line,
        },
    })
}

/// Reads the keyring saved at `path`, with its format: `Ok(None)` if
/// there is no file.
pub fn read(path: &Path) -> Result<Option<Saved>, LoadError> {
    let text = versioned::read(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    let Some(text) = text else {
        return Ok(None);
    };
    let format = format_of(path, text.lines().next().unwrap_or(""))?;
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        keys.push(Key::from_base64(line).map_err(|source| LoadError::Key {
            path: path.to_owned(),
            line: i + 1,
            source,
        })?);
    }
    if keys.is_empty() {
        return Err(LoadError::Empty {
            path: path.to_owned(),
        });
    }
    let primary = keys.remove(0);
    Ok(Some(Saved {
        ring: Keyring::new(primary, keys),
        format,
    }))
}

/// Writes `ring` to `path` atomically and durably, mode 0600
/// ([`versioned::write`]).
pub fn save(path: &Path, ring: &Keyring) -> std::io::Result<()> {
    let mut text = format!(
        "{}\n\
         # hale keyring, written by the agent on every live key change (hale keys).\n\
         # The first key seals; every key opens. Delete this file to use the\n\
         # keys of the configuration again.\n",
        KIND.line()
    );
    for k in ring.keys() {
        text.push_str(&k.to_base64());
        text.push('\n');
    }
    versioned::write(path, &text, 0o600)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_saved_keyring_loads_with_the_same_primary_and_keys() {
        let dir = std::env::temp_dir().join(format!("hale-keyring-{}", std::process::id()));
        let path = dir.join("keyring");
        assert!(load(&path).unwrap().is_none());
        let (a, b) = (Key::generate(), Key::generate());
        let ring = Keyring::new(b.clone(), vec![a.clone()]);
        save(&path, &ring).unwrap();
        let back = load(&path).unwrap().unwrap();
        assert_eq!(back.keys(), &[b, a][..]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(matches!(load(&path), Err(LoadError::Empty { .. })));
        std::fs::write(&path, "not a key\n").unwrap();
        assert!(matches!(load(&path), Err(LoadError::Key { line: 1, .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hale-keyring-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// What the previous release's `save` wrote (commit 67c6e85).
    fn previous_release_file(ring: &Keyring) -> String {
        let mut text = String::from(
            "# hale keyring, written by the agent on every live key change (hale keys).\n\
             # The first key seals; every key opens. Delete this file to use the\n\
             # keys of the configuration again.\n",
        );
        for k in ring.keys() {
            text.push_str(&k.to_base64());
            text.push('\n');
        }
        text
    }

    /// The previous release's `load`, as it reads a file (commit 67c6e85).
    fn previous_release_load(text: &str) -> Option<Keyring> {
        let mut keys = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            keys.push(Key::from_base64(line).ok()?);
        }
        let primary = (!keys.is_empty()).then(|| keys.remove(0))?;
        Some(Keyring::new(primary, keys))
    }

    #[test]
    fn a_keyring_file_of_the_previous_format_is_read_and_migrated_with_the_same_keys() {
        let dir = scratch("migrate");
        let path = dir.join("keyring");
        let (a, b) = (Key::generate(), Key::generate());
        let ring = Keyring::new(b.clone(), vec![a.clone()]);
        std::fs::write(&path, previous_release_file(&ring)).unwrap();
        let saved = read(&path).unwrap().unwrap();
        assert_eq!(saved.format, 1);
        assert_eq!(saved.ring.keys(), &[b.clone(), a.clone()][..]);
        let m = migrate(&path).unwrap().unwrap();
        assert_eq!((m.from, m.to), (1, FORMAT));
        assert_eq!(
            m.to_string(),
            format!("migrated {} from format 1 to 2", path.display())
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().next(), Some("# hale keyring, format 2"));
        let again = read(&path).unwrap().unwrap();
        assert_eq!((again.format, again.ring.keys()), (2, &[b, a][..]));
        assert_eq!(migrate(&path).unwrap(), None, "nothing left to do");
        assert_eq!(migrate(&dir.join("none")).unwrap(), None, "no file");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_keyring_file_in_this_format_is_one_the_previous_release_reads() {
        let dir = scratch("downgrade");
        let path = dir.join("keyring");
        let (a, b) = (Key::generate(), Key::generate());
        save(&path, &Keyring::new(a.clone(), vec![b.clone()])).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let old = previous_release_load(&text).unwrap();
        assert_eq!(old.keys(), &[a, b][..]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_keyring_file_of_a_future_format_is_refused_naming_the_file_and_both_formats() {
        let dir = scratch("future");
        let path = dir.join("keyring");
        let text = format!(
            "# hale keyring, format 3\n{}\n",
            Key::generate().to_base64()
        );
        std::fs::write(&path, &text).unwrap();
        let e = load(&path).unwrap_err();
        assert!(
            matches!(
                &e,
                LoadError::Future {
                    found: 3,
                    supported: 2,
                    ..
                }
            ),
            "{e:?}"
        );
        let words = e.to_string();
        assert!(words.contains(&path.display().to_string()), "{words}");
        assert!(
            words.contains("format 3") && words.contains("up to 2"),
            "{words}"
        );
        assert!(matches!(
            migrate(&path),
            Err(MigrateError::Load(LoadError::Future { .. }))
        ));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "left as it was"
        );
        std::fs::write(&path, "# hale keyring, format two\n").unwrap();
        assert!(matches!(load(&path), Err(LoadError::BadFormat { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
