//! `hale status`: the cluster on one screen — members by state, roles
//! (holder, epoch, standbys), failing checks per node, relay state and any
//! drill faults in force. Asks the local agent, and every peer's agent (short
//! timeouts) through the addresses members publish.

use std::collections::{BTreeMap, BTreeSet};

use clap::Args;
use hale_agent::view::MemberState;
use hale_agent::MemberView;
use serde::Serialize;

use crate::client_cmd::{block_on, ApiArgs};
use crate::cluster::{self, Agents, NodeState};

/// Arguments of `hale status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// A peer's agent API address, when its metadata does not publish one
    /// (NAME=HOST:PORT; repeatable).
    #[arg(long = "peer")]
    pub peers: Vec<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// The summary, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct Status {
    /// The cluster's name, as the agent asked reports it.
    pub cluster: Option<String>,
    /// The agent asked.
    pub observer: String,
    /// Members the observer knows, itself included.
    pub size: usize,
    /// Member names by state (`alive`, `suspect`, `dead`, `left`).
    pub members: BTreeMap<String, Vec<String>>,
    /// Roles: holder, epoch, standbys (best first).
    pub roles: Vec<RoleStatus>,
    /// Whether the control plane answered.
    pub control_plane: bool,
    /// Services failing now, per node.
    pub failing_checks: Vec<FailingCheck>,
    /// Relays, per node running one.
    pub relays: Vec<(String, hale_agent::RelayView)>,
    /// Drill faults in force, per node.
    pub drill: Vec<(String, Vec<hale_agent::view::FaultView>)>,
    /// Clocks off beyond the control plane's window, per node that noticed.
    pub clocks: Vec<(String, hale_agent::view::ClockReport)>,
    /// Agents that did not answer (name, why).
    pub unreachable: Vec<(String, String)>,
    /// The control-plane server the agent asked runs, if any.
    pub control: Option<hale_control::raft::ControlStatus>,
    /// Live members by the wire versions they publish (`"2"` for agents
    /// before 0.2.0, which publish none): who is upgraded, mid-upgrade.
    pub wire: BTreeMap<String, Vec<String>>,
    /// The wire version the agent asked writes, and the versions it speaks.
    pub wire_written: Option<hale_agent::view::WireView>,
    /// The hooks of the agent asked: running, queued, the bound.
    pub hooks: Option<hale_agent::roles::slots::SlotCounts>,
}

/// One role.
#[derive(Debug, Serialize)]
pub struct RoleStatus {
    /// Role name.
    pub role: String,
    /// Holder, if any.
    pub holder: Option<String>,
    /// Fencing epoch.
    pub epoch: u64,
    /// Other candidates: (node, priority, eligible).
    pub standbys: Vec<(String, i64, bool)>,
    /// Paused by an operator: no automatic promotion or demotion.
    pub paused: bool,
    /// Candidates whose settings set them apart (node, what they say:
    /// never promoted, no load-balanced reads, never synchronous).
    pub set_apart: Vec<(String, String)>,
    /// Nobody holds the role (or its holder is gone) and no live candidate
    /// may take it: why.
    pub unheld: Option<String>,
}

/// One failing service.
#[derive(Debug, Serialize)]
pub struct FailingCheck {
    /// Node.
    pub node: String,
    /// Service.
    pub service: String,
    /// Whether it is essential.
    pub essential: bool,
    /// The last failing result.
    pub detail: String,
}

