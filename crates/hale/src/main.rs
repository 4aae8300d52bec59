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

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::{Cli, Command};

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn sim_takes_a_scenario_and_its_options() {
        let cli = Cli::parse_from([
            "hale", "sim", "s.toml", "--seed", "9", "--runs", "3", "--nodes", "50", "--json",
            "r.json", "--plot", "p.svg",
        ]);
        let Command::Sim(a) = cli.command;
        assert_eq!(a.scenario.to_str(), Some("s.toml"));
        assert_eq!((a.seed, a.runs, a.nodes), (Some(9), 3, Some(50)));
        assert_eq!(a.reproduce(9), "hale sim s.toml --seed 9 --nodes 50");
    }

    #[test]
    fn zero_runs_are_refused() {
        assert!(Cli::try_parse_from(["hale", "sim", "s.toml", "--runs", "0"]).is_err());
    }
}
