//! The run's timeline and figures, from the load generator's attempts, the
//! hooks' and the script's event log, and the new primary's login ids.

use std::collections::HashSet;
use std::path::PathBuf;

use anyhow::{bail, Context};

/// `analyze` options.
#[derive(clap::Args)]
pub struct Args {
    /// The load generator's CSV.
    #[arg(long)]
    attempts: PathBuf,
    /// When the fault was injected (Unix ns).
    #[arg(long)]
    t0: u128,
    /// Event log: lines `<unix ns> <what happened>`. Hook lines are
    /// `<ns> host-X promote|promoted|demote|demoted <role> <epoch> ...`.
    #[arg(long)]
    events: PathBuf,
    /// Login ids in the new primary's table, one per line.
    #[arg(long)]
    committed: PathBuf,
    /// Further facts measured by the script, `key=value`, printed and kept in the JSON.
    #[arg(long = "fact")]
    facts: Vec<String>,
    /// Print only the JSON summary line.
    #[arg(long)]
    quiet: bool,
}

struct Attempt {
    sent: u128,
    good: bool,
    ok: bool,
    latency_us: u128,
    id: Option<i64>,
}

impl Attempt {
    fn done(&self) -> u128 {
        self.sent + self.latency_us * 1000
    }
}

fn attempts(path: &PathBuf) -> anyhow::Result<Vec<Attempt>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 7 {
            bail!("{}:{}: expected 7 fields", path.display(), n + 1);
        }
        out.push(Attempt {
            sent: f[1].parse()?,
            good: f[2] == "1",
            ok: f[4] == "1",
            latency_us: f[5].parse()?,
            id: (!f[6].is_empty()).then(|| f[6].parse()).transpose()?,
        });
    }
    out.sort_by_key(|a| a.sent);
    Ok(out)
}

fn percentile(mut v: Vec<u128>, p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    Some(v[i] as f64 / 1000.0)
}

fn secs(ns: i128) -> f64 {
    ns as f64 / 1e9
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.1} ms"))
}

