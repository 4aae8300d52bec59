//! Connections to a PostgreSQL server with tokio-postgres, bounded in time,
//! telling "does not answer" apart from "answered with an error".

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, NoTls, Socket};

use crate::config::PostgresConfig;
use crate::credentials::{session_password, CredentialsError};
use crate::tls::{connector, session_mode, TlsError};

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
    /// The TLS handshake failed: the server's certificate was refused
    /// (`sslmode`, `sslrootcert`), or the server offers no TLS where it is
    /// required. The server may be up: it counts as refusing, not as down.
    #[error("PostgreSQL at {host}:{port}: no TLS session (sslmode {sslmode}): {reason}")]
    Handshake {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The configured `sslmode`.
        sslmode: &'static str,
        /// Why.
        reason: String,
    },
    /// A password file or the passfile could not be used; nothing was
    /// connected to.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    /// TLS could not be readied (`sslrootcert`); nothing was connected to.
    #[error(transparent)]
    Tls(#[from] TlsError),
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
/// `cfg.connect_timeout`. The password is `cfg`'s (read now, see
/// [`crate::credentials`]); over TCP, TLS is as `cfg.sslmode` and
/// `cfg.sslrootcert` say ([`crate::tls`]). The connection is driven by a
/// spawned task that ends when the client is dropped.
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
    if let Some(password) = session_password(cfg, host, port)? {
        config.password(password.expose());
    }
    // libpq never uses TLS over a unix socket, whatever sslmode says.
    if host.starts_with('/') || cfg.sslmode == crate::tls::SslMode::Disable {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        open(cfg, &config, host, port, NoTls).await
    } else {
        config.ssl_mode(session_mode(cfg.sslmode));
        open(cfg, &config, host, port, connector(cfg)?).await
    }
}

/// Connects with `config` through `tls`, sorting the failures.
async fn open<T>(
    cfg: &PostgresConfig,
    config: &tokio_postgres::Config,
    host: &str,
    port: u16,
    tls: T,
) -> Result<Client, ConnectError>
where
    T: MakeTlsConnect<Socket>,
    T::Stream: Send + 'static,
    T::TlsConnect: Send,
    T::Error: Send,
    <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
{
    let unanswered = |reason: String| ConnectError::Unanswered {
        host: host.to_owned(),
        port,
        reason,
    };
    match tokio::time::timeout(cfg.connect_timeout, config.connect(tls)).await {
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
            // tokio-postgres's TLS failures (its error kind is private) all
            // say so first: a refused certificate, no TLS where required.
            None if err
                .to_string()
                .starts_with("error performing TLS handshake") =>
            {
                Err(ConnectError::Handshake {
                    host: host.to_owned(),
                    port,
                    sslmode: cfg.sslmode.as_str(),
                    reason: with_causes(&err),
                })
            }
            // No server error: the socket failed (refused, reset, closed,
            // timed out)...
            None if socket_failed(&err) => Err(unanswered(err.to_string())),
            // ... or the server answered with something hale cannot go on
            // with: a password it asked for and hale has none ("password
            // missing"), a failed SCRAM exchange.
            None => Err(ConnectError::Refused {
                host: host.to_owned(),
                port,
                source: err,
            }),
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

/// An error's message followed by its causes' (tokio-postgres's TLS error
/// does not show why the handshake failed).
fn with_causes(err: &tokio_postgres::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Whether a failed connection failed at the socket (nothing or nobody
/// answering): the connection was closed, timed out, or an I/O error is
/// among the error's causes.
fn socket_failed(err: &tokio_postgres::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(err);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    // tokio-postgres's own connect_timeout ("timeout waiting for server").
    err.is_closed() || err.to_string().starts_with("timeout")
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
