//! `hale`: the command-line tool of the hale cluster-health layer.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod sim_cmd;

/// hale: cluster health (SWIM + Lifeguard failure detection).
#[derive(Debug, Parser)]
#[command(name = "hale", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario in the deterministic simulator and report on it.
    Sim(sim_cmd::SimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim_cmd::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
