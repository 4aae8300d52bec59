//! What a run measured, per run and summarised over runs: detection
//! latency, false positives, bandwidth, convergence, checks. Serialisable
//! (`--json`) and printable as a table (`Display`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use hale_core::Time;

use crate::check::OBSERVER_GRACE;
use crate::runner::{CheckResult, Finished};
use crate::scenario::Scenario;

mod table;

/// Bandwidth samples before this are the start-up (warm-start sync), not
/// the steady state.
pub const WARMUP: Duration = Duration::from_secs(60);
/// A sample is idle when no fault step took effect within this long before it.
pub const QUIET: Duration = Duration::from_secs(60);

/// Detection of one injected fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FaultReport {
    /// The faulty node.
    pub node: u32,
    /// crash, freeze, cut-off or ingress-blocked.
    pub kind: String,
    /// When it was injected (seconds of virtual time).
    pub at_secs: f64,
    /// Until the first observer held it dead (the first verdict).
    pub first_secs: Option<f64>,
    /// Until the median observer held it dead.
    pub median_secs: Option<f64>,
    /// Until every expected observer held it dead (None: some never did).
    pub all_secs: Option<f64>,
    /// From the first verdict until every expected observer held it dead.
    pub after_verdict_secs: Option<f64>,
    /// Observers that held it dead.
    pub detected_by: usize,
    /// Observers expected to: healthy at the end, members when it happened.
    pub expected: usize,
}

/// Propagation of one join.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JoinReport {
    /// The new node.
    pub node: u32,
    /// When it started joining.
    pub at_secs: f64,
    /// Until every healthy member knew it (None: some never did).
    pub all_secs: Option<f64>,
    /// Members that learned of it.
    pub seen_by: usize,
    /// Members expected to.
    pub expected: usize,
}

/// A healthy member declared dead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FalseDeathReport {
    /// When (nanoseconds of virtual time).
    pub at_nanos: u64,
    /// Who declared it.
    pub observer: u32,
    /// The healthy member.
    pub member: u32,
}

/// Per-node bandwidth, steady state.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Bandwidth {
    /// Mean over the samples after the start-up.
    pub steady_mean: f64,
    /// Mean over idle samples (no fault within the last minute), if any.
    pub idle_mean: Option<f64>,
    /// Highest sample after the start-up.
    pub peak: f64,
    /// Highest sample during the start-up (the warm-start sync).
    pub startup_peak: f64,
}

/// Mean bandwidth while one application traffic rate held.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrafficSegment {
    /// Start (seconds).
    pub from_secs: f64,
    /// End (seconds).
    pub to_secs: f64,
    /// Application messages per second per node.
    pub rate: f64,
    /// Protocol bytes per node per second, mean over the segment.
    pub bytes_per_node_sec: Option<f64>,
    /// Protocol packets per node per second, mean over the segment.
    pub msgs_per_node_sec: Option<f64>,
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// The seed (reproduce with `hale sim FILE --seed SEED`).
    pub seed: u64,
    /// Nodes at the start.
    pub nodes: u32,
    /// Virtual seconds simulated.
    pub virtual_secs: f64,
    /// Wall-clock seconds the run took.
    pub wall_secs: f64,
    /// Of which building the cluster (the warm start).
    pub setup_secs: f64,
    /// Digest of the event log (equal for equal runs).
    pub digest: String,
    /// Events the nodes reported.
    pub events: u64,
    /// Each injected fault.
    pub faults: Vec<FaultReport>,
    /// Each join.
    pub joins: Vec<JoinReport>,
    /// Healthy members declared dead (at most the first 20 are listed).
    pub false_deaths: usize,
    /// The first false deaths.
    pub false_death_examples: Vec<FalseDeathReport>,
    /// Deaths declared across a partition (expected).
    pub partition_deaths: u64,
    /// Deaths accepted just after a detected freeze or cut-off ended, on a
    /// verdict reached during it (expected).
    pub stale_deaths: u64,
    /// Suspicions of any member.
    pub suspicions: u64,
    /// Suspicions of healthy members (refuted, but costly).
    pub healthy_suspicions: u64,
    /// Initial nodes x virtual hours.
    pub node_hours: f64,
    /// Protocol bytes per node per second.
    pub bytes_per_node_sec: Bandwidth,
    /// Protocol packets per node per second.
    pub msgs_per_node_sec: Bandwidth,
    /// Bandwidth per application traffic rate.
    pub traffic_segments: Vec<TrafficSegment>,
    /// Largest datagram any node sent.
    pub largest_datagram: u64,
    /// Every check.
    pub checks: Vec<CheckResult>,
    /// Bandwidth time series: (seconds, bytes/node/s, packets/node/s).
    pub samples: Vec<(f64, f64, f64)>,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The mean of `v`, if it has values.
fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn median(sorted: &[f64]) -> Option<f64> {
    (!sorted.is_empty()).then(|| sorted[(sorted.len() - 1) / 2])
}

impl RunReport {
    /// Summarises a finished run.
    pub fn collect(sc: &Scenario, f: &Finished) -> RunReport {
        let sim = &f.sim;
        let o = &sim.observer;
        let healthy = sim.healthy_nodes();
        let faults = o
            .faults
            .iter()
            .map(|fr| {
                let expected: Vec<u32> = healthy
                    .iter()
                    .copied()
                    .filter(|&x| {
                        x != fr.node
                            && o.added_before(x, fr.at)
                            && !o.faulty_during(x, fr.at, fr.at + OBSERVER_GRACE)
                            && !o.stalled_during(x, fr.at, fr.at + OBSERVER_GRACE)
                    })
                    .collect();
                let since = |t: &Time| secs(t.saturating_since(fr.at));
                let mut lat: Vec<f64> = expected
                    .iter()
                    .filter_map(|x| fr.dead_at.get(x).map(since))
                    .collect();
                lat.sort_by(f64::total_cmp);
                let all =
                    (lat.len() == expected.len() && !lat.is_empty()).then(|| lat[lat.len() - 1]);
                // The first verdict, by anyone.
                let first = fr.dead_at.values().min().map(since);
                FaultReport {
                    node: fr.node,
                    kind: fr.kind.as_str().to_owned(),
                    at_secs: fr.at.as_secs_f64(),
                    first_secs: first,
                    median_secs: median(&lat),
                    all_secs: all,
                    after_verdict_secs: all.zip(first).map(|(a, f)| a - f),
                    detected_by: fr.dead_at.len(),
                    expected: expected.len(),
                }
            })
            .collect();
        let joins = o
            .joins
            .iter()
            .filter(|j| healthy.contains(&j.node))
            .map(|j| {
                let expected: Vec<u32> = healthy
                    .iter()
                    .copied()
                    .filter(|&x| {
                        x != j.node
                            && o.added_before(x, j.at)
                            && !o.faulty_during(x, j.at, j.at + OBSERVER_GRACE)
                    })
                    .collect();
                let all = expected
                    .iter()
                    .map(|x| j.seen_at.get(x).map(|t| secs(t.saturating_since(j.at))))
                    .try_fold(0.0f64, |m, v| v.map(|v| m.max(v)));
                JoinReport {
                    node: j.node,
                    at_secs: j.at.as_secs_f64(),
                    all_secs: all,
                    seen_by: j.seen_at.len(),
                    expected: expected.len(),
                }
            })
            .collect();
        let hours = sc.duration.get().as_secs_f64() / 3600.0;
        let (bytes, msgs) = bandwidth(sc, f);
        RunReport {
            seed: f.seed,
            nodes: sc.nodes,
            virtual_secs: sim.now().as_secs_f64(),
            wall_secs: f.wall.as_secs_f64(),
            setup_secs: f.setup.as_secs_f64(),
            digest: format!("{:016x}", o.digest()),
            events: o.events,
            faults,
            joins,
            false_deaths: o.false_deaths.len(),
            false_death_examples: o
                .false_deaths
                .iter()
                .take(20)
                .map(|d| FalseDeathReport {
                    at_nanos: d.at.as_nanos(),
                    observer: d.observer,
                    member: d.member,
                })
                .collect(),
            partition_deaths: o.partition_deaths,
            stale_deaths: o.stale_deaths,
            suspicions: o.suspicions,
            healthy_suspicions: o.healthy_suspicions,
            node_hours: f64::from(sc.nodes) * hours,
            bytes_per_node_sec: bytes,
            msgs_per_node_sec: msgs,
            traffic_segments: segments(f),
            largest_datagram: o.largest_datagram,
            checks: f.checks.clone(),
            samples: o
                .samples
                .iter()
                .map(|s| {
                    (
                        s.at.as_secs_f64(),
                        s.bytes_per_node_sec,
                        s.msgs_per_node_sec,
                    )
                })
                .collect(),
        }
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// The report without what differs between two identical runs (wall time).
    pub fn without_timing(&self) -> RunReport {
        RunReport {
            wall_secs: 0.0,
            setup_secs: 0.0,
            ..self.clone()
        }
    }
}

fn bandwidth(sc: &Scenario, f: &Finished) -> (Bandwidth, Bandwidth) {
    let every = sc.sample_interval();
    let o = &f.sim.observer;
    let warm = Time::ZERO + WARMUP.max(every * 2);
    let quiet = |t: Time| {
        let from = t - (every + QUIET);
        !f.plan.fault_times.iter().any(|&ft| ft > from && ft <= t)
    };
    let pick = |get: &dyn Fn(&crate::observe::Sample) -> f64| {
        let steady: Vec<f64> = o.samples.iter().filter(|s| s.at > warm).map(get).collect();
        let idle: Vec<f64> = o
            .samples
            .iter()
            .filter(|s| s.at > warm && quiet(s.at))
            .map(get)
            .collect();
        Bandwidth {
            steady_mean: mean(&steady).unwrap_or(0.0),
            idle_mean: mean(&idle),
            peak: steady.iter().copied().fold(0.0, f64::max),
            startup_peak: o
                .samples
                .iter()
                .filter(|s| s.at <= warm)
                .map(get)
                .fold(0.0, f64::max),
        }
    };
    (
        pick(&|s| s.bytes_per_node_sec),
        pick(&|s| s.msgs_per_node_sec),
    )
}

fn segments(f: &Finished) -> Vec<TrafficSegment> {
    let o = &f.sim.observer;
    let tr = &f.plan.traffic;
    let mut out: Vec<TrafficSegment> = Vec::new();
    for (k, &(from, rate)) in tr.iter().enumerate() {
        let to = tr.get(k + 1).map_or(f.plan.end, |x| x.0);
        if to <= from {
            continue;
        }
        let warm = from.max(Time::ZERO + WARMUP);
        let inside = o.samples.iter().filter(|s| s.at > warm && s.at <= to);
        let (bytes, msgs): (Vec<f64>, Vec<f64>) = inside
            .map(|s| (s.bytes_per_node_sec, s.msgs_per_node_sec))
            .unzip();
        out.push(TrafficSegment {
            from_secs: from.as_secs_f64(),
            to_secs: to.as_secs_f64(),
            rate,
            bytes_per_node_sec: mean(&bytes),
            msgs_per_node_sec: mean(&msgs),
        });
    }
    out
}

/// A distribution's summary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Dist {
    /// Values.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl Dist {
    /// Summarises `values` (None when empty).
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Dist> {
        let mut v: Vec<f64> = values.into_iter().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Some(Dist {
            n: v.len(),
            p50: rank(0.50),
            p99: rank(0.99),
            max: v[v.len() - 1],
        })
    }
}

