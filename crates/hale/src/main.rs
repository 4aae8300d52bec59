//! `hale`: the command-line tool of the hale cluster-health layer.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod agent_cmd;
mod client_cmd;
mod cluster;
mod demo_cmd;
mod docs_cmd;
mod drill_cmd;
mod drill_report;
mod history_cmd;
mod keys_cmd;
mod postgres_cmd;
mod roles_cmd;
mod sim_cmd;
mod status_cmd;

/// hale: cluster health (SWIM + Lifeguard failure detection).
#[derive(Debug, Parser)]
#[command(name = "hale", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent (a single-node loopback cluster without a config file).
    Agent(agent_cmd::AgentArgs),
    /// List the members the local agent knows, with the evidence behind deaths.
    Members(client_cmd::MembersArgs),
    /// Ask the local agent to join a cluster through these addresses.
    Join(client_cmd::JoinArgs),
    /// Ask the local agent to leave the cluster gracefully.
    Leave(client_cmd::ApiArgs),
    /// Ask the local agent to read its configuration file again and apply
    /// it, all of it or nothing (what SIGHUP does); exits 1 when refused.
    Reload(client_cmd::ReloadArgs),
    /// Print membership events (and follow them live with --follow).
    Events(client_cmd::EventsArgs),
    /// Print a new random cluster key (base64).
    Keygen,
    /// The cluster keyring, changed live on every agent: list, install, use, remove.
    Keys(keys_cmd::KeysArgs),
    /// Start a 5-node cluster on loopback, freeze one node and kill another.
    Demo(demo_cmd::DemoArgs),
    /// Show role holders, epochs and this node's candidacies; hand a role over.
    Roles(roles_cmd::RolesArgs),
    /// A role's failover history, cluster-wide: each change of its holder,
    /// when (UTC, the control-plane leader's clock), and why.
    History(history_cmd::HistoryArgs),
    /// Add or remove control-plane servers.
    Control(roles_cmd::ControlArgs),
    /// Show this node's services and their checks.
    Services(roles_cmd::ServicesArgs),
    /// Internal: the fencing watchdog the agent starts for the roles it holds.
    #[command(hide = true)]
    Watchdog,
    /// Internal: the agent's demote command, run once per holding.
    #[command(hide = true)]
    DemoteOnce(roles_cmd::DemoteOnceArgs),
    /// Run a scenario in the deterministic simulator and report on it.
    Sim(sim_cmd::SimArgs),
    /// Run a scripted, reversible outage against the cluster and report on it.
    Drill(drill_cmd::DrillArgs),
    /// The cluster on one screen: members, roles, failing checks, relays.
    Status(status_cmd::StatusArgs),
    /// A `[role.postgres]` role's server: promote, fence, status.
    Postgres(postgres_cmd::PostgresArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    Completions(docs_cmd::CompletionsArgs),
    /// Print the man page (roff: `hale man | man -l -`).
    Man,
}

/// The CLI's definition, its long version naming the protocols it speaks.
fn command() -> clap::Command {
    Cli::command().long_version(long_version())
}

/// `hale --version`: the release and the protocol versions it speaks.
fn long_version() -> String {
    format!(
        "{}\nwire protocol: {} (writes the highest every live member speaks)\n\
         control-plane protocol: {} (speaks {} to {})",
        env!("CARGO_PKG_VERSION"),
        hale_core::wire::SPOKEN,
        hale_control::PROTOCOL,
        hale_control::OLDEST_PROTOCOL,
        hale_control::PROTOCOL,
    )
}

