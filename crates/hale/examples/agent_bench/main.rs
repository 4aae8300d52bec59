//! Benchmarks of real `hale agent` processes on loopback (see `bench/agent.sh`
//! and BENCHMARKS.md, "Agent (real processes)").
//!
//! * `agent_bench detect --nodes N --trials T --signal kill|stop`: detection
//!   time of a SIGKILLed or SIGSTOPped agent, from the signal to the `dead`
//!   event (its `unix_ms`, stamped by each observer) at the first observer
//!   and at the last one.
//! * `agent_bench detect --signal stall`: SIGSTOP for 2 s then SIGCONT; counts
//!   the observers that declared the stalled agent dead (must be none).
//! * `agent_bench idle --nodes N --secs S`: bytes sent per node per second,
//!   resident memory and CPU of an idle cluster.
//! * `agent_bench flood --nodes 3 --secs S`: probe round trips of one agent
//!   for S seconds unflooded, then S seconds under a junk flood (datagrams,
//!   huge and trickling TCP frames from three source addresses); its peak
//!   memory and what the flood sent.

#![allow(clippy::unwrap_used)] // A benchmark harness: a failure is a panic with its message.

mod flood;
#[path = "../../tests/it/junk_flood.rs"]
mod junk_flood;
mod loss;
#[path = "../../tests/it/support.rs"]
#[allow(dead_code, unused_imports)] // What the benchmark does not use of the tests' harness.
mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use hale_agent::view::unix_ms;
use hale_agent::{AgentEvent, Key};
use nix::sys::signal::Signal;

use support::{call, loopback_spec, spawn, wait_all_alive, AgentProc, Spec};

/// Benchmarks of real agent processes on loopback.
#[derive(Debug, Parser)]
struct Args {
    /// `detect` or `idle`.
    #[arg(value_enum)]
    mode: Mode,
    /// Agents in the cluster.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Detection trials.
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// The fault of a detection trial.
    #[arg(long, value_enum, default_value_t = Fault::Kill)]
    signal: Fault,
    /// Length of the idle measurement, in seconds.
    #[arg(long, default_value_t = 120)]
    secs: u64,
    /// `idle`: drop this percentage of the packets to the agents' ports
    /// (loopback, nftables, random), after the cluster formed.
    #[arg(long, default_value_t = 0)]
    loss: u32,
    /// Timing profile of the agents.
    #[arg(long, default_value = "lan")]
    profile: String,
    /// The hale binary (default: next to this one's directory).
    #[arg(long)]
    hale: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    Detect,
    Idle,
    Flood,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Fault {
    Kill,
    Stop,
    /// SIGSTOP for 2 s, then SIGCONT: a stall that must never be convicted.
    Stall,
}

/// How long a `stall` trial stops the agent.
const STALL: Duration = Duration::from_secs(2);
/// How long after a stall a `stall` trial watches for a verdict.
const STALL_WATCH: Duration = Duration::from_secs(10);

/// `/proc/<pid>/stat`'s utime + stime, in clock ticks.
fn cpu_ticks(a: &AgentProc) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", a.pid())).unwrap_or_default();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of stat; `after` starts at field 3.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// When `a` declared `victim` dead (its `unix_ms`), among its events after `since`.
fn declared_dead(a: &AgentProc, victim: &str, since: u64) -> Option<u64> {
    call(a.api().events(since))
        .unwrap_or_default()
        .into_iter()
        .find(|e| matches!(e.event, AgentEvent::Dead(_)) && e.member.as_deref() == Some(victim))
        .map(|e| e.unix_ms)
}

struct Bench {
    logs: PathBuf,
    key: String,
    cluster: String,
    profile: String,
    agents: Vec<AgentProc>,
}

impl Bench {
    /// Starts agent `name` on loopback, joining through the first agent.
    fn spawn(&self, name: &str) -> AgentProc {
        let first = self.agents.first();
        let spec = loopback_spec(name, first, &self.cluster, &self.key, &self.logs);
        spawn(&Spec {
            profile: self.profile.clone(),
            ..spec
        })
    }

    /// Waits (a minute at most) until every agent sees every agent alive.
    fn wait_formed(&self) {
        wait_all_alive(&self.agents, Duration::from_secs(60), "the cluster to form");
    }