/// Prints the report (and a `RESULT {json}` line).
pub fn main(a: Args) -> anyhow::Result<()> {
    let all = attempts(&a.attempts)?;
    let t0 = a.t0;
    let rel = |t: u128| secs(t as i128 - t0 as i128);
    let events: Vec<(u128, String)> = std::fs::read_to_string(&a.events)
        .with_context(|| format!("{}", a.events.display()))?
        .lines()
        .filter_map(|l| {
            let (t, what) = l.split_once(' ')?;
            Some((t.parse().ok()?, what.trim().to_owned()))
        })
        .collect();
    let committed: HashSet<i64> = std::fs::read_to_string(&a.committed)
        .with_context(|| format!("{}", a.committed.display()))?
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let hook = |host: &str, what: &str| {
        events
            .iter()
            .filter(|(t, e)| {
                *t >= t0
                    && e.split_whitespace()
                        .take(2)
                        .eq([host, what].iter().copied())
            })
            .map(|(t, _)| *t)
            .min()
    };

    // The outage: from the first failed attempt after the fault to the last
    // one within 60 s; successes around it, by when their answers arrived.
    let horizon = t0 + 60_000_000_000;
    // A failure counts against the fault once the fault began before it
    // failed: a login sent a moment before the fault and still waiting on
    // A when A's processes were killed failed *because of* the fault (seen:
    // one sent 1 ms before t0 on a loaded host, which counted as "failed
    // before the fault" when failures were judged by when they were sent).
    let failures: Vec<&Attempt> = all
        .iter()
        .filter(|x| !x.ok && x.done() >= t0 && x.sent < horizon)
        .collect();
    let before_fault_failures = all.iter().filter(|x| !x.ok && x.done() < t0).count();
    let first_fail = failures.first().map(|x| x.sent);
    let last_fail = failures.last().map(|x| x.sent);
    let last_ok_before = first_fail.and_then(|f| {
        all.iter()
            .filter(|x| x.ok && x.sent < f)
            .map(Attempt::done)
            .max()
    });
    let first_ok_after = last_fail.and_then(|l| {
        all.iter()
            .filter(|x| x.ok && x.sent > l)
            .map(Attempt::done)
            .min()
    });
    let downtime = match (last_ok_before, first_ok_after) {
        (Some(a), Some(b)) => Some(secs(b as i128 - a as i128)),
        _ if failures.is_empty() => Some(0.0),
        _ => None,
    };
    // Latency outside the outage (and a second of margin either side).
    let (out_lo, out_hi) = match (last_ok_before, first_ok_after) {
        (Some(a), Some(b)) => (a.saturating_sub(1_000_000_000), b + 1_000_000_000),
        _ => (u128::MAX, u128::MAX),
    };
    let outside = |keep: &dyn Fn(&Attempt) -> bool| -> Vec<u128> {
        let out = |x: &Attempt| x.ok && (x.done() < out_lo || x.sent > out_hi);
        all.iter()
            .filter(|x| out(x) && keep(x))
            .map(|x| x.latency_us)
            .collect()
    };
    let p99_before = percentile(outside(&|x| x.sent < t0), 0.99);
    let p99_after = percentile(outside(&|x| x.sent >= t0), 0.99);
    let outside = outside(&|_| true);
    let p50 = percentile(outside.clone(), 0.50);
    let p99 = percentile(outside, 0.99);
    let good_ok: Vec<i64> = all
        .iter()
        .filter(|x| x.good && x.ok)
        .filter_map(|x| x.id)
        .collect();
    let missing = good_ok.iter().filter(|i| !committed.contains(i)).count();
    let promote = hook("host-B", "promote");
    let promoted = hook("host-B", "promoted");
    let a_demoted = hook("host-A", "demoted");
    let facts: Vec<(String, String)> = a
        .facts
        .iter()
        .filter_map(|f| f.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();

    if !a.quiet {
        println!("Timeline (t=0: the fault):");
        let mut lines: Vec<(u128, String)> = events
            .iter()
            .filter(|(t, _)| *t + 30_000_000_000 >= t0)
            .cloned()
            .collect();
        for (t, what) in [
            (last_ok_before, "last successful login before the outage"),
            (first_fail, "first failed login"),
            (last_fail, "last failed login"),
            (first_ok_after, "first successful login after the outage"),
        ] {
            lines.extend(t.map(|t| (t, format!("auth: {what}"))));
        }
        lines.sort();
        for (t, what) in &lines {
            println!("  t={:+8.3}s  {what}", rel(*t));
        }
        println!();
        match (first_fail, last_fail) {
            (Some(f), Some(l)) => {
                println!("Failed logins per 100 ms (by when they were sent; # = 10%):");
                let from = f.saturating_sub(500_000_000);
                let to = l + 600_000_000;
                let mut b = from;
                while b < to {
                    let e = b + 100_000_000;
                    let sent: Vec<&Attempt> =
                        all.iter().filter(|x| x.sent >= b && x.sent < e).collect();
                    let (n, bad) = (sent.len(), sent.iter().filter(|x| !x.ok).count());
                    let pct = if n == 0 {
                        0.0
                    } else {
                        bad as f64 * 100.0 / n as f64
                    };
                    println!(
                        "  t={:+7.1}s  {bad:3}/{n:3} failed {:5.1}%  {}",
                        rel(b),
                        pct,
                        "#".repeat((pct / 10.0).round() as usize)
                    );
                    b = e;
                }
            }
            _ => println!("No failed login after the fault."),
        }
        println!();
        println!(
            "Logins attempted: {} ({} with a wrong secret, answered 401 as they must be); failed: {} after the fault, {} before it",
            all.len(),
            all.iter().filter(|x| !x.good).count(),
            failures.len(),
            before_fault_failures
        );
        println!(
            "Auth downtime (last success before the first failure -> first success after the last): {}",
            downtime.map_or_else(|| "n/a (no recovery)".to_owned(), |d| format!("{d:.3} s"))
        );
        if let (Some(p), Some(d)) = (promote, promoted) {
            println!(
                "Promotion: B's promote hook (pg_ctl promote -w) ran t=+{:.3}s .. t=+{:.3}s ({:.3} s)",
                rel(p),
                rel(d),
                secs(d as i128 - p as i128)
            );
        }
        if let (Some(f), Some(p)) = (a_demoted, promote) {
            println!(
                "Old primary fenced (A's demote hook done) at t=+{:.3}s: {} B's promotion started",
                rel(f),
                if f < p { "before" } else { "AFTER" }
            );
        }
        println!(
            "Committed logins (answered with an id): {}; missing from the new primary's table: {missing}",
            good_ok.len()
        );
        println!(
            "Auth latency of successful logins outside the outage: p50 {}, p99 {}",
            fmt_ms(p50),
            fmt_ms(p99)
        );
        println!(
            "  p99 before the fault {}, after it (outside the outage) {}",
            fmt_ms(p99_before),
            fmt_ms(p99_after)
        );
        for (k, v) in &facts {
            println!("{k}: {v}");
        }
    }
    let mut j = serde_json::json!({
        "attempts": all.len(),
        "failed_after_fault": failures.len(),
        "failed_before_fault": before_fault_failures,
        "downtime_s": downtime,
        "first_failure_s": first_fail.map(rel),
        "promote_start_s": promote.map(rel),
        "promote_end_s": promoted.map(rel),
        "old_fenced_s": a_demoted.map(rel),
        "committed": good_ok.len(),
        "missing": missing,
        "p50_outside_ms": p50,
        "p99_outside_ms": p99,
        "p99_before_fault_ms": p99_before,
        "p99_after_fault_ms": p99_after,
    });
    for (k, v) in facts {
        // A number where it is one, else the text.
        j[k] = v
            .parse::<f64>()
            .map_or(serde_json::Value::String(v), serde_json::Value::from);
    }
    println!("RESULT {j}");
    Ok(())
}
