//! `hale roles`, `hale roles handover|pause|resume|switchover`, `hale services`, and the internal
//! `hale watchdog` that fences a role when its lease runs out.

use clap::{Args, Subcommand};

use crate::client_cmd::{block_on, ApiArgs};

/// `hale roles [handover ROLE]`.
#[derive(Debug, Args)]
pub struct RolesArgs {
    #[command(subcommand)]
    pub action: Option<RolesAction>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub api: ApiArgs,
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
    /// Pause ROLE (from any member): no automatic promotion or demotion,
    /// and its holder keeps it whatever its checks say, until `resume`.
    Pause {
        /// The role.
        role: String,
    },
    /// Resume a paused ROLE: it moves on faults again. Refused while
    /// ROLE's holding is kept (its holder's agent stopped keeping the role
    /// and no later run has adopted it), and while its holder has renewed
    /// nothing for longer than a lease.
    Resume {
        /// The role.
        role: String,
        /// Resume even though the holding is kept or the holder silent
        /// (accepted a lease plus the drift margin after its last
        /// renewal): stop its service by hand first, or another node is
        /// promoted while it still runs.
        #[arg(long)]
        force: bool,
    },
    /// Switch ROLE over to candidate NODE (from any member): refused, with
    /// the reason, unless NODE is a live candidate that may be promoted
    /// (not set promotable = false) whose checks pass and,
    /// for a PostgreSQL role, a replica streaming within its
    /// max_lag_on_failover. The holder waits for NODE to catch up, demotes,
    /// and NODE is promoted.
    Switchover {
        /// The role.
        role: String,
        /// The candidate to hand it to.
        #[arg(long, required_unless_present = "cancel")]
        to: Option<String>,
        /// Not before TIME: an RFC 3339 time (2026-12-03T02:00:00Z) or a
        /// delay from now (10m, 1h30m).
        #[arg(long, conflicts_with = "cancel")]
        at: Option<String>,
        /// Withdraw the switchover ordered for the current holder.
        #[arg(long, conflicts_with = "to")]
        cancel: bool,
    },
}

/// Unix milliseconds as an RFC 3339 time (to the second).
fn rfc3339(unix_ms: u64) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms),
    )
}

/// `--at`: an RFC 3339 time or a delay from `now`, as Unix milliseconds.
pub fn parse_at(at: &str, now: std::time::SystemTime) -> anyhow::Result<u64> {
    let t = match humantime::parse_rfc3339_weak(at) {
        Ok(t) => t,
        Err(_) => match humantime::parse_duration(at) {
            Ok(d) => now + d,
            Err(_) => anyhow::bail!(
                "--at {at:?}: expected an RFC 3339 time (2026-12-03T02:00:00Z) or a delay (10m)"
            ),
        },
    };
    let ms = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| anyhow::anyhow!("--at {at:?} is before 1970"))?
        .as_millis();
    Ok(u64::try_from(ms)?)
}

