//! Debug aid: runs one seed of a scenario and prints every event of every
//! node in order, plus each node's local health and probe counters every
//! half second of virtual time.
//!
//! `cargo run --release -p hale-sim --example dump_seed -- SCENARIO.toml SEED [FROM_SECS] [TO_SECS]`

#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use hale_core::Time;
use hale_sim::engine::Sim;
use hale_sim::runner::sim_config;
use hale_sim::scenario::Scenario;

fn secs(t: Time) -> f64 {
    t.as_nanos() as f64 / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: dump_seed SCENARIO.toml SEED [FROM_SECS] [TO_SECS]");
        std::process::exit(2);
    }
    let sc = Scenario::load(std::path::Path::new(&args[1])).unwrap();
    let seed: u64 = args[2].parse().unwrap();
    let from: f64 = args.get(3).map_or(0.0, |v| v.parse().unwrap());
    let plan = sc.plan(seed).unwrap();
    let to: f64 = args.get(4).map_or(secs(plan.end), |v| v.parse().unwrap());
    let mut sim = Sim::new(sim_config(&sc, seed, &plan).unwrap());
    sim.observer.keep_log();
    for (t, a) in &plan.actions {
        sim.schedule(*t, a.clone());
    }
    let mut printed = 0;
    let mut t = from;
    sim.run_until(Time::from_nanos((from * 1e9) as u64));
    while t < to {
        t += 0.5;
        sim.run_until(Time::from_nanos((t * 1e9) as u64));
        let log = sim.observer.log.as_ref().unwrap();
        for (at, n, e) in &log[printed..] {
            if secs(*at) >= from {
                println!("{:>10.3} n{n} {e:?}", secs(*at));
            }
        }
        printed = log.len();
        for i in 0..sc.nodes {
            if let Some(n) = sim.node(i) {
                let st = n.stats();
                println!(
                    "{t:>10.3} n{i} health={} discounted={} probes={} failures={} nacks={}",
                    n.local_health(),
                    st.discounted_accusations,
                    st.probes,
                    st.probe_failures,
                    st.nacks
                );
            }
        }
    }
}
