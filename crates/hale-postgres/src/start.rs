//! Starting the local server as a standby: what a member does with a
//! stopped server when nobody holds the role (a cold start of the whole
//! cluster), so that it can offer its copy.

use std::path::PathBuf;

use crate::config::{ConfigError, PostgresConfig};
use crate::credentials::{libpq_passfile, CredentialsError};
use crate::layout::LayoutError;
use crate::process::{postmaster, write_owned, ToolError, Tools};

/// What [`start_standby`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartedStandby {
    /// It ran already; nothing was done.
    AlreadyRunning,
    /// It was started, `standby.signal` written first.
    Started,
}

/// Why the server was not started. It is as it was (stopped), except that
/// `standby.signal` may have been written.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is invalid; nothing was done.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The data directory carries the fence marker: it rejoins the holder,
    /// it does not start on its own; nothing was done.
    #[error(
        "{0} carries hale's fence marker: it rejoins the holder, it does not start on its own"
    )]
    Fenced(PathBuf),
    /// No cluster in the data directory; nothing was done.
    #[error("{0} holds no PostgreSQL cluster (no PG_VERSION)")]
    NotACluster(PathBuf),
    /// The configuration directory (`config_dir`) names another data
    /// directory, or the distribution would start the cluster at boot;
    /// nothing was done.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// `standby.signal` could not be written; the server was not started.
    #[error("writing {path}: {source}")]
    Signal {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A password file or the passfile could not be used (or the passfile
    /// its WAL receiver reads written); nothing was done.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// The OS user could not be found, or `pg_ctl start` failed or timed out.
    #[error(transparent)]
    Start(#[from] ToolError),
}

/// Starts the local server as a standby (`standby.signal`, then `pg_ctl
/// start -w`), unless it runs already. Refused for a fenced data directory,
/// for secret files that cannot be used (see
/// [`PostgresConfig::check_secret_files`]) and for a configuration
/// directory that fails [`PostgresConfig::check_layout`].
pub async fn start_standby(cfg: &PostgresConfig) -> Result<StartedStandby, StartError> {
    cfg.validate()?;
    if postmaster(&cfg.data_dir).is_some() {
        return Ok(StartedStandby::AlreadyRunning);
    }
    cfg.check_layout().await?;
    let marker = cfg.fence_marker();
    if marker.exists() {
        return Err(StartError::Fenced(marker));
    }
    if !cfg.data_dir.join("PG_VERSION").is_file() {
        return Err(StartError::NotACluster(cfg.data_dir.clone()));
    }
    let tools = Tools::new(cfg)?;
    // The passfile its primary_conninfo names, written afresh (a password
    // changed meanwhile) before anything is.
    libpq_passfile(cfg, tools.user()).await?;
    let path = cfg.data_dir.join("standby.signal");
    write_owned(&path, Vec::new(), tools.user())
        .await
        .map_err(|source| StartError::Signal { path, source })?;
    tools.start(cfg.start_timeout, None).await?;
    Ok(StartedStandby::Started)
}