/// Builds the summary from a survey.
pub fn summarize(observer: &str, members: &[MemberView], nodes: &[NodeState]) -> Status {
    let mut by_state: BTreeMap<String, Vec<String>> = ["alive", "suspect", "dead", "left"]
        .iter()
        .map(|s| ((*s).to_owned(), Vec::new()))
        .collect();
    for m in members {
        by_state
            .entry(m.state.as_str().to_owned())
            .or_default()
            .push(m.name.clone());
    }
    // The lease table from the first agent whose control plane answered.
    let table = nodes.iter().find_map(|n| n.roles.as_ref()?.leases.as_ref());
    let cands = cluster::candidates(members);
    let mut roles: Vec<RoleStatus> = Vec::new();
    let mut names: BTreeSet<String> = cands.keys().cloned().collect();
    names.extend(table.iter().flat_map(|t| t.keys().cloned()));
    for role in names {
        let lease = table.and_then(|t| t.get(&role));
        let (holder, epoch) = lease.map_or((None, 0), |l| (l.holder.clone(), l.epoch));
        let standbys = cands
            .get(&role)
            .into_iter()
            .flatten()
            .filter(|c| Some(&c.0) != holder.as_ref())
            .cloned()
            .collect();
        let apart = cluster::set_apart(members, &role);
        let paused = lease.is_some_and(|l| l.paused);
        let standbys: Vec<(String, i64, bool)> = standbys;
        // Nobody holds it, or the table names a holder that is gone (its
        // lease ran out; it is named until another is granted the role).
        let held = holder.as_ref().is_some_and(|h| {
            let alive = |m: &&MemberView| &m.name == h && m.state == MemberState::Alive;
            members.iter().any(|m| alive(&m))
        });
        let unheld = (!held && !paused && table.is_some())
            .then(|| unheld(&standbys, &apart))
            .flatten();
        roles.push(RoleStatus {
            paused,
            role,
            holder,
            epoch,
            standbys,
            set_apart: apart,
            unheld,
        });
    }
    let mut failing_checks = Vec::new();
    for n in nodes {
        for s in n.services.iter().flatten().filter(|s| !s.healthy) {
            let detail = s
                .checks
                .iter()
                .filter_map(|c| c.recent.last())
                .find(|r| !r.ok)
                .map_or_else(|| "failing".to_owned(), |r| r.detail.clone());
            failing_checks.push(FailingCheck {
                node: n.name.clone(),
                service: s.name.clone(),
                essential: s.essential,
                detail,
            });
        }
    }
    Status {
        cluster: None,
        observer: observer.to_owned(),
        size: members.len(),
        members: by_state,
        control_plane: table.is_some(),
        roles,
        failing_checks,
        relays: nodes
            .iter()
            .filter_map(|n| Some((n.name.clone(), n.relay.clone()?)))
            .collect(),
        drill: nodes
            .iter()
            .filter_map(|n| {
                let d = n.drill.as_ref()?;
                (!d.active.is_empty()).then(|| (n.name.clone(), d.active.clone()))
            })
            .collect(),
        clocks: nodes
            .iter()
            .filter_map(|n| {
                let c = n.clock.as_ref()?;
                (!c.offsets.is_empty() || !c.refused.is_empty())
                    .then(|| (n.name.clone(), c.clone()))
            })
            .collect(),
        unreachable: nodes
            .iter()
            .filter_map(|n| Some((n.name.clone(), n.error.clone()?)))
            .collect(),
        control: None,
        wire: wire_ranges(members),
        wire_written: None,
        hooks: None,
    }
}

/// Live members by the wire range they publish.
fn wire_ranges(members: &[MemberView]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in members.iter().filter(|m| m.state.is_live()) {
        let range = hale_agent::AgentMeta::parse(&m.meta)
            .and_then(|p| p.wire)
            .unwrap_or(hale_core::Versions {
                min: hale_core::wire::OLDEST,
                max: hale_core::wire::OLDEST,
            });
        out.entry(range.to_string())
            .or_default()
            .push(m.name.clone());
    }
    out
}

/// Why nobody can take a role nobody holds: `None` when a live standby
/// is eligible (its checks pass and it may be promoted).
fn unheld(standbys: &[(String, i64, bool)], apart: &[(String, String)]) -> Option<String> {
    if standbys.iter().any(|s| s.2) {
        return None;
    }
    if standbys.is_empty() {
        return Some("no live candidate".into());
    }
    let each: Vec<String> = standbys
        .iter()
        .map(|(n, ..)| match apart.iter().find(|(a, _)| a == n) {
            Some((_, what)) if what.contains("never promoted") => {
                format!("{n} may not be promoted (promotable = false)")
            }
            _ => format!("{n}'s checks fail"),
        })
        .collect();
    Some(format!(
        "no live candidate may take it: {}",
        each.join("; ")
    ))
}

fn names(v: &[String]) -> String {
    if v.is_empty() {
        "-".into()
    } else {
        v.join(", ")
    }
}

