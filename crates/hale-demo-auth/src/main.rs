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
