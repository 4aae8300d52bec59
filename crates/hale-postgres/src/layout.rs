//! A configuration outside the data directory (`config_dir`), as Debian's and
//! Ubuntu's packaged clusters keep it: checked before hale starts the server
//! from it.
//!
//! - The `postgresql.conf` there must name `data_dir` as its
//!   `data_directory` (PostgreSQL is asked: `postgres -C data_directory`,
//!   includes and all), else hale would start one directory's server and
//!   fence another's.
//! - A packaged cluster (`/etc/postgresql/<version>/<name>`) must not be
//!   started by the distribution at boot: `start.conf` `manual` or
//!   `disabled`, its `postgresql@<version>-<name>` unit not enabled. Started
//!   at boot, a primary that went down with its host would come back
//!   writable before hale could fence it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::PostgresConfig;
use crate::process::{run_blocking, ToolError, Tools};

/// Where a packaged cluster's configuration directories are: Debian's and
/// Ubuntu's `postgresql-common` (`/etc/postgresql/<version>/<name>`).
const PACKAGED_ROOT: &str = "/etc/postgresql";

/// Where systemd keeps the units an administrator enabled.
const SYSTEMD_UNITS: &str = "/etc/systemd/system";

/// How long PostgreSQL may take to say which data directory a configuration
/// names.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// Why hale will not start the server from `config_dir`. Nothing was done.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// `<config_dir>/postgresql.conf` cannot be read.
    #[error("role.postgres.config_dir: cannot read {path}: {source}")]
    NoConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// PostgreSQL could not say which data directory that configuration
    /// names (`postgres -C data_directory` failed: a broken
    /// `postgresql.conf`, or `bin_dir`, `os_user` wrong).
    #[error("asking PostgreSQL which data directory {config_file} names: {source}")]
    Ask {
        /// The configuration file.
        config_file: PathBuf,
        /// What failed.
        source: ToolError,
    },
    /// The configuration names another data directory than `data_dir`: hale
    /// would start that one's server and fence this one.
    #[error(
        "{config_file} names the data directory {names:?}, not role.postgres.data_dir \
         {data_dir:?}: set data_dir to the cluster's data directory"
    )]
    OtherDataDir {
        /// The configuration file.
        config_file: PathBuf,
        /// The data directory it names (`data_directory`).
        names: PathBuf,
        /// `data_dir`.
        data_dir: PathBuf,
    },
    /// The distribution starts this cluster at boot, where a primary that
    /// went down with its host would come back writable before hale fenced
    /// it.
    #[error("cluster {cluster}: {why}, so it would start at boot before hale fences it: {fix}")]
    StartsAtBoot {
        /// The cluster, `<version>/<name>`.
        cluster: String,
        /// What starts it.
        why: String,
        /// What to do.
        fix: String,
    },
}

impl PostgresConfig {
    /// Checks the configuration directory as hale's operations do before
    /// they start the server (`promote`, `rejoin`, `start_standby`; never
    /// `fence`): `<config_dir>/postgresql.conf` names `data_dir`, and a
    /// packaged cluster is not started by the distribution at boot. For a
    /// start-up check too (the agent's). Nothing to check without
    /// `config_dir`.
    pub async fn check_layout(&self) -> Result<(), LayoutError> {
        let Some(config_dir) = &self.config_dir else {
            return Ok(());
        };
        let config_file = self.config_file();
        let dir = config_dir.clone();
        let boot = run_blocking({
            let config_file = config_file.clone();
            move || {
                std::fs::File::open(&config_file)?;
                Ok(started_at_boot(&dir))
            }
        })
        .await
        .map_err(|source| LayoutError::NoConfig {
            path: config_file.clone(),
            source,
        })?;
        if let Some(refusal) = boot {
            return Err(refusal);
        }
        let ask = |source| LayoutError::Ask {
            config_file: config_file.clone(),
            source,
        };
        let tools = Tools::new(self).map_err(ask)?;
        let out = tools
            .run(
                "postgres",
                [
                    "-C".as_ref(),
                    "data_directory".as_ref(),
                    "-D".as_ref(),
                    config_dir.as_os_str(),
                ],
                ASK_TIMEOUT,
            )
            .await
            .map_err(ask)?;
        let names = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if !same_dir(&names, &self.data_dir) {
            return Err(LayoutError::OtherDataDir {
                config_file,
                names,
                data_dir: self.data_dir.clone(),
            });
        }
        warn_ignored(config_dir);
        Ok(())
    }
}

/// Whether two paths name the same directory: equal component by component,
/// or, both existing, after resolving symbolic links.
fn same_dir(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(a), Ok(b)) if a == b
        )
}

/// `<version>` and `<name>` of a packaged cluster's configuration directory
/// (`/etc/postgresql/<version>/<name>`); `None` for any other directory.
fn packaged(config_dir: &Path) -> Option<(String, String)> {
    let name = config_dir.file_name()?.to_str()?;
    let version_dir = config_dir.parent()?;
    let version = version_dir.file_name()?.to_str()?;
    (version_dir.parent()? == Path::new(PACKAGED_ROOT))
        .then(|| (version.to_owned(), name.to_owned()))
}

