//! `hale roles`, `hale roles handover`, `hale services`, and the internal
//! `hale watchdog` that fences a role when its lease runs out.

use std::time::Duration;

use clap::{Args, Subcommand};

use crate::client_cmd::ApiArgs;

/// `hale roles [handover ROLE]`.
#[derive(Debug, Args)]
pub struct RolesArgs {
    #[command(subcommand)]
    pub action: Option<RolesAction>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// What to do with roles.
#[derive(Debug, Subcommand)]
pub enum RolesAction {
    /// Ask the local agent, which must hold ROLE, to hand it to the next candidate.
    Handover {
        /// The role.
        role: String,
        /// Hand it to this candidate (by node name) rather than the next by priority.
        #[arg(long)]
        to: Option<String>,
    },
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

async fn get(api: &ApiArgs, path: &str) -> anyhow::Result<serde_json::Value> {
    crate::client_cmd::get_json(api, path).await
}

/// `hale roles`.
pub fn roles(api: &ApiArgs, args: &RolesArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        if let Some(RolesAction::Handover { role, to }) = &args.action {
            crate::client_cmd::post(
                api,
                &format!("/v1/roles/{role}/handover"),
                serde_json::json!({ "to": to }),
            )
            .await?;
            match to {
                Some(n) => println!("handing {role} over to {n}"),
                None => println!("handing {role} over to the next candidate"),
            }
            return Ok(());
        }
        let v = get(api, "/v1/roles").await?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&v)?);
            return Ok(());
        }
        println!("{:<16}{:<20}{:>7}", "ROLE", "HOLDER", "EPOCH");
        if let Some(leases) = v["leases"].as_object() {
            for (role, l) in leases {
                println!(
                    "{:<16}{:<20}{:>7}",
                    role,
                    l["holder"].as_str().unwrap_or("-"),
                    l["epoch"]
                );
            }
        } else {
            println!("(control plane unreachable or not configured)");
        }
        println!("\nThis node's candidacies:");
        println!(
            "{:<16}{:<12}{:>9}{:>7}{:>12}  LAST CHANGE",
            "ROLE", "STATE", "PRIORITY", "EPOCH", "LEASE LEFT"
        );
        for r in v["local"].as_array().into_iter().flatten() {
            println!(
                "{:<16}{:<12}{:>9}{:>7}{:>12}  {}",
                r["role"].as_str().unwrap_or("?"),
                r["state"].as_str().unwrap_or("?"),
                r["priority"].to_string(),
                r["epoch"].as_u64().map_or("-".into(), |e| e.to_string()),
                r["lease_left_ms"]
                    .as_u64()
                    .map_or("-".into(), |ms| format!("{ms}ms")),
                r["last_change"].as_str().unwrap_or("-"),
            );
        }
        Ok(())
    })
}

/// `hale services`.
pub fn services(api: &ApiArgs, json: bool) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let v = get(api, "/v1/services").await?;
        if json {
            println!("{}", serde_json::to_string_pretty(&v)?);
            return Ok(());
        }
        println!(
            "{:<16}{:<11}{:<9}{:<7}  CHECKS (last result)",
            "SERVICE", "ESSENTIAL", "HEALTHY", "READY"
        );
        for s in v.as_array().into_iter().flatten() {
            let checks: Vec<String> = s["checks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let last = c["recent"].as_array().and_then(|r| r.last());
                    format!(
                        "{}: {}",
                        c["name"].as_str().unwrap_or("?"),
                        last.map_or("not run yet".into(), |l| l["detail"]
                            .as_str()
                            .unwrap_or("")
                            .to_owned())
                    )
                })
                .collect();
            println!(
                "{:<16}{:<11}{:<9}{:<7}  {}",
                s["name"].as_str().unwrap_or("?"),
                s["essential"].to_string(),
                s["healthy"].to_string(),
                s["ready"].to_string(),
                checks.join("; ")
            );
        }
        Ok(())
    })
}

/// `hale watchdog` (started by the agent, not by people).
#[derive(Debug, Args)]
pub struct WatchdogArgs {
    /// Fence if not re-armed within this many milliseconds.
    #[arg(long)]
    pub deadline_ms: u64,
    /// Hard limit on the fence command.
    #[arg(long, default_value_t = 10_000)]
    pub hook_timeout_ms: u64,
    /// The fence (demote) command and its arguments.
    #[arg(last = true)]
    pub fence: Vec<String>,
}

/// Runs the watchdog; exit status 0 when released, 3 when it fenced.
pub fn watchdog(args: &WatchdogArgs) -> std::process::ExitCode {
    let env: Vec<(String, String)> = ["HALE_ROLE", "HALE_EPOCH", "HALE_NODE"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
        .collect();
    match hale_agent::watchdog::run(
        Duration::from_millis(args.deadline_ms),
        &args.fence,
        &env,
        Duration::from_millis(args.hook_timeout_ms),
    ) {
        hale_agent::watchdog::WatchdogExit::Released => std::process::ExitCode::SUCCESS,
        _ => std::process::ExitCode::from(3),
    }
}

/// `hale control ...`: change the control plane's servers.
#[derive(Debug, clap::Subcommand)]
pub enum ControlAction {
    /// Add a server (start its agent with `[control] id = ID` first).
    AddServer {
        /// The new server's id.
        id: u64,
        /// Its Raft/HTTP address (host:port).
        addr: String,
    },
    /// Remove a server from the control plane.
    RemoveServer {
        /// The server's id.
        id: u64,
    },
}

/// `hale control add-server | remove-server`.
pub fn control(api: &ApiArgs, action: &ControlAction) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        match action {
            ControlAction::AddServer { id, addr } => {
                crate::client_cmd::post(
                    api,
                    "/v1/control/servers",
                    serde_json::json!({ "id": id, "addr": addr }),
                )
                .await?;
                println!("server {id} ({addr}) added to the control plane");
            }
            ControlAction::RemoveServer { id } => {
                crate::client_cmd::post(
                    api,
                    &format!("/v1/control/servers/{id}/remove"),
                    serde_json::json!({}),
                )
                .await?;
                println!("server {id} removed from the control plane");
            }
        }
        Ok(())
    })
}
