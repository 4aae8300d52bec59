//! Passwords: read from the files `[role.postgres]` names, never kept in the
//! configuration itself, never printed.
//!
//! - hale's own sessions (tokio-postgres) send the password of `user`, read
//!   from `password_file` at each connection (a changed password takes
//!   effect without restarting hale), else looked up in `passfile`.
//! - PostgreSQL's programs (`pg_rewind`, `pg_basebackup`) and a standby's
//!   WAL receiver (`primary_conninfo`) are libpq clients: they get the
//!   *path* of a `.pgpass`-format file in their connection string
//!   (`passfile=...`), never a password on a command line (`ps` shows it to
//!   every user) or in `primary_conninfo` (`postgresql.auto.conf`, copied
//!   by every clone). That file is `passfile` when configured, else one hale
//!   writes from the password files next to the data directory,
//!   `<data_dir>.pgpass` (mode 0600, owned by `os_user`; inside the data
//!   directory it would be removed by a re-clone and copied by every
//!   `pg_basebackup`).
//!
//! A secret file that its group or others may read, write or run is refused,
//! as libpq refuses such a `.pgpass` and ssh such a key: a password others can
//! read is no secret, and a silent fallback to no password would show up
//! only as a failed authentication far from its cause.

use std::fmt;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::config::PostgresConfig;
use crate::process::{write_owned, OsUser};

/// A password read from a file. Its `Debug` shows no character of it, and
/// it has no `Display`: it cannot end up in a log line or an error by a
/// `{}` or `{:?}`.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Password(String);

impl Password {
    /// The password itself, for the one place that sends it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// Why the credentials `[role.postgres]` names could not be used. Nothing
/// was connected to, started or changed (but for a generated passfile that
/// could not be written: see [`CredentialsError::Write`]).
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The file could not be read (missing, no permission).
    #[error("role.postgres.{key}: cannot read {path}: {source}")]
    Unreadable {
        /// The key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a regular file (a directory, a device).
    #[error("role.postgres.{key}: {path} is not a regular file")]
    NotAFile {
        /// The key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// Its group or others may read, write or run the file: refused, as
    /// libpq refuses such a `.pgpass`.
    #[error(
        "role.postgres.{key}: {path} is accessible by its group or others (mode {mode:04o}); \
         a secret must be readable by its owner only: chmod 600 {path}"
    )]
    Exposed {
        /// The key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The passfile is not owned by `os_user`: libpq, running as that user,
    /// could not read a file only its owner may read.
    #[error(
        "role.postgres.passfile: {path} is owned by uid {owner}, but PostgreSQL's programs \
         read it as os_user {os_user:?} (uid {uid}): chown it to {os_user:?}"
    )]
    NotOwned {
        /// The file.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// The configured OS user.
        os_user: String,
        /// That user's uid.
        uid: u32,
    },
    /// The password file is empty, or holds more than one line.
    #[error("role.postgres.{key}: {path} must hold the password on one line ({problem})")]
    BadPassword {
        /// The key that names the file.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong: `empty` or `more than one line`.
        problem: &'static str,
    },
    /// The passfile hale generates for PostgreSQL's programs could not be
    /// written; none of them was run.
    #[error("writing the passfile {path} for PostgreSQL's programs: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Reads a secret file's metadata and refuses anything but a regular file
