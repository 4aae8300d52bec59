//! The generation file (`generation` in `[agent] state_dir`): the last
//! run's generation (see `hale_core::Config::generation`), so that this
//! run's is never at or below it even when the wall clock was set back.
//!
//! Format versions:
//!
//! * **1**, the previous release's (commit 67c6e85): the number alone
//!   (`1764000000000\n`).
//! * **2** (this build, [`FORMAT`]): a first line naming the format,
//!   then the number: `# hale generation, format 2\n1764000000000\n`.
//!
//! A file of format 1 is read and rewritten in format 2 (every start
//! rewrites the file anyway), and the migration logged by the agent; one
//! of a newer format is refused ([`GenerationError::Future`], naming the
//! file and both formats) and the agent does not start. A downgrade to
//! the previous release keeps working, less well: that release reads a
//! format-2 file as unreadable and falls back to the wall clock (as with
//! no file), then writes format 1 again, which this build migrates. The
//! fallback costs something only if the clock was also set back across
//! that restart (peers then tell the node a higher generation).

use std::path::{Path, PathBuf};

use hale_keyring::versioned::{self, Format, FormatError};

/// The generation file's name in `[agent] state_dir`.
pub const GENERATION_FILE: &str = "generation";
/// The newest generation file format this build reads, and the one it writes.
pub const FORMAT: u16 = 2;
/// The generation file's kind of versioned file.
const KIND: Format = Format {
    name: "generation",
    newest: FORMAT,
};

/// Why the generation file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GenerationError {
    /// The file exists but could not be read.
    #[error("cannot read the generation file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a generation file of any format this build knows.
    #[error("the generation file {path} is not one: {why}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A newer release wrote it, in a format this build does not read.
    #[error(
        "the generation file {path} is in format {found}, newer than this build reads (up to \
         {supported}): it was written by a newer release of hale; run that release again, or \
         delete the file (this run then starts from the wall clock)"
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

/// A generation file as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saved {
    /// The last run's generation.
    pub last: u64,
    /// The file's format (1: the number alone).
    pub format: u16,
}

/// A file brought forward to the current format: one type for every
/// file hale migrates (`hale_keyring::versioned`, below every crate that
/// keeps a state file).
pub use hale_keyring::versioned::Migrated;

/// Reads the generation file at `path`: `Ok(None)` if there is none.
pub fn read(path: &Path) -> Result<Option<Saved>, GenerationError> {
    let text = versioned::read(path).map_err(|source| GenerationError::Read {
        path: path.to_owned(),
        source,
    })?;
    text.map(|t| parse(&t, path)).transpose()
}

/// The text of the generation file at `path`: format 1 (the number alone)
/// or a format line and the number. Total: every text is a generation or
/// says why not.
fn parse(text: &str, path: &Path) -> Result<Saved, GenerationError> {
    let malformed = |why| GenerationError::Malformed {
        path: path.to_owned(),
        why,
    };
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    let (format, number) = match KIND.named_by(first) {
        Ok(None) => (1, first),
        Ok(Some(f)) => (f, lines.next().unwrap_or("")),
        Err(FormatError::Future { found, supported }) => {
            return Err(GenerationError::Future {
                path: path.to_owned(),
                found,
                supported,
            })
        }
        Err(e @ FormatError::NotAFormat { .. }) => return Err(malformed(e.to_string())),
    };
    let last = number.parse::<u64>().map_err(|_| {
        let shown: String = number.chars().take(40).collect();
        malformed(format!("not a generation number: {shown:?}"))
    })?;
    if let Some(extra) = lines.next() {
        let shown: String = extra.chars().take(40).collect();
        return Err(malformed(format!("more than a number: {shown:?}")));
    }
    Ok(Saved { last, format })
}

/// The file's text for generation `g`, in [`FORMAT`].
fn render(g: u64) -> String {
    format!("{}\n{g}\n", KIND.line())
}