    /// Every agent reports local health 0 and no suspect.
    fn settled(&self) -> bool {
        self.agents.iter().all(|a| {
            call(a.api().health()).is_ok_and(|h| h.local_health == 0 && h.members.suspect == 0)
        })
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summary(label: &str, v: &mut [u64]) -> String {
    v.sort_unstable();
    format!(
        "{label}: p50 {:.2}s  p99 {:.2}s  min {:.2}s  max {:.2}s  (n={})",
        percentile(v, 50.0) as f64 / 1000.0,
        percentile(v, 99.0) as f64 / 1000.0,
        v[0] as f64 / 1000.0,
        v[v.len() - 1] as f64 / 1000.0,
        v.len()
    )
}

fn detect(b: &mut Bench, trials: usize, fault: Fault) {
    let n = b.agents.len();
    let (mut first, mut all) = (Vec::new(), Vec::new());
    for t in 0..trials {
        b.wait_formed();
        // Settle (a resumed node's peers lower their health again), bounded.
        let start = Instant::now();
        while !b.settled() && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let v = 1 + t % (n - 1);
        let since: Vec<u64> = b
            .agents
            .iter()
            .map(|a| {
                a.events()
                    .and_then(|e| e.last().map(|e| e.seq))
                    .unwrap_or(0)
            })
            .collect();
        let victim = b.agents[v].name.clone();
        if fault == Fault::Stall {
            b.agents[v].signal(Signal::SIGSTOP);
            std::thread::sleep(STALL); // The fault itself, not a wait for a condition.
            b.agents[v].signal(Signal::SIGCONT);
            std::thread::sleep(STALL_WATCH); // The window in which no verdict may come.
            let convicted = (b.agents.iter().enumerate())
                .filter(|&(i, a)| i != v && declared_dead(a, &victim, since[i]).is_some())
                .count();
            println!("trial {t:>2}: {victim:<10} stalled 2s, convicted by {convicted} observer(s)");
            all.push(convicted as u64);
            continue;
        }
        let t0 = unix_ms();
        b.agents[v].signal(match fault {
            Fault::Kill => Signal::SIGKILL,
            Fault::Stop | Fault::Stall => Signal::SIGSTOP,
        });
        let mut seen: Vec<Option<u64>> = vec![None; n];
        seen[v] = Some(0);
        let start = Instant::now();
        while seen.iter().any(Option::is_none) {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "trial {t}: not every observer declared {victim} dead: {seen:?}"
            );
            for (i, a) in b.agents.iter().enumerate() {
                if seen[i].is_some() {
                    continue;
                }
                seen[i] = declared_dead(a, &victim, since[i]).map(|at| at.saturating_sub(t0));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let times: Vec<u64> = seen
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != v)
            .map(|(_, s)| s.unwrap())
            .collect();
        let (lo, hi) = (*times.iter().min().unwrap(), *times.iter().max().unwrap());
        println!(
            "trial {t:>2}: {victim:<10} first {:.2}s all {:.2}s",
            lo as f64 / 1000.0,
            hi as f64 / 1000.0
        );
        first.push(lo);
        all.push(hi);
        match fault {
            Fault::Stop | Fault::Stall => b.agents[v].signal(Signal::SIGCONT),
            Fault::Kill => {
                let fresh = b.spawn(&format!("n{v}-t{t}"));
                b.agents[v] = fresh;
            }
        }
    }
    println!(
        "RESULT detect nodes={n} signal={fault:?} profile={}",
        b.profile
    );
    if fault == Fault::Stall {
        let stalls_convicted = all.iter().filter(|&&c| c > 0).count();
        println!(
            "RESULT   stalls convicted: {stalls_convicted} of {trials} (observers convicting: {})",
            all.iter().sum::<u64>()
        );
        return;
    }
    println!("RESULT   {}", summary("first observer", &mut first));
    println!("RESULT   {}", summary("all observers ", &mut all));
}

fn metrics_sum(text: &str, names: &[&str]) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| names.iter().any(|n| l.split(['{', ' ']).next() == Some(n)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// One agent's counters in `idle`: datagram bytes, datagrams, stream
/// frames, CPU ticks, suspicions, deaths, stream bytes (all sent or seen).
type Counters = (u64, u64, u64, u64, u64, u64, u64);

fn idle(b: &Bench, secs: u64, loss: u32) {
    let n = b.agents.len();
    b.wait_formed();
    let ports: Vec<u16> = b.agents.iter().map(|a| a.gossip.port()).collect();
    let _loss = (loss > 0).then(|| loss::Loss::install(loss, &ports));
    // Let joins and their gossip die down.
    std::thread::sleep(Duration::from_secs(10));
    let sample = || -> Vec<Counters> {
        b.agents
            .iter()
            .map(|a| {
                let m = a.metrics().unwrap();
                (
                    metrics_sum(&m, &["hale_datagram_bytes_out_total"]),
                    metrics_sum(&m, &["hale_datagrams_out_total"]),
                    metrics_sum(&m, &["hale_streams_out_total"]),
                    cpu_ticks(a),
                    metrics_sum(&m, &["hale_suspicions_total"]),
                    metrics_sum(
                        &m,
                        &["hale_deaths_declared_total", "hale_deaths_accepted_total"],
                    ),
                    metrics_sum(&m, &["hale_stream_bytes_out_total"]),
                )
            })
            .collect()
    };
    let before = sample();
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let after = sample();
    let el = t.elapsed().as_secs_f64();
    let ticks: f64 = String::from_utf8(
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap_or(100.0);
    let mut bytes = Vec::new();
    let mut wire = Vec::new();
    let mut cpu = Vec::new();
    for (x, y) in before.iter().zip(&after) {
        let payload = (y.0 - x.0 + y.6 - x.6) as f64;
        let dgrams = (y.1 - x.1) as f64;
        let streams = (y.2 - x.2) as f64;
        bytes.push(payload / el);
        // Sealing adds 29 bytes, UDP/IPv4 headers 28, a stream's length prefix 4.
        wire.push((payload + dgrams * (29.0 + 28.0) + streams * (29.0 + 4.0)) / el);
        cpu.push((y.3 - x.3) as f64 / ticks / el * 100.0);
    }
    let mut rss: Vec<f64> = b
        .agents
        .iter()
        .map(|a| a.rss_kib() as f64 / 1024.0)
        .collect();
    let stat = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() - 1])
    };
    let (bm, bx) = stat(&mut bytes);
    let (wm, wx) = stat(&mut wire);
    let (cm, cx) = stat(&mut cpu);
    let (rm, rx) = stat(&mut rss);
    let delta = |f: fn(&Counters) -> u64| -> u64 {
        before.iter().zip(&after).map(|(x, y)| f(y) - f(x)).sum()
    };
    let (suspicions, deaths) = (delta(|s| s.4), delta(|s| s.5));
    let per_node = |v: u64| v as f64 / n as f64 / el;
    println!(
        "RESULT idle nodes={n} profile={} secs={el:.0} loss={loss}%",
        b.profile
    );
    println!("RESULT   payload bytes out per node per second: median {bm:.0}, max {bx:.0}");
    println!("RESULT   on the wire (sealed + UDP/IP headers): median {wm:.0}, max {wx:.0}");
    println!("RESULT   CPU per agent (% of one core): median {cm:.2}, max {cx:.2}");
    println!("RESULT   RSS per agent (MiB): median {rm:.1}, max {rx:.1}");
    let (dg, db) = (delta(|s| s.1), delta(|s| s.0));
    println!(
        "RESULT   mean per node: {:.2} datagrams/s of {:.0} payload bytes; {:.2} stream frames/s, {:.0} stream bytes/s",
        per_node(dg),
        db as f64 / dg.max(1) as f64,
        per_node(delta(|s| s.2)),
        per_node(delta(|s| s.6)),
    );
    println!("RESULT   suspicions raised (all agents): {suspicions}; deaths (declared or accepted, all agents): {deaths}");
}

fn main() {
    let args = Args::parse();
    let hale = args.hale.clone().unwrap_or_else(|| {
        let me = std::env::current_exe().unwrap();
        me.parent().unwrap().parent().unwrap().join("hale")
    });
    assert!(hale.exists(), "no hale binary at {}", hale.display());
    let logs = std::env::temp_dir().join(format!("hale-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs).unwrap();
    support::HALE_BIN.set(hale).unwrap();
    let mut b = Bench {
        logs: logs.clone(),
        key: Key::generate().to_base64(),
        cluster: format!("bench-{}", std::process::id()),
        profile: args.profile.clone(),
        agents: Vec::new(),
    };
    for i in 0..args.nodes {
        let a = b.spawn(&format!("n{i}"));
        b.agents.push(a);
    }
    match args.mode {
        Mode::Detect => detect(&mut b, args.trials, args.signal),
        Mode::Idle => idle(&b, args.secs, args.loss),
        Mode::Flood => flood::flood(&b, args.secs),
    }
    drop(b);
    if std::env::var_os("AGENT_BENCH_KEEP_LOGS").is_none() {
        let _ = std::fs::remove_dir_all(logs);
    } else {
        println!("logs kept in {}", logs.display());
    }
}
