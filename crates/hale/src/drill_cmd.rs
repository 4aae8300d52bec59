//! `hale drill`: a scripted, reversible outage against the running cluster,
//! with a verdict per step (essential services stayed healthy, no live
//! member was declared dead, failovers finished within their targets) and a
//! report with a timeline.
//!
//! Faults are set through the agents' `/v1/drill` endpoints, each with the
//! drill's duration: an agent reverts its fault on its own when the duration
//! ends, so a drill killed outright leaves nothing behind past it. Ctrl-C
//! restores everything at once, verifies the restore and writes the partial
//! report marked aborted.

use hale_agent::view::BreakerState;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::{Args, Subcommand};

use hale_agent::view::Fault;
use hale_agent::{AgentEvent, EventView};

use crate::client_cmd::{block_on, until, ApiArgs};
use crate::cluster::{self, Agents, Leases};
use crate::drill_report::{Check, Entry, Outcome, Report, Step};

/// Arguments of `hale drill`.
#[derive(Debug, Args)]
pub struct DrillArgs {
    #[command(subcommand)]
    pub kind: DrillKind,
    /// How long the fault is held, in seconds.
    #[arg(long, global = true, default_value_t = 10.0)]
    pub duration: f64,
    /// Where to write report.txt and report.json (default: a timestamped
    /// directory here, or under the temporary directory).
    #[arg(long, global = true)]
    pub report: Option<PathBuf>,
    /// Print the report as JSON (the path goes to standard error).
    #[arg(long, global = true)]
    pub json: bool,
    /// Target for a standby to take a role over, in seconds.
    #[arg(long, global = true, default_value_t = 5.0)]
    pub promote_target: f64,
    /// How long the cluster may take to be whole again after a restore, in seconds.
    #[arg(long, global = true, default_value_t = 30.0)]
    pub recover_timeout: f64,
    /// Target for the relay to answer a test event during a drill, in milliseconds.
    #[arg(long, global = true, default_value_t = 500)]
    pub accept_target_ms: u64,
    /// `sentry_key` for the relay's test events (when the relay requires keys).
    #[arg(long, global = true)]
    pub sentry_key: Option<String>,
    /// Path prefix of the relay's routes (its `path_prefix`).
    #[arg(long, global = true, default_value = "")]
    pub relay_prefix: String,
    /// A peer's agent API address, when its metadata does not publish one
    /// (NAME=HOST:PORT; repeatable).
    #[arg(long = "peer", global = true)]
    pub peers: Vec<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// Which drill.
#[derive(Debug, Clone, Subcommand)]
pub enum DrillKind {
    /// The relay's upstream goes half-dead (a local black hole).
    SinkBlackhole,
    /// NODE's agent stops answering the cluster, then resumes.
    NodeFreeze {
        /// The node to freeze.
        node: String,
    },
    /// Switch ROLE over to each standby in turn and back.
    Handover {
        /// The role.
        role: String,
    },
    /// Application traffic signals are ignored: only probes keep members alive.
    Quiet,
}

impl DrillKind {
    fn name(&self) -> &'static str {
        match self {
            DrillKind::SinkBlackhole => "sink-blackhole",
            DrillKind::NodeFreeze { .. } => "node-freeze",
            DrillKind::Handover { .. } => "handover",
            DrillKind::Quiet => "quiet",
        }
    }

    fn target(&self) -> Option<String> {
        match self {
            DrillKind::NodeFreeze { node } => Some(node.clone()),
            DrillKind::Handover { role } => Some(role.clone()),
            _ => None,
        }
    }
}

/// How often the drill samples the cluster.
const TICK: Duration = Duration::from_millis(250);

/// Agents hold a fault this much longer than the drill does: the drill ends
/// it explicitly, and the agent's own revert is the safety net.
pub const SAFETY_MARGIN: Duration = Duration::from_secs(2);

/// What must be undone if the drill is interrupted.
#[derive(Debug, Default)]
struct Undo {
    /// (node, fault) set by this drill.
    faults: BTreeSet<(String, Fault)>,
    /// (role, node) the role should be held by again.
    homes: BTreeMap<String, String>,
}

fn check(name: impl Into<String>, passed: bool, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        passed,
        detail: detail.into(),
    }
}

/// A check that passes when `problems` is empty: its detail is then
/// `clear`, else `prefix` and the problems joined with `sep`.
fn none_check(
    name: impl Into<String>,
    problems: &[String],
    clear: impl Into<String>,
    prefix: &str,
    sep: &str,
) -> Check {
    let detail = if problems.is_empty() {
        clear.into()
    } else {
        format!("{prefix}{}", problems.join(sep))
    };
    check(name, problems.is_empty(), detail)
}

