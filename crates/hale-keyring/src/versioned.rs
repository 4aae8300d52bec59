//! Versioned state files: what every text file hale keeps between runs
//! shares (the keyring file, `file.rs`; the agent's generation file): the
//! first line names the file's format (`# hale keyring, format 2`), a file
//! without that line is of format 1 (the previous release's), a file of a
//! newer format than this build reads is refused, and a file is written
//! whole or not at all.
//!
//! Each file's own module parses what follows the format line, owns its
//! error type (which names the file and says what happened to state) and
//! decides what a migration rewrites; this module holds the rules that
//! must not differ between them. It lives in the lowest crate that keeps a
//! state file, so that every crate above can use it.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A kind of versioned file: its name in the format line and the newest
/// format this build reads (and writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Format {
    /// What the file is, as its format line names it (`keyring`).
    pub name: &'static str,
    /// The newest format this build reads, and the one it writes.
    pub newest: u16,
}

/// Why a file's first line names no format this build reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A newer release wrote it.
    #[error("format {found}, newer than this build reads (up to {supported})")]
    Future {
        /// The format it names.
        found: u16,
        /// The newest this build reads.
        supported: u16,
    },
    /// It starts like a format line but names no format (at most 80
    /// characters of it are kept).
    #[error("not a format line: {line:?}")]
    NotAFormat {
        /// The line.
        line: String,
    },
}

impl Format {
    /// The line a file of the newest format starts with (no newline).
    pub fn line(&self) -> String {
        format!("{}{}", self.prefix(), self.newest)
    }

    fn prefix(&self) -> String {
        format!("# hale {}, format ", self.name)
    }

    /// The format a file whose first line is `first` is in: 1 when the line
    /// names none. Total: every line is a format or says why not.
    pub fn of(&self, first: &str) -> Result<u16, FormatError> {
        self.named_by(first).map(|f| f.unwrap_or(1))
    }

    /// The format `first` names, if it is a format line (`None`: it is the
    /// first line of a format-1 file's content).
    pub fn named_by(&self, first: &str) -> Result<Option<u16>, FormatError> {
        let Some(number) = first.trim().strip_prefix(&self.prefix()) else {
            return Ok(None);
        };
        match number.trim().parse::<u16>() {
            Ok(found) if found > self.newest => Err(FormatError::Future {
                found,
                supported: self.newest,
            }),
            Ok(f) if f >= 1 => Ok(Some(f)),
            _ => Err(FormatError::NotAFormat {
                line: first.chars().take(80).collect(),
            }),
        }
    }
}

/// The text of the file at `path`: `Ok(None)` if there is none.
pub fn read(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `text` to `path` atomically and durably, with permission bits
/// `mode`: to a temporary file beside it, flushed to disk, renamed over
/// it, and the directory flushed. A crash or a full disk leaves the old
/// file or the new one, never half of one (or an empty one).
pub fn write(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, mode);
        #[cfg(not(unix))]
        let _ = mode;
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// A file brought forward to the current format (the keyring file, the
/// control plane's store, the generation file: every state file hale
/// migrates); its text is the log line (`migrated <file> from format 1 to 2`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The file.
    pub file: PathBuf,
    /// The format it was in.
    pub from: u16,
    /// The format it is in now.
    pub to: u16,
}

impl std::fmt::Display for Migrated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "migrated {} from format {} to {}",
            self.file.display(),
            self.from,
            self.to
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    const KEYRING: Format = Format {
        name: "keyring",
        newest: 2,
    };

    #[test]
    fn a_first_line_names_the_format_one_when_it_names_none_and_a_newer_one_is_refused() {
        assert_eq!(KEYRING.line(), "# hale keyring, format 2");
        assert_eq!(KEYRING.of("# hale keyring, format 2"), Ok(2));
        assert_eq!(KEYRING.of("  # hale keyring, format 1 "), Ok(1));
        assert_eq!(KEYRING.of("# a comment"), Ok(1));
        assert_eq!(KEYRING.of(""), Ok(1));
        assert_eq!(
            KEYRING.of("# hale generation, format 9"),
            Ok(1),
            "another kind's line"
        );
        assert_eq!(
            KEYRING.of("# hale keyring, format 3"),
            Err(FormatError::Future {
                found: 3,
                supported: 2
            })
        );
        for bad in [
            "# hale keyring, format 0",
            "# hale keyring, format x",
            "# hale keyring, format 99999999",
        ] {
            assert!(
                matches!(KEYRING.of(bad), Err(FormatError::NotAFormat { .. })),
                "{bad}"
            );
        }
        let long = format!("# hale keyring, format {}", "9".repeat(500));
        let Err(FormatError::NotAFormat { line }) = KEYRING.of(&long) else {
            panic!("not refused");
        };
        assert_eq!(line.chars().count(), 80);
    }

    #[test]
    fn a_written_file_replaces_the_old_one_whole_with_its_mode() {
        let dir = std::env::temp_dir().join(format!("hale-versioned-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sub").join("state");
        assert_eq!(read(&path).unwrap(), None);
        write(&path, "one\n", 0o600).unwrap();
        write(&path, "two\n", 0o600).unwrap();
        assert_eq!(read(&path).unwrap().as_deref(), Some("two\n"));
        assert!(!path.with_extension("tmp").exists());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