/// that only its owner may access.
fn check_private(key: &'static str, path: &Path) -> Result<std::fs::Metadata, CredentialsError> {
    let meta = std::fs::metadata(path).map_err(|source| CredentialsError::Unreadable {
        key,
        path: path.to_owned(),
        source,
    })?;
    if !meta.is_file() {
        return Err(CredentialsError::NotAFile {
            key,
            path: path.to_owned(),
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(CredentialsError::Exposed {
            key,
            path: path.to_owned(),
            mode,
        });
    }
    Ok(meta)
}

/// Reads the password in `path` (one line; a final line break is not part
/// of it), after [`check_private`].
fn read_password(key: &'static str, path: &Path) -> Result<Password, CredentialsError> {
    check_private(key, path)?;
    let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Unreadable {
        key,
        path: path.to_owned(),
        source,
    })?;
    let password = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    let bad = |problem| CredentialsError::BadPassword {
        key,
        path: path.to_owned(),
        problem,
    };
    if password.is_empty() {
        return Err(bad("empty"));
    }
    if password.contains(['\n', '\r']) {
        return Err(bad("more than one line"));
    }
    Ok(Password(password.to_owned()))
}

/// The passwords of `[role.postgres]`, as read now.
#[derive(Debug, Default)]
pub(crate) struct Passwords {
    /// `user`'s, from `password_file`.
    session: Option<Password>,
    /// `replication_user`'s: from `replication_password_file`, else
    /// `password_file` when `replication_user` is `user`.
    replication: Option<Password>,
}

impl Passwords {
    /// Reads (and checks) the configured password files.
    fn read(cfg: &PostgresConfig) -> Result<Self, CredentialsError> {
        let session = cfg
            .password_file
            .as_deref()
            .map(|path| read_password("password_file", path))
            .transpose()?;
        let replication = match &cfg.replication_password_file {
            Some(path) => Some(read_password("replication_password_file", path)?),
            None if cfg.replication_user == cfg.user => session.clone(),
            None => None,
        };
        Ok(Self {
            session,
            replication,
        })
    }
}

/// The password hale's own session as `cfg.user` to `cfg.database` at
/// `host:port` sends: `password_file`'s, else the one `passfile` has for that
/// connection (a unix-socket directory matches `localhost`, as libpq's
/// default socket does), else none.
pub(crate) fn session_password(
    cfg: &PostgresConfig,
    host: &str,
    port: u16,
) -> Result<Option<Password>, CredentialsError> {
    // Files of a few bytes, read where they are needed: no blocking worth a
    // thread of its own.
    if let Some(path) = &cfg.password_file {
        return read_password("password_file", path).map(Some);
    }
    let Some(path) = &cfg.passfile else {
        return Ok(None);
    };
    check_private("passfile", path)?;
    let text = std::fs::read_to_string(path).map_err(|source| CredentialsError::Unreadable {
        key: "passfile",
        path: path.clone(),
        source,
    })?;
    let host = if host.starts_with('/') {
        "localhost"
    } else {
        host
    };
    let port = port.to_string();
    Ok(pgpass_lookup(&text, [host, &port, &cfg.database, &cfg.user]).map(Password))
}

/// The passfile libpq clients (PostgreSQL's programs, a standby's WAL
/// receiver) are given, made ready for them: `passfile` when configured
/// (checked: a regular file only its owner may access, that owner being
/// `os_user` when hale runs as root), else, when a password file is
/// configured, `<data_dir>.pgpass` written afresh from the password files
/// (mode 0600, owned by `os_user`), else none.
pub(crate) async fn libpq_passfile(
    cfg: &PostgresConfig,
    user: Option<&OsUser>,
) -> Result<Option<PathBuf>, CredentialsError> {
    if let Some(path) = &cfg.passfile {
        check_passfile(cfg, path, user)?;
        return Ok(Some(path.clone()));
    }
    let passwords = Passwords::read(cfg)?;
    if passwords.session.is_none() && passwords.replication.is_none() {
        return Ok(None);
    }
    let path = generated_passfile(cfg);
    write_owned(&path, pgpass_text(cfg, &passwords).into_bytes(), user)
        .await
        .map_err(|source| CredentialsError::Write {
            path: path.clone(),
            source,
        })?;
    Ok(Some(path))
}

/// Checks the configured passfile as libpq needs it: [`check_private`], and
/// owned by the OS user PostgreSQL's programs run as (when hale runs as
/// root).
fn check_passfile(
    cfg: &PostgresConfig,
    path: &Path,
    user: Option<&OsUser>,
) -> Result<(), CredentialsError> {
    let meta = check_private("passfile", path)?;
    match user.map(|u| u.uid.as_raw()) {
        Some(uid) if uid != meta.uid() => Err(CredentialsError::NotOwned {
            path: path.to_owned(),
            owner: meta.uid(),
            os_user: cfg.os_user.clone(),
            uid,
        }),
        _ => Ok(()),
    }
}

/// Checks every secret file `[role.postgres]` names (readable, regular,
/// accessible by its owner only, a password on one line; the passfile owned
/// by `os_user` when running as root), reading nothing into memory that
/// outlives the check. For a start-up check: hale reads them again at each
/// use.
pub(crate) fn check_files(
    cfg: &PostgresConfig,
    user: Option<&OsUser>,
) -> Result<(), CredentialsError> {
    Passwords::read(cfg)?;
    match &cfg.passfile {
        Some(path) => check_passfile(cfg, path, user),
        None => Ok(()),
    }
}

/// The passfile hale writes when it has password files and no `passfile`:
/// `<data_dir>.pgpass`.
pub(crate) fn generated_passfile(cfg: &PostgresConfig) -> PathBuf {
    let mut name = cfg.data_dir.clone().into_os_string();
    name.push(".pgpass");
    PathBuf::from(name)
}

/// The `.pgpass` text for the passwords: the replication user's line first,
/// for physical replication connections only (database `replication`), then
/// `user`'s for any other, for every host and port (hale connects only to its
/// own cluster's members).
fn pgpass_text(cfg: &PostgresConfig, passwords: &Passwords) -> String {
    let mut text = String::from("# Written by hale from role.postgres's password files.\n");
    let mut line = |database: &str, user: &str, password: &Password| {
        text.push_str(&format!(
            "*:*:{}:{}:{}\n",
            pgpass_field(database),
            pgpass_field(user),
            pgpass_field(password.expose())
        ));
    };
    if let Some(password) = &passwords.replication {
        line("replication", &cfg.replication_user, password);
    }
    if let Some(password) = &passwords.session {
        line("*", &cfg.user, password);
    }
    text
}

/// A field of a `.pgpass` line: `:` and `\` escaped with `\`.
fn pgpass_field(value: &str) -> String {
    value.replace('\\', "\\\\").replace(':', "\\:")
}

/// The password of the first line of `.pgpass` text that matches `want`
/// (host, port, database, user), as libpq matches them: `*` matches
/// anything, `\` escapes `:` and `\`, `#` starts a comment line.
fn pgpass_lookup(text: &str, want: [&str; 4]) -> Option<String> {
    text.lines().find_map(|line| {
        if line.starts_with('#') {
            return None;
        }
        let mut fields = Vec::with_capacity(5);
        let mut field = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => field.push(chars.next().unwrap_or('\\')),
                ':' if fields.len() < 4 => fields.push(std::mem::take(&mut field)),
                c => field.push(c),
            }
        }
        fields.push(field);
        if fields.len() != 5 {
            return None;
        }
        let matches = fields
            .iter()
            .zip(want)
            .all(|(have, want)| have == "*" || have == want);
        matches.then(|| fields.swap_remove(4))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn secret(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn a_password_is_one_line_without_its_line_break_and_its_debug_shows_nothing_of_it() {
        let dir = tempfile::tempdir().expect("dir");
        let path = secret(dir.path(), "pw", "s3cr:et\\x\r\n", 0o600);
        let pw = read_password("password_file", &path).expect("read");
        assert_eq!(pw.expose(), "s3cr:et\\x");
        assert_eq!(format!("{pw:?}"), "Password(<redacted>)");
        for (text, problem) in [
            ("", "empty"),
            ("\n", "empty"),
            ("a\nb\n", "more than one line"),
        ] {
            let path = secret(dir.path(), "bad", text, 0o600);
            let err = read_password("password_file", &path).expect_err(text);
            assert!(
                matches!(err, CredentialsError::BadPassword { problem: p, .. } if p == problem),
                "{err}"
            );
        }
    }

    #[test]
    fn a_secret_its_group_or_others_may_access_is_refused_naming_the_fix() {
        let dir = tempfile::tempdir().expect("dir");
        for mode in [0o640, 0o604, 0o620, 0o610, 0o644] {
            let path = secret(dir.path(), "pw", "x", mode);
            let err = read_password("password_file", &path).expect_err("exposed");
            assert!(
                matches!(err, CredentialsError::Exposed { mode: m, .. } if m == mode),
                "{err}"
            );
            assert!(err.to_string().contains("chmod 600"), "{err}");
            assert!(!err.to_string().contains("\"x\""));
        }
        for mode in [0o600, 0o400] {
            let path = secret(dir.path(), "pw", "x", mode);
            assert!(read_password("password_file", &path).is_ok(), "{mode:o}");
        }
        let err = read_password("password_file", dir.path()).expect_err("a directory");
        assert!(matches!(err, CredentialsError::NotAFile { .. }), "{err}");
    }

    #[test]
    fn the_generated_passfile_escapes_fields_and_puts_replication_first() {
        let mut cfg = PostgresConfig::new("/d");
        cfg.user = "hale".into();
        cfg.replication_user = "rep:l".into();
        let passwords = Passwords {
            session: Some(Password("a:b".into())),
            replication: Some(Password("c\\d".into())),
        };
        let text = pgpass_text(&cfg, &passwords);
        assert!(text.ends_with("*:*:replication:rep\\:l:c\\\\d\n*:*:*:hale:a\\:b\n"));
        assert_eq!(
            pgpass_lookup(&text, ["h", "5432", "replication", "rep:l"]).as_deref(),
            Some("c\\d")
        );
        assert_eq!(
            pgpass_lookup(&text, ["h", "5432", "postgres", "hale"]).as_deref(),
            Some("a:b")
        );
        assert_eq!(pgpass_lookup(&text, ["h", "5432", "postgres", "x"]), None);
        assert_eq!(
            generated_passfile(&cfg),
            PathBuf::from("/d.pgpass"),
            "next to the data directory"
        );
    }

    #[test]
    fn a_pgpass_lookup_takes_the_first_matching_line() {
        let text = "# comment\ndb1:5432:*:u:one\n*:5433:*:u:two\n*:*:*:*:three\nbroken:line\n";
        assert_eq!(
            pgpass_lookup(text, ["db1", "5432", "x", "u"]).as_deref(),
            Some("one")
        );
        assert_eq!(
            pgpass_lookup(text, ["db2", "5433", "x", "u"]).as_deref(),
            Some("two")
        );
        assert_eq!(
            pgpass_lookup(text, ["db2", "5432", "x", "v"]).as_deref(),
            Some("three")
        );
    }

    #[test]
    fn the_replication_password_defaults_to_the_users_only_for_the_same_user() {
        let dir = tempfile::tempdir().expect("dir");
        let mut cfg = PostgresConfig::new("/d");
        cfg.password_file = Some(secret(dir.path(), "pw", "one\n", 0o600));
        let same = Passwords::read(&cfg).expect("read");
        assert_eq!(same.replication.as_ref().map(Password::expose), Some("one"));
        cfg.replication_user = "replicator".into();
        assert!(Passwords::read(&cfg).expect("read").replication.is_none());
        cfg.replication_password_file = Some(secret(dir.path(), "rpw", "two", 0o400));
        let own = Passwords::read(&cfg).expect("read");
        assert_eq!(own.replication.as_ref().map(Password::expose), Some("two"));
        assert_eq!(own.session.as_ref().map(Password::expose), Some("one"));
        assert!(!format!("{own:?}").contains("one"));
    }
}
