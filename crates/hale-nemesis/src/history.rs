//! What a run recorded, all on the shared clock: the faults as they were
//! carried out, the client's operations, the registers' and hooks' logs,
//! the death verdicts the agents published, the primaries they reported,
//! and how the cluster settled after the last heal. The checker reads only
//! this (`history.json` in the run's directory).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::hook::HookLine;
use crate::register::RegisterRecord;
use crate::schedule::{Fault, Schedule};

/// A fault as it was carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// The scheduled fault.
    pub fault: Fault,
    /// The hosts it touched (targets resolved; every host of a partition's
    /// cut, every host of a loss).
    pub hosts: Vec<String>,
    /// When it started.
    pub start_ns: u64,
    /// When it was healed (None: never, a harness bug).
    pub heal_ns: Option<u64>,
    /// What was done (the processes hit, the rules set).
    pub note: String,
}

/// A `hale` command an operator action ran, as it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecord {
    /// The index in [`History::faults`] of the action it belongs to
    /// (None: the heal phase's).
    pub record: Option<usize>,
    /// The host it ran on (inside its namespace, against its agent).
    pub host: String,
    /// The arguments after `hale`.
    pub args: Vec<String>,
    /// Started at.
    pub start_ns: u64,
    /// Ended (or was killed, after 20 s) at.
    pub end_ns: u64,
    /// Its exit status (None: killed).
    pub status: Option<i32>,
    /// What it printed (standard output, then standard error).
    pub output: String,
}

/// How a client's write ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Acknowledged at this epoch.
    Ack {
        /// The primary's epoch.
        epoch: u64,
    },
    /// Refused (the register answered no).
    Refused(String),
    /// No answer in time, or the connection failed: it may or may not
    /// have been accepted.
    Unknown(String),
}

/// One write of the client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// The client worker.
    pub client: u32,
    /// The value (unique in the run).
    pub value: u64,
    /// The node whose register it was sent to.
    pub node: String,
    /// Sent at.
    pub invoke_ns: u64,
    /// Answered (or given up) at.
    pub complete_ns: u64,
    /// How it ended.
    pub outcome: Outcome,
}

/// A death verdict an agent published (`GET /v1/events`, kind `dead`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Death {
    /// The agent that published it.
    pub observer: String,
    /// The member declared dead.
    pub member: String,
    /// When the harness first saw it.
    pub seen_ns: u64,
    /// Who reached the verdict (the event's `detail.declared_by`): the
    /// observer itself, or the member whose verdict it accepted. Histories
    /// recorded before it was kept: `None` (the observer is taken).
    #[serde(default)]
    pub declared_by: Option<String>,
    /// When the harness last asked that agent for its events before the
    /// answer that had this one (the verdict was published after it): a
    /// verdict seen late, its agent frozen or slow to answer just after it,
    /// is judged from when it was reached. Histories recorded before it
    /// was kept: `None` (judged from `seen_ns` with the harness's lag).
    #[serde(default)]
    pub published_after_ns: Option<u64>,
}

/// A change in what one agent's `GET /v1/roles/db/primary` answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrimarySample {
    /// When.
    pub t: u64,
    /// The agent.
    pub node: String,
    /// Whether it answered 200 (it is the primary).
    pub primary: bool,
    /// The epoch it reported.
    pub epoch: Option<u64>,
}

/// The whole history of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The schedule that ran.
    pub schedule: Option<Schedule>,
    /// The hosts' node names.
    pub nodes: Vec<String>,
    /// When the fault phase started.
    pub faults_start_ns: u64,
    /// When the last fault was healed (the heal phase began).
    pub heal_ns: u64,
    /// When the run ended.
    pub end_ns: u64,
    /// When the harness began stopping the cluster (host after host: what
    /// agents do from then on is the harness's doing, not a fault's).
    /// Histories recorded before it existed: `None`.
    #[serde(default)]
    pub stopping_ns: Option<u64>,
    /// The liveness bound: after `heal_ns`, exactly one primary and
    /// membership converged within this.
    pub liveness_bound_ns: u64,
    /// The cluster never formed with one primary before the faults (none
    /// were carried out).
    #[serde(default)]
    pub never_formed: bool,
    /// When, after `heal_ns`, exactly one agent reported itself primary
    /// and every agent saw every other alive (None: never within the bound).
    pub settled_ns: Option<u64>,
    /// The last look before giving up or settling: each agent's view of
    /// every member, and who reported itself primary.
    pub final_members: BTreeMap<String, BTreeMap<String, String>>,
    /// Who reported itself primary at the last look.
    pub final_primaries: Vec<String>,
    /// Faults as carried out.
    pub faults: Vec<FaultRecord>,
    /// The client's writes.
    pub ops: Vec<Op>,
    /// Each register's log, read after the run.
    pub registers: BTreeMap<String, Vec<RegisterRecord>>,
    /// Every hook log line.
    pub hooks: Vec<HookLine>,
    /// Death verdicts published.
    pub deaths: Vec<Death>,
    /// Changes of the agents' primary answers.
    pub primaries: Vec<PrimarySample>,
    /// The commands operator actions ran, and the heal phase's.
    #[serde(default)]
    pub commands: Vec<CommandRecord>,
}

