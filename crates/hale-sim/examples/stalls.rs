//! Scratch: stall-heavy hunt for false deaths (not a test).
use std::time::Duration;
use hale_core::Time;
use hale_sim::{Action, Sim, SimConfig};
use rand::{Rng, SeedableRng};
fn main() {
    let n: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let loss: f64 = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(0.05);
    let mins: u64 = std::env::args().nth(3).and_then(|a| a.parse().ok()).unwrap_or(30);
    let seed: u64 = std::env::args().nth(4).and_then(|a| a.parse().ok()).unwrap_or(1);
    let t0 = std::time::Instant::now();
    let mut sim = Sim::new(SimConfig { nodes: n, seed, ..SimConfig::default() });
    sim.net.loss = loss;
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    // 10% of nodes stall 2 s, each about once a minute.
    let stallers: Vec<u32> = (0..n).filter(|i| i % 10 == 3).collect();
    for &s in &stallers {
        let mut t = rng.random_range(10.0..70.0);
        while t < (mins * 60) as f64 {
            sim.schedule(Time::from_nanos((t * 1e9) as u64), Action::Stall(s, Duration::from_secs(2)));
            t += rng.random_range(30.0..90.0);
        }
    }
    sim.observer.keep_log();
    sim.run_until(Time::from_secs(mins * 60));
    let o = &sim.observer;
    println!("false deaths {} suspicions {} healthy {} events {} wall {:?}", o.false_deaths.len(), o.suspicions, o.healthy_suspicions, o.events, t0.elapsed());
    for fd in o.false_deaths.iter().take(3) {
        println!("FALSE {:?}", fd);
        if let Some(log) = &o.log {
            for (t, ob, e) in log {
                let s = format!("{e:?}");
                let near = t.as_nanos() + 12_000_000_000 > fd.at.as_nanos() && *t <= fd.at;
                let m = format!("SimId({})", fd.member);
                if near && ((*ob == fd.observer && s.contains(&m)) || (*ob == fd.member && (s.contains("Refuted") || s.contains("Paused")))) {
                    println!("  {t:?} @{ob} {s}");
                }
            }
        }
    }
    let mean: f64 = o.samples.iter().skip(3).map(|s| s.bytes_per_node_sec).sum::<f64>() / o.samples.len().saturating_sub(3).max(1) as f64;
    println!("mean bytes/node/s {mean:.0}");
}
