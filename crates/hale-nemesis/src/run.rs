//! One schedule, end to end: build the lab, start the cluster, wait until
//! it has formed and elected a primary, carry out the schedule while the
//! client writes, heal, wait for the cluster to settle, stop everything,
//! gather the logs into a [`History`] and check it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::check::{check_all, Violation};
use crate::client::Client;
use crate::clock::now_ns;
use crate::cluster::{ClockMode, Cluster, ClusterConfig, ClusterError};
use crate::history::{read_log, History, Outcome};
use crate::lab::{Lab, LabError};
use crate::nemesis::{Nemesis, Oracle};
use crate::schedule::{Fault, Net, Schedule, ScheduleParams};

/// How long a new cluster gets to form with one primary before the faults.
pub const FORMATION: Duration = Duration::from_secs(90);

/// Set when the process was asked to stop (Ctrl-C, SIGTERM): every wait
/// gives up, and the run's processes and namespaces are cleaned up.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Why a run could not be carried out (a violation is not an error: it is
/// in the [`RunReport`]).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The lab could not be built.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// Processes could not be started.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// A file could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Ctrl-C or SIGTERM.
    #[error("interrupted")]
    Interrupted,
}

/// How runs are carried out.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The `hale` binary.
    pub hale_bin: PathBuf,
    /// This harness's binary.
    pub nemesis_bin: PathBuf,
    /// Where each run's directory goes (`seed-<N>/`).
    pub out: PathBuf,
    /// The hosts, the length of the fault phase, the fault families to draw
    /// from, the most faults at once.
    pub schedule: ScheduleParams,
    /// After the last heal, the bound for one primary and converged membership.
    pub liveness_bound: Duration,
    /// Client writers that look the primary up again every second.
    pub workers: u32,
    /// Client writers that keep their primary until a write fails.
    pub sticky_workers: u32,
    /// Agents get a `state_dir`.
    pub state_dir: bool,
    /// `HALE_PLANTED_BUG` for the agents and hooks.
    pub planted_bug: Option<String>,
    /// The registers skip their epoch checks (planted bug).
    pub register_skips_epoch_check: bool,
    /// Each host's tmpfs, MiB.
    pub disk_mb: u32,
    /// Promote hooks take between these (ms), drawn per host from the seed.
    pub promote_ms: (u64, u64),
    /// Demote hooks take between these (ms).
    pub demote_ms: (u64, u64),
    /// The previous release's `hale`, for upgrade actions (None: skipped).
    pub previous_bin: Option<PathBuf>,
}

/// What one run found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// The run's directory.
    pub dir: PathBuf,
    /// The schedule.
    pub schedule: Schedule,
    /// Violations found.
    pub violations: Vec<Violation>,
    /// Failover times (ms) after faults that hit the primary's host: from
    /// the fault to another agent (or a new epoch) answering primary.
    pub failovers: Vec<(String, u64)>,
    /// Seconds from the last heal to one primary and converged membership.
    pub settle_s: Option<f64>,
    /// Writes acknowledged, refused, of unknown outcome.
    pub writes: (usize, usize, usize),
}

struct RunOracle<'a> {
    client: &'a Client,
    rt: &'a tokio::runtime::Runtime,
    rng: Xoshiro256PlusPlus,
    hosts: usize,
}