/// `hale roles`.
pub fn roles(args: &RolesArgs) -> anyhow::Result<()> {
    let client = args.api.client();
    match &args.action {
        Some(RolesAction::Handover { role, to }) => {
            block_on(client.handover(role, to.as_deref()))??;
            match to {
                Some(n) => println!("handing {role} over to {n}"),
                None => println!("handing {role} over to the next candidate"),
            }
            return Ok(());
        }
        Some(RolesAction::Pause { role } | RolesAction::Resume { role, .. }) => {
            let v = match &args.action {
                Some(RolesAction::Resume { force: true, .. }) => {
                    block_on(client.force_resume(role))??
                }
                a => {
                    let pause = matches!(a, Some(RolesAction::Pause { .. }));
                    block_on(client.set_paused(role, pause))??
                }
            };
            if v.paused {
                println!("{role} paused: no automatic promotion or demotion until `hale roles resume {role}`");
            } else {
                println!("{role} resumed");
            }
            return Ok(());
        }
        Some(RolesAction::Switchover {
            role,
            to,
            at,
            cancel: _,
        }) => {
            let at = at
                .as_deref()
                .map(|a| parse_at(a, std::time::SystemTime::now()))
                .transpose()?;
            let v = block_on(client.switchover(role, to.as_deref(), at))??;
            match &v.to {
                Some(to) if v.at_unix_ms == 0 => println!(
                    "{role}: switchover from {} to {to} ordered; the holder hands over once {to} has caught up",
                    v.from
                ),
                Some(to) => println!(
                    "{role}: switchover from {} to {to} ordered for {}",
                    v.from,
                    rfc3339(v.at_unix_ms)
                ),
                None => println!("{role}: switchover cancelled"),
            }
            return Ok(());
        }
        None => {}
    }
    let v = block_on(client.roles())??;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("{:<16}{:<20}{:>7}", "ROLE", "HOLDER", "EPOCH");
    if let Some(leases) = &v.leases {
        for (role, l) in leases {
            println!(
                "{:<16}{:<20}{:>7}{}{}",
                role,
                l.holder.as_deref().unwrap_or("-"),
                l.epoch,
                if l.paused { "  PAUSED" } else { "" },
                if l.kept {
                    "  KEPT (agent down: not adopted yet; resume is refused until it is)"
                } else {
                    ""
                }
            );
            if let Some(o) = &l.switchover {
                let when = if o.at_unix_ms == 0 {
                    "as soon as it has caught up".to_owned()
                } else {
                    format!("at {}", rfc3339(o.at_unix_ms))
                };
                println!("{:<16}switchover to {} ordered, {when}", "", o.to);
            }
        }
    } else {
        println!("(control plane unreachable or not configured)");
    }
    println!("\nThis node's candidacies:");
    println!(
        "{:<16}{:<12}{:>9}{:>7}{:>12}  LAST CHANGE",
        "ROLE", "STATE", "PRIORITY", "EPOCH", "LEASE LEFT"
    );
    for r in &v.local {
        println!(
            "{:<16}{:<12}{:>9}{:>7}{:>12}  {}",
            r.role,
            r.state.as_str(),
            r.priority,
            r.epoch.map_or("-".into(), |e| e.to_string()),
            r.lease_left_ms.map_or("-".into(), |ms| format!("{ms}ms")),
            r.last_change.as_deref().unwrap_or("-"),
        );
        if let Some(what) = r.tags.describe() {
            println!("{:<16}{what}", "");
        }
        if let Some(why) = &r.handover_waits {
            println!("{:<16}{why}", "");
        }
    }
    let pg: Vec<_> = v
        .local
        .iter()
        .filter_map(|r| Some((r, r.postgres.as_ref()?)))
        .collect();
    if !pg.is_empty() {
        println!("\nPostgreSQL on this node:");
        println!(
            "{:<16}{:<10}{:>14}{:>12}  {:<10}  DETAIL",
            "ROLE", "SERVER", "POSITION", "LAG", "REJOIN"
        );
        for (r, p) in pg {
            println!("{}", postgres_line(r, p));
        }
    }
    Ok(())
}

/// One `[role.postgres]` role's line of `hale roles`: the server's
/// standing, WAL position, lag behind the holder's last mark, last rejoin
/// step, and what is wrong (fenced, not eligible, an error).
fn postgres_line(r: &hale_agent::view::RoleView, p: &hale_agent::view::PostgresView) -> String {
    use hale_postgres::{format_lsn, Standing};
    let (server, position) = match &p.standing {
        Some(Standing::Primary { lsn, .. }) => ("primary", format_lsn(*lsn)),
        Some(Standing::Replica {
            replay_lsn,
            streaming,
            ..
        }) => (
            if *streaming { "streaming" } else { "replica" },
            format_lsn(*replay_lsn),
        ),
        Some(Standing::Down) => ("down", "-".into()),
        None => ("unknown", "-".into()),
    };
    let mut detail = Vec::new();
    if p.fenced {
        detail.push("fenced: rejoins before it may be promoted".to_owned());
    }
    if let Some(l) = r.lagging {
        detail.push(format!(
            "not eligible: {} bytes behind, max_lag_on_failover {}",
            l.lag, l.max_lag
        ));
    }
    if let Some(e) = &p.error {
        detail.push(e.clone());
    }
    format!(
        "{:<16}{:<10}{:>14}{:>12}  {:<10}  {}",
        r.role,
        server,
        position,
        p.lag().map_or("-".into(), |l| format!("{l} B")),
        p.rejoin.map_or("-", |s| s.as_str()),
        if detail.is_empty() {
            "-".to_owned()
        } else {
            detail.join("; ")
        }
    )
}