/// Reads a log of JSON lines (a register's log, `hooks.log`): lines that
/// do not parse, such as a line cut short by a full disk, are skipped; a
/// missing file reads as empty.
pub fn read_log<T: DeserializeOwned>(path: &Path) -> Vec<T> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn secs(t: u64, base: u64) -> String {
    format!("{:>8.3}s", (t as i128 - base as i128) as f64 / 1e9)
}

impl History {
    /// When the harness began stopping the cluster; for histories recorded
    /// before that was kept, when the last write was answered (the client
    /// stops first, 1.5 s before the cluster).
    pub fn stopping(&self) -> u64 {
        self.stopping_ns.unwrap_or_else(|| {
            self.ops
                .iter()
                .map(|o| o.complete_ns)
                .max()
                .unwrap_or(self.end_ns)
        })
    }

    /// Every register's records, with the register's node: registers in
    /// name order, each one's records in its log's order.
    pub fn records(&self) -> impl Iterator<Item = (&str, &RegisterRecord)> {
        self.registers
            .iter()
            .flat_map(|(node, recs)| recs.iter().map(move |r| (node.as_str(), r)))
    }

    /// Everything recorded between `from_ns` and `to_ns`, one line each,
    /// in time order (times from the start of the fault phase); of the
    /// writes, only those of `values` and a count of the others.
    pub fn slice(&self, from_ns: u64, to_ns: u64, values: &[u64]) -> String {
        let base = self.faults_start_ns;
        let mut lines: Vec<(u64, String)> = Vec::new();
        let within = |t: u64| t >= from_ns && t <= to_ns;
        for f in &self.faults {
            if within(f.start_ns) {
                lines.push((
                    f.start_ns,
                    format!("fault {} on {:?}: {}", f.fault.name(), f.hosts, f.note),
                ));
            }
            if let Some(h) = f.heal_ns.filter(|&h| within(h)) {
                lines.push((h, format!("heal {} on {:?}", f.fault.name(), f.hosts)));
            }
        }
        let mut elided = 0usize;
        for o in &self.ops {
            if !values.contains(&o.value) {
                elided += usize::from(within(o.invoke_ns));
                continue;
            }
            if within(o.invoke_ns) || within(o.complete_ns) {
                lines.push((
                    o.complete_ns,
                    format!(
                        "client {} write {} to {} (sent {}): {:?}",
                        o.client,
                        o.value,
                        o.node,
                        secs(o.invoke_ns, base),
                        o.outcome
                    ),
                ));
            }
        }
        for (node, r) in self.records() {
            let t = match r {
                RegisterRecord::Promote { t, .. }
                | RegisterRecord::Fence { t, .. }
                | RegisterRecord::Accepted { t, .. }
                | RegisterRecord::Replica { t, .. } => *t,
            };
            let write = match r {
                RegisterRecord::Accepted { value, .. } | RegisterRecord::Replica { value, .. } => {
                    Some(*value)
                }
                _ => None,
            };
            if within(t) && write.is_none_or(|v| values.contains(&v)) {
                lines.push((t, format!("register {node}: {r:?}")));
            }
        }
        for h in self.hooks.iter().filter(|h| within(h.t)) {
            lines.push((
                h.t,
                format!(
                    "hook {} {:?} {:?} epoch {} {:?}",
                    h.node, h.kind, h.phase, h.epoch, h.reason
                ),
            ));
        }
        for c in self.commands.iter().filter(|c| within(c.end_ns)) {
            lines.push((
                c.end_ns,
                format!(
                    "on {}: hale {} (sent {}): exit {:?}: {}",
                    c.host,
                    c.args.join(" "),
                    secs(c.start_ns, base),
                    c.status,
                    c.output.replace('\n', " / ")
                ),
            ));
        }
        for d in self.deaths.iter().filter(|d| within(d.seen_ns)) {
            lines.push((
                d.seen_ns,
                format!("{} declared {} dead", d.observer, d.member),
            ));
        }
        for p in self.primaries.iter().filter(|p| within(p.t)) {
            lines.push((
                p.t,
                format!("agent {} primary={} epoch {:?}", p.node, p.primary, p.epoch),
            ));
        }
        lines.sort_by_key(|l| l.0);
        let mut out = format!("({elided} other writes in this stretch not shown)\n");
        for (t, l) in lines {
            let _ = writeln!(out, "{} {l}", secs(t, base));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_recorded_before_operator_actions_still_reads() {
        let mut v = serde_json::to_value(History::default()).expect("serializes");
        v.as_object_mut().expect("an object").remove("commands");
        let h: History = serde_json::from_value(v).expect("reads without commands");
        assert!(h.commands.is_empty());
    }

    #[test]
    fn the_slice_shows_an_operator_command_with_its_status_and_output() {
        let h = History {
            end_ns: 10,
            commands: vec![CommandRecord {
                record: Some(0),
                host: "h2".into(),
                args: vec!["roles".into(), "resume".into(), "db".into()],
                start_ns: 4,
                end_ns: 5,
                status: Some(2),
                output: "error: refused\nsecond line".into(),
            }],
            ..History::default()
        };
        let text = h.slice(0, 10, &[]);
        assert!(
            text.contains("on h2: hale roles resume db") && text.contains("Some(2)"),
            "{text}"
        );
        assert!(text.contains("error: refused / second line"), "{text}");
    }
}
