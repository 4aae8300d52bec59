//! `hale keys`: the cluster keyring, changed live on every agent (through
//! the local agent, which fans the operation out sealed with the current
//! keys; see `hale_agent::keys_api`).

use clap::{Args, Subcommand};

use hale_agent::view::KeyOp;

use crate::client_cmd::{block_on, ApiArgs};

/// `hale keys ...`.
#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub action: KeysAction,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// What to do with the keyring.
#[derive(Debug, Subcommand)]
pub enum KeysAction {
    /// This agent's keys (fingerprints; the primary seals, all open).
    List,
    /// Add KEY to every agent's keyring (it opens; nothing seals with it yet).
    Install {
        /// The key, base64 (from `hale keygen`).
        key: String,
    },
    /// Make the installed KEY the primary on every agent (it seals from now on).
    Use {
        /// The key, base64.
        key: String,
    },
    /// Drop KEY (not the primary) from every agent's keyring. Refused
    /// while a member that has not left is dead: it may never have
    /// installed the new key and would be locked out when it comes back.
    Remove {
        /// The key, base64.
        key: String,
        /// Remove it even so (the dead member will not come back, or will
        /// come back with the new key in its hale.toml).
        #[arg(long)]
        force: bool,
    },
}

/// Runs `hale keys`; fails unless every agent applied the operation.
pub fn run(args: &KeysArgs) -> anyhow::Result<()> {
    let client = args.api.client();
    let (op, key, force) = match &args.action {
        KeysAction::List => {
            let v = block_on(client.keys())??;
            println!("keys of {} (the primary seals, every key opens):", v.node);
            for k in &v.keys {
                println!(
                    "  {}{}",
                    k.fingerprint,
                    if k.primary { "  primary" } else { "" }
                );
            }
            return Ok(());
        }
        KeysAction::Install { key } => (KeyOp::Install, key, false),
        KeysAction::Use { key } => (KeyOp::Use, key, false),
        KeysAction::Remove { key, force } => (KeyOp::Remove, key, *force),
    };
    let r = block_on(client.key_op_forced(op, key, force))??;
    println!(
        "{} {}: applied by {} of {} agents",
        op.as_str(),
        r.key,
        r.ok.len(),
        r.agents
    );
    for (node, why) in &r.failed {
        println!("  NOT on {node}: {why}");
    }
    if !r.failed.is_empty() {
        anyhow::bail!(
            "{} agent(s) did not apply it: repeat once they answer{}",
            r.failed.len(),
            if op == KeyOp::Use {
                " (and do not remove the old key before)"
            } else {
                ""
            }
        );
    }
    println!("remember to put the new keys in every agent's hale.toml ([cluster] keys, the primary first) before it restarts");
    Ok(())
}
