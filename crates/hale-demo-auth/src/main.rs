//! `hale-demo-auth`: the real parts of hale's first incident, for
//! `examples/postgres-failover/run.sh`.
//!
//! * `serve` — the auth service: `POST /login` checks a user against
//!   PostgreSQL (through HAProxy) and writes a login row; every failure is
//!   reported with the `sentry` crate (DSN at the local agent's relay).
//! * `load` — logs in at a fixed rate (open loop) and records every attempt.
//! * `sink` — a Sentry that counts the events it receives, or a half-dead one.
//! * `analyze` — the run's timeline and figures from what the others recorded.

mod analyze;
mod load;
mod serve;
mod sink;
mod transport;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "hale's incident with real parts: auth service, load, Sentry sinks, analysis")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The auth service.
    Serve(serve::Args),
    /// The load generator.
    Load(load::Args),
    /// A Sentry sink: counting, or half-dead.
    Sink(sink::Args),
    /// Timeline and figures of a run.
    Analyze(analyze::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Serve(a) => serve::main(a),
        Cmd::Load(a) => load::main(a),
        Cmd::Sink(a) => sink::main(a),
        Cmd::Analyze(a) => analyze::main(a),
    }
}

/// Runs `f` on a runtime of `threads` worker threads.
fn block_on<T>(
    threads: usize,
    f: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?
        .block_on(f)
}

/// Serves `app` on `addr`.
async fn serve_on(addr: std::net::SocketAddr, app: axum::Router) -> anyhow::Result<()> {
    use anyhow::Context;
    let l = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    axum::serve(l, app).await?;
    Ok(())
}