/// Arguments of `hale services`.
#[derive(Debug, Args)]
pub struct ServicesArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `hale services`.
pub fn services(args: &ServicesArgs) -> anyhow::Result<()> {
    let v = block_on(args.api.client().services())??;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:<16}{:<11}{:<9}{:<7}  CHECKS (last result)",
        "SERVICE", "ESSENTIAL", "HEALTHY", "READY"
    );
    for s in &v {
        let checks: Vec<String> = s
            .checks
            .iter()
            .map(|c| {
                let last = c.recent.last();
                format!(
                    "{}: {}",
                    c.name,
                    last.map_or("not run yet", |l| l.detail.as_str())
                )
            })
            .collect();
        println!(
            "{:<16}{:<11}{:<9}{:<7}  {}",
            s.name,
            s.essential,
            s.healthy,
            s.ready,
            checks.join("; ")
        );
    }
    Ok(())
}

/// `hale demote-once` (started by the agent, not by people): the agent's
/// demote command under the holding's claim.
#[derive(Debug, Args)]
pub struct DemoteOnceArgs {
    /// The holding's demote claim, shared with the watchdog's fence.
    #[arg(long)]
    pub claim: std::path::PathBuf,
    /// From this instant (nanoseconds of CLOCK_MONOTONIC: the lease's end),
    /// kill a demote still holding the claim instead of waiting for it (the
    /// watchdog's fence).
    #[arg(long)]
    pub preempt_at: Option<u64>,
    /// The demote command and its arguments.
    #[arg(last = true)]
    pub demote: Vec<String>,
}

/// `hale demote-once`.
pub fn demote_once(a: &DemoteOnceArgs) -> std::process::ExitCode {
    #[allow(unused_mut)] // Changed only by a planted bug.
    let mut preempt_at = a.preempt_at;
    // Test builds only (see `hale_control::planted`): the fence waits for
    // the agent's demote however long it runs past the lease's end.
    #[cfg(feature = "planted-bugs")]
    if hale_control::planted::active("fence-waits") {
        preempt_at = None;
    }
    hale_agent::watchdog::demote_once(&a.claim, preempt_at, &a.demote)
}

/// `hale watchdog` (started by the agent, not by people): guards every
/// holding the agent tells it of; exit status 0 when its agent went away
/// with nothing to fence, 3 when it fenced.
pub fn watchdog() -> std::process::ExitCode {
    // Test builds only (see `hale_control::planted`): a watchdog that never fences.
    #[cfg(feature = "planted-bugs")]
    if hale_control::planted::active("no-watchdog") {
        return planted_idle_watchdog();
    }
    match hale_agent::watchdog::run() {
        hale_agent::watchdog::WatchdogExit::Released => std::process::ExitCode::SUCCESS,
        hale_agent::watchdog::WatchdogExit::Fenced => std::process::ExitCode::from(3),
    }
}

/// Planted bug `no-watchdog`: answers the agent as a watchdog would, fences never.
#[cfg(feature = "planted-bugs")]
fn planted_idle_watchdog() -> std::process::ExitCode {
    use hale_agent::watchdog::{Answer, Disarmed, Order};
    use std::io::{BufRead, Write};
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        if let Ok(Order::Disarm { h }) = serde_json::from_str(line.trim()) {
            let disarmed = Disarmed::Disarmed;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", Answer { h, disarmed }.line());
            let _ = out.flush();
        }
    }
    std::process::ExitCode::SUCCESS
}

/// `hale control ...`: change the control plane's servers.
#[derive(Debug, Args)]
pub struct ControlArgs {
    #[command(subcommand)]
    pub action: ControlAction,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// What to change.
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
pub fn control(args: &ControlArgs) -> anyhow::Result<()> {
    let client = args.api.client();
    match &args.action {
        ControlAction::AddServer { id, addr } => {
            block_on(client.add_server(*id, addr))??;
            println!("server {id} ({addr}) added to the control plane");
        }
        ControlAction::RemoveServer { id } => {
            block_on(client.remove_server(*id))??;
            println!("server {id} removed from the control plane");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    #[test]
    fn at_takes_an_rfc3339_time_or_a_delay_from_now_and_refuses_anything_else() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(parse_at("10m", now).ok(), Some(1_600_000));
        assert_eq!(
            parse_at("2026-12-03T02:00:00Z", now).ok(),
            Some(1_796_263_200_000)
        );
        assert!(parse_at("tomorrow-ish", SystemTime::now()).is_err());
    }
}
