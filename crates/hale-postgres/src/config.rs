//! The `[role.postgres]` table of `hale.toml`: where the local PostgreSQL
//! lives, how to reach it, and how far the operations may go.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::tls::SslMode;

/// The fence marker's file name in the data directory. While it exists, hale
/// never promotes the server; only a rejoin that reached streaming removes it.
pub const FENCE_MARKER: &str = "hale.fenced";

/// How hale runs the local PostgreSQL server. Every field but `data_dir` has
/// a default, given in its documentation.
///
/// ```toml
/// [role.postgres]
/// data_dir = "/var/lib/postgresql/15/main"
/// max_lag_on_failover = 1048576
/// rejoin_timeout = "2m"
/// password_file = "/etc/hale/pg-password"   # 0600: the password of `user`
/// sslmode = "verify-full"
/// sslrootcert = "/etc/hale/pg-ca.pem"
/// ```
///
/// The configuration holds the *paths* of secret files, never a password:
/// it is printed (`Debug`), compared, sent to hale's own hooks on their
/// command line (`hale postgres promote --settings JSON`) and shown by
/// `hale config`; the passwords are read from the files where a connection
/// needs them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// The data directory (`PGDATA`), absolute. Required. hale keeps its fence
    /// marker (`hale.fenced`) and `standby.signal` in it.
    pub data_dir: PathBuf,
    /// Where the server's configuration is when it is not in the data
    /// directory, absolute: a directory with the `postgresql.conf` that
    /// names `data_dir` as its `data_directory`, as Debian's and Ubuntu's
    /// packaged clusters keep it (`/etc/postgresql/<version>/<name>`, made by
    /// `pg_createcluster`). hale then starts the server from it (`pg_ctl
    /// start -D <config_dir>`: the same server, pid file and socket that
    /// `pg_ctlcluster` and `pg_lsclusters` see), gives `pg_rewind` its
    /// `postgresql.conf`, and never writes in it: a rewind or a re-clone
    /// changes the data directory only, and configuration files a clone
    /// brings from the upstream's data directory are removed. It must not be,
    /// or lie inside, `data_dir` (a re-clone empties that). A packaged
    /// cluster must not be started by the distribution at boot: its
    /// `start.conf` must say `manual` or `disabled` and its
    /// `postgresql@<version>-<name>` unit must not be enabled, else hale
    /// refuses to start the server ([`PostgresConfig::check_layout`]).
    /// Default: none, the configuration is in `data_dir`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_dir: Option<PathBuf>,
    /// Where PostgreSQL's programs (`pg_ctl`, `pg_rewind`, `pg_basebackup`,
    /// `postgres`) are. Default `/usr/lib/postgresql/15/bin`.
    #[serde(default = "default_bin_dir")]
    pub bin_dir: PathBuf,
    /// How to reach the local server: a unix-socket directory (starting with
    /// `/`) or a host name or address. Default `/var/run/postgresql`.
    #[serde(default = "default_host")]
    pub host: String,
    /// The local server's port (also names its unix socket). Default 5432.
    #[serde(default = "default_port")]
    pub port: u16,
    /// The superuser hale connects as, locally and to the upstream (to create
    /// replication slots, and as `pg_rewind`'s source). Default `postgres`.
    /// Its password is read from `password_file` (or looked up in
    /// `passfile`); with neither, no password is sent and `pg_hba.conf` must
    /// let this user in by `trust` or `peer`.
    #[serde(default = "default_postgres")]
    pub user: String,
    /// The database hale connects to. Default `postgres`.
    #[serde(default = "default_postgres")]
    pub database: String,
    /// The user a replica streams as (`primary_conninfo`) and clones as
    /// (`pg_basebackup`); it needs the `REPLICATION` attribute. Default
    /// `postgres`.
    #[serde(default = "default_postgres")]
    pub replication_user: String,
    /// A file holding the password of `user` (SCRAM or md5 in
    /// `pg_hba.conf`), on one line; a final line break is not part of it.
    /// Absolute. It must be a regular file that only its owner may access
    /// (mode 0600 or 0400), else every operation is refused (as libpq refuses
    /// such a `.pgpass`): a secret others can read is none. Read at each
    /// connection, so a new password takes effect without restarting hale.
    /// hale's own sessions send it; PostgreSQL's programs and the standby's
    /// WAL receiver get it from `<data_dir>.pgpass`, a passfile hale writes
    /// (mode 0600, owned by `os_user`) unless `passfile` is set. Default:
    /// none.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// A file holding the password of `replication_user`, like
    /// `password_file`. Default: `password_file` when `replication_user` is
    /// `user` (one role for both), else none (that user then needs `trust`
    /// for replication, or a line in `passfile`). Not with `passfile`.
    #[serde(default)]
    pub replication_password_file: Option<PathBuf>,
    /// A libpq password file (`.pgpass` format, `host:port:database:user:password`
    /// lines) that PostgreSQL's programs and the standby's WAL receiver use
    /// instead of one hale writes (`passfile=` in their connection strings;
    /// libpq's `PGPASSFILE`). Absolute; a regular file only its owner may
    /// access, owned by `os_user` when hale runs as root (libpq reads it as
    /// that user). Without `password_file`, hale's own sessions look their
    /// password up in it too (a unix-socket host matches `localhost`).
    /// Default: none.
    #[serde(default)]
    pub passfile: Option<PathBuf>,
    /// TLS for connections to other hosts, libpq's `sslmode`: `disable`,
    /// `prefer`, `require`, `verify-ca` or `verify-full` ([`SslMode`]).
    /// Applies to hale's sessions over TCP, `pg_rewind`, `pg_basebackup` and
    /// `primary_conninfo`; a unix socket never uses TLS. Default `prefer`,
    /// libpq's default.
    #[serde(default)]
    pub sslmode: SslMode,
    /// The CA certificates (PEM) a server's certificate must be signed by.
    /// Absolute; readable by `os_user` too (libpq reads it as that user).
    /// Required by `verify-ca` and `verify-full`; with `prefer` or `require`
    /// it is checked too, as libpq does when it has a root certificate.
    /// Default: none.
    #[serde(default)]
    pub sslrootcert: Option<PathBuf>,
    /// What each node's replication slot on the primary is named by:
    /// `<slot_prefix><node>` ([`PostgresConfig::slot_name`]). 1 to 32 of
    /// `a-z`, `0-9`, `_`. Default `hale_`.
    #[serde(default = "default_slot_prefix")]
    pub slot_prefix: String,
    /// The OS user that runs `pg_ctl`, `pg_rewind` and `pg_basebackup` and
    /// owns the files hale writes in the data directory (PostgreSQL refuses to
    /// run as root). Used only when hale runs as root; otherwise the tools run
    /// as hale's own user. Default `postgres`.
    #[serde(default = "default_postgres")]
    pub os_user: String,
    /// The most a standby's replay may be behind the primary, in bytes of WAL,
    /// for it to be promoted. Default 1 MiB (1048576), as Patroni's
    /// `maximum_lag_on_failover`.
    #[serde(default = "default_max_lag")]
    pub max_lag_on_failover: u64,
    /// When `pg_rewind` fails or cannot run (no valid cluster, WAL hints and
    /// checksums both off, WAL missing on the upstream), delete the data
    /// directory's contents and clone it afresh with `pg_basebackup`. Default
    /// `true`: the member rejoins by itself, at the cost of transferring the
    /// whole database and of discarding the old primary's unreplicated
    /// transactions for good (they cannot be recovered from it afterwards).
    /// `false` keeps the data directory for a person to look at; the member
    /// then stays fenced and out of replication until someone acts.
    #[serde(default = "default_true")]
    pub reclone_on_rewind_failure: bool,
    /// Synchronous replication by quorum: the primary keeps
    /// `synchronous_standby_names = 'ANY 1 (...)'` over the streaming
    /// standbys the role's lease table names (a commit returns once *one*
    /// of them has flushed it: a hung standby holds no write hostage while
    /// another streams), and `''` when none streams, so that it keeps
    /// accepting commits alone (like Patroni's non-strict synchronous mode:
    /// see [`PostgresConfig::strict`]). Default `true`.
    #[serde(default = "default_true")]
    pub synchronous: bool,
    /// Strict durability (needs `synchronous`): the primary never commits
    /// alone. With no standby streaming it keeps waiting for the last ones
    /// named (or, before any streamed, for one that does not exist:
    /// `NO_STANDBY`), so writes stop rather than risk loss; and
    /// a standby takes the role only if it is proven to hold every
    /// acknowledged commit (every synchronous standby heard from, none
    /// further). Like Patroni's `synchronous_mode_strict`. Default `false`.
    #[serde(default)]
    pub strict: bool,
    /// The least free space, in bytes, the filesystems of the data
    /// directory and of its `pg_wal` may have for the server to pass its
    /// check (`hale_postgres::check`): below it the next WAL segment or
    /// checkpoint may fail and the server PANIC, so the role moves first.
    /// Default 64 MiB (four WAL segments); 0 turns the test off.
    #[serde(default = "default_min_free")]
    pub min_free_bytes: u64,
    /// How long a connection to a server may take before it counts as not
    /// answering. Default 1 s.
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// How long `pg_ctl promote` may take; also bounds how long a change of
    /// `synchronous_standby_names` may take to be in effect. Default 10 s.
    #[serde(default = "default_promote_timeout", with = "humantime_serde")]
    pub promote_timeout: Duration,
    /// How long each way of stopping the server (`pg_ctl stop -m fast`, then
    /// `-m immediate`, then SIGKILL) may take before the next one. Default 5 s.
    #[serde(default = "default_stop_timeout", with = "humantime_serde")]
    pub stop_timeout: Duration,
    /// How long `pg_ctl start` may take (crash recovery included). Default 60 s.
    #[serde(default = "default_start_timeout", with = "humantime_serde")]
    pub start_timeout: Duration,
    /// How long a whole rejoin may take, from stopping the server to its
    /// streaming from the upstream (a re-clone included). Default 120 s.
    #[serde(default = "default_rejoin_timeout", with = "humantime_serde")]
    pub rejoin_timeout: Duration,
    /// The server's log while hale starts it (`pg_ctl start -l`), absolute.
    /// Default: next to the data directory, `<data_dir>.log` (inside, it would
    /// be removed by a rewind or a re-clone).
    #[serde(default)]
    pub log_file: Option<PathBuf>,
}

