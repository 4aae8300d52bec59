//! Running a scenario: build the cluster, schedule the plan, run it in
//! virtual time, check the invariants.

use std::time::{Duration, Instant};

use hale_core::Time;

use crate::check::{self, Violation};
use crate::engine::{Sim, SimConfig};
use crate::net::Network;
use crate::report::{Report, RunReport};
use crate::scenario::{Plan, Scenario, ScenarioError};

/// The outcome of one invariant check.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckResult {
    /// Which check.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// Why not, if it did not.
    pub violation: Option<String>,
}

impl CheckResult {
    fn of(name: &str, r: Result<(), Violation>) -> CheckResult {
        CheckResult {
            name: name.to_owned(),
            passed: r.is_ok(),
            violation: r.err().map(|v| v.to_string()),
        }
    }
}

/// A finished run, with the simulator still there to inspect.
#[derive(Debug)]
pub struct Finished {
    /// The simulator at the end of the run.
    pub sim: Sim,
    /// What was scheduled.
    pub plan: Plan,
    /// The seed.
    pub seed: u64,
    /// The checks, in a fixed order.
    pub checks: Vec<CheckResult>,
    /// Wall-clock time of the run.
    pub wall: Duration,
    /// Wall-clock time of building the cluster (the warm start), included in `wall`.
    pub setup: Duration,
}

/// Threads per run set by [`set_threads`] (0: not set).
static THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Sets the threads each run uses from now on (1, the default, or 2; the
/// results do not depend on it). Two pay off only with a core to spare: on
/// a machine already busy they cost CPU time and save no wall time
/// (BENCHMARKS.md, simulator speed).
pub fn set_threads(n: usize) {
    THREADS.store(n.clamp(1, 2), std::sync::atomic::Ordering::Relaxed);
}

fn threads() -> usize {
    THREADS.load(std::sync::atomic::Ordering::Relaxed).max(1)
}

/// Set by [`set_wire_bytes`].
static WIRE_BYTES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether runs from now on encode every packet and decode it at its
/// addressee (`SimConfig::wire_bytes`; the results do not depend on it).
pub fn set_wire_bytes(on: bool) {
    WIRE_BYTES.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The simulator configuration of a scenario run with `seed`.
pub fn sim_config(sc: &Scenario, seed: u64, plan: &Plan) -> Result<SimConfig, ScenarioError> {
    let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
    Ok(SimConfig {
        nodes: sc.nodes,
        seed,
        node: sc.node_config()?,
        warm_start: sc.warm_start,
        net: Network {
            latency: ms(sc.network.latency_ms),
            jitter: ms(sc.network.jitter_ms),
            loss: sc.network.loss,
            ..Network::default()
        },
        traffic_rate: plan.traffic.first().map_or(0.0, |t| t.1),
        trace_probes: sc.trace_probes,
        sample_every: sc.sample_interval(),
        threads: threads(),
        wire_bytes: WIRE_BYTES.load(std::sync::atomic::Ordering::Relaxed),
        ..SimConfig::default()
    })
}

/// Runs `sc` once with `seed`, calling `progress` with the virtual time
/// every so often, and runs the checks:
///
/// * `no_false_death`: always;
/// * `every_fault_detected`: always (at the end of the run);
/// * `views_converged`: at the end of the heal phase, when there is one;
/// * `probe_coverage`: with `trace_probes` (needs a stable membership).
pub fn simulate(
    sc: &Scenario,
    seed: u64,
    progress: &mut dyn FnMut(Time),
) -> Result<Finished, ScenarioError> {
    let started = Instant::now();
    let plan = sc.plan(seed)?;
    let mut sim = Sim::new(sim_config(sc, seed, &plan)?);
    let setup = started.elapsed();
    for (t, a) in &plan.actions {
        sim.schedule(*t, a.clone());
    }
    let end = plan.end;
    let chunk = (end.saturating_since(Time::ZERO) / 200).max(Duration::from_secs(1));
    while sim.now() < end {
        let next = (sim.now() + chunk).min(end);
        sim.run_until(next);
        progress(sim.now());
    }
    let mut checks = vec![
        CheckResult::of("no_false_death", check::no_false_death(&sim.observer)),
        CheckResult::of("every_fault_detected", check::every_fault_detected(&sim)),
    ];
    if !sc.heal_len().is_zero() {
        checks.push(CheckResult::of(
            "views_converged",
            check::views_converged(&sim),
        ));
    }
    if sc.trace_probes {
        checks.push(CheckResult::of(
            "probe_coverage",
            check::probe_coverage(&sim.observer, sc.nodes),
        ));
    }
    Ok(Finished {
        sim,
        plan,
        seed,
        checks,
        wall: started.elapsed(),
        setup,
    })
}

/// Runs `sc` once with `seed` and summarises it.
pub fn run(
    sc: &Scenario,
    seed: u64,
    progress: &mut dyn FnMut(Time),
) -> Result<RunReport, ScenarioError> {
    let f = simulate(sc, seed, progress)?;
    Ok(RunReport::collect(sc, &f))
}

/// Runs `sc` with each of `seeds` in turn; `progress` gets the run's index
/// and its virtual time.
pub fn run_many(
    sc: &Scenario,
    seeds: &[u64],
    progress: &mut dyn FnMut(usize, Time),
) -> Result<Report, ScenarioError> {
    let mut runs = Vec::with_capacity(seeds.len());
    for (k, &seed) in seeds.iter().enumerate() {
        runs.push(run(sc, seed, &mut |t| progress(k, t))?);
    }
    Ok(Report::new(sc, runs))
}
