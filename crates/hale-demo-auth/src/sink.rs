//! A Sentry for the demo: hale-relay's fake Sentry (counting the distinct
//! event ids it accepts, or half-dead: accepts connections, never answers),
//! with a small control API beside it.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use hale_relay::fake::{FakeSentry, Mode};

/// `sink` options.
#[derive(clap::Args)]
pub struct Args {
    /// Where Sentry clients (the relay) send envelopes.
    #[arg(long)]
    listen: SocketAddr,
    /// Control API: `GET /count`, `POST /mode/up`, `POST /mode/half-dead`.
    #[arg(long)]
    control: SocketAddr,
    /// `up` (answers 200 and counts) or `half-dead` (never answers).
    #[arg(long, default_value = "up")]
    mode: String,
}

fn mode(s: &str) -> Option<Mode> {
    match s {
        "up" => Some(Mode::Up),
        "half-dead" => Some(Mode::HalfDead),
        _ => None,
    }
}

async fn count(State(s): State<Arc<FakeSentry>>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "event_ids": s.event_ids().len(),
        "events": s.events(),
        "requests": s.requests(),
    }))
}

async fn set_mode(State(s): State<Arc<FakeSentry>>, Path(m): Path<String>) -> StatusCode {
    match mode(&m) {
        Some(m) => {
            s.set_mode(m);
            StatusCode::NO_CONTENT
        }
        None => StatusCode::NOT_FOUND,
    }
}

/// Runs the sink until killed.
pub fn main(a: Args) -> anyhow::Result<()> {
    let m = mode(&a.mode).context("--mode is up or half-dead")?;
    crate::block_on(1, async {
        let sentry = Arc::new(
            FakeSentry::start_on(a.listen, m)
                .await
                .with_context(|| format!("binding {}", a.listen))?,
        );
        let app = Router::new()
            .route("/count", get(count))
            .route("/mode/{mode}", post(set_mode))
            .with_state(sentry);
        crate::serve_on(a.control, app).await
    })
}
