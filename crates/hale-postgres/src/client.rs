//! Connections to a PostgreSQL server with tokio-postgres, bounded in time,
//! telling "does not answer" apart from "answered with an error".

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use crate::config::PostgresConfig;

/// Why no session could be opened with a server.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server does not answer: nothing listens, the connection or the
    /// handshake timed out, or it is starting up or shutting down.
    #[error("PostgreSQL at {host}:{port} does not answer: {reason}")]
    Unanswered {
        /// The host or socket directory.
        host: String,
        /// The port.
        port: u16,
        /// Why.
        reason: String,
    },
    /// The server answered and refused the session (authentication, unknown
    /// database or user, too many connections).
    #[error("PostgreSQL at {host}:{port} refused the session: {source}")]
    Refused {
        /// The host or socket directory.
        host: String,
        /// The port.
        port: u16,
        /// What it said.
        source: tokio_postgres::Error,
    },
}

impl ConnectError {
    /// True when the server did not answer (as opposed to refusing).
    pub fn is_unanswered(&self) -> bool {
        matches!(self, Self::Unanswered { .. })
    }
}

/// Opens a session as `cfg.user` on `cfg.database` at `host:port` (a
/// directory starting with `/` is a unix-socket directory), giving up after
/// `cfg.connect_timeout`. The connection is driven by a spawned task that
/// ends when the client is dropped.
pub(crate) async fn connect(
    cfg: &PostgresConfig,
    host: &str,
    port: u16,
) -> Result<Client, ConnectError> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(host)
        .port(port)
        .user(&cfg.user)
        .dbname(&cfg.database)
        .application_name("hale")
        .connect_timeout(cfg.connect_timeout);
    let unanswered = |reason: String| ConnectError::Unanswered {
        host: host.to_owned(),
        port,
        reason,
    };
    match tokio::time::timeout(cfg.connect_timeout, config.connect(NoTls)).await {
        Err(_) => Err(unanswered(format!(
            "no session within {:?}",
            cfg.connect_timeout
        ))),
        Ok(Ok((client, connection))) => {
            tokio::spawn(async move {
                if let Err(err) = connection.await {
                    tracing::debug!(%err, "PostgreSQL connection ended");
                }
            });
            Ok(client)
        }
        Ok(Err(err)) => match err.code() {
            // No server error: the socket failed (refused, reset, timed out).
            None => Err(unanswered(err.to_string())),
            // "the database system is starting up / shutting down".
            Some(code) if *code == SqlState::CANNOT_CONNECT_NOW => Err(unanswered(err.to_string())),
            Some(_) => Err(ConnectError::Refused {
                host: host.to_owned(),
                port,
                source: err,
            }),
        },
    }
}

/// Polls `check` every `every` until it answers `Some`, or `deadline` passes
/// (then `None`). `check` runs at least once.
pub(crate) async fn poll_until<T, F, Fut>(
    deadline: tokio::time::Instant,
    every: Duration,
    mut check: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    loop {
        if let Some(found) = check().await {
            return Some(found);
        }
        if tokio::time::Instant::now() + every > deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}
