//! Promotion: the local server becomes the primary, unless it is fenced.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::client::{connect, ConnectError};
use crate::config::{ConfigError, PostgresConfig};
use crate::layout::LayoutError;
use crate::process::{postmaster, ToolError, Tools};

/// What a promotion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "promotion")]
pub enum Promotion {
    /// It was a primary already.
    AlreadyPrimary {
        /// True when it was down and hale started it.
        started: bool,
    },
    /// It was a standby and was promoted (`pg_ctl promote`).
    Promoted {
        /// True when it was down and hale started it first.
        started: bool,
    },
}

/// Why a promotion did not happen. Unless said otherwise, the server is as it
/// was (started, if it was down and the start succeeded).
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    /// The configuration is invalid; nothing was done.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The data directory carries hale's fence marker: it must rejoin first.
    /// Nothing was done.
    #[error(
        "{marker} exists: this data directory was fenced and must rejoin before it may be promoted"
    )]
    Fenced {
        /// The marker.
        marker: PathBuf,
    },
    /// The data directory holds no cluster (`PG_VERSION` missing). Nothing
    /// was done.
    #[error("{data_dir} holds no PostgreSQL cluster")]
    NotACluster {
        /// The data directory.
        data_dir: PathBuf,
    },
    /// The configuration directory (`config_dir`) names another data
    /// directory, or the distribution would start the cluster at boot.
    /// Nothing was done.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// The server was down and did not start.
    #[error("starting the server: {0}")]
    Start(ToolError),
    /// `pg_ctl promote` failed or timed out; the server may still be
    /// promoting.
    #[error("promoting: {0}")]
    Promote(ToolError),
    /// The OS user could not be found; nothing was done.
    #[error(transparent)]
    Tool(ToolError),
    /// The running server could not be asked whether it is in recovery.
    #[error("asking whether it is in recovery: {0}")]
    Connect(#[from] ConnectError),
    /// The query whether it is in recovery failed.
    #[error("asking whether it is in recovery: {0}")]
    Query(#[from] tokio_postgres::Error),
}

/// Makes the local server the primary: refused when the data directory
/// carries the fence marker, or when the configuration directory fails
/// [`PostgresConfig::check_layout`]; starts the server if it is down; promotes it if
/// it is a standby (`pg_ctl promote -w -t promote_timeout`). Idempotent: a
/// primary is left as it is.
pub async fn promote(cfg: &PostgresConfig) -> Result<Promotion, PromoteError> {
    cfg.validate()?;
    cfg.check_layout().await?;
    let marker = cfg.fence_marker();
    if marker.exists() {
        return Err(PromoteError::Fenced { marker });
    }
    if !cfg.data_dir.join("PG_VERSION").is_file() {
        return Err(PromoteError::NotACluster {
            data_dir: cfg.data_dir.clone(),
        });
    }
    let tools = Tools::new(cfg).map_err(PromoteError::Tool)?;
    let started = postmaster(&cfg.data_dir).is_none();
    if started {
        tools
            .start(cfg.start_timeout, None)
            .await
            .map_err(PromoteError::Start)?;
    }
    let client = connect(cfg, &cfg.host, cfg.port).await?;
    let in_recovery: bool = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .get(0);
    if !in_recovery {
        return Ok(Promotion::AlreadyPrimary { started });
    }
    tools
        .pg_ctl("promote", &[], cfg.promote_timeout)
        .await
        .map_err(PromoteError::Promote)?;
    Ok(Promotion::Promoted { started })
}
