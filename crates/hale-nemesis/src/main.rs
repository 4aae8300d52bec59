//! `hale-nemesis`: run nemesis schedules against real `hale` agents, serve
//! a fenced register, run a role hook, or re-check a recorded history.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use hale_nemesis::hook::HookConfig;
use hale_nemesis::register::RegisterConfig;
use hale_nemesis::run::{run_one, RunOptions, INTERRUPTED};
use hale_nemesis::schedule::{Family, ScheduleParams};

#[derive(Parser)]
#[command(
    name = "hale-nemesis",
    about = "Random faults on real hale agents, checked like Jepsen"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run schedules (as root: network namespaces, nftables, tmpfs, libfaketime).
    Run(RunArgs),
    /// Serve a fenced register (started by `run` inside each host).
    Register(RegisterConfig),
    /// Run a role hook (configured by `run` as the agents' hooks).
    Hook(HookConfig),
    /// Summarize the `report.json` files under a directory.
    Summary {
        /// The results directory.
        dir: PathBuf,
    },
    /// Check a recorded `history.json` again and print violations.
    Check {
        /// The history file.
        history: PathBuf,
    },
    /// Keep a delayed link's queue full (started by `run`).
    Filler {
        /// The network namespace to send from.
        #[arg(long)]
        netns: String,
        /// Where to send.
        #[arg(long)]
        to: SocketAddr,
        /// The rate, kbit/s.
        #[arg(long)]
        kbit: u32,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Replay exactly this seed's schedule.
    #[arg(long)]
    seed: Option<u64>,
    /// First seed of a series (with --schedules).
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    /// How many schedules (seeds first_seed, first_seed+1, ...).
    #[arg(long, default_value_t = 1)]
    schedules: u64,
    /// Seconds of faults per schedule.
    #[arg(long, default_value_t = 60)]
    length: u64,
    /// Fault families to draw from (default: all).
    #[arg(long, value_delimiter = ',')]
    faults: Vec<Family>,
    /// Most faults active at once.
    #[arg(long, default_value_t = 2)]
    max_overlap: usize,
    /// Seconds after the last heal for one primary and converged membership.
    #[arg(long, default_value_t = 30)]
    liveness_bound: u64,
    /// Client writers that look the primary up again every second.
    #[arg(long, default_value_t = 3)]
    workers: u32,
    /// Client writers that keep writing to one primary until a write fails
    /// (a connection pool that never looks again).
    #[arg(long, default_value_t = 1)]
    sticky_workers: u32,
    /// Run agents without a state_dir.
    #[arg(long)]
    no_state_dir: bool,
    /// The hale binary.
    #[arg(long, env = "HALE_BIN")]
    hale_bin: Option<PathBuf>,
    /// Where results go (a directory per seed).
    #[arg(long, default_value = "nemesis-results")]
    out: PathBuf,
    /// Planted bug (test builds only): `no-watchdog`, `no-lease-wait` and
    /// `one-observer-convicts` need a hale built with `--features planted-bugs`; `skip-demote`
    /// (the hooks) and `register-no-epoch-check` (the registers) work with any.
    #[arg(long)]
    planted_bug: Option<String>,
    /// Promote hooks take between MIN and MAX ms.
    #[arg(long, num_args = 2, default_values_t = [1000, 3000])]
    promote_ms: Vec<u64>,
    /// Demote hooks take between MIN and MAX ms.
    #[arg(long, num_args = 2, default_values_t = [500, 1000])]
    demote_ms: Vec<u64>,
    /// Stop at the first schedule with a violation.
    #[arg(long)]
    stop_on_violation: bool,
}

fn default_hale_bin() -> PathBuf {
    // target/release/hale-nemesis -> target/release/hale
    std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.join("hale")))
        .unwrap_or_else(|| PathBuf::from("target/release/hale"))
}

/// Runs `f` to completion on a single-threaded runtime.
fn block_on<F: std::future::Future>(f: F) -> std::io::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(rt.block_on(f))
}

fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    // Ctrl-C and SIGTERM set INTERRUPTED; the run cleans up and returns.
    std::thread::spawn(|| {
        let _ = block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            // Without a SIGTERM handler, its branch is disabled: Ctrl-C only.
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                Some(()) = async { term.as_mut()?.recv().await } => {}
            }
            INTERRUPTED.store(true, Ordering::Relaxed);
        });
    });
    if let Some(why) = hale_nemesis::lab::unsupported() {
        anyhow::bail!("cannot run: {why}");
    }
    let hale_bin = args.hale_bin.clone().unwrap_or_else(default_hale_bin);
    anyhow::ensure!(
        hale_bin.exists(),
        "no hale binary at {} (build it: cargo build --release -p hale, or --hale-bin)",
        hale_bin.display()
    );
    let (bug, skip_epoch) = match args.planted_bug.as_deref() {
        Some("register-no-epoch-check") => (None, true),
        other => (other.map(str::to_owned), false),
    };
    let opts = RunOptions {
        hale_bin,
        nemesis_bin: std::env::current_exe().context("own path")?,
        out: args.out.clone(),
        schedule: ScheduleParams {
            hosts: 5,
            length: Duration::from_secs(args.length),
            families: if args.faults.is_empty() {
                Family::ALL.to_vec()
            } else {
                args.faults.clone()
            },
            max_overlap: args.max_overlap,
        },
        liveness_bound: Duration::from_secs(args.liveness_bound),
        workers: args.workers,
        sticky_workers: args.sticky_workers,
        state_dir: !args.no_state_dir,
        planted_bug: bug,
        register_skips_epoch_check: skip_epoch,
        disk_mb: 48,
        promote_ms: (args.promote_ms[0], args.promote_ms[1]),
        demote_ms: (args.demote_ms[0], args.demote_ms[1]),
    };
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first_seed..args.first_seed + args.schedules).collect(),
    };
    let mut bad = 0;
    for seed in seeds {
        let report = match run_one(&opts, seed) {
            Ok(r) => r,
            Err(hale_nemesis::run::RunError::Interrupted) => {
                eprintln!("interrupted; cleaned up");
                return Ok(ExitCode::from(130));
            }
            Err(e) => {
                println!("seed {seed}: ERROR {e}");
                bad += 1;
                continue;
            }
        };
        println!(
            "seed {seed}: {} faults, writes ack/refused/unknown {:?}, failovers ms {:?}, settled in {:?} s, {}",
            report.schedule.steps.len(),
            report.writes,
            report.failovers.iter().map(|f| f.1).collect::<Vec<_>>(),
            report.settle_s.map(|s| (s * 10.0).round() / 10.0),
            if report.violations.is_empty() {
                "ok".to_owned()
            } else {
                format!("VIOLATIONS: {}", report.violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
            }
        );
        if !report.violations.is_empty() {
            bad += 1;
            if args.stop_on_violation {
                break;
            }
        }
    }
    Ok(if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn main() -> anyhow::Result<ExitCode> {
    match Cli::parse().cmd {
        Cmd::Run(args) => run(args),
        Cmd::Register(cfg) => {
            block_on(hale_nemesis::register::serve(cfg))??;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Hook(cfg) => {
            block_on(hale_nemesis::hook::run(&cfg))??;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Summary { dir } => {
            print!("{}", hale_nemesis::summary::summarize(&dir)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Filler { netns, to, kbit } => {
            hale_nemesis::lab::filler(&netns, to, kbit)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check { history } => {
            let text = std::fs::read(&history).context("reading the history")?;
            let h: hale_nemesis::history::History = serde_json::from_slice(&text)?;
            let v = hale_nemesis::check::check_all(&h);
            for x in &v {
                println!("{x}\n{}", x.slice(&h));
            }
            println!("{}", hale_nemesis::check::false_death::exemptions(&h));
            println!("{} violation(s)", v.len());
            Ok(if v.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