/// Detection latency of a set of faults, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Detection {
    /// Faults.
    pub faults: usize,
    /// Until the first observer.
    pub first: Option<Dist>,
    /// Until the median observer.
    pub median: Option<Dist>,
    /// Until every observer.
    pub all: Option<Dist>,
    /// Faults that some expected observer never detected.
    pub undetected: usize,
}

impl Detection {
    fn of<'a>(faults: impl Iterator<Item = &'a FaultReport> + Clone) -> Detection {
        Detection {
            faults: faults.clone().count(),
            first: Dist::of(faults.clone().filter_map(|f| f.first_secs)),
            median: Dist::of(faults.clone().filter_map(|f| f.median_secs)),
            all: Dist::of(faults.clone().filter_map(|f| f.all_secs)),
            undetected: faults.filter(|f| f.all_secs.is_none()).count(),
        }
    }
}

/// A failed check, with what reproduces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// The run's seed.
    pub seed: u64,
    /// The check.
    pub check: String,
    /// What went wrong.
    pub violation: String,
}

/// Everything over all runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Runs.
    pub runs: usize,
    /// Detection latency of every fault of every run ("all" and per kind).
    pub detection: BTreeMap<String, Detection>,
    /// From the first verdict until every member knew (deaths).
    pub dissemination_after_verdict: Option<Dist>,
    /// Until every member knew a join.
    pub join_convergence: Option<Dist>,
    /// Joins that some member never learned of.
    pub joins_unconverged: usize,
    /// Healthy members declared dead.
    pub false_deaths: usize,
    /// False deaths per node-hour.
    pub false_deaths_per_node_hour: f64,
    /// Suspicions of healthy members.
    pub healthy_suspicions: u64,
    /// Healthy suspicions per node-hour.
    pub healthy_suspicions_per_node_hour: f64,
    /// Suspicions of anyone.
    pub suspicions: u64,
    /// Deaths declared across a partition (expected).
    pub partition_deaths: u64,
    /// Deaths accepted just after a detected freeze or cut-off (expected).
    pub stale_deaths: u64,
    /// Protocol bytes per node per second: steady mean and idle mean
    /// (means over runs), peaks (maxima over runs).
    pub bytes_per_node_sec: Bandwidth,
    /// Protocol packets per node per second.
    pub msgs_per_node_sec: Bandwidth,
    /// Largest datagram of any run.
    pub largest_datagram: u64,
    /// Whether every check of every run passed.
    pub passed: bool,
    /// Every failed check.
    pub failures: Vec<Failure>,
    /// Median wall-clock seconds per run.
    pub wall_secs_median: f64,
}