fn names_or_none<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = names.map(String::as_str).collect();
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

/// What was seen while watching a window.
#[derive(Debug, Default)]
struct Seen {
    /// (node, service) -> samples it failed in.
    essential_failing: BTreeMap<(String, String), u32>,
    /// (node, essential service) -> slowest latest check run seen, in ms.
    check_ms: BTreeMap<(String, String), u64>,
    /// Relay test events: (latency, status).
    probes: Vec<(Duration, u16)>,
    /// When a relay breaker was first seen not closed.
    breaker_open_at: Option<Duration>,
    /// role -> first (time, holder, epoch) with a holder other than the old one.
    new_holder: BTreeMap<String, (Duration, String, u64)>,
}

struct Drill {
    agents: Agents,
    args: DrillArgsView,
    report: Mutex<Report>,
    undo: Mutex<Undo>,
    cursors: BTreeMap<String, u64>,
}

/// The options the steps need (owned, so the drill can run in a task).
#[derive(Debug, Clone)]
struct DrillArgsView {
    kind: DrillKind,
    duration: Duration,
    promote_target: Duration,
    recover_timeout: Duration,
    accept_target: Duration,
    sentry_key: Option<String>,
    relay_prefix: String,
}

impl Drill {
    /// The report, locked.
    fn report(&self) -> MutexGuard<'_, Report> {
        self.report.lock().expect("report lock")
    }

    /// What must be undone, locked.
    fn undo(&self) -> MutexGuard<'_, Undo> {
        self.undo.lock().expect("undo lock")
    }

    fn step_start(&self, name: &str) -> usize {
        let now = self.mark("step", None, serde_json::json!(name));
        let mut r = self.report();
        r.steps.push(Step {
            name: name.to_owned(),
            started_unix_ms: now,
            ended_unix_ms: 0,
            checks: Vec::new(),
        });
        r.steps.len() - 1
    }

    fn add(&self, step: usize, c: Check) {
        eprintln!("  {c}");
        self.report().steps[step].checks.push(c);
    }

    /// Adds the check `name` (see [`check`]) to `step`.
    fn check(&self, step: usize, name: impl Into<String>, passed: bool, detail: impl Into<String>) {
        self.add(step, check(name, passed, detail));
    }

    fn step_end(&self, step: usize) {
        let mut r = self.report();
        r.steps[step].ended_unix_ms = hale_agent::view::unix_ms();
    }

    /// Puts a drill action on the timeline, stamped now; when that was.
    fn mark(&self, kind: &str, member: Option<&str>, detail: serde_json::Value) -> u64 {
        let now = hale_agent::view::unix_ms();
        self.report().timeline.push(Entry {
            unix_ms: now,
            source: "drill".into(),
            kind: kind.into(),
            member: member.map(str::to_owned),
            detail: Some(detail),
        });
        now
    }

    /// Appends every agent's new events to the timeline; returns them.
    async fn poll_events(&mut self) -> Vec<EventView> {
        let nodes: Vec<String> = self.agents.addrs.keys().cloned().collect();
        let mut fresh = Vec::new();
        for n in nodes {
            let since = self.cursors.get(&n).copied().unwrap_or(0);
            let Ok(list) = self.agents.events(&n, since).await else {
                continue;
            };
            for e in list {
                self.cursors.insert(n.clone(), e.seq.max(since));
                if e.event != AgentEvent::Metadata {
                    fresh.push(e);
                }
            }
        }
        self.report()
            .timeline
            .extend(fresh.iter().map(Entry::event));
        fresh
    }

    async fn set_fault(&self, node: &str, fault: Fault) -> anyhow::Result<()> {
        self.undo().faults.insert((node.to_owned(), fault));
        self.mark("set", Some(node), serde_json::json!(fault));
        self.agents
            .client(node)?
            .set_fault(fault, self.args.duration + SAFETY_MARGIN)
            .await?;
        Ok(())
    }

    /// Watches the cluster for `length`: essential services everywhere but
    /// `skip`, relay test events through `relay_node`, holders of `roles`.
    async fn watch(
        &mut self,
        length: Duration,
        skip: Option<&str>,
        relay: Option<(&str, &str)>,
        roles: &BTreeMap<String, (String, u64)>,
    ) -> (Seen, Vec<EventView>) {
        let start = Instant::now();
        let mut seen = Seen::default();
        let mut events = Vec::new();
        while start.elapsed() < length {
            let tick = tokio::time::sleep(TICK);
            events.extend(self.poll_events().await);
            for (n, c) in self.agents.clients_except(skip) {
                let Ok(svcs) = c.services().await else {
                    continue;
                };
                for s in svcs.iter().filter(|s| s.essential) {
                    let key = (n.clone(), s.name.clone());
                    if !s.healthy {
                        *seen.essential_failing.entry(key.clone()).or_default() += 1;
                    }
                    let took = s
                        .checks
                        .iter()
                        .filter_map(|c| c.recent.last())
                        .map(|r| r.took_ms);
                    if let Some(ms) = took.max() {
                        let e = seen.check_ms.entry(key).or_default();
                        *e = (*e).max(ms);
                    }
                }
            }
            if let Some((node, path)) = relay {
                // No agent to ask, or no answer: a test event never answered.
                let mut probe = (Duration::MAX, 0);
                if let Ok(c) = self.agents.client(node) {
                    let key = self.args.sentry_key.as_deref();
                    probe = c.relay_probe(path, key).await.unwrap_or(probe);
                    if seen.breaker_open_at.is_none() {
                        let v = c.relay().await.ok().flatten();
                        if v.is_some_and(|v| {
                            v.upstreams
                                .iter()
                                .any(|u| u.breaker != BreakerState::Closed)
                        }) {
                            seen.breaker_open_at = Some(start.elapsed());
                        }
                    }
                }
                seen.probes.push(probe);
            }
            if !roles.is_empty() {
                if let Some(l) = self.leases(skip).await {
                    for (role, (old, epoch)) in roles {
                        if let Some((Some(h), e)) = l.get(role) {
                            if h != old && e > epoch && !seen.new_holder.contains_key(role) {
                                seen.new_holder
                                    .insert(role.clone(), (start.elapsed(), h.clone(), *e));
                            }
                        }
                    }
                }
            }
            tick.await;
        }
        (seen, events)
    }

    /// The lease table as the first agent other than `skip` sees it.
    async fn leases(&self, skip: Option<&str>) -> Option<Leases> {
        for (_, c) in self.agents.clients_except(skip) {
            if let Some(l) = c.roles().await.ok().as_ref().and_then(cluster::lease_table) {
                return Some(l);
            }
        }
        None
    }

    /// Checks shared by every fault window.
    fn window_checks(&self, step: usize, seen: &Seen, events: &[EventView], spared: Option<&str>) {
        let failing: Vec<String> = seen
            .essential_failing
            .iter()
            .map(|((n, s), k)| format!("{s} on {n} ({k} samples)"))
            .collect();
        self.add(
            step,
            none_check(
                "every essential service stayed healthy",
                &failing,
                "no essential check failed on any node",
                "failing: ",
                ", ",
            ),
        );
        self.add(step, no_deaths(events, spared));
        let suspected = accused(events, spared, |e| {
            matches!(e, AgentEvent::Suspected { .. })
        });
        let quiet = matches!(self.args.kind, DrillKind::Quiet);
        self.check(
            step,
            "no live member was suspected",
            !quiet || suspected.is_empty(),
            if suspected.is_empty() {
                "none".to_owned()
            } else if quiet {
                suspected.join(", ")
            } else {
                format!("{} (refuted; informational)", suspected.join(", "))
            },
        );
    }

    /// Posts `restore` to every agent a fault was set on.
    async fn restore_faults(&self) {
        let nodes: BTreeSet<String> = self.undo().faults.iter().map(|(n, _)| n.clone()).collect();
        for n in nodes {
            // Retried: a restore lost to a busy agent still ends by its duration.
            for _ in 0..3 {
                let Ok(c) = self.agents.client(&n) else { break };
                if c.restore(None).await.is_ok() {
                    break;
                }
            }
        }
    }

    /// Restores every fault this drill set and verifies the cluster is whole.
    async fn restore_and_verify(&mut self, step: usize) {
        self.restore_faults().await;
        let start = Instant::now();
        let mut last = Vec::new();
        let agents = &self.agents;
        until(TICK, start + self.args.recover_timeout, async || {
            last = whole(&agents.survey().await, agents.addrs.len());
            last.is_empty().then_some(())
        })
        .await;
        self.poll_events().await;
        self.check(step, "the cluster is whole again",
                last.is_empty(),
                if last.is_empty() {
                    format!(
                        "no fault in force, every member alive everywhere, relays not diverted, after {}",
                        secs(start.elapsed())
                    )
                } else {
                    format!("after {}: {}", secs(start.elapsed()), last.join("; "))
                });
    }
}