/// The summary as text (one screen).
pub fn render(s: &Status) -> String {
    let mut out = String::new();
    let count = |k: &str| s.members.get(k).map_or(0, Vec::len);
    let list = |k: &str| names(s.members.get(k).map_or(&[][..], Vec::as_slice));
    out.push_str(&format!(
        "cluster {}: {} members, as seen by {}\n",
        s.cluster.as_deref().unwrap_or("?"),
        s.size,
        s.observer
    ));
    out.push_str(&format!(
        "MEMBERS  alive {}  suspect {}  dead {}  left {}\n",
        count("alive"),
        count("suspect"),
        count("dead"),
        count("left")
    ));
    for k in ["suspect", "dead", "left"] {
        if count(k) > 0 {
            out.push_str(&format!("  {k}: {}\n", list(k)));
        }
    }
    if let Some(c) = &s.control {
        let idx = |i: Option<u64>| i.map_or("-".to_owned(), |i| i.to_string());
        out.push_str(&format!(
            "CONTROL  server {} is {}, leader {}, term {}, log {}, applied {}, snapshot {}, voters {}, protocol {}\n",
            c.id,
            c.state,
            c.leader.map_or("none".to_owned(), |l| l.to_string()),
            c.term,
            idx(c.last_log_index),
            idx(c.applied_index),
            idx(c.snapshot_index),
            c.voters
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(","),
            c.protocol
        ));
        if c.churn_breaker {
            out.push_str(
                "  CHURN BREAKER OPEN: the control plane was unstable lately (a new leader, or \
                 several leases ran out at once); a role whose lease runs out goes back to its \
                 holder if that holder is alive, rather than move\n",
            );
        }
        if let Some(common) = c.common_protocol.filter(|p| *p < c.protocol) {
            out.push_str(&format!(
                "  MIXED RELEASES: a server speaks only control-plane protocol {common} (an upgrade \
                 under way?); nothing newer is written until every server speaks it\n"
            ));
        }
        if let Some(e) = &c.storage_error {
            out.push_str(&format!("  STORAGE FAILED: {e}\n"));
        }
    }
    if !s.wire.is_empty() {
        let by_range: Vec<String> = s
            .wire
            .iter()
            .map(|(r, n)| format!("speaks {r}: {}", names(n)))
            .collect();
        let written = s.wire_written.as_ref().map_or(String::new(), |w| {
            format!("{} writes {}; ", s.observer, w.writes)
        });
        out.push_str(&format!("WIRE     {written}{}\n", by_range.join("; ")));
    }
    if let Some(h) = &s.hooks {
        out.push_str(&format!(
            "HOOKS    {}: {} running, {} queued (at most {} at once)\n",
            s.observer, h.running, h.queued, h.limit
        ));
    }
    out.push_str("ROLES\n");
    if s.roles.is_empty() {
        out.push_str("  (none)\n");
    } else if !s.control_plane {
        out.push_str("  (control plane unreachable: holders unknown)\n");
    }
    for r in &s.roles {
        let standbys: Vec<String> = r
            .standbys
            .iter()
            .map(|(n, p, e)| format!("{n} ({p}{})", if *e { "" } else { ", not eligible" }))
            .collect();
        out.push_str(&format!(
            "  {:<16} holder {:<12} epoch {:<5} standbys {}{}\n",
            r.role,
            r.holder.as_deref().unwrap_or("NONE"),
            r.epoch,
            names(&standbys),
            if r.paused {
                "  PAUSED: no automatic promotion or demotion (hale roles resume)"
            } else {
                ""
            }
        ));
        for (node, what) in &r.set_apart {
            out.push_str(&format!("  {:<16} {node}: {what}\n", ""));
        }
        if let Some(why) = &r.unheld {
            out.push_str(&format!("  {:<16} NO HOLDER: {why}\n", ""));
        }
    }
    out.push_str("CHECKS\n");
    if s.failing_checks.is_empty() {
        out.push_str("  every check passing\n");
    }
    for f in &s.failing_checks {
        out.push_str(&format!(
            "  {:<12} {:<16} {} {}\n",
            f.node,
            f.service,
            if f.essential {
                "ESSENTIAL failing:"
            } else {
                "failing:"
            },
            f.detail
        ));
    }
    for (node, r) in &s.relays {
        out.push_str(&format!(
            "RELAY on {node}: queue {}/{} B, spool {} B, in flight {}, accepted {}, forwarded {}, dropped {}{}\n",
            r.queue_bytes,
            r.queue_cap,
            r.spool_bytes,
            r.in_flight,
            r.accepted,
            r.forwarded,
            r.dropped_total,
            r.diverted.as_ref().map(|d| format!(", DIVERTED to {d}")).unwrap_or_default()
        ));
        for u in &r.upstreams {
            out.push_str(&format!(
                "  {:<8} breaker {:<10} {}\n",
                u.role, u.breaker, u.target
            ));
        }
    }
    for (node, faults) in &s.drill {
        let f: Vec<&str> = faults.iter().map(|f| f.fault.as_str()).collect();
        out.push_str(&format!("DRILL on {node}: {} in force\n", f.join(", ")));
    }
    for (node, c) in &s.clocks {
        for o in &c.offsets {
            out.push_str(&format!(
                "CLOCK {node}: its clock is {} ms off control-plane server {}'s ({}); requests stamped in the server's time: fix NTP\n",
                -o.offset_ms, o.server, o.addr
            ));
        }
        for r in &c.refused {
            out.push_str(&format!(
                "CLOCK {node}: its control-plane server {} refused {} request(s) from a member whose clock was off (last {} ms): fix NTP\n",
                r.server, r.count, r.last_skew_ms
            ));
        }
    }
    for (node, why) in &s.unreachable {
        out.push_str(&format!("UNREACHABLE {node}: {why}\n"));
    }
    out
}

/// `hale status`.
pub fn run(args: &StatusArgs) -> anyhow::Result<()> {
    block_on(async {
        let (agents, members) = Agents::discover(&args.api, &args.peers).await?;
        let nodes = agents.survey().await;
        let mut s = summarize(&agents.local, &members, &nodes);
        if let Ok(h) = args.api.client().health().await {
            s.cluster = Some(h.cluster);
            s.control = h.control;
            s.wire_written = h.wire;
            s.hooks = h.hooks;
        }
        if args.json {
            println!("{}", serde_json::to_string_pretty(&s)?);
        } else {
            print!("{}", render(&s));
        }
        Ok(())
    })?
}
