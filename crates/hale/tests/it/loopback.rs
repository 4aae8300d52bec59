//! Real agent processes on 127.0.0.1: crashes, freezes, idleness, wrong
//! keys, graceful leaves and the CLI's JSON.

use hale_agent::view::MemberState;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::{all_see, dead_events, during, metric, spawn, view, wait_until, Cluster};

use hale_agent::{AgentEvent, Key, MemberView};

const FORM: Duration = Duration::from_secs(30);
/// Detection takes about 5 s on the lan profile; leave room for a loaded machine.
const DETECT: Duration = Duration::from_secs(30);

#[test]
fn a_sigkilled_node_is_declared_dead_by_all_others() {
    let mut c = Cluster::start("sigkill", 5);
    let victim = c.agents.pop().unwrap();
    victim.signal(Signal::SIGKILL);
    let name = victim.name.clone();
    drop(victim);
    wait_until(
        DETECT,
        "every other agent to declare the killed node dead",
        || all_see(&c.agents, &name, MemberState::Dead),
    );
    for a in &c.agents {
        let deaths = dead_events(a);
        assert!(
            deaths.iter().all(|e| e.member.as_deref() == Some(&name)),
            "{} declared someone else dead: {deaths:?}",
            a.name
        );
    }
}

#[test]
fn a_sigstopped_node_is_declared_dead_and_after_sigcont_rejoins_with_a_higher_incarnation() {
    let c = Cluster::start("sigstop", 5);
    let (frozen, others) = c.agents.split_last().unwrap();
    frozen.signal(Signal::SIGSTOP);
    wait_until(
        DETECT,
        "every other agent to declare the frozen node dead",
        || all_see(others, &frozen.name, MemberState::Dead),
    );
    frozen.signal(Signal::SIGCONT);
    wait_until(
        DETECT,
        "every agent to see the resumed node alive at a higher incarnation",
        || {
            others.iter().all(|a| {
                a.members().is_some_and(|l| {
                    l.iter().any(|m| {
                        m.name == frozen.name && m.state == MemberState::Alive && m.incarnation > 0
                    })
                })
            })
        },
    );
    // It refuted its own death: its own view says so, and its events record it.
    let me = frozen.members().unwrap();
    assert!(me[0].is_self && me[0].incarnation > 0, "{me:?}");
    let refuted = frozen
        .events()
        .unwrap()
        .into_iter()
        .any(|e| matches!(e.event, AgentEvent::Refuted { .. }));
    assert!(refuted, "the resumed node has no `refuted` event");
    c.wait_formed(FORM);
}

#[test]
fn an_idle_cluster_has_no_false_deaths_for_60_seconds() {
    let c = Cluster::start("idle", 5);
    let names = c.names();
    during(Duration::from_secs(60), Duration::from_secs(1), || {
        for a in &c.agents {
            let Some(v) = view(a) else {
                panic!("{} stopped answering", a.name)
            };
            for n in &names {
                let st = v.get(n).copied();
                assert!(
                    st.is_some_and(MemberState::is_live),
                    "{} sees {n} as {st:?}",
                    a.name
                );
            }
        }
    });
    for a in &c.agents {
        let deaths = dead_events(a);
        assert!(deaths.is_empty(), "{}: {deaths:?}", a.name);
        assert_eq!(crate::support::alive_count(a), Some(names.len()));
    }
}

#[test]
fn a_node_with_the_wrong_key_cannot_join_and_its_packets_are_counted_as_dropped() {
    let mut c = Cluster::start("wrongkey", 3);
    let auth_failed = |a: &crate::support::AgentProc| {
        metric(
            &a.metrics().unwrap(),
            "hale_dropped_packets_total",
            &["reason=\"auth_failed\""],
        )
    };
    let before: Vec<f64> = c.agents.iter().map(auth_failed).collect();
    let mut spec = c.spec("intruder");
    spec.key = Key::generate().to_base64();
    // Seed it with every member, so that every member receives its packets.
    spec.seeds = c.agents.iter().map(|a| a.gossip).collect();
    let intruder = spawn(&spec);
    wait_until(
        Duration::from_secs(20),
        "auth_failed to rise on every member",
        || {
            c.agents
                .iter()
                .zip(&before)
                .all(|(a, b)| auth_failed(a) > *b)
        },
    );
    // Give it a few of its seed retries; it never gets in.
    during(Duration::from_secs(3), Duration::from_millis(500), || {
        for a in &c.agents {
            let v = view(a).unwrap();
            assert!(!v.contains_key("intruder"), "{} lists the intruder", a.name);
            assert_eq!(v.len(), 3, "{} sees {v:?}", a.name);
        }
        let own = intruder.members().unwrap();
        assert!(
            own.iter()
                .all(|m| m.is_self || m.state != MemberState::Alive),
            "the intruder sees live members: {own:?}"
        );
    });
    c.agents.push(intruder);
}