fn main() -> ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let result = match &cli.command {
        Command::Sim(args) => sim_cmd::run(args),
        Command::Agent(a) => agent_cmd::run(a).map(|()| ExitCode::SUCCESS),
        Command::Members(a) => client_cmd::members(a).map(|()| ExitCode::SUCCESS),
        Command::Join(a) => client_cmd::join(a).map(|()| ExitCode::SUCCESS),
        Command::Leave(api) => client_cmd::leave(api).map(|()| ExitCode::SUCCESS),
        Command::Events(a) => client_cmd::events(a).map(|()| ExitCode::SUCCESS),
        Command::Reload(a) => client_cmd::reload(a).map(|ok| ExitCode::from(u8::from(!ok))),
        Command::Keygen => {
            agent_cmd::keygen();
            Ok(ExitCode::SUCCESS)
        }
        Command::Keys(a) => keys_cmd::run(a).map(|()| ExitCode::SUCCESS),
        Command::Roles(a) => roles_cmd::roles(a).map(|()| ExitCode::SUCCESS),
        Command::History(a) => history_cmd::run(a).map(|()| ExitCode::SUCCESS),
        Command::Control(a) => roles_cmd::control(a).map(|()| ExitCode::SUCCESS),
        Command::Services(a) => roles_cmd::services(a).map(|()| ExitCode::SUCCESS),
        Command::Watchdog => Ok(roles_cmd::watchdog()),
        Command::DemoteOnce(a) => Ok(roles_cmd::demote_once(a)),
        Command::Drill(a) => drill_cmd::run(a),
        Command::Status(a) => status_cmd::run(a).map(|()| ExitCode::SUCCESS),
        Command::Postgres(a) => postgres_cmd::run(a),
        Command::Completions(a) => {
            docs_cmd::completions(command(), a.shell).map(|()| ExitCode::SUCCESS)
        }
        Command::Man => docs_cmd::man(command()).map(|()| ExitCode::SUCCESS),
        Command::Demo(a) => demo_cmd::run(a).map(|ok| ExitCode::from(u8::from(!ok))),
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

    use super::{command, long_version, Cli, Command};

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
        let Command::Sim(a) = cli.command else {
            panic!("not the sim command");
        };
        assert_eq!(a.scenario.to_str(), Some("s.toml"));
        assert_eq!((a.seed, a.runs, a.nodes), (Some(9), 3, Some(50)));
        assert_eq!(a.reproduce(9), "hale sim s.toml --seed 9 --nodes 50");
    }

    #[test]
    fn commands_accept_only_the_flags_they_use() {
        // The agent binds its configuration's address: no client flags.
        assert!(Cli::try_parse_from(["hale", "agent", "--http", "127.0.0.1:1"]).is_err());
        assert!(Cli::try_parse_from(["hale", "sim", "s.toml", "--token", "t"]).is_err());
        assert!(Cli::try_parse_from(["hale", "demo", "--http", "127.0.0.1:1"]).is_err());
        let cli = Cli::parse_from([
            "hale",
            "members",
            "--http",
            "127.0.0.1:1",
            "--api-token",
            "t",
        ]);
        let Command::Members(a) = cli.command else {
            panic!("not the members command");
        };
        assert_eq!(
            (a.api.http.as_str(), a.api.token.as_deref()),
            ("127.0.0.1:1", Some("t"))
        );
    }

    #[test]
    fn zero_runs_are_refused() {
        assert!(Cli::try_parse_from(["hale", "sim", "s.toml", "--runs", "0"]).is_err());
    }

    #[test]
    fn the_long_version_names_the_protocols_this_build_speaks() {
        let v = long_version();
        assert!(v.starts_with(env!("CARGO_PKG_VERSION")), "{v}");
        let wire = format!("wire protocol: {}", hale_core::wire::SPOKEN);
        assert!(v.contains(&wire), "{v}");
        let control = format!("control-plane protocol: {}", hale_control::PROTOCOL);
        assert!(v.contains(&control), "{v}");
    }

    #[test]
    fn the_man_page_and_completions_come_from_the_cli_definition() {
        let mut man = Vec::new();
        let rendered = clap_mangen::Man::new(command()).render(&mut man);
        assert!(rendered.is_ok(), "{rendered:?}");
        let man = String::from_utf8_lossy(&man);
        assert!(man.contains(".TH hale"), "{man}");
        let mut bash = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut command(),
            "hale",
            &mut bash,
        );
        let bash = String::from_utf8_lossy(&bash);
        assert!(
            bash.contains("_hale()") && bash.contains("switchover"),
            "{bash}"
        );
    }
}