fn default_bin_dir() -> PathBuf {
    PathBuf::from("/usr/lib/postgresql/15/bin")
}
fn default_host() -> String {
    "/var/run/postgresql".to_owned()
}
fn default_port() -> u16 {
    5432
}
/// The default of every name (users, database): `postgres`.
fn default_postgres() -> String {
    "postgres".to_owned()
}
fn default_slot_prefix() -> String {
    "hale_".to_owned()
}
fn default_max_lag() -> u64 {
    1 << 20
}
fn default_min_free() -> u64 {
    64 << 20
}
fn default_true() -> bool {
    true
}
fn default_connect_timeout() -> Duration {
    Duration::from_secs(1)
}
fn default_promote_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_stop_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_start_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_rejoin_timeout() -> Duration {
    Duration::from_secs(120)
}

/// A `[role.postgres]` value hale cannot work with. Nothing was done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A path that must be absolute is relative.
    #[error("role.postgres.{key}: {path:?} must be an absolute path")]
    RelativePath {
        /// The key.
        key: &'static str,
        /// Its value.
        path: PathBuf,
    },
    /// A name or host is empty.
    #[error("role.postgres.{key} must not be empty")]
    Empty {
        /// The key.
        key: &'static str,
    },
    /// A port of 0.
    #[error("role.postgres.{key} must not be 0")]
    Zero {
        /// The key.
        key: &'static str,
    },
    /// Two keys that cannot be used together.
    #[error("role.postgres.{key} cannot be used with role.postgres.{with}: {why}")]
    Conflict {
        /// The key.
        key: &'static str,
        /// The key it conflicts with.
        with: &'static str,
        /// Why.
        why: &'static str,
    },
    /// `verify-ca` or `verify-full` without a CA to verify with.
    #[error("role.postgres.sslmode = {sslmode:?} needs role.postgres.sslrootcert (the CA certificates, PEM)")]
    NoRootCert {
        /// The mode.
        sslmode: &'static str,
    },
    /// A slot prefix PostgreSQL would refuse, or that leaves no room for
    /// the node's name.
    #[error("role.postgres.slot_prefix {prefix:?}: 1 to 32 of a-z, 0-9 and _")]
    SlotPrefix {
        /// Its value.
        prefix: String,
    },
    /// `strict` without `synchronous`: a primary that waits for no standby
    /// cannot refuse to commit alone.
    #[error("role.postgres.strict needs role.postgres.synchronous")]
    StrictNeedsSynchronous,
    /// `config_dir` is `data_dir` or lies inside it: a re-clone, which
    /// empties the data directory, would delete the configuration.
    #[error(
        "role.postgres.config_dir {config_dir:?} is or lies inside role.postgres.data_dir \
         {data_dir:?}, which a re-clone empties: leave config_dir unset when the \
         configuration is in the data directory"
    )]
    ConfigInsideData {
        /// `config_dir`.
        config_dir: PathBuf,
        /// `data_dir`.
        data_dir: PathBuf,
    },
}