/// A scenario's report: every run and the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Its description.
    pub description: String,
    /// Nodes at the start.
    pub nodes: u32,
    /// Virtual time per run.
    pub duration: String,
    /// Timing profile.
    pub profile: String,
    /// Summary over the runs.
    pub summary: Summary,
    /// Every run.
    pub runs: Vec<RunReport>,
}

fn mean_bw(runs: &[RunReport], get: fn(&RunReport) -> Bandwidth) -> Bandwidth {
    let n = runs.len().max(1) as f64;
    let idle: Vec<f64> = runs.iter().filter_map(|r| get(r).idle_mean).collect();
    Bandwidth {
        steady_mean: runs.iter().map(|r| get(r).steady_mean).sum::<f64>() / n,
        idle_mean: mean(&idle),
        peak: runs.iter().map(|r| get(r).peak).fold(0.0, f64::max),
        startup_peak: runs.iter().map(|r| get(r).startup_peak).fold(0.0, f64::max),
    }
}

impl Report {
    /// Summarises the runs of `sc`.
    pub fn new(sc: &Scenario, runs: Vec<RunReport>) -> Report {
        let faults = || runs.iter().flat_map(|r| r.faults.iter());
        let mut detection = BTreeMap::new();
        detection.insert("all".to_owned(), Detection::of(faults()));
        let mut kinds: Vec<&str> = faults().map(|f| f.kind.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        for k in kinds {
            detection.insert(
                k.to_owned(),
                Detection::of(faults().filter(|f| f.kind == k)),
            );
        }
        let node_hours: f64 = runs.iter().map(|r| r.node_hours).sum::<f64>().max(1e-9);
        let false_deaths: usize = runs.iter().map(|r| r.false_deaths).sum();
        let healthy_suspicions: u64 = runs.iter().map(|r| r.healthy_suspicions).sum();
        let joins = || runs.iter().flat_map(|r| r.joins.iter());
        let failures: Vec<Failure> = runs
            .iter()
            .flat_map(|r| {
                r.checks.iter().filter(|c| !c.passed).map(|c| Failure {
                    seed: r.seed,
                    check: c.name.clone(),
                    violation: c.violation.clone().unwrap_or_default(),
                })
            })
            .collect();
        let mut walls: Vec<f64> = runs.iter().map(|r| r.wall_secs).collect();
        walls.sort_by(f64::total_cmp);
        let summary = Summary {
            runs: runs.len(),
            detection,
            dissemination_after_verdict: Dist::of(faults().filter_map(|f| f.after_verdict_secs)),
            join_convergence: Dist::of(joins().filter_map(|j| j.all_secs)),
            joins_unconverged: joins().filter(|j| j.all_secs.is_none()).count(),
            false_deaths,
            false_deaths_per_node_hour: false_deaths as f64 / node_hours,
            healthy_suspicions,
            healthy_suspicions_per_node_hour: healthy_suspicions as f64 / node_hours,
            suspicions: runs.iter().map(|r| r.suspicions).sum(),
            partition_deaths: runs.iter().map(|r| r.partition_deaths).sum(),
            stale_deaths: runs.iter().map(|r| r.stale_deaths).sum(),
            bytes_per_node_sec: mean_bw(&runs, |r| r.bytes_per_node_sec),
            msgs_per_node_sec: mean_bw(&runs, |r| r.msgs_per_node_sec),
            largest_datagram: runs.iter().map(|r| r.largest_datagram).max().unwrap_or(0),
            passed: failures.is_empty(),
            failures,
            wall_secs_median: median(&walls).unwrap_or(0.0),
        };
        Report {
            scenario: sc.name.clone(),
            description: sc.description.clone(),
            nodes: sc.nodes,
            duration: sc.duration.to_string(),
            profile: format!("{:?}", sc.profile).to_lowercase(),
            summary,
            runs,
        }
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("reports are plain data")
    }
}
