//! The membership core's behaviour, on virtual time: each test states what
//! must hold and a check that would fail if it did not.

use std::time::Duration;

use hale_core::{Event, MemberState, Time};
use hale_sim::check::{every_fault_detected, no_false_death, probe_coverage, views_converged};
use hale_sim::{Action, Sim, SimConfig, SimId};

fn cluster(nodes: u32, seed: u64) -> SimConfig {
    SimConfig {
        nodes,
        seed,
        ..SimConfig::default()
    }
}

/// Time for every healthy member to agree after faults: the longest
/// suspicion plus dissemination, with room.
const SETTLE: Duration = Duration::from_secs(30);

fn state_seen(sim: &Sim, observer: u32, member: u32) -> Option<MemberState> {
    sim.node(observer)?
        .member(&SimId(member))
        .map(|m| m.state())
}

fn idle_cluster_run(cfg: SimConfig, hours: u64) -> Sim {
    let mut sim = Sim::new(cfg);
    sim.run_until(Time::from_secs(hours * 3600));
    sim
}

#[test]
fn an_idle_cluster_of_50_never_evicts_anyone_and_probes_everyone_every_round() {
    let mut cfg = cluster(50, 11);
    cfg.trace_probes = true;
    let walk = cfg.node.walk_interval.as_secs_f64();
    let sim = idle_cluster_run(cfg, 2);
    no_false_death(&sim.observer).unwrap();
    probe_coverage(&sim.observer, 50).unwrap();
    views_converged(&sim).unwrap();
    assert_eq!(
        sim.observer.suspicions, 0,
        "no suspicion at all in a healthy idle cluster"
    );
    // About 7200 s / one visit a walk interval / 49 members rounds per
    // node (29 with the 5 s walk): the walk really ran.
    let expected = 7200.0 / walk / 49.0;
    let rounds = sim.observer.visits[&0].len();
    assert!(
        rounds as f64 > 0.8 * expected,
        "only {rounds} rounds recorded, about {expected:.0} expected"
    );
}

#[test]
fn the_incidents_scheduler_bug_is_caught_by_the_coverage_check() {
    let mut cfg = cluster(50, 11);
    cfg.trace_probes = true;
    cfg.node.fault = Some(hale_core::config::Fault::RepeatFirstTarget);
    let mut sim = Sim::new(cfg);
    sim.run_until(Time::from_secs(600));
    let err = probe_coverage(&sim.observer, 50).expect_err("the buggy scheduler must be caught");
    assert!(err.to_string().contains("never visited"), "{err}");
}

#[test]
fn one_observer_convicting_alone_is_caught_by_the_false_death_check() {
    // 40% loss: probes fail now and then; with corroboration one such
    // failure is refuted in time, without it one observer's word convicts.
    let run = |fault| {
        let mut cfg = cluster(10, 5);
        cfg.node.fault = fault;
        let mut sim = Sim::new(cfg);
        sim.schedule(Time::from_secs(10), Action::Loss(0.4));
        sim.run_until(Time::from_secs(300));
        no_false_death(&sim.observer)
    };
    run(None).expect("corroborated verdicts under 40% loss");
    let err = run(Some(hale_core::config::Fault::ConvictAlone))
        .expect_err("one observer's word must be caught");
    assert!(err.to_string().contains("declared dead"), "{err}");
}

#[test]
fn a_crashed_node_is_declared_dead_by_every_member() {
    let mut sim = Sim::new(cluster(30, 2));
    sim.schedule(Time::from_secs(20), Action::Crash(7));
    sim.run_until(Time::from_secs(20) + SETTLE);
    every_fault_detected(&sim).unwrap();
    no_false_death(&sim.observer).unwrap();
    views_converged(&sim).unwrap();
    let f = &sim.observer.faults[0];
    assert_eq!(f.dead_at.len(), 29);
    // In virtual time the bound is exact: every member within 5 s.
    let last = f.dead_at.values().max().unwrap().saturating_since(f.at);
    assert!(last <= Duration::from_secs(5), "took {last:?}");
}