impl PostgresConfig {
    /// A configuration for the cluster in `data_dir`, every other field at its
    /// default.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            config_dir: None,
            bin_dir: default_bin_dir(),
            host: default_host(),
            port: default_port(),
            user: default_postgres(),
            database: default_postgres(),
            replication_user: default_postgres(),
            slot_prefix: default_slot_prefix(),
            os_user: default_postgres(),
            max_lag_on_failover: default_max_lag(),
            reclone_on_rewind_failure: true,
            synchronous: true,
            strict: false,
            min_free_bytes: default_min_free(),
            connect_timeout: default_connect_timeout(),
            promote_timeout: default_promote_timeout(),
            stop_timeout: default_stop_timeout(),
            start_timeout: default_start_timeout(),
            rejoin_timeout: default_rejoin_timeout(),
            log_file: None,
            password_file: None,
            replication_password_file: None,
            passfile: None,
            sslmode: SslMode::default(),
            sslrootcert: None,
        }
    }

    /// Checks what serde cannot: absolute paths, non-empty names, non-zero
    /// port and timeouts, keys that go together. The first offending key is
    /// named. Reads no file: see [`PostgresConfig::check_secret_files`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        absolute("data_dir", &self.data_dir)?;
        absolute("bin_dir", &self.bin_dir)?;
        for (key, path) in [
            ("config_dir", &self.config_dir),
            ("log_file", &self.log_file),
            ("password_file", &self.password_file),
            ("replication_password_file", &self.replication_password_file),
            ("passfile", &self.passfile),
            ("sslrootcert", &self.sslrootcert),
        ] {
            if let Some(path) = path {
                absolute(key, path)?;
            }
        }
        if let Some(config_dir) = &self.config_dir {
            if config_dir.starts_with(&self.data_dir) {
                return Err(ConfigError::ConfigInsideData {
                    config_dir: config_dir.clone(),
                    data_dir: self.data_dir.clone(),
                });
            }
        }
        if self.passfile.is_some() && self.replication_password_file.is_some() {
            return Err(ConfigError::Conflict {
                key: "replication_password_file",
                with: "passfile",
                why: "the replication connections read their password from passfile",
            });
        }
        if self.sslmode.verifies() && self.sslrootcert.is_none() {
            return Err(ConfigError::NoRootCert {
                sslmode: self.sslmode.as_str(),
            });
        }
        for (key, value) in [
            ("host", &self.host),
            ("user", &self.user),
            ("database", &self.database),
            ("replication_user", &self.replication_user),
            ("os_user", &self.os_user),
        ] {
            if value.trim().is_empty() {
                return Err(ConfigError::Empty { key });
            }
        }
        if self.port == 0 {
            return Err(ConfigError::Zero { key: "port" });
        }
        if self.strict && !self.synchronous {
            return Err(ConfigError::StrictNeedsSynchronous);
        }
        if !slot_chars(&self.slot_prefix, 32) {
            let prefix = self.slot_prefix.clone();
            return Err(ConfigError::SlotPrefix { prefix });
        }
        for (key, value) in [
            ("connect_timeout", self.connect_timeout),
            ("promote_timeout", self.promote_timeout),
            ("stop_timeout", self.stop_timeout),
            ("start_timeout", self.start_timeout),
            ("rejoin_timeout", self.rejoin_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Zero { key });
            }
        }
        Ok(())
    }

    /// Node `node`'s replication slot on the primary: `slot_prefix` and the
    /// node's name in lower case, every other character an underscore (at
    /// most 63 bytes, PostgreSQL's limit).
    pub fn slot_name(&self, node: &str) -> String {
        let mut s: String = self
            .slot_prefix
            .chars()
            .chain(node.chars().map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9' | '_') => c,
                _ => '_',
            }))
            .collect();
        s.truncate(63);
        s
    }

    /// The server's log while hale starts it: `log_file`, else
    /// `<data_dir>.log`.
    pub fn log_file(&self) -> PathBuf {
        match &self.log_file {
            Some(path) => path.clone(),
            None => {
                let mut name = self.data_dir.clone().into_os_string();
                name.push(".log");
                PathBuf::from(name)
            }
        }
    }

    /// The server's main configuration file: `<config_dir>/postgresql.conf`,
    /// else `<data_dir>/postgresql.conf`.
    pub fn config_file(&self) -> PathBuf {
        self.start_dir().join("postgresql.conf")
    }

    /// The directory `pg_ctl start -D` is given: `config_dir`, else
    /// `data_dir` (PostgreSQL reads `postgresql.conf` there and finds the
    /// data directory by its `data_directory`).
    pub(crate) fn start_dir(&self) -> &Path {
        self.config_dir.as_deref().unwrap_or(&self.data_dir)
    }

    /// The fence marker: while it exists, this data directory is never
    /// promoted.
    pub fn fence_marker(&self) -> PathBuf {
        self.data_dir.join(FENCE_MARKER)
    }

    /// Checks the secret files this configuration names, as every operation
    /// does before it acts: each a regular, readable file that only its
    /// owner may access, a password file holding one line, the `passfile`
    /// owned by `os_user` when hale runs as root. For a start-up check (the
    /// agent's), so that a bad file is reported once, at once; the
    /// passwords are not kept.
    pub fn check_secret_files(&self) -> Result<(), crate::credentials::CredentialsError> {
        let user = crate::process::OsUser::resolve(self).ok().flatten();
        crate::credentials::check_files(self, user.as_ref())
    }
}