#[test]
fn sigterm_makes_peers_record_the_node_as_left_not_dead() {
    let mut c = Cluster::start("sigterm", 4);
    let mut leaver = c.agents.pop().unwrap();
    leaver.signal(Signal::SIGTERM);
    wait_until(
        Duration::from_secs(10),
        "the agent to exit on SIGTERM",
        || leaver.exited(),
    );
    wait_until(
        Duration::from_secs(10),
        "every peer to record the node as left",
        || all_see(&c.agents, &leaver.name, MemberState::Left),
    );
    // Stay long enough that a missed leave would have become a death.
    during(Duration::from_secs(8), Duration::from_secs(1), || {
        for a in &c.agents {
            assert_eq!(a.state_of(&leaver.name), Some(MemberState::Left));
        }
    });
    for a in &c.agents {
        let events = a.events().unwrap();
        assert!(
            events
                .iter()
                .any(|e| e.event == AgentEvent::Left && e.member.as_deref() == Some(&leaver.name)),
            "{} has no `left` event",
            a.name
        );
        assert!(dead_events(a).is_empty(), "{}: {events:?}", a.name);
    }
}

#[test]
fn hale_members_json_parses_as_the_documented_shape() {
    let c = Cluster::start("json", 3);
    let a = &c.agents[1];
    // Every field, of its documented type (the `Member` schema is checked
    // against `MemberView` by the agent's OpenAPI test).
    let list: Vec<MemberView> = serde_json::from_str(&a.cli_ok(&["members", "--json"])).unwrap();
    assert_eq!(list.len(), 3);
    for (i, m) in list.iter().enumerate() {
        assert!(m.addr.parse::<std::net::SocketAddr>().is_ok(), "{m:?}");
        assert_eq!(m.is_self, i == 0, "self comes first: {m:?}");
    }
    assert_eq!(list[0].name, "n1");
    assert_eq!(list[0].addr, a.gossip.to_string());
    let mut names: Vec<&str> = list.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["n0", "n1", "n2"]);
}

#[test]
fn two_agents_restarted_at_once_each_the_others_only_seed_rejoin_the_whole_cluster() {
    // n1..n3 joined through n0. n0 and n1 die together, stay dead until
    // the news of it has stopped spreading, and come back at once on their
    // old ports, each with the other as its only seed: an island of two.
    // The rest hold them dead and only ping them now and then (reconnect);
    // no periodic sync reaches them for 30 s or more (found by the
    // nemesis harness, seed 3014).
    let mut c = Cluster::start_restartable("island", 4);
    let (g0, g1) = (c.agents[0].gossip, c.agents[1].gossip);
    let mut s0 = c.spec("n0");
    let mut s1 = c.spec("n1");
    s0.bind = g0;
    s0.seeds = vec![g1];
    s0.log = c.logs.path().join("n0-again.log");
    s1.bind = g1;
    s1.seeds = vec![g0];
    s1.log = c.logs.path().join("n1-again.log");
    c.agents[0].kill();
    c.agents[1].kill();
    let rest = &c.agents[2..];
    wait_until(DETECT, "n2 and n3 to see n0 and n1 dead", || {
        all_see(rest, "n0", MemberState::Dead) && all_see(rest, "n1", MemberState::Dead)
    });
    during(Duration::from_secs(5), Duration::from_millis(250), || {
        assert!(all_see(rest, "n0", MemberState::Dead) && all_see(rest, "n1", MemberState::Dead));
    });
    let started = std::time::Instant::now();
    c.agents[0] = spawn(&s0);
    c.agents[1] = spawn(&s1);
    // Well under the periodic sync (lan: every 30 s): what merges them is
    // the first packet from a member they do not know.
    crate::support::wait_all_alive(
        &c.agents,
        Duration::from_secs(25),
        "all four agents to see all four alive after the island's restart",
    );
    eprintln!(
        "island: merged {:.2} s after the restart",
        started.elapsed().as_secs_f64()
    );
}
