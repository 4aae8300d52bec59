//! `hale keys`: the cluster keyring, changed live on every agent (through
//! the local agent, which fans the operation out sealed with the current
//! keys; see `hale_agent::keys_api`).

use clap::Subcommand;

use hale_agent::keys_api::{KeyReport, KeysView};

use crate::client_cmd::{get_json, post, runtime, ApiArgs};

/// `hale keys ...`.
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
    /// Drop KEY (not the primary) from every agent's keyring.
    Remove {
        /// The key, base64.
        key: String,
    },
}

/// Runs `hale keys`; fails unless every agent applied the operation.
pub fn run(api: &ApiArgs, action: &KeysAction) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let (op, key) = match action {
            KeysAction::List => {
                let v: KeysView = get_json(api, "/v1/keys").await?;
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
            KeysAction::Install { key } => ("install", key),
            KeysAction::Use { key } => ("use", key),
            KeysAction::Remove { key } => ("remove", key),
        };
        let v = post(
            api,
            &format!("/v1/keys/{op}"),
            serde_json::json!({ "key": key }),
        )
        .await?;
        let r: KeyReport = serde_json::from_value(v)?;
        println!(
            "{op} {}: applied by {} of {} agents",
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
                if op == "use" {
                    " (and do not remove the old key before)"
                } else {
                    ""
                }
            );
        }
        println!("remember to put the new keys in every agent's hale.toml ([cluster] keys, the primary first) before it restarts");
        Ok(())
    })
}
