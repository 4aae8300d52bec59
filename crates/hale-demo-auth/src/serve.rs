//! The auth service: axum + tokio-postgres, failures reported to Sentry.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use tokio::sync::Semaphore;
use tokio_postgres::{Client, NoTls};

/// `serve` options.
#[derive(clap::Args)]
pub struct Args {
    /// Where to listen for HTTP.
    #[arg(long)]
    listen: SocketAddr,
    /// libpq-style connection string of the database (through HAProxy).
    #[arg(long)]
    db: String,
    /// A file holding the database password (one line), kept off the
    /// command line and out of `--db`.
    #[arg(long)]
    db_password_file: Option<std::path::PathBuf>,
    /// Sentry DSN for failure reports (the local agent's relay).
    #[arg(long)]
    dsn: Option<String>,
    /// `concurrent`: envelopes posted to the relay concurrently from a queue
    /// of 10,000; `sdk`: the SDK's own reqwest transport (one request at a
    /// time, a queue of 30 that drops envelopes during bursts).
    #[arg(long, default_value = "concurrent")]
    transport: String,
    /// Database connections at most.
    #[arg(long, default_value_t = 16)]
    pool: usize,
    /// A login that takes longer than this against the database fails.
    #[arg(long, default_value_t = 2000)]
    query_timeout_ms: u64,
}

/// One statement: checks the user's secret and writes the login row.
const LOGIN: &str = "INSERT INTO logins (name) SELECT name FROM users \
                     WHERE name = $1 AND secret = $2 RETURNING id";

struct Auth {
    db: tokio_postgres::Config,
    idle: Mutex<Vec<Client>>,
    slots: Semaphore,
    query_timeout: Duration,
    ok: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    reported: AtomicU64,
}

#[derive(serde::Deserialize)]
struct Login {
    user: String,
    secret: String,
}

impl Auth {
    /// An idle open connection, or a new one.
    async fn client(&self) -> Result<Client, tokio_postgres::Error> {
        while let Some(c) = self.idle.lock().expect("pool lock").pop() {
            if !c.is_closed() {
                return Ok(c);
            }
        }
        let (client, conn) = self.db.connect(NoTls).await?;
        tokio::spawn(conn);
        Ok(client)
    }

    async fn login(&self, l: &Login) -> Result<Option<i64>, String> {
        let _slot = self.slots.acquire().await.map_err(|e| e.to_string())?;
        let attempt = async {
            let c = self
                .client()
                .await
                .map_err(|e| format!("connect: {:#}", anyhow::Error::from(e)))?;
            // A connection whose query failed is dropped, never reused.
            let row = c
                .query_opt(LOGIN, &[&l.user, &l.secret])
                .await
                .map_err(|e| match e.as_db_error() {
                    Some(db) => format!("query: {}", db.message()),
                    None => format!("query: {:#}", anyhow::Error::from(e)),
                })?;
            self.idle.lock().expect("pool lock").push(c);
            Ok(row.map(|r| r.get::<_, i64>(0)))
        };
        match tokio::time::timeout(self.query_timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "no answer from the database within {:?}",
                self.query_timeout
            )),
        }
    }

    fn report(&self, msg: &str, level: sentry::Level) {
        let id = sentry::Hub::main().capture_message(msg, level);
        if !id.is_nil() {
            self.reported.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn login(State(st): State<Arc<Auth>>, Json(l): Json<Login>) -> Response {
    match st.login(&l).await {
        Ok(Some(id)) => {
            st.ok.fetch_add(1, Ordering::Relaxed);
            Json(serde_json::json!({ "id": id })).into_response()
        }
        Ok(None) => {
            st.refused.fetch_add(1, Ordering::Relaxed);
            st.report(
                &format!("login refused for {}", l.user),
                sentry::Level::Warning,
            );
            (
                StatusCode::UNAUTHORIZED,
                Json(serde_json::json!({ "error": "bad credentials" })),
            )
                .into_response()
        }
        Err(e) => {
            let n = st.failed.fetch_add(1, Ordering::Relaxed);
            if n < 20 || n % 100 == 0 {
                eprintln!("login failed (#{}): {e}", n + 1);
            }
            st.report(&format!("login failed: {e}"), sentry::Level::Error);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(serde_json::json!({ "error": e })),
            )
                .into_response()
        }
    }
}

async fn stats(State(st): State<Arc<Auth>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "ok": st.ok.load(Ordering::Relaxed),
        "refused": st.refused.load(Ordering::Relaxed),
        "failed": st.failed.load(Ordering::Relaxed),
        "reported": st.reported.load(Ordering::Relaxed),
        "transport_dropped": crate::transport::DROPPED.load(Ordering::Relaxed),
    }))
}

/// Runs the auth service until killed.
pub fn main(a: Args) -> anyhow::Result<()> {
    let _sentry = match &a.dsn {
        Some(dsn) => {
            let dsn: sentry::types::Dsn = dsn.parse().context("--dsn")?;
            let transport: Arc<dyn sentry::TransportFactory> = match a.transport.as_str() {
                // The SDK's own reqwest transport.
                "sdk" => Arc::new(sentry::transports::DefaultTransportFactory),
                "concurrent" => {
                    let t = crate::transport::Concurrent::start(&dsn)?;
                    Arc::new(
                        move |_: &sentry::ClientOptions| -> Arc<dyn sentry::Transport> {
                            t.clone()
                        },
                    )
                }
                _ => anyhow::bail!("--transport is concurrent or sdk"),
            };
            Some(sentry::init(sentry::ClientOptions {
                dsn: Some(dsn),
                transport: Some(transport),
                ..Default::default()
            }))
        }
        None => None,
    };
    let mut db: tokio_postgres::Config = a.db.parse().context("--db")?;
    if let Some(path) = &a.db_password_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--db-password-file {}", path.display()))?;
        db.password(text.trim_end_matches(['\n', '\r']));
    }
    db.connect_timeout(Duration::from_secs(1));
    let auth = Arc::new(Auth {
        db,
        idle: Mutex::new(Vec::new()),
        slots: Semaphore::new(a.pool),
        query_timeout: Duration::from_millis(a.query_timeout_ms),
        ok: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        reported: AtomicU64::new(0),
    });
    let app = Router::new()
        .route("/login", post(login))
        .route("/stats", get(stats))
        .with_state(auth);
    crate::block_on(2, crate::serve_on(a.listen, app))
}
