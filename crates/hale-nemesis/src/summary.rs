//! `hale-nemesis summary DIR`: the figures of many runs (their
//! `report.json` files): schedules, violations by check and seed, the fault
//! mix, failover times and settling times. Violations are those of this
//! build's checker over each `history.json`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use crate::check::check_all;
use crate::history::History;
use crate::run::RunReport;

fn reports(dir: &Path, out: &mut Vec<RunReport>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            reports(&p, out)?;
        } else if p.file_name().is_some_and(|n| n == "report.json") {
            if let Ok(mut r) = serde_json::from_slice::<RunReport>(&std::fs::read(&p)?) {
                // The violations of this checker, not of the one that ran,
                // where the history was kept (a committed run keeps none).
                let h = std::fs::read(p.with_file_name("history.json")).unwrap_or_default();
                if let Ok(h) = serde_json::from_slice::<History>(&h) {
                    r.violations = check_all(&h);
                }
                out.push(r);
            }
        }
    }
    Ok(())
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// The summary of every `report.json` under `dir`, as text (or why the
/// directory could not be read).
pub fn summarize(dir: &Path) -> std::io::Result<String> {
    let mut all = Vec::new();
    reports(dir, &mut all)?;
    all.sort_by_key(|r| r.seed);
    let mut s = String::new();
    let bad: Vec<&RunReport> = all.iter().filter(|r| !r.violations.is_empty()).collect();
    let _ = writeln!(
        s,
        "schedules: {}, with violations: {}",
        all.len(),
        bad.len()
    );
    if let (Some(a), Some(b)) = (all.first(), all.last()) {
        let _ = writeln!(
            s,
            "seeds: {}..={} ; fault phase {} s each",
            a.seed,
            b.seed,
            a.schedule.length_ms / 1000
        );
    }
    let mut by_check: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for r in &bad {
        for v in &r.violations {
            by_check.entry(v.check.as_str()).or_default().push(r.seed);
        }
    }
    for (c, seeds) in &by_check {
        let _ = writeln!(s, "  {c}: seeds {seeds:?}");
    }
    let mut mix: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &all {
        for st in &r.schedule.steps {
            *mix.entry(st.fault.name()).or_default() += 1;
        }
    }
    let total: usize = mix.values().sum();
    let _ = writeln!(s, "faults: {total}");
    for (k, n) in &mix {
        let _ = writeln!(s, "  {k:<18} {n}");
    }
    let mut fo: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for r in &all {
        for (k, ms) in &r.failovers {
            fo.entry(k.as_str()).or_default().push(*ms);
            fo.entry("all").or_default().push(*ms);
        }
    }
    let _ = writeln!(
        s,
        "failover after a fault on the primary's host (ms): n p50 p90 p99 max"
    );
    for (k, v) in &mut fo {
        v.sort_unstable();
        let _ = writeln!(
            s,
            "  {k:<18} {:>4} {:>6} {:>6} {:>6} {:>6}",
            v.len(),
            pct(v, 0.5),
            pct(v, 0.9),
            pct(v, 0.99),
            v.last().copied().unwrap_or(0)
        );
    }
    let mut settle: Vec<u64> = all
        .iter()
        .filter_map(|r| r.settle_s.map(|x| (x * 1000.0) as u64))
        .collect();
    settle.sort_unstable();
    let _ = writeln!(
        s,
        "settling after the last heal (ms): n {} p50 {} p90 {} max {}; never settled: {}",
        settle.len(),
        pct(&settle, 0.5),
        pct(&settle, 0.9),
        settle.last().copied().unwrap_or(0),
        all.len() - settle.len()
    );
    let (a, rf, u) = all.iter().fold((0, 0, 0), |acc, r| {
        (acc.0 + r.writes.0, acc.1 + r.writes.1, acc.2 + r.writes.2)
    });
    let _ = writeln!(s, "writes: acknowledged {a}, refused {rf}, unknown {u}");
    Ok(s)
}