impl Oracle for RunOracle<'_> {
    fn holder(&self) -> Option<usize> {
        self.client.shared.lock().ok()?.primary().map(|(i, _)| i)
    }
    fn leader(&self) -> Option<usize> {
        (0..crate::cluster::SERVERS.min(self.hosts))
            .find_map(|i| self.rt.block_on(self.client.leader(i)))
            .and_then(|id| usize::try_from(id).ok()?.checked_sub(1))
            .filter(|&h| h < self.hosts)
    }
    fn any(&mut self, below: usize) -> usize {
        self.rng.random_range(0..below.max(1))
    }
    fn degraded(&self, host: usize) -> bool {
        self.rt
            .block_on(self.client.get(host, "/v1/health"))
            .is_some_and(|(_, v)| v.get("status").and_then(|s| s.as_str()) == Some("degraded"))
    }
    fn answers(&self, host: usize) -> bool {
        self.rt
            .block_on(self.client.get(host, "/v1/health"))
            .is_some()
    }
    fn paused(&self) -> Option<bool> {
        (0..self.hosts).find_map(|i| {
            let (_, v) = self.rt.block_on(self.client.get(i, "/v1/roles"))?;
            v.get("leases")?.get("db")?.get("paused")?.as_bool()
        })
    }
    fn knows_paused(&self, host: usize) -> bool {
        self.rt
            .block_on(self.client.get(host, "/v1/roles"))
            .and_then(|(_, v)| {
                let local = v.get("local")?.as_array()?;
                let db = local
                    .iter()
                    .find(|r| r.get("role").and_then(|x| x.as_str()) == Some("db"))?;
                db.get("paused")?.as_bool()
            })
            .unwrap_or(false)
    }
    fn says_primary(&self, host: usize) -> bool {
        matches!(
            self.rt
                .block_on(self.client.get(host, "/v1/roles/db/primary")),
            Some((200, _))
        )
    }
    fn restarted(&self, host: usize) {
        if let Ok(mut s) = self.client.shared.lock() {
            s.generations[host] += 1;
        }
    }
}

fn check_interrupt() -> Result<(), RunError> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        return Err(RunError::Interrupted);
    }
    Ok(())
}

/// Every agent answers and sees every other alive, and exactly one agent
/// answers primary: returns that one's index.
fn settled(client: &Client, rt: &tokio::runtime::Runtime, h: &mut History) -> Option<usize> {
    let n = h.nodes.len();
    let (members, primaries) = rt.block_on(async {
        let mut members = std::collections::BTreeMap::new();
        let mut primaries = Vec::new();
        for i in 0..n {
            if let Some(m) = client.members(i).await {
                members.insert(h.nodes[i].clone(), m);
            }
            if let Some((200, _)) = client.get(i, "/v1/roles/db/primary").await {
                primaries.push(i);
            }
        }
        (members, primaries)
    });
    h.final_primaries = primaries.iter().map(|&i| h.nodes[i].clone()).collect();
    let converged = members.len() == n
        && members.iter().all(|(obs, view)| {
            h.nodes
                .iter()
                .all(|x| x == obs || view.get(x).map(String::as_str) == Some("alive"))
        });
    h.final_members = members;
    (converged && primaries.len() == 1).then(|| primaries[0])
}

/// Failover times: for each fault that takes the primary's host away
/// (SIGKILL or SIGSTOP of its agent or of the whole host, cutting it off
/// or making it deaf or mute) when it started, how long until another
/// agent (or a higher epoch) answered primary.
fn failovers(h: &History) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for f in &h.faults {
        let takes_away = matches!(
            f.fault,
            Fault::KillAgent(_)
                | Fault::StopAgent(_)
                | Fault::KillHost(_)
                | Fault::StopHost(_)
                | Fault::Net(Net::Isolate(_) | Net::OneWay { .. })
        );
        if !takes_away {
            continue;
        }
        let before = h.primaries.iter().filter(|p| p.t <= f.start_ns);
        let mut state: std::collections::BTreeMap<&str, (bool, Option<u64>)> = Default::default();
        for p in before {
            state.insert(&p.node, (p.primary, p.epoch));
        }
        let Some((holder, epoch)) = state
            .iter()
            .filter(|(_, s)| s.0)
            .max_by_key(|(_, s)| s.1)
            .map(|(n, s)| (*n, s.1))
        else {
            continue;
        };
        if !f.hosts.iter().any(|x| x == holder) || f.hosts.len() > 1 {
            continue;
        }
        let next = h
            .primaries
            .iter()
            .find(|p| p.t > f.start_ns && p.primary && (p.node != holder || p.epoch > epoch));
        if let Some(p) = next {
            out.push((f.fault.name().to_owned(), (p.t - f.start_ns) / 1_000_000));
        }
    }
    out
}

