//! The report of a `hale drill`: steps with their checks (verdicts), and a
//! timeline of what the agents reported, written as `report.txt` and
//! `report.json`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// How a drill ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Still running.
    Running,
    /// Every check passed.
    Passed,
    /// Some check failed.
    Failed,
    /// The cluster was not healthy enough to start: nothing was changed.
    Refused,
    /// Interrupted (Ctrl-C): faults were restored, the report is partial.
    Aborted,
}

/// One verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    /// What was checked, as a sentence.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// Measurements and reasons.
    pub detail: String,
}

impl std::fmt::Display for Check {
    /// `ok   name: detail`, or `FAIL name: detail`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = if self.passed { "ok  " } else { "FAIL" };
        write!(f, "{mark} {}: {}", self.name, self.detail)
    }
}

/// One step of a drill.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Step {
    /// What the step does.
    pub name: String,
    /// Unix time it started, in milliseconds.
    pub started_unix_ms: u64,
    /// Unix time it ended, in milliseconds (0: did not end).
    pub ended_unix_ms: u64,
    /// Its verdicts.
    pub checks: Vec<Check>,
}

impl Step {
    /// Whether every check of the step passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }
}

/// One timeline entry: an agent's event, or a drill action.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// Unix time, in milliseconds.
    pub unix_ms: u64,
    /// Who reported it: a node's name, or `drill`.
    pub source: String,
    /// Event kind (`suspected`, `dead`, `promoted`, `breaker`, ...) or drill action.
    pub kind: String,
    /// The member it is about, if any.
    pub member: Option<String>,
    /// Extra detail.
    pub detail: Option<serde_json::Value>,
}

impl Entry {
    /// An agent's event, in the timeline.
    pub fn event(e: &hale_agent::EventView) -> Entry {
        Entry {
            unix_ms: e.unix_ms,
            source: e.observer.clone(),
            kind: e.event.kind(),
            member: e.member.clone(),
            detail: e.event.detail(),
        }
    }
}

/// A drill's report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// `sink-blackhole`, `node-freeze`, `handover` or `quiet`.
    pub drill: String,
    /// The node or role the drill is aimed at.
    pub target: Option<String>,
    /// The agent the drill was run through.
    pub observer: String,
    /// How long the fault was held, in milliseconds.
    pub duration_ms: u64,
    /// Unix time the drill started, in milliseconds.
    pub started_unix_ms: u64,
    /// Unix time the report was written, in milliseconds.
    pub finished_unix_ms: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Steps, in order.
    pub steps: Vec<Step>,
    /// Everything that happened, in time order.
    pub timeline: Vec<Entry>,
}

impl Report {
    /// A new, running report.
    pub fn new(drill: &str, target: Option<String>, observer: &str, duration_ms: u64) -> Report {
        Report {
            drill: drill.to_owned(),
            target,
            observer: observer.to_owned(),
            duration_ms,
            started_unix_ms: hale_agent::view::unix_ms(),
            finished_unix_ms: 0,
            outcome: Outcome::Running,
            steps: Vec::new(),
            timeline: Vec::new(),
        }
    }

    /// Whether every check of every step passed.
    pub fn all_passed(&self) -> bool {
        self.steps.iter().all(Step::passed)
    }

    fn secs(&self, unix_ms: u64) -> String {
        let d = unix_ms as i64 - self.started_unix_ms as i64;
        format!("{:+.3}s", d as f64 / 1000.0)
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut out = format!(
            "hale drill {}{}: {}\n",
            self.drill,
            self.target
                .as_ref()
                .map(|t| format!(" {t}"))
                .unwrap_or_default(),
            match self.outcome {
                Outcome::Passed => "PASSED (every check held)",
                Outcome::Failed => "FAILED (see the checks marked FAIL)",
                Outcome::Refused => "REFUSED (the cluster is degraded; nothing was changed)",
                Outcome::Aborted => "ABORTED (interrupted; faults restored; partial report)",
                Outcome::Running => "RUNNING",
            }
        );
        let held = if self.duration_ms > 0 {
            format!(", fault held {:.1}s", self.duration_ms as f64 / 1000.0)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "through {}{held}, started at unix ms {}\n\n",
            self.observer, self.started_unix_ms
        ));
        for s in &self.steps {
            out.push_str(&format!(
                "[{}] {} ({} .. {})\n",
                match (s.ended_unix_ms, s.passed()) {
                    (0, _) => "STOPPED",
                    (_, true) => "PASS",
                    (_, false) => "FAIL",
                },
                s.name,
                self.secs(s.started_unix_ms),
                if s.ended_unix_ms == 0 {
                    "-".to_owned()
                } else {
                    self.secs(s.ended_unix_ms)
                }
            ));
            for c in &s.checks {
                out.push_str(&format!("    {c}\n"));
            }
        }
        out.push_str("\nTIMELINE\n");
        for e in &self.timeline {
            out.push_str(&format!(
                "  {:>9} {:<10} {:<16} {:<10} {}\n",
                self.secs(e.unix_ms),
                e.source,
                e.kind,
                e.member.as_deref().unwrap_or("-"),
                e.detail
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ));
        }
        out
    }

    /// Writes `report.txt` and `report.json` into `dir` (created if needed).
    pub fn write(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let json = serde_json::to_string_pretty(self)? + "\n";
        for (name, text) in [("report.txt", self.render()), ("report.json", json)] {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// Where a report goes without `--report`: a timestamped directory under the
/// current directory, or under the temporary directory if that is not writable.
pub fn default_dir(drill: &str) -> PathBuf {
    let name = format!("hale-drill-{drill}-{}", hale_agent::view::unix_ms() / 1000);
    let here = PathBuf::from(&name);
    if std::fs::create_dir_all(&here).is_ok() {
        return here;
    }
    std::env::temp_dir().join(name)
}