/// `member by observer` for each event of `events` that `kind` picks, but
/// those about or by `spared`.
fn accused(
    events: &[EventView],
    spared: Option<&str>,
    kind: fn(&AgentEvent) -> bool,
) -> Vec<String> {
    events
        .iter()
        .filter(|e| kind(&e.event))
        .filter(|e| spared.is_none_or(|s| e.observer != s && e.member.as_deref() != Some(s)))
        .map(|e| format!("{} by {}", e.member.as_deref().unwrap_or("?"), e.observer))
        .collect()
}

/// The check that no member but `spared` was declared dead in `events`.
fn no_deaths(events: &[EventView], spared: Option<&str>) -> Check {
    let dead = accused(events, spared, |e| matches!(e, AgentEvent::Dead(_)));
    none_check("no live member was declared dead", &dead, "none", "", ", ")
}

mod steps;
mod verdicts;

use verdicts::{preflight, whole};

/// `hale drill`: returns the process exit code (0 only if every check passed).
pub fn run(args: &DrillArgs) -> anyhow::Result<std::process::ExitCode> {
    if !(args.duration > 0.0 && args.duration <= 3600.0) {
        bail!("--duration must be more than 0 and at most 3600 seconds");
    }
    block_on(async {
        let (agents, members) = Agents::discover(&args.api, &args.peers).await?;
        let report = Mutex::new(Report::new(
            args.kind.name(),
            args.kind.target(),
            &agents.local,
            match args.kind {
                DrillKind::Handover { .. } => 0,
                _ => (args.duration * 1000.0) as u64,
            },
        ));
        let mut drill = Drill {
            agents: agents.clone(),
            args: DrillArgsView {
                kind: args.kind.clone(),
                duration: Duration::from_secs_f64(args.duration),
                promote_target: Duration::from_secs_f64(args.promote_target),
                recover_timeout: Duration::from_secs_f64(args.recover_timeout),
                accept_target: Duration::from_millis(args.accept_target_ms),
                sentry_key: args.sentry_key.clone(),
                relay_prefix: args.relay_prefix.trim_end_matches('/').to_owned(),
            },
            report,
            undo: Mutex::default(),
            cursors: BTreeMap::new(),
        };
        eprintln!("hale drill {} through {}", args.kind.name(), agents.local);
        let interrupted = tokio::select! {
            r = drill.run(members) => { r?; false }
            _ = tokio::signal::ctrl_c() => true,
        };
        if interrupted {
            eprintln!("interrupted: restoring every fault");
            abort_restore(&mut drill).await;
            drill.report().outcome = Outcome::Aborted;
        }
        let mut r = drill.report().clone();
        if r.outcome == Outcome::Running {
            r.outcome = if r.all_passed() {
                Outcome::Passed
            } else {
                Outcome::Failed
            };
        }
        r.finished_unix_ms = hale_agent::view::unix_ms();
        r.timeline.sort_by_key(|e| e.unix_ms);
        let dir = args
            .report
            .clone()
            .unwrap_or_else(|| crate::drill_report::default_dir(args.kind.name()));
        r.write(&dir)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&r)?);
            eprintln!("report: {}", dir.display());
        } else {
            print!("{}", r.render());
            println!("report: {}", dir.join("report.txt").display());
        }
        Ok(std::process::ExitCode::from(match r.outcome {
            Outcome::Passed => 0,
            Outcome::Failed | Outcome::Running => 1,
            Outcome::Refused => 3,
            Outcome::Aborted => 130,
        }))
    })?
}

/// After Ctrl-C: restore every fault, hand roles back home, verify.
async fn abort_restore(d: &mut Drill) {
    let step = d.step_start("restore after interruption");
    d.restore_and_verify(step).await;
    let homes = d.undo().homes.clone();
    for (role, home) in homes {
        d.hand_home(step, &role, &home).await;
    }
    d.step_end(step);
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::DrillKind;
    use crate::{Cli, Command};

    #[test]
    fn drill_options_go_before_or_after_the_drill() {
        let cli = Cli::parse_from([
            "hale",
            "drill",
            "--duration",
            "3",
            "node-freeze",
            "n1",
            "--report",
            "d",
            "--json",
        ]);
        let Command::Drill(a) = cli.command else {
            panic!("not the drill command");
        };
        assert!(matches!(a.kind, DrillKind::NodeFreeze { ref node } if node == "n1"));
        assert_eq!(a.duration, 3.0);
        assert!(a.json);
        assert_eq!(a.report.as_deref(), Some(std::path::Path::new("d")));
        assert_eq!(a.promote_target, 5.0, "the benchmarks' promote target");
    }
}
