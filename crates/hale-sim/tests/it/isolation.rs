//! Correlated isolation: members that lose every path at once, alone or as
//! a group, and come back. No healthy member may be declared dead, by
//! anyone, while they are cut off or after.

use std::path::PathBuf;

use hale_core::{Event, MemberState, Time};
use hale_sim::check::{every_fault_detected, no_false_death, views_converged};
use hale_sim::scenario::Scenario;
use hale_sim::{Action, Sim, SimConfig};

fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn members_each_cut_off_alone_then_back_get_no_healthy_member_declared_dead() {
    // 100 members: 1, then 10, then 30 of them each lose every path for a
    // minute. Before the cut-off rule: 18-26 false deaths per run.
    let sc = scenario("isolation-small.toml");
    let report = hale_sim::run_many(&sc, &[1, 2], &mut |_, _| {}).unwrap();
    for run in &report.runs {
        assert_eq!(
            run.false_deaths, 0,
            "seed {}: {:?}",
            run.seed, run.false_death_examples
        );
    }
    assert!(report.summary.passed, "{:?}", report.summary.failures);
}

#[test]
fn a_member_that_hears_from_nobody_concludes_it_is_cut_off_and_convicts_nobody() {
    let mut sim = Sim::new(SimConfig {
        nodes: 40,
        seed: 21,
        ..SimConfig::default()
    });
    sim.observer.keep_log();
    sim.schedule(Time::from_secs(10), Action::CutOff(7, true));
    sim.schedule(Time::from_secs(70), Action::CutOff(7, false));
    sim.run_until(Time::from_secs(69));
    let n = sim.node(7).unwrap();
    assert_eq!(
        n.members()
            .filter(|m| m.state() == MemberState::Dead)
            .count(),
        0,
        "it holds nobody dead"
    );
    assert!(n.is_cut_off(), "it heard from nobody for a minute");
    sim.run_until(Time::from_secs(100));
    let log = sim.observer.log.as_ref().unwrap();
    let convicted_by_7: Vec<_> = log
        .iter()
        .filter(|(_, o, e)| *o == 7 && matches!(e, Event::Dead { .. }))
        .collect();
    assert!(convicted_by_7.is_empty(), "{convicted_by_7:?}");
    assert!(!sim.node(7).unwrap().is_cut_off());
    no_false_death(&sim.observer).unwrap();
    every_fault_detected(&sim).unwrap();
    views_converged(&sim).unwrap();
}

#[test]
fn members_back_from_a_cut_off_accuse_nobody_on_probes_they_started_while_cut_off() {
    // Their probes in flight at the heal were sent into the void; each
    // accusation would be gossiped to every member and refuted.
    let mut sim = Sim::new(SimConfig {
        nodes: 200,
        seed: 24,
        ..SimConfig::default()
    });
    sim.observer.keep_log();
    let cut: Vec<u32> = (0..10).map(|i| i * 20 + 3).collect();
    for &i in &cut {
        sim.schedule(Time::from_secs(10), Action::CutOff(i, true));
        sim.schedule(Time::from_secs(130), Action::CutOff(i, false));
    }
    sim.run_until(Time::from_secs(160));
    let log = sim.observer.log.as_ref().unwrap();
    let after_return: Vec<_> = log
        .iter()
        .filter(|(t, o, e)| {
            *t >= Time::from_secs(130)
                && cut.contains(o)
                && matches!(e, Event::Suspected { accuser, .. } if accuser.0 == *o)
        })
        .collect();
    assert!(after_return.is_empty(), "{after_return:?}");
    no_false_death(&sim.observer).unwrap();
}