/// The value of a `start.conf` (`auto`, `manual` or `disabled`): its first
/// line that is not blank once comments are removed, as
/// `postgresql-common`'s systemd generator reads it.
fn start_conf_value(text: &str) -> Option<String> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .find(|line| !line.is_empty())
        .map(str::to_owned)
}

/// What starts the cluster of `config_dir` at boot, if anything does: a
/// `start.conf` saying `auto` (for a packaged cluster, a missing one counts
/// as `auto`, as the distribution reads it), or its enabled
/// `postgresql@<version>-<name>` unit.
fn started_at_boot(config_dir: &Path) -> Option<LayoutError> {
    let packaged = packaged(config_dir);
    let cluster = packaged.as_ref().map_or_else(
        || config_dir.display().to_string(),
        |(v, n)| format!("{v}/{n}"),
    );
    let start_conf = config_dir.join("start.conf");
    let value = match std::fs::read_to_string(&start_conf) {
        Ok(text) => start_conf_value(&text),
        Err(_) if packaged.is_some() => Some("auto".to_owned()),
        Err(_) => None,
    };
    if value.as_deref() == Some("auto") {
        let reload = if packaged.is_some() {
            " (then systemctl daemon-reload)"
        } else {
            ""
        };
        return Some(LayoutError::StartsAtBoot {
            cluster,
            why: format!(
                "{} says auto (or is missing): the distribution's postgresql service starts it",
                start_conf.display()
            ),
            fix: format!(
                "write manual in {}{reload}; hale starts and stops it",
                start_conf.display()
            ),
        });
    }
    let (version, name) = packaged?;
    let unit = format!("postgresql@{version}-{name}.service");
    let enabled = std::fs::read_dir(SYSTEMD_UNITS)
        .ok()?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".wants"))
        .map(|entry| entry.path().join(&unit))
        .find(|link| link.symlink_metadata().is_ok())?;
    Some(LayoutError::StartsAtBoot {
        cluster,
        why: format!("its unit {unit} is enabled ({})", enabled.display()),
        fix: format!("systemctl disable postgresql@{version}-{name}; hale starts and stops it"),
    })
}

/// Logs the settings of a packaged cluster's `pg_ctl.conf` and `environment`
/// that `pg_ctlcluster` applies and hale, starting the server with `pg_ctl`
/// itself, does not.
fn warn_ignored(config_dir: &Path) {
    let settings = |file: &str| -> Vec<String> {
        let Ok(text) = std::fs::read_to_string(config_dir.join(file)) else {
            return Vec::new();
        };
        text.lines()
            .map(|line| line.split('#').next().unwrap_or("").trim())
            .filter(|line| !line.is_empty())
            .filter(|line| {
                // pg_ctl.conf's default: pg_ctl_options = ''
                let value = line.split_once('=').map_or("", |(_, v)| v.trim());
                file != "pg_ctl.conf" || !matches!(value, "" | "''")
            })
            .map(str::to_owned)
            .collect()
    };
    for file in ["pg_ctl.conf", "environment"] {
        let set = settings(file);
        if !set.is_empty() {
            tracing::warn!(
                file = %config_dir.join(file).display(),
                settings = ?set,
                "hale starts the server with pg_ctl itself and does not apply these settings \
                 (pg_ctlcluster does): put server settings in postgresql.conf"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packaged_cluster_is_named_by_its_version_and_name_and_no_other_directory_is() {
        assert_eq!(
            packaged(Path::new("/etc/postgresql/15/main")),
            Some(("15".to_owned(), "main".to_owned()))
        );
        assert_eq!(packaged(Path::new("/etc/postgresql/15")), None);
        assert_eq!(packaged(Path::new("/srv/pg/conf")), None);
        assert_eq!(packaged(Path::new("/")), None);
    }

    #[test]
    fn start_conf_is_read_as_the_distribution_reads_it() {
        let debian = "# Automatic startup configuration\n#   auto: ...\n\nauto\n";
        assert_eq!(start_conf_value(debian).as_deref(), Some("auto"));
        assert_eq!(
            start_conf_value("  manual  # by hale\n").as_deref(),
            Some("manual")
        );
        assert_eq!(start_conf_value("# nothing\n\n"), None);
    }

    #[test]
    fn a_directory_that_is_no_packaged_cluster_starts_at_boot_only_by_its_start_conf() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert!(started_at_boot(dir.path()).is_none(), "no start.conf");
        std::fs::write(dir.path().join("start.conf"), "manual\n").expect("write");
        assert!(started_at_boot(dir.path()).is_none());
        std::fs::write(dir.path().join("start.conf"), "# x\nauto\n").expect("write");
        let refused = started_at_boot(dir.path()).expect("auto starts it at boot");
        assert!(refused.to_string().contains("write manual in"), "{refused}");
    }
}