#[test]
fn every_death_verdict_carries_its_evidence() {
    let mut sim = Sim::new(cluster(10, 3));
    sim.observer.keep_log();
    sim.schedule(Time::from_secs(10), Action::Crash(4));
    sim.run_until(Time::from_secs(40));
    let log = sim.observer.log.as_ref().unwrap();
    let verdicts: Vec<_> = log
        .iter()
        .filter_map(|(_, o, e)| match e {
            Event::Dead {
                member, evidence, ..
            } if *member == SimId(4) => Some((*o, evidence.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(verdicts.len(), 9);
    for (observer, ev) in verdicts {
        assert!(ev.confirmations >= 2, "node {observer}: {ev:?}");
        assert!(ev.last_heard < Time::from_secs(10) + Duration::from_secs(1));
        assert!(ev.declared_at > Time::from_secs(10));
    }
}

#[test]
fn a_frozen_node_is_declared_dead_then_refutes_and_rejoins_when_it_resumes() {
    let mut sim = Sim::new(cluster(20, 4));
    sim.observer.keep_log();
    sim.schedule(
        Time::from_secs(10),
        Action::Freeze(5, Duration::from_secs(20)),
    );
    sim.run_until(Time::from_secs(29));
    for o in sim.up_nodes() {
        assert_eq!(state_seen(&sim, o, 5), Some(MemberState::Dead), "node {o}");
    }
    sim.run_until(Time::from_secs(30) + SETTLE);
    views_converged(&sim).unwrap();
    no_false_death(&sim.observer).unwrap();
    let log = sim.observer.log.as_ref().unwrap();
    assert!(log
        .iter()
        .any(|(_, o, e)| *o == 5 && matches!(e, Event::Refuted { .. })));
    let recovered = log
        .iter()
        .filter(|(_, _, e)| {
            matches!(
                e,
                Event::Recovered {
                    member: SimId(5),
                    was_dead: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(
        recovered, 19,
        "every other member saw it come back from the dead"
    );
    let inc = sim.node(5).unwrap().incarnation();
    assert!(inc >= 1);
    for o in sim.up_nodes().into_iter().filter(|&o| o != 5) {
        assert_eq!(
            sim.node(o)
                .unwrap()
                .member(&SimId(5))
                .unwrap()
                .incarnation(),
            inc
        );
    }
}

#[test]
fn a_two_second_stall_is_refuted_and_never_declared_dead() {
    let mut sim = Sim::new(cluster(50, 5));
    for k in 0..20u64 {
        sim.schedule(
            Time::from_secs(20 + 17 * k),
            Action::Stall((k * 7 % 50) as u32, Duration::from_secs(2)),
        );
    }
    sim.run_until(Time::from_secs(400));
    no_false_death(&sim.observer).unwrap();
    views_converged(&sim).unwrap();
    assert!(
        sim.observer.healthy_suspicions > 0,
        "stalls must at least be suspected"
    );
}

#[test]
fn a_node_that_can_send_but_not_receive_gets_no_healthy_member_killed_and_is_itself_declared_dead()
{
    let mut sim = Sim::new(cluster(30, 6));
    sim.observer.keep_log();
    sim.schedule(Time::from_secs(10), Action::BlockIngress(3, true));
    sim.run_until(Time::from_secs(120));
    no_false_death(&sim.observer).unwrap();
    every_fault_detected(&sim).unwrap();
    // Whatever the isolated node concluded in its own view, no healthy
    // member accepted it: every healthy node still sees every other alive.
    for o in sim.up_nodes().into_iter().filter(|&o| o != 3) {
        for m in sim.up_nodes().into_iter().filter(|&m| m != 3 && m != o) {
            assert_eq!(
                state_seen(&sim, o, m),
                Some(MemberState::Alive),
                "{o} sees {m}"
            );
        }
    }
    // Heal: it learns it was declared dead, rejoins, and views converge.
    sim.schedule(sim.now(), Action::BlockIngress(3, false));
    sim.run_for(SETTLE);
    views_converged(&sim).unwrap();
}

#[test]
fn five_percent_loss_causes_no_false_death() {
    let mut cfg = cluster(50, 7);
    cfg.net.loss = 0.05;
    let sim = idle_cluster_run(cfg, 1);
    no_false_death(&sim.observer).unwrap();
    views_converged(&sim).unwrap();
}

#[test]
fn heavy_traffic_spares_probes_and_still_detects_crashes() {
    let mut cfg = cluster(30, 8);
    cfg.traffic_rate = 50.0;
    let mut sim = Sim::new(cfg);
    sim.schedule(Time::from_secs(60), Action::Crash(9));
    sim.run_until(Time::from_secs(60) + SETTLE);
    every_fault_detected(&sim).unwrap();
    no_false_death(&sim.observer).unwrap();
    let skipped: u64 = sim
        .up_nodes()
        .iter()
        .map(|&i| sim.node(i).unwrap().stats().probes_skipped_fresh)
        .sum();
    assert!(
        skipped > 100,
        "traffic should spare probes, skipped {skipped}"
    );
}

#[test]
fn traffic_stopping_at_night_evicts_nobody() {
    let mut cfg = cluster(40, 9);
    cfg.traffic_rate = 100.0;
    let mut sim = Sim::new(cfg);
    sim.schedule(Time::from_secs(300), Action::Traffic(0.0));
    sim.schedule(Time::from_secs(3600), Action::Traffic(100.0));
    sim.run_until(Time::from_secs(3900));
    no_false_death(&sim.observer).unwrap();
    views_converged(&sim).unwrap();
}

#[test]
fn joins_through_a_seed_reach_every_member() {
    let mut cfg = cluster(20, 10);
    cfg.warm_start = false;
    let mut sim = Sim::new(cfg);
    sim.run_until(Time::from_secs(60));
    views_converged(&sim).unwrap();
    for k in 0..5 {
        sim.schedule(Time::from_secs(60 + k), Action::Join(20 + k as u32));
    }
    sim.run_until(Time::from_secs(120));
    views_converged(&sim).unwrap();
    for j in &sim.observer.joins {
        assert_eq!(
            j.seen_at.len(),
            24,
            "join of {} seen by {}",
            j.node,
            j.seen_at.len()
        );
    }
}

#[test]
fn a_graceful_leave_is_recorded_as_left_not_dead() {
    let mut sim = Sim::new(cluster(20, 11));
    sim.schedule(Time::from_secs(10), Action::Leave(6));
    sim.run_until(Time::from_secs(40));
    for o in sim.up_nodes() {
        assert_eq!(state_seen(&sim, o, 6), Some(MemberState::Left), "node {o}");
    }
    assert!(sim.observer.faults.is_empty());
    no_false_death(&sim.observer).unwrap();
}

#[test]
fn a_restarted_node_rejoins_with_a_higher_incarnation() {
    let mut sim = Sim::new(cluster(20, 12));
    sim.schedule(Time::from_secs(10), Action::Crash(8));
    sim.schedule(Time::from_secs(40), Action::Restart(8));
    sim.run_until(Time::from_secs(80));
    views_converged(&sim).unwrap();
    assert!(sim.node(8).unwrap().incarnation() >= 1);
}

#[test]
fn metadata_changes_reach_every_member() {
    let mut sim = Sim::new(cluster(25, 13));
    sim.run_until(Time::from_secs(5));
    sim.with_node(3, |n, now| n.set_metadata(now, b"role=db-primary".to_vec()))
        .unwrap()
        .unwrap();
    sim.run_for(Duration::from_secs(5));
    for o in sim.up_nodes().into_iter().filter(|&o| o != 3) {
        let m = sim.node(o).unwrap().member(&SimId(3)).unwrap();
        assert_eq!(m.meta(), b"role=db-primary", "node {o}");
        assert_eq!(m.incarnation(), 1);
    }
}

#[test]
fn a_partition_heals_and_views_converge() {
    let mut sim = Sim::new(cluster(20, 14));
    let (a, b): (Vec<u32>, Vec<u32>) = (0..20).partition(|i| i % 2 == 0);
    sim.schedule(Time::from_secs(10), Action::Partition(vec![a, b]));
    sim.schedule(Time::from_secs(60), Action::Heal);
    sim.run_until(Time::from_secs(60) + Duration::from_secs(60));
    views_converged(&sim).unwrap();
    assert!(sim.observer.partition_deaths > 0);
}

#[test]
fn every_datagram_stays_within_1200_bytes_when_news_piles_up() {
    let mut sim = Sim::new(cluster(200, 16));
    sim.run_until(Time::from_secs(5));
    // Forty members publish 300-byte metadata at once while ten crash.
    for k in 0..40u32 {
        sim.with_node(k * 5, |n, now| n.set_metadata(now, vec![k as u8; 300]))
            .unwrap()
            .unwrap();
    }
    for k in 0..10u32 {
        sim.schedule(Time::from_secs(6), Action::Crash(k * 5 + 1));
    }
    sim.run_until(Time::from_secs(60));
    let largest = sim
        .up_nodes()
        .iter()
        .map(|&i| sim.node(i).unwrap().stats().largest_datagram)
        .max()
        .unwrap();
    assert!(largest <= 1200, "largest datagram {largest}");
    assert!(largest > 900, "news should fill packets: largest {largest}");
    every_fault_detected(&sim).unwrap();
    no_false_death(&sim.observer).unwrap();
    for o in sim.up_nodes().into_iter().filter(|&o| o != 5) {
        let m = sim.node(o).unwrap().member(&SimId(5)).unwrap();
        assert_eq!(m.meta(), &[1u8; 300][..], "node {o}");
    }
}

#[test]
fn the_survivor_of_a_three_node_cluster_declares_both_crashed_peers_dead() {
    let mut sim = Sim::new(cluster(3, 17));
    sim.schedule(Time::from_secs(10), Action::Crash(1));
    sim.schedule(Time::from_secs(10), Action::Crash(2));
    sim.run_until(Time::from_secs(40));
    every_fault_detected(&sim).unwrap();
    let n = sim.node(0).unwrap();
    assert_eq!(n.num_live(), 0);
    for f in &sim.observer.faults {
        let t = f.dead_at[&0].saturating_since(f.at);
        assert!(t < Duration::from_secs(15), "took {t:?}");
    }
}

#[test]
fn a_node_cut_off_for_long_falls_back_to_its_seeds_and_rejoins() {
    let mut cfg = cluster(8, 18);
    cfg.warm_start = false; // joined through node 0, which is its seed
    let mut sim = Sim::new(cfg);
    sim.observer.keep_log();
    sim.run_until(Time::from_secs(10));
    views_converged(&sim).unwrap();
    sim.schedule(Time::from_secs(10), Action::CutOff(5, true));
    sim.schedule(Time::from_secs(300), Action::CutOff(5, false));
    sim.run_until(Time::from_secs(299));
    let n = sim.node(5).unwrap();
    assert_eq!(n.num_live(), 7, "it convicts nobody");
    assert!(
        n.is_cut_off(),
        "hearing from nobody, it knows it is cut off"
    );
    no_false_death(&sim.observer).unwrap();
    assert_eq!(sim.observer.impaired_observer_deaths, 0);
    sim.run_until(Time::from_secs(300) + SETTLE);
    views_converged(&sim).unwrap();
    let log = sim.observer.log.as_ref().unwrap();
    assert!(log
        .iter()
        .any(|(_, o, e)| *o == 5 && matches!(e, Event::SeedFallback)));
}

#[test]
fn a_process_killed_on_a_live_host_is_convicted_by_every_member_within_a_second() {
    // Its host answers probes with "port closed": positive evidence that
    // convicts, corroborated, without the silence suspicion time. (With
    // the evidence off, every member takes 3.5-4.5 s, as for a host crash.)
    let mut sim = Sim::new(cluster(60, 23));
    for (k, victim) in [5u32, 17, 42].into_iter().enumerate() {
        sim.schedule(Time::from_secs(20 + 30 * k as u64), Action::Kill(victim));
    }
    sim.run_until(Time::from_secs(120));
    every_fault_detected(&sim).unwrap();
    no_false_death(&sim.observer).unwrap();
    for f in &sim.observer.faults {
        let last = f.dead_at.values().max().unwrap().saturating_since(f.at);
        assert!(
            last < Duration::from_secs(1),
            "{} took {last:?} to reach every member",
            f.node
        );
    }
}

/// Runs `cfg` through crashes, kills (refusals), restarts, freezes (queued
/// packets), stalls, slow nodes and loss: every path of a window.
fn eventful_run(cfg: SimConfig) -> Sim {
    let mut sim = Sim::new(cfg);
    let at = Time::from_secs;
    sim.schedule(at(5), Action::Loss(0.05));
    sim.schedule(at(10), Action::Crash(3));
    sim.schedule(at(12), Action::Kill(4));
    sim.schedule(at(15), Action::Freeze(5, Duration::from_secs(8)));
    sim.schedule(at(16), Action::Stall(6, Duration::from_secs(2)));
    sim.schedule(at(18), Action::Slow(7, Duration::from_millis(3)));
    sim.schedule(at(30), Action::Restart(3));
    sim.schedule(at(32), Action::Restart(4));
    sim.schedule(at(35), Action::Slow(7, Duration::ZERO));
    sim.run_until(at(70));
    sim
}

/// The two runs did exactly the same: same digest, views and statistics
/// (byte counts included).
fn assert_same_run(one: &Sim, two: &Sim, nodes: u32) {
    assert!(one.observer.events > 100, "{} events", one.observer.events);
    assert_eq!(one.observer.digest(), two.observer.digest());
    for i in 0..nodes {
        let view = |s: &Sim| {
            s.node(i)
                .map(|n| format!("{:?}", n.members().collect::<Vec<_>>()))
        };
        assert_eq!(view(one), view(two), "node {i}'s view");
        assert_eq!(
            one.node(i).map(|n| n.stats()),
            two.node(i).map(|n| n.stats())
        );
    }
}

#[test]
fn two_threads_run_exactly_what_one_runs() {
    let one = eventful_run(cluster(40, 9));
    let mut cfg = cluster(40, 9);
    cfg.threads = 2;
    cfg.window_min = 1; // Every window on two threads, however small.
    let two = eventful_run(cfg);
    assert_same_run(&one, &two, 40);
}

#[test]
fn two_threads_with_windows_cut_short_run_exactly_what_one_runs() {
    let one = eventful_run(cluster(40, 9));
    let mut cfg = cluster(40, 9);
    cfg.threads = 2;
    cfg.window_min = 1;
    cfg.window_max = 3; // Nearly every window halved, some down to an instant.
    let two = eventful_run(cfg);
    assert_same_run(&one, &two, 40);
}

/// Handing packets over (the default) runs exactly what encoding every
/// packet and decoding it at its addressee runs, on one thread and on two.
#[test]
fn two_wire_paths_run_the_same() {
    for threads in [1, 2] {
        let mut cfg = cluster(40, 11);
        cfg.threads = threads;
        cfg.window_min = 1;
        let packets = eventful_run(cfg.clone());
        cfg.wire_bytes = true;
        let bytes = eventful_run(cfg);
        assert_same_run(&packets, &bytes, 40);
        let sent: u64 = (0..40)
            .filter_map(|i| packets.node(i))
            .map(|n| n.stats().datagram_bytes_out + n.stats().stream_bytes_out)
            .sum();
        assert!(sent > 0);
    }
}

#[test]
fn members_that_missed_a_join_in_a_cluster_of_1000_learn_it_within_three_sync_periods() {
    // (In wire version 3, whose sync slows as the cluster grows, 2 of the
    // 10 still did not know after three periods.)
    let mut sim = Sim::new(cluster(1000, 31));
    let period = sim.node(0).unwrap().config().push_pull_interval;
    let joiner = 1000u32;
    let deaf: Vec<u32> = (0..10).map(|k| 7 + 97 * k).collect();
    // They hear nothing while the join's gossip runs its course.
    for &d in &deaf {
        sim.schedule(Time::from_secs(60), Action::BlockIngress(d, true));
        sim.schedule(Time::from_secs(62), Action::BlockIngress(d, false));
    }
    sim.schedule(Time::from_millis(60_050), Action::Join(joiner));
    sim.run_until(Time::from_secs(62));
    for &d in &deaf {
        assert_eq!(state_seen(&sim, d, joiner), None, "{d} missed the join");
    }
    assert!(sim
        .healthy_nodes()
        .iter()
        .filter(|&&i| !deaf.contains(&i) && i != joiner)
        .all(|&i| state_seen(&sim, i, joiner) == Some(MemberState::Alive)));
    // Nothing gossips the join any more: the periodic sync repairs it.
    let deadline = Time::from_secs(62) + period * 3;
    let knows = |sim: &Sim| {
        deaf.iter()
            .filter(|&&d| state_seen(sim, d, joiner) == Some(MemberState::Alive))
            .count()
    };
    while knows(&sim) < deaf.len() && sim.now() < deadline {
        sim.run_for(Duration::from_secs(1));
    }
    assert_eq!(
        knows(&sim),
        deaf.len(),
        "members that learned the join within three sync periods"
    );
    sim.run_for(SETTLE);
    no_false_death(&sim.observer).unwrap();
    views_converged(&sim).unwrap();
}
