//! The keyring file: where an agent keeps the keys a live rotation gave it,
//! so that a restart comes back with them (Serf's keyring file is the model).
//!
//! Format: one base64 key per line, the primary first; `#` starts a comment.
//! Written to a temporary file in the same directory, flushed to disk, then
//! renamed over the old one (and the directory flushed), with mode 0600: a
//! crash leaves the old file or the new one, never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::{Key, KeyError, Keyring};

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
}

/// Reads the keyring saved at `path`: `Ok(None)` if there is no file.
pub fn load(path: &Path) -> Result<Option<Keyring>, LoadError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LoadError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
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
    Ok(Some(Keyring::new(primary, keys)))
}

/// Writes `ring` to `path` atomically and durably (see the module docs).
pub fn save(path: &Path, ring: &Keyring) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut text = String::from(
        "# hale keyring, written by the agent on every live key change (hale keys).\n\
         # The first key seals; every key opens. Delete this file to use the\n\
         # keys of the configuration again.\n",
    );
    for k in ring.keys() {
        text.push_str(&k.to_base64());
        text.push('\n');
    }
    let tmp = path.with_extension("tmp");
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
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
}
