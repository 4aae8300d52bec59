//! The report as a readable table.

use std::fmt::{self, Display, Formatter, Write as _};

use super::{Bandwidth, Detection, Dist, Report};

fn s(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}s"))
}

fn dist(d: Option<Dist>) -> String {
    match d {
        None => format!("{:>6} {:>9} {:>9} {:>9}", 0, "-", "-", "-"),
        Some(d) => format!(
            "{:>6} {:>9} {:>9} {:>9}",
            d.n,
            s(Some(d.p50)),
            s(Some(d.p99)),
            s(Some(d.max))
        ),
    }
}

fn bytes(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.1} KB", v / 1000.0)
    } else {
        format!("{v:.0} B")
    }
}

fn bw_row(name: &str, b: Bandwidth, fmt: fn(f64) -> String) -> String {
    format!(
        "  {name:<22} {:>12} {:>12} {:>12} {:>12}\n",
        fmt(b.steady_mean),
        b.idle_mean.map_or_else(|| "-".to_owned(), fmt),
        fmt(b.peak),
        fmt(b.startup_peak)
    )
}

fn detection_rows(out: &mut String, label: &str, d: &Detection) {
    let _ = writeln!(
        out,
        "  {label:<16} {:>6} faults, {} undetected by some member",
        d.faults, d.undetected
    );
    for (name, v) in [
        ("first observer", d.first),
        ("median observer", d.median),
        ("all observers", d.all),
    ] {
        let _ = writeln!(out, "    {name:<18} {}", dist(v));
    }
}

impl Display for Report {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let sm = &self.summary;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "scenario {}: {} nodes, {} virtual, profile {}, {} run(s)",
            self.scenario, self.nodes, self.duration, self.profile, sm.runs
        );
        let _ = writeln!(out, "  {}", self.description.trim().replace('\n', "\n  "));
        let _ = writeln!(out, "\nruns");
        let _ = writeln!(
            out,
            "  {:>20} {:>10} {:>10} {:>10} {:>8} {:>11} {:>8}  checks",
            "seed", "wall", "(setup)", "events", "faults", "false dead", "susp."
        );
        for r in &self.runs {
            let checks = if r.passed() {
                "pass".to_owned()
            } else {
                let failed: Vec<&str> = r
                    .checks
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| c.name.as_str())
                    .collect();
                format!("FAIL ({})", failed.join(", "))
            };
            let _ = writeln!(
                out,
                "  {:>20} {:>9.1}s {:>9.1}s {:>10} {:>8} {:>11} {:>8}  {checks}",
                r.seed,
                r.wall_secs,
                r.setup_secs,
                r.events,
                r.faults.len(),
                r.false_deaths,
                r.healthy_suspicions
            );
        }
        let _ = writeln!(
            out,
            "\ndetection latency (seconds from injection; across faults and runs)"
        );
        let _ = writeln!(
            out,
            "    {:<18} {:>6} {:>9} {:>9} {:>9}",
            "", "n", "p50", "p99", "max"
        );
        if let Some(all) = sm.detection.get("all") {
            detection_rows(&mut out, "all faults", all);
        }
        for (kind, d) in sm.detection.iter().filter(|(k, _)| k.as_str() != "all") {
            if sm.detection.len() > 2 {
                detection_rows(&mut out, kind, d);
            }
        }
        let _ = writeln!(out, "\nconvergence (time until 100% of live members know)");
        let _ = writeln!(
            out,
            "    {:<18} {}",
            "death, after verdict",
            dist(sm.dissemination_after_verdict)
        );
        let _ = writeln!(out, "    {:<18} {}", "join", dist(sm.join_convergence));
        if sm.joins_unconverged > 0 {
            let _ = writeln!(out, "    joins never fully known: {}", sm.joins_unconverged);
        }
        let _ = writeln!(out, "\nfalse positives");
        let _ = writeln!(
            out,
            "  healthy members declared dead: {} ({:.2e} per node-hour)",
            sm.false_deaths, sm.false_deaths_per_node_hour
        );
        let _ = writeln!(
            out,
            "  suspicions of healthy members: {} ({:.2e} per node-hour); all suspicions: {}",
            sm.healthy_suspicions, sm.healthy_suspicions_per_node_hour, sm.suspicions
        );
        if sm.partition_deaths > 0 {
            let _ = writeln!(
                out,
                "  deaths declared across a partition (expected): {}",
                sm.partition_deaths
            );
        }
        if sm.stale_deaths > 0 {
            let _ = writeln!(
                out,
                "  deaths accepted just after a detected freeze or cut-off ended (expected): {}",
                sm.stale_deaths
            );
        }
        let _ = writeln!(out, "\nbandwidth per node per second");
        let _ = writeln!(
            out,
            "  {:<22} {:>12} {:>12} {:>12} {:>12}",
            "", "steady mean", "idle mean", "peak", "start-up"
        );
        out.push_str(&bw_row("bytes", sm.bytes_per_node_sec, bytes));
        out.push_str(&bw_row("packets", sm.msgs_per_node_sec, |v| {
            format!("{v:.2}")
        }));
        let _ = writeln!(out, "  largest datagram: {} bytes", sm.largest_datagram);
        if let Some(r) = self.runs.first() {
            if r.traffic_segments.len() > 1 {
                let _ = writeln!(out, "\nbandwidth by application traffic rate (first run)");
                for seg in &r.traffic_segments {
                    let _ = writeln!(
                        out,
                        "  {:>9.0}s..{:>9.0}s  {:>8.1} msg/s  {:>10} {:>10}",
                        seg.from_secs,
                        seg.to_secs,
                        seg.rate,
                        seg.bytes_per_node_sec.map_or_else(|| "-".into(), bytes),
                        seg.msgs_per_node_sec
                            .map_or_else(|| "-".into(), |v| format!("{v:.2} pkt"))
                    );
                }
            }
        }
        let _ = writeln!(out, "\nchecks");
        let mut names: Vec<&str> = self
            .runs
            .iter()
            .flat_map(|r| r.checks.iter().map(|c| c.name.as_str()))
            .collect();
        names.dedup();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let failed: Vec<_> = sm.failures.iter().filter(|x| x.check == name).collect();
            if failed.is_empty() {
                let _ = writeln!(out, "  {name:<22} pass");
            } else {
                let _ = writeln!(out, "  {name:<22} FAIL in {} run(s)", failed.len());
                for x in failed {
                    let _ = writeln!(out, "    seed {}: {}", x.seed, x.violation);
                }
            }
        }
        let _ = writeln!(
            out,
            "\nmedian wall time per run: {:.1}s",
            sm.wall_secs_median
        );
        f.write_str(&out)
    }
}