/// Runs the schedule of `seed`.
pub fn run_one(opts: &RunOptions, seed: u64) -> Result<RunReport, RunError> {
    let dir = opts.out.join(format!("seed-{seed}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let schedule = Schedule::generate(seed, &opts.schedule);
    std::fs::write(dir.join("schedule.txt"), schedule.to_string())?;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x6e65_6d65_7369_7321);
    let lab = Lab::new(&dir, &format!("s{seed}"), opts.schedule.hosts, opts.disk_mb)?;
    lab.enter_bridge()?;
    let draw =
        |rng: &mut Xoshiro256PlusPlus, (lo, hi): (u64, u64)| rng.random_range(lo..=hi.max(lo));
    let ccfg = ClusterConfig {
        hale_bin: opts.hale_bin.clone(),
        nemesis_bin: opts.nemesis_bin.clone(),
        promote_ms: (0..opts.schedule.hosts)
            .map(|_| draw(&mut rng, opts.promote_ms))
            .collect(),
        demote_ms: (0..opts.schedule.hosts)
            .map(|_| draw(&mut rng, opts.demote_ms))
            .collect(),
        state_dir: opts.state_dir,
        planted_bug: opts.planted_bug.clone(),
        register_skips_epoch_check: opts.register_skips_epoch_check,
        previous_bin: opts.previous_bin.clone(),
    };
    let mut cluster = Cluster::new(lab, ccfg, &format!("nemesis-{seed}"))?;
    let names = cluster.names.clone();
    for i in 0..opts.schedule.hosts {
        cluster.start_register(i)?;
    }
    for i in 0..opts.schedule.hosts {
        cluster.start_agent(i, ClockMode::True)?;
    }
    // Worker threads start here, inside the bridge namespace.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = Client::new(cluster.lab.ips.clone(), names.clone());
    {
        let _g = rt.enter();
        client.start(opts.workers, opts.sticky_workers);
    }
    let mut history = History {
        schedule: Some(schedule.clone()),
        nodes: names.clone(),
        liveness_bound_ns: opts.liveness_bound.as_nanos() as u64,
        ..History::default()
    };
    // A cluster that never forms with one primary is a liveness violation
    // of its own: no faults are carried out, and check (c) reports it.
    let formed_by = Instant::now() + FORMATION;
    let mut formed = false;
    while !formed && Instant::now() < formed_by {
        check_interrupt()?;
        formed = settled(&client, &rt, &mut history).is_some();
        if !formed {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    history.never_formed = !formed;
    // Let writes flow a moment before the first fault.
    std::thread::sleep(Duration::from_secs(1));
    let mut oracle = RunOracle {
        client: &client,
        rt: &rt,
        rng,
        hosts: opts.schedule.hosts,
    };
    let mut nemesis = Nemesis::default();
    let mut plan: Vec<(u64, bool, usize)> = Vec::new(); // (ms, heal?, step)
    for (i, s) in schedule.steps.iter().enumerate() {
        plan.push((s.at_ms, false, i));
        plan.push((s.at_ms + s.for_ms, true, i));
    }
    plan.sort();
    let mut record_of: Vec<Option<usize>> = vec![None; schedule.steps.len()];
    history.faults_start_ns = now_ns();
    let t0 = Instant::now();
    let mut next = 0;
    while formed && (t0.elapsed() < Duration::from_millis(schedule.length_ms) || next < plan.len())
    {
        check_interrupt()?;
        let now_ms = t0.elapsed().as_millis() as u64;
        while next < plan.len() && plan[next].0 <= now_ms {
            let (_, heal, step) = plan[next];
            if heal {
                if let Some(r) = record_of[step] {
                    nemesis.heal(&mut cluster, r, &mut oracle)?;
                }
            } else {
                record_of[step] = Some(nemesis.records.len());
                nemesis.apply(&mut cluster, &schedule.steps[step].fault, &mut oracle)?;
            }
            next += 1;
        }
        nemesis.tick(&mut cluster, &mut oracle)?;
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every fault healed, every operator action carried to its end (each
    // of their steps has a deadline), then the heal phase's own actions.
    nemesis.heal_all(&mut cluster, &mut oracle)?;
    let mut phase_begun = false;
    while formed && (nemesis.busy() || !phase_begun) {
        check_interrupt()?;
        if !nemesis.busy() {
            nemesis.begin_heal_phase(&mut cluster);
            phase_begun = true;
        }
        nemesis.tick(&mut cluster, &mut oracle)?;
        std::thread::sleep(Duration::from_millis(50));
    }
    history.heal_ns = now_ns();
    let bound_at = Instant::now() + opts.liveness_bound;
    let mut waiting = formed;
    while waiting {
        check_interrupt()?;
        if settled(&client, &rt, &mut history).is_some() {
            history.settled_ns = Some(now_ns());
        }
        waiting = history.settled_ns.is_none() && Instant::now() <= bound_at;
        if waiting {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    // A little more writing on the settled cluster, then let answers arrive.
    std::thread::sleep(Duration::from_secs(2));
    client.stop();
    std::thread::sleep(Duration::from_millis(1500));
    history.stopping_ns = Some(now_ns());
    cluster.stop_all();
    history.end_ns = now_ns();
    history.faults = nemesis.records;
    history.commands = nemesis.commands;
    {
        let mut s = crate::client::lock(&client.shared);
        history.ops = std::mem::take(&mut s.ops);
        history.deaths = std::mem::take(&mut s.deaths);
        history.primaries = std::mem::take(&mut s.primaries);
    }
    for (i, name) in names.iter().enumerate() {
        let recs = read_log(&cluster.lab.disks[i].join("register.log"));
        history.registers.insert(name.clone(), recs);
        history
            .hooks
            .extend(read_log(&cluster.lab.dirs[i].join("hooks.log")));
        // Keep the register log past the tmpfs.
        let _ = std::fs::copy(
            cluster.lab.disks[i].join("register.log"),
            cluster.lab.dirs[i].join("register.log"),
        );
    }
    history.hooks.sort_by_key(|l| l.t);
    drop(cluster);
    drop(rt);
    let text = serde_json::to_vec(&history).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("history.json"), text)?;
    let violations = check_all(&history);
    let count = |f: fn(&Outcome) -> bool| history.ops.iter().filter(|o| f(&o.outcome)).count();
    let report = RunReport {
        seed,
        dir: dir.clone(),
        schedule,
        failovers: failovers(&history),
        settle_s: history
            .settled_ns
            .map(|t| (t - history.heal_ns) as f64 / 1e9),
        writes: (
            count(|o| matches!(o, Outcome::Ack { .. })),
            count(|o| matches!(o, Outcome::Refused(_))),
            count(|o| matches!(o, Outcome::Unknown(_))),
        ),
        violations,
    };
    let text = serde_json::to_vec_pretty(&report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("report.json"), text)?;
    if !report.violations.is_empty() {
        let mut out = format!(
            "VIOLATION in seed {seed} (replay: --seed {seed})\n{}",
            report.schedule
        );
        for v in &report.violations {
            out.push_str(&format!(
                "{v}\n---- history {:.1}s..{:.1}s ----\n{}",
                (v.from_ns as i128 - history.faults_start_ns as i128) as f64 / 1e9,
                (v.to_ns as i128 - history.faults_start_ns as i128) as f64 / 1e9,
                v.slice(&history)
            ));
        }
        std::fs::write(dir.join("violations.txt"), &out)?;
        eprintln!("{out}");
    }
    Ok(report)
}
