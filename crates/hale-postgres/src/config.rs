//! The `[role.postgres]` table of `hale.toml`: where the local PostgreSQL
//! lives, how to reach it, and how far the operations may go.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// The data directory (`PGDATA`), absolute. Required. hale keeps its fence
    /// marker (`hale.fenced`) in it.
    pub data_dir: PathBuf,
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
    /// No password is sent: `pg_hba.conf` must let this user in by `trust`
    /// (or the tools' `~/.pgpass` of `os_user`, for the tools).
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
    /// Synchronous replication when possible: the primary keeps
    /// `synchronous_standby_names = '*'` while some standby streams and `''`
    /// when none does (so it keeps accepting commits alone), like Patroni's
    /// non-strict synchronous mode. Default `true`.
    #[serde(default = "default_true")]
    pub synchronous: bool,
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
    /// A slot prefix PostgreSQL would refuse, or that leaves no room for
    /// the node's name.
    #[error("role.postgres.slot_prefix {prefix:?}: 1 to 32 of a-z, 0-9 and _")]
    SlotPrefix {
        /// Its value.
        prefix: String,
    },
}

impl PostgresConfig {
    /// A configuration for the cluster in `data_dir`, every other field at its
    /// default.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
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
            connect_timeout: default_connect_timeout(),
            promote_timeout: default_promote_timeout(),
            stop_timeout: default_stop_timeout(),
            start_timeout: default_start_timeout(),
            rejoin_timeout: default_rejoin_timeout(),
            log_file: None,
        }
    }

    /// Checks what serde cannot: absolute paths, non-empty names, non-zero
    /// port and timeouts. The first offending key is named.
    pub fn validate(&self) -> Result<(), ConfigError> {
        absolute("data_dir", &self.data_dir)?;
        absolute("bin_dir", &self.bin_dir)?;
        if let Some(log) = &self.log_file {
            absolute("log_file", log)?;
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

    /// The fence marker: while it exists, this data directory is never
    /// promoted.
    pub fn fence_marker(&self) -> PathBuf {
        self.data_dir.join(FENCE_MARKER)
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