/// Whether `name` is 1 to `max` of `a-z`, `0-9` and `_`: what a replication
/// slot's name (and so its prefix) may hold.
pub(crate) fn slot_chars(name: &str, max: usize) -> bool {
    (1..=max).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn absolute(key: &'static str, path: &Path) -> Result<(), ConfigError> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(ConfigError::RelativePath {
            key,
            path: path.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_with_only_the_data_directory_takes_every_default() {
        let cfg: PostgresConfig =
            toml::from_str("data_dir = \"/var/lib/postgresql/15/main\"").expect("parses");
        assert_eq!(cfg, PostgresConfig::new("/var/lib/postgresql/15/main"));
        assert_eq!(cfg.max_lag_on_failover, 1_048_576);
        assert_eq!(cfg.rejoin_timeout, Duration::from_secs(120));
        assert_eq!(
            cfg.log_file(),
            PathBuf::from("/var/lib/postgresql/15/main.log")
        );
        cfg.validate().expect("valid");
    }

    #[test]
    fn durations_are_written_the_human_way_and_unknown_keys_are_refused() {
        let cfg: PostgresConfig =
            toml::from_str("data_dir = \"/d\"\nstop_timeout = \"250ms\"").expect("parses");
        assert_eq!(cfg.stop_timeout, Duration::from_millis(250));
        let unknown = toml::from_str::<PostgresConfig>("data_dir = \"/d\"\nmax_lag = 5");
        assert!(unknown.is_err());
    }

    #[test]
    fn validation_names_the_offending_key() {
        let mut cfg = PostgresConfig::new("relative/dir");
        assert_eq!(
            cfg.validate(),
            Err(ConfigError::RelativePath {
                key: "data_dir",
                path: "relative/dir".into()
            })
        );
        cfg.data_dir = "/d".into();
        cfg.replication_user = " ".into();
        assert_eq!(
            cfg.validate(),
            Err(ConfigError::Empty {
                key: "replication_user"
            })
        );
        cfg.replication_user = "replicator".into();
        cfg.promote_timeout = Duration::ZERO;
        assert_eq!(
            cfg.validate(),
            Err(ConfigError::Zero {
                key: "promote_timeout"
            })
        );
    }

    #[test]
    fn secrets_and_tls_are_paths_and_modes_checked_together() {
        let cfg: PostgresConfig = toml::from_str(
            "data_dir = \"/d\"\npassword_file = \"/etc/hale/pw\"\n\
             sslmode = \"verify-full\"\nsslrootcert = \"/etc/hale/ca.pem\"",
        )
        .expect("parses");
        assert_eq!(cfg.sslmode, SslMode::VerifyFull);
        assert_eq!(
            cfg.password_file.as_deref(),
            Some(Path::new("/etc/hale/pw"))
        );
        cfg.validate().expect("valid");
        assert!(
            toml::from_str::<PostgresConfig>("data_dir = \"/d\"\nsslmode = \"verify\"").is_err()
        );

        let mut bad = cfg.clone();
        bad.sslrootcert = None;
        assert_eq!(
            bad.validate(),
            Err(ConfigError::NoRootCert {
                sslmode: "verify-full"
            })
        );
        bad.sslmode = SslMode::Require;
        bad.validate().expect("require needs no CA");
        bad.password_file = Some("pw".into());
        assert!(matches!(
            bad.validate(),
            Err(ConfigError::RelativePath {
                key: "password_file",
                ..
            })
        ));
        let mut both = cfg;
        both.passfile = Some("/etc/hale/pgpass".into());
        both.replication_password_file = Some("/etc/hale/rpw".into());
        assert!(matches!(
            both.validate(),
            Err(ConfigError::Conflict {
                key: "replication_password_file",
                ..
            })
        ));
    }

    #[test]
    fn a_configuration_directory_is_absolute_and_never_inside_the_data_directory() {
        let cfg: PostgresConfig = toml::from_str(
            "data_dir = \"/var/lib/postgresql/15/main\"\n\
             config_dir = \"/etc/postgresql/15/main\"",
        )
        .expect("parses");
        cfg.validate().expect("valid");
        assert_eq!(
            cfg.config_file(),
            PathBuf::from("/etc/postgresql/15/main/postgresql.conf")
        );
        assert_eq!(
            PostgresConfig::new("/d").config_file(),
            PathBuf::from("/d/postgresql.conf")
        );
        // Unset, it is not in the settings hale's hooks are given.
        let json = serde_json::to_string(&PostgresConfig::new("/d")).expect("serializes");
        assert!(!json.contains("config_dir"), "{json}");
        for inside in [
            "/var/lib/postgresql/15/main",
            "/var/lib/postgresql/15/main/conf",
        ] {
            let mut bad = cfg.clone();
            bad.config_dir = Some(inside.into());
            assert!(
                matches!(bad.validate(), Err(ConfigError::ConfigInsideData { .. })),
                "{inside}"
            );
        }
        let mut beside = cfg.clone();
        beside.config_dir = Some("/var/lib/postgresql/15/main-conf".into());
        beside.validate().expect("a sibling is not inside");
        let mut relative = cfg;
        relative.config_dir = Some("etc/main".into());
        assert!(matches!(
            relative.validate(),
            Err(ConfigError::RelativePath {
                key: "config_dir",
                ..
            })
        ));
    }

    #[test]
    fn slot_names_are_the_prefix_and_the_node_as_postgresql_accepts_them() {
        let mut cfg = PostgresConfig::new("/d");
        assert_eq!(cfg.slot_name("host-A.example"), "hale_host_a_example");
        assert_eq!(cfg.slot_name(&"x".repeat(100)).len(), 63);
        cfg.slot_prefix = "db2_".into();
        assert_eq!(cfg.slot_name("b"), "db2_b");
        for bad in ["", "Hale_", "a-b", &"p".repeat(33)] {
            cfg.slot_prefix = bad.to_owned();
            assert!(
                matches!(cfg.validate(), Err(ConfigError::SlotPrefix { .. })),
                "{bad:?}"
            );
        }
    }
}
