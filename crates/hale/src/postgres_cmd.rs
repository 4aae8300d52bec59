//! `hale postgres promote|fence|status`: the operations of a
//! `[role.postgres]` role on the local server. The agent runs `promote` and
//! `fence` as the role's hooks (with `--settings`, the role's
//! `[role.postgres]` table as JSON); an operator runs them with `--config`
//! and `--role`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use hale_agent::config::FileConfig;
use hale_postgres::PostgresConfig;

use crate::client_cmd::block_on;

/// `hale postgres ...`.
#[derive(Debug, Args)]
pub struct PostgresArgs {
    #[command(subcommand)]
    op: Op,
}

#[derive(Debug, Subcommand)]
enum Op {
    /// Make the local server the primary (refused while it is fenced): the
    /// promote hook of a `[role.postgres]` role.
    Promote(Target),
    /// Fence the local server: no writes now or after a restart (fence
    /// marker, standby.signal, stopped, killed if hung): the demote hook.
    Fence(Target),
    /// Where the local server stands in replication, as JSON.
    Status(Target),
    /// Whether the local server does its job (a primary commits a write, a
    /// replica answers, disk to spare), as the `postgres` service check
    /// runs it; exit status 1 when it does not within `--timeout`.
    Check {
        #[command(flatten)]
        target: Target,
        /// How long the check may take.
        #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
}

/// Which server: `--settings JSON`, or a role of a configuration file.
#[derive(Debug, Args)]
struct Target {
    /// The role's `[role.postgres]` table as JSON (how the agent runs the hooks).
    #[arg(long, conflicts_with_all = ["config", "role"])]
    settings: Option<String>,
    /// The agent's configuration file.
    #[arg(long, short, requires = "role")]
    config: Option<PathBuf>,
    /// The `[[role]]` with a `[role.postgres]` table in it.
    #[arg(long, requires = "config")]
    role: Option<String>,
}

impl Target {
    fn settings(&self) -> anyhow::Result<PostgresConfig> {
        let pg: PostgresConfig = match (&self.settings, &self.config, &self.role) {
            (Some(json), _, _) => serde_json::from_str(json).context("--settings")?,
            (None, Some(path), Some(role)) => {
                let file = FileConfig::load(path)?;
                let spec = file
                    .roles
                    .iter()
                    .find(|r| &r.name == role)
                    .with_context(|| format!("{}: no [[role]] named {role:?}", path.display()))?;
                spec.postgres.clone().with_context(|| {
                    format!("{}: role {role:?} has no [role.postgres]", path.display())
                })?
            }
            _ => anyhow::bail!("give --settings JSON, or --config FILE --role NAME"),
        };
        pg.validate()?;
        Ok(pg)
    }
}

/// Prints what a hook did; an output nobody reads any more (a closed pipe)
/// must not turn a promotion or a fence that happened into a failure.
fn say(what: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{what}");
}

/// Runs the operation; prints what it did (JSON for `status`).
pub fn run(args: &PostgresArgs) -> anyhow::Result<ExitCode> {
    match &args.op {
        Op::Promote(t) => {
            let pg = t.settings()?;
            let done = block_on(hale_postgres::promote(&pg))??;
            say(format_args!("{done:?}"));
        }
        Op::Fence(t) => {
            let pg = t.settings()?;
            let done = block_on(hale_postgres::fence(&pg))??;
            say(format_args!("{done:?}"));
        }
        Op::Status(t) => {
            let pg = t.settings()?;
            let standing = block_on(hale_postgres::standing(&pg))??;
            println!("{}", serde_json::to_string_pretty(&standing)?);
        }
        Op::Check { target, timeout } => {
            let pg = target.settings()?;
            let checked = block_on(async {
                tokio::time::timeout(*timeout, hale_postgres::check(&pg)).await
            })?;
            match checked {
                Ok(Ok(working)) => say(format_args!("{working}")),
                Ok(Err(e)) => {
                    say(format_args!("failing: {e}"));
                    return Ok(ExitCode::FAILURE);
                }
                Err(_) => {
                    say(format_args!("failing: no answer within {timeout:?}"));
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
