//! Benchmark: how long members that missed a join stay unaware of it.
//!
//! Ten members of N hear nothing for 2 s while a new member joins, so that
//! every copy of the join's news misses them (the test of the same name in
//! `tests/it/membership.rs` checks that they did). Then nothing gossips the
//! join any more: only the periodic sync can tell them. Prints when each
//! learns, for up to 300 s.
//!
//! `cargo run --release -p hale-sim --example missed_join -- N [v3]`
//! (`v3`: the nodes speak wire versions 2-3 only, whose sync interval
//! grows with N).

#![allow(clippy::unwrap_used, clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use hale_core::{MemberState, Time};
use hale_sim::{Action, Sim, SimConfig, SimId};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(n) = args.get(1).and_then(|a| a.parse::<u32>().ok()) else {
        eprintln!("usage: missed_join N [v3]");
        std::process::exit(2);
    };
    let mut cfg = SimConfig {
        nodes: n,
        seed: 31,
        ..SimConfig::default()
    };
    if args.get(2).is_some_and(|a| a == "v3") {
        cfg.node.wire_versions = hale_core::wire::Versions { min: 2, max: 3 };
    }
    let mut sim = Sim::new(cfg);
    let joiner = n;
    let deaf: Vec<u32> = (0..10).map(|k| 7 + (n / 10) * k).collect();
    let (block, unblock) = (Time::from_secs(60), Time::from_secs(62));
    for &d in &deaf {
        sim.schedule(block, Action::BlockIngress(d, true));
        sim.schedule(unblock, Action::BlockIngress(d, false));
    }
    sim.schedule(Time::from_millis(60_050), Action::Join(joiner));
    let knows = |sim: &Sim, i: u32| {
        sim.node(i)
            .and_then(|x| x.member(&SimId(joiner)))
            .map(|m| m.state())
            == Some(MemberState::Alive)
    };
    let deaf_knowing = |sim: &Sim| deaf.iter().filter(|&&d| knows(sim, d)).count();
    sim.run_until(unblock);
    let others = sim
        .healthy_nodes()
        .into_iter()
        .filter(|i| !deaf.contains(i) && *i != joiner)
        .collect::<Vec<_>>();
    let informed = others.iter().filter(|&&i| knows(&sim, i)).count();
    println!(
        "{n} members; when the block ends: {} of 10 deaf members know the joiner, {informed} of {} others",
        deaf_knowing(&sim),
        others.len()
    );
    let mut last = deaf_knowing(&sim);
    while sim.now() < unblock + Duration::from_secs(300) && last < deaf.len() {
        sim.run_for(Duration::from_secs(1));
        let k = deaf_knowing(&sim);
        if k != last {
            println!(
                "{:>4} s after: {k} of 10",
                sim.now().saturating_since(unblock).as_secs()
            );
            last = k;
        }
    }
    println!(
        "after {} s: {last} of 10",
        sim.now().saturating_since(unblock).as_secs()
    );
}
