//! Scratch smoke run (not a test).
use std::time::Duration;
use hale_core::Time;
use hale_sim::{Action, Sim, SimConfig};
fn main() {
    let n: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(50);
    let loss: f64 = std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(0.0);
    let t0 = std::time::Instant::now();
    let mut sim = Sim::new(SimConfig { nodes: n, seed: 7, ..SimConfig::default() });
    sim.net.loss = loss;
    eprintln!("built in {:?}", t0.elapsed());
    for k in 0..5u32 {
        sim.schedule(Time::from_secs(60 + 60 * u64::from(k)), Action::Crash(k * 3 + 1));
    }
    sim.schedule(Time::from_secs(400), Action::Freeze(2, Duration::from_secs(30)));
    sim.schedule(Time::from_secs(500), Action::Stall(5, Duration::from_secs(2)));
    sim.observer.keep_log();
    sim.run_until(Time::from_secs(600));
    if let Some(log) = &sim.observer.log { for (t, o, e) in log { if *t > Time::from_secs(499) && *t < Time::from_secs(520) { let s = format!("{e:?}"); if (s.contains("member: SimId(5)") && (*o == 471 || s.contains("Dead"))) || (*o == 5) { println!("{t:?} @{o} {s}"); } } } }
    let o = &sim.observer;
    let up = sim.up_nodes();
    for f in &o.faults {
        let first = f.dead_at.values().min().map(|t| t.saturating_since(f.at).as_secs_f64());
        let all = up.iter().filter(|&&u| u != f.node).map(|u| f.dead_at.get(u).copied()).collect::<Option<Vec<_>>>()
            .map(|v| v.into_iter().max().unwrap().saturating_since(f.at).as_secs_f64());
        println!("{:?} node {} first {:?} all {:?} observers {}", f.kind, f.node, first, all, f.dead_at.len());
    }
    println!("false deaths {} suspicions {} healthy {} events {}", o.false_deaths.len(), o.suspicions, o.healthy_suspicions, o.events);
    let s: Vec<_> = o.samples.iter().skip(2).take(4).map(|s| (s.bytes_per_node_sec as u64, s.msgs_per_node_sec)).collect();
    println!("samples {:?}", s);
    let largest = up.iter().filter_map(|&u| sim.node(u)).map(|n| n.stats().largest_datagram).max();
    for fd in &o.false_deaths { println!("FALSE {:?}", fd); }
    let all: Vec<_> = o.samples.iter().map(|s| s.bytes_per_node_sec as u64).collect();
    println!("series {:?}", all);
    println!("largest {:?}  wall {:?}", largest, t0.elapsed());
}
#[allow(dead_code)]
fn unused() {}
