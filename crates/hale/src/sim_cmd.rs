//! `hale sim`: run a scenario file in the simulator, print the report,
//! optionally write it as JSON and plot it.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use hale_sim::scenario::{parse_duration, Scenario};

/// Arguments of `hale sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Scenario file (TOML; see scenarios/).
    pub scenario: PathBuf,
    /// Seed of the first run (default: the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Runs, with seeds seed, seed + 1, ...
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Override the number of nodes at the start.
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Shorten the run to at most this much virtual time (e.g. "10m").
    #[arg(long)]
    pub duration: Option<String>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also draw the detection-latency CDF and bandwidth over time (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Threads per run: 1 (default), or 2 to run the nodes of busy
    /// stretches on two; worth it only with a core to spare. Results are
    /// the same.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=2))]
    pub threads: Option<u32>,
    /// Encode every packet and decode it at its addressee, as a real
    /// network would (slower). Results are the same.
    #[arg(long)]
    pub wire_bytes: bool,
}

impl SimArgs {
    /// The command line that reruns one seed.
    pub(crate) fn reproduce(&self, seed: u64) -> String {
        let mut cmd = format!("hale sim {} --seed {seed}", self.scenario.display());
        if let Some(n) = self.nodes {
            cmd.push_str(&format!(" --nodes {n}"));
        }
        if let Some(d) = &self.duration {
            cmd.push_str(&format!(" --duration {d}"));
        }
        cmd
    }
}

fn progress_bar(total: u64) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} virtual s (eta {eta})",
        )
        .expect("valid progress template"),
    );
    bar
}

/// Runs `hale sim`. Exit status 1 when a check failed.
pub fn run(args: &SimArgs) -> Result<ExitCode> {
    let mut sc = Scenario::load(&args.scenario)?;
    if let Some(n) = args.nodes {
        sc.nodes = n;
    }
    if let Some(d) = &args.duration {
        let d = parse_duration(d)
            .map_err(anyhow::Error::msg)
            .context("--duration")?;
        sc.limit_duration(d);
    }
    sc.validate()
        .with_context(|| format!("{} with the overrides", args.scenario.display()))?;
    if let Some(t) = args.threads {
        hale_sim::runner::set_threads(t as usize);
    }
    hale_sim::runner::set_wire_bytes(args.wire_bytes);
    let first = args.seed.unwrap_or(sc.seed);
    let seeds: Vec<u64> = (0..u64::from(args.runs))
        .map(|k| first.wrapping_add(k))
        .collect();
    let per_run = sc.duration.get().as_secs();
    let bar = progress_bar(per_run * seeds.len() as u64);
    let report = hale_sim::run_many(&sc, &seeds, &mut |k, t| {
        bar.set_prefix(format!("run {}/{} seed {}", k + 1, seeds.len(), seeds[k]));
        bar.set_position(per_run * k as u64 + t.as_nanos() / 1_000_000_000);
    })?;
    bar.finish_and_clear();
    print!("{report}");
    if let Some(path) = &args.json {
        std::fs::write(path, report.to_json())
            .with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    if let Some(path) = &args.plot {
        hale_sim::plot::write_svg(&report, path)?;
        println!("plot written to {}", path.display());
    }
    if report.summary.passed {
        return Ok(ExitCode::SUCCESS);
    }
    let mut failed: Vec<u64> = report.summary.failures.iter().map(|f| f.seed).collect();
    failed.dedup();
    println!();
    for seed in failed {
        println!(
            "FAILED: seed {seed}; reproduce with: {}",
            args.reproduce(seed)
        );
    }
    Ok(ExitCode::FAILURE)
}
