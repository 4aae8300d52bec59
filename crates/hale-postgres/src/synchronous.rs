//! Synchronous replication when a standby can take it: the primary waits for
//! a standby's flush while one streams, and commits alone when none does.

use std::time::Duration;

use tokio::time::Instant;

use crate::client::{connect, poll_until, ConnectError};
use crate::config::{ConfigError, PostgresConfig};
use crate::standing::{SenderState, Standing};

/// The value of `synchronous_standby_names` hale sets when synchronous: any
/// one streaming standby (PostgreSQL takes the first in its list).
pub const ANY_STANDBY: &str = "*";

/// Why `synchronous_standby_names` could not be set. It is as it was, or set
/// but not yet in effect (`NotInEffect`).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The configuration is invalid; nothing was done.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The local server could not be reached.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The local server is a standby; nothing was done.
    #[error("the local server is a standby: only a primary has synchronous standbys")]
    NotPrimary,
    /// A query failed.
    #[error("setting synchronous_standby_names: {0}")]
    Query(#[from] tokio_postgres::Error),
    /// The setting was changed and the configuration reloaded, but the
    /// server did not report it in effect within `promote_timeout`.
    #[error("synchronous_standby_names set to {wanted:?} but not in effect after {after:?}")]
    NotInEffect {
        /// The value set.
        wanted: &'static str,
        /// How long hale waited.
        after: Duration,
    },
}

/// Sets `synchronous_standby_names` on the local primary: `'*'` when `on`,
/// `''` when not (`ALTER SYSTEM`, `pg_reload_conf()`), and waits until the
/// server reports the new value. Answers whether anything changed.
pub async fn set_synchronous(cfg: &PostgresConfig, on: bool) -> Result<bool, SyncError> {
    cfg.validate()?;
    let wanted = if on { ANY_STANDBY } else { "" };
    let client = connect(cfg, &cfg.host, cfg.port).await?;
    let query = "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names')";
    let row = client.query_one(query, &[]).await?;
    if row.get::<_, bool>(0) {
        return Err(SyncError::NotPrimary);
    }
    if row.get::<_, String>(1) == wanted {
        return Ok(false);
    }
    // Two queries: ALTER SYSTEM refuses a transaction block.
    client
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{wanted}'"
        ))
        .await?;
    client.batch_execute("SELECT pg_reload_conf()").await?;
    // The reload reaches each process asynchronously; a new session reads the
    // configuration the postmaster has loaded.
    let deadline = Instant::now() + cfg.promote_timeout;
    let in_effect = poll_until(deadline, Duration::from_millis(20), || async {
        let client = connect(cfg, &cfg.host, cfg.port).await.ok()?;
        let row = client
            .query_one("SELECT current_setting('synchronous_standby_names')", &[])
            .await
            .ok()?;
        (row.get::<_, String>(0) == wanted).then_some(())
    })
    .await;
    in_effect.map(|()| true).ok_or(SyncError::NotInEffect {
        wanted,
        after: cfg.promote_timeout,
    })
}

/// Keeps a primary synchronous when it can be (when `cfg.synchronous`): `'*'`
/// while some standby streams, `''` when none does, so that the primary keeps
/// accepting commits alone. `pg_basebackup`'s WAL stream does not count. Does
/// nothing for a replica, a server that is down, or when `cfg.synchronous` is
/// off. Answers the setting it decided (`Some(true)` for `'*'`), if any.
pub async fn maintain_synchronous(
    cfg: &PostgresConfig,
    standing: &Standing,
) -> Result<Option<bool>, SyncError> {
    let Standing::Primary { standbys, .. } = standing else {
        return Ok(None);
    };
    if !cfg.synchronous {
        return Ok(None);
    }
    let on = standbys
        .iter()
        .any(|s| s.state == SenderState::Streaming && s.name != "pg_basebackup");
    set_synchronous(cfg, on).await?;
    Ok(Some(on))
}