/// This run's generation: the wall clock in milliseconds, and never at or
/// below the last one used when `state_dir` remembers it, so that a clock
/// set back across a restart does not make peers take this run's packets
/// for replays of the last one's. Saved for the next run, in [`FORMAT`]:
/// with the migration if the file was of an older format. A file of a
/// newer format is refused; one that cannot be read or is not a
/// generation file is reported and replaced (this run starts from the wall
/// clock, as the previous release did).
pub fn next(state_dir: Option<&Path>) -> Result<(u64, Option<Migrated>), GenerationError> {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_millis() as u64);
    let Some(dir) = state_dir else {
        return Ok((wall, None));
    };
    let path = dir.join(GENERATION_FILE);
    let saved = match read(&path) {
        Ok(s) => s,
        Err(e @ GenerationError::Future { .. }) => return Err(e),
        Err(e) => {
            tracing::warn!(file = %path.display(), "{e}: starting from the wall clock");
            None
        }
    };
    let g = saved.map_or(wall, |s| wall.max(s.last.saturating_add(1)));
    // Written whole or not at all (`versioned::write`): a full disk leaves
    // the last value, never an empty file that would start the next run at
    // the wall clock again (peers then tell it, but the file must not lie).
    if let Err(e) = versioned::write(&path, &render(g), 0o644) {
        tracing::warn!(file = %path.display(), error = %e, "cannot save this run's generation");
        return Ok((g, None));
    }
    let migrated = saved.filter(|s| s.format < FORMAT).map(|s| Migrated {
        file: path,
        from: s.format,
        to: FORMAT,
    });
    Ok((g, migrated))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    /// The previous release's reading of the file (commit 67c6e85).
    fn previous_release_read(text: &str) -> Option<u64> {
        text.trim().parse::<u64>().ok()
    }

    #[test]
    fn a_generation_grows_across_restarts_even_when_the_clock_is_set_back() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path();
        let (first, _) = next(Some(dir)).unwrap();
        assert!(
            next(Some(dir)).unwrap().0 > first,
            "a second start in the same ms"
        );
        // The last run stamped a generation an hour ahead of this clock (the
        // clock was set back since): this run still comes after it.
        let ahead = first + 3_600_000;
        std::fs::write(dir.join(GENERATION_FILE), render(ahead)).unwrap();
        assert_eq!(next(Some(dir)).unwrap(), (ahead + 1, None));
        assert_eq!(next(Some(dir)).unwrap().0, ahead + 2);
        // Without a state directory: the wall clock alone.
        assert!(next(None).unwrap().0 >= first);
    }

    #[test]
    fn a_generation_file_of_the_previous_format_is_migrated_and_its_number_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(GENERATION_FILE);
        let ahead = 4_000_000_000_000_u64; // Far past the wall clock.
        std::fs::write(&path, format!("{ahead}\n")).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            Some(Saved {
                last: ahead,
                format: 1
            })
        );
        let (g, migrated) = next(Some(dir.path())).unwrap();
        assert_eq!(g, ahead + 1);
        let m = migrated.unwrap();
        assert_eq!(
            m.to_string(),
            format!("migrated {} from format 1 to 2", path.display())
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            format!("# hale generation, format 2\n{}\n", ahead + 1)
        );
        assert_eq!(
            read(&path).unwrap(),
            Some(Saved {
                last: ahead + 1,
                format: 2
            })
        );
        assert_eq!(next(Some(dir.path())).unwrap(), (ahead + 2, None));
        // The previous release cannot read it (it then starts from the
        // wall clock): the documented cost of a downgrade.
        assert_eq!(previous_release_read(&text), None);
    }

    #[test]
    fn a_generation_file_of_a_future_format_is_refused_naming_the_file_and_both_formats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(GENERATION_FILE);
        let text = "# hale generation, format 3\n99\n";
        std::fs::write(&path, text).unwrap();
        let e = next(Some(dir.path())).unwrap_err();
        assert!(
            matches!(
                &e,
                GenerationError::Future {
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
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "left as it was"
        );
    }

    #[test]
    fn a_generation_file_that_is_not_one_is_replaced_and_the_run_starts_from_the_wall_clock() {
        for junk in [
            "",
            "x\n",
            "# hale generation, format two\n1\n",
            "12 13\n",
            "1\n2\n",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join(GENERATION_FILE);
            std::fs::write(&path, junk).unwrap();
            assert!(
                matches!(read(&path), Err(GenerationError::Malformed { .. })),
                "{junk:?}"
            );
            let (g, migrated) = next(Some(dir.path())).unwrap();
            assert_eq!(migrated, None);
            let saved = read(&path).unwrap().unwrap();
            assert_eq!((saved.last, saved.format), (g, FORMAT), "{junk:?}");
        }
    }
}
