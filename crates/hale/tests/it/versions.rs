//! Wire versions between real agents: what a cluster writes when its
//! members speak different ranges, members that share none, and mixed
//! clusters of the previous release (`dist/previous-release.toml`) and
//! this build.

use std::net::SocketAddr;
use std::time::Duration;

use nix::sys::signal::Signal;

use hale_agent::view::MemberState;
use hale_agent::AgentEvent;

use crate::support::*;

/// The wire version agent `a` writes (`None`: it does not say, a release
/// before 0.2.0, or it does not answer).
fn writes(a: &AgentProc) -> Option<u8> {
    Some(call(a.api().health()).ok()?.wire?.writes)
}

/// Packets of wire `version` agent `a` received.
fn received_in(a: &AgentProc, version: u8) -> f64 {
    let v = version.to_string();
    let labels = ["direction=\"in\"", &format!("version=\"{v}\"")];
    a.metrics()
        .map_or(0.0, |m| metric(&m, "hale_wire_packets_total", &labels))
}

/// Packets agent `a` dropped for their wire version.
fn version_drops(a: &AgentProc) -> f64 {
    a.metrics().map_or(0.0, |m| {
        metric(&m, "hale_dropped_packets_total", &["reason=\"version\""])
    })
}

/// A configuration file holding only `[membership] wire_versions`.
fn wire_config(dir: &std::path::Path, name: &str, versions: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!("[membership]\nwire_versions = \"{versions}\"\n"),
    )
    .unwrap();
    path
}

fn unsupported_reports(a: &AgentProc, about: &str) -> Vec<AgentEvent> {
    a.events()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.member.as_deref() == Some(about))
        .map(|e| e.event)
        .filter(|e| matches!(e, AgentEvent::UnsupportedWireVersion { .. }))
        .collect()
}

/// Asserts every second for `length` that every agent sees every agent alive.
fn every_pair_stays_alive(agents: &[AgentProc], length: Duration) {
    during(length, Duration::from_secs(1), || {
        for a in agents {
            for b in agents {
                let state = a.state_of(&b.name);
                assert_eq!(
                    state,
                    Some(MemberState::Alive),
                    "{} sees {}",
                    a.name,
                    b.name
                );
            }
        }
    });
}

#[test]
fn a_cluster_moves_up_to_the_newest_wire_version_when_its_last_version_two_member_leaves() {
    let newest = hale_core::wire::VERSION;
    let mut c = Cluster::start("wire-up", 2);
    let mut spec = c.spec("old");
    spec.config = Some(wire_config(c.logs.path(), "old", "2"));
    c.agents.push(spawn(&spec));
    c.wait_formed(Duration::from_secs(30));
    wait_until(
        Duration::from_secs(10),
        "everyone to write version 2",
        || c.agents.iter().all(|a| writes(a) == Some(2)),
    );
    let mut old = c.agents.pop().unwrap();
    old.signal(Signal::SIGTERM);
    wait_until(Duration::from_secs(10), "the old member to leave", || {
        old.exited()
    });
    wait_until(
        Duration::from_secs(10),
        "the rest to write the newest version",
        || c.agents.iter().all(|a| writes(a) == Some(newest)),
    );
    wait_until(
        Duration::from_secs(10),
        "packets of the newest version to flow both ways",
        || c.agents.iter().all(|a| received_in(a, newest) > 0.0),
    );
    for a in &c.agents {
        assert!(dead_events(a).is_empty(), "{}: a death", a.name);
        assert_eq!(
            version_drops(a),
            0.0,
            "{}: a packet dropped for its version",
            a.name
        );
    }
}

#[test]
fn agents_that_share_no_wire_version_report_each_other_by_name() {
    let logs = log_dir("wire-none");
    let cluster = cluster_name("wire-none");
    let key = hale_agent::Key::generate().to_base64();
    let ports = [free_port(), free_port()];
    let addr = |i: usize| SocketAddr::from(([127, 0, 0, 1], ports[i]));
    let mut agents = Vec::new();
    for (i, (name, versions)) in [("newer", "3"), ("older", "2")].into_iter().enumerate() {
        let mut spec = loopback_spec(name, None, &cluster, &key, logs.path());
        spec.bind = addr(i);
        spec.seeds = vec![addr(1 - i)];
        spec.config = Some(wire_config(logs.path(), name, versions));
        agents.push(spawn(&spec));
    }
    let (newer, older) = (&agents[0], &agents[1]);
    wait_until(Duration::from_secs(20), "both to report the other", || {
        !unsupported_reports(newer, "older").is_empty()
            && !unsupported_reports(older, "newer").is_empty()
    });
    assert!(unsupported_reports(newer, "older").iter().any(|e| matches!(
        e,
        AgentEvent::UnsupportedWireVersion { version: 2, ours, .. } if ours == "3"
    )));
    assert!(unsupported_reports(older, "newer").iter().any(|e| matches!(
        e,
        AgentEvent::UnsupportedWireVersion { version: 3, speaks: Some(s), ours } if s == "3" && ours == "2"
    )));
    for a in &agents {
        assert!(version_drops(a) > 0.0);
        let log = std::fs::read_to_string(&a.log).unwrap();
        assert!(
            log.contains("wire version this agent does not speak"),
            "{}: no warning in its log",
            a.name
        );
        assert_ne!(
            a.state_of(if a.name == "newer" { "older" } else { "newer" }),
            Some(MemberState::Alive)
        );
    }
}

#[test]
fn the_previous_release_and_this_one_form_one_cluster_in_its_version_and_this_one_moves_up_when_it_leaves(
) {
    let prev = previous_release();
    let logs = log_dir("wire-mixed");
    let cluster = cluster_name("wire-mixed");
    let key = hale_agent::Key::generate().to_base64();
    let mut agents: Vec<AgentProc> = Vec::new();
    let start = |agents: &mut Vec<AgentProc>, name: &str, old: bool| {
        let mut spec = loopback_spec(name, agents.first(), &cluster, &key, logs.path());
        if old {
            spec.exe = Some(prev.exe.clone());
        }
        agents.push(spawn(&spec));
    };
    // Old, new, new, old: the seed is an old one.
    for (name, old) in [
        ("old0", true),
        ("new1", false),
        ("new2", false),
        ("old3", true),
    ] {
        start(&mut agents, name, old);
    }
    wait_all_alive(
        &agents,
        Duration::from_secs(30),
        "the mixed cluster to form",
    );
    let new = |agents: &[AgentProc]| -> Vec<usize> {
        (0..agents.len())
            .filter(|&i| agents[i].name.starts_with("new"))
            .collect()
    };
    for &i in &new(&agents) {
        assert_eq!(writes(&agents[i]), Some(2), "{}", agents[i].name);
    }
    // `hale status` says who is upgraded and what is written.
    let status = agents[1].cli_ok(&["status"]);
    assert!(
        status.contains("WIRE     new1 writes 2; speaks 2: old0, old3; speaks 2-4: new1, new2"),
        "{status}"
    );
    // Every pair keeps hearing each other for a while.
    every_pair_stays_alive(&agents, Duration::from_secs(6));
    for a in &agents {
        assert_eq!(
            version_drops(a),
            0.0,
            "{}: a packet dropped for its version",
            a.name
        );
    }
    // The old ones leave: the new ones move up.
    let olds: Vec<AgentProc> = {
        let (o, n): (Vec<_>, Vec<_>) = agents.drain(..).partition(|a| a.name.starts_with("old"));
        agents = n;
        o
    };
    for mut o in olds {
        o.signal(Signal::SIGTERM);
        wait_until(Duration::from_secs(10), "an old agent to leave", || {
            o.exited()
        });
    }
    wait_until(
        Duration::from_secs(10),
        "the new ones to write the newest version",
        || {
            agents
                .iter()
                .all(|a| writes(a) == Some(hale_core::wire::VERSION))
        },
    );
    // An old agent joins again (a downgrade): the cluster goes back to 2.
    start(&mut agents, "old4", true);
    wait_all_alive(
        &agents,
        Duration::from_secs(30),
        "the downgraded agent to join",
    );
    wait_until(
        Duration::from_secs(10),
        "the new ones to write version 2 again",
        || new(&agents).iter().all(|&i| writes(&agents[i]) == Some(2)),
    );
    every_pair_stays_alive(&agents, Duration::from_secs(5));
    for a in &agents {
        assert!(dead_events(a).is_empty(), "{}: a death", a.name);
    }
    // The new ones answer its new run in its version until they learn its
    // range, so it never gets a packet it cannot read.
    let old4 = agents.last().unwrap();
    assert_eq!(
        version_drops(old4),
        0.0,
        "previous release {} ({}, wire {}) got packets in a version it does not speak",
        prev.version,
        prev.commit,
        prev.wire
    );
}

/// What agent `a`'s control-plane server says of itself, if it answers
/// (an agent of the previous release says no protocol: 1).
fn control_of(a: &AgentProc) -> Option<hale_control::raft::ControlStatus> {
    call(a.api().health()).ok()?.control
}

/// Makes agent `i`'s configuration name `exe` for its watchdogs (the
/// `hale` it runs), instead of `from`.
fn use_exe(c: &Cluster, i: usize, from: &std::path::Path, exe: &std::path::Path) {
    let config = c.path(&format!("{}.toml", c.agents[i].name));
    let text = std::fs::read_to_string(&config).unwrap();
    let to = exe.display().to_string();
    std::fs::write(&config, text.replace(&from.display().to_string(), &to)).unwrap();
}

/// The line agent `i` logs once it has migrated its control-plane store.
fn store_migrated(c: &Cluster, i: usize) -> String {
    let store = c.path(&format!("data-{}", c.agents[i].name));
    let file = store.join("control.redb");
    format!("migrated {} from format 1 to 2", file.display())
}

#[test]
fn a_control_plane_of_the_previous_release_upgraded_server_by_server_keeps_serving_and_migrates_each_store(
) {
    use crate::failover::first_holder;
    use crate::restart::{restart, terminate};
    use hale_control::raft::ControlState;
    use hale_control::PROTOCOL;

    let prev = previous_release();
    let new = hale_bin();
    let mut c = Cluster::roles_of("control-upgrade", 3, &prev.exe);
    let held = first_holder(&c);
    assert_eq!(held.0, "n0");
    // The standbys' agents (each a control-plane server) first, one at a
    // time: a graceful stop, then this build on the same configuration
    // and store, beside servers of the previous release.
    for i in [1, 2] {
        terminate(&mut c, i);
        use_exe(&c, i, &prev.exe, new);
        restart(&mut c, i);
        let line = store_migrated(&c, i);
        wait_until(
            Duration::from_secs(20),
            "the store's migration logged",
            || std::fs::read_to_string(&c.agents[i].log).is_ok_and(|l| l.contains(&line)),
        );
        wait_until(
            Duration::from_secs(20),
            "the upgraded server to follow a leader",
            || {
                control_of(&c.agents[i])
                    .is_some_and(|s| s.protocol == PROTOCOL && s.leader.is_some())
            },
        );
        c.assert_holder_stays(Duration::from_secs(2), &held, "while upgrading");
    }
    // Writes through an upgraded agent reach whichever server leads.
    let out = c.agents[1].cli_ok(&["roles", "pause", "db"]);
    assert!(out.contains("db paused"), "{out}");
    let out = c.agents[2].cli_ok(&["roles", "resume", "db"]);
    assert!(out.contains("db resumed"), "{out}");
    c.assert_holder_stays(Duration::from_secs(2), &held, "after a pause and resume");
    // The holder's agent, the last of the previous release, stops: db
    // moves to a standby, and a server of this build leads. It has not
    // heard n0's server in protocol 2, so it writes nothing newer.
    terminate(&mut c, 0);
    let next = wait_for(Duration::from_secs(20), "a standby takes db", || {
        c.holder().filter(|(h, _)| h != "n0")
    });
    let leader = wait_for(Duration::from_secs(20), "n1 or n2 leads", || {
        (1..3).find(|&i| control_of(&c.agents[i]).is_some_and(|s| s.state == ControlState::Leader))
    });
    let s = control_of(&c.agents[leader]).unwrap();
    assert_eq!(s.common_protocol, Some(1), "{s:?}");
    let status = c.agents[leader].cli_ok(&["status"]);
    assert!(status.contains("MIXED RELEASES"), "{status}");
    // It comes back upgraded: once the leader has heard its server answer,
    // every server speaks protocol 2.
    use_exe(&c, 0, &prev.exe, new);
    restart(&mut c, 0);
    let line = store_migrated(&c, 0);
    wait_until(
        Duration::from_secs(20),
        "n0's store's migration logged",
        || std::fs::read_to_string(&c.agents[0].log).is_ok_and(|l| l.contains(&line)),
    );
    let leader = wait_for(
        Duration::from_secs(30),
        "the leader to hear every server speak this build's protocol",
        || {
            (0..3).find(|&i| {
                control_of(&c.agents[i]).is_some_and(|s| s.common_protocol == Some(PROTOCOL))
            })
        },
    );
    let status = c.agents[leader].cli_ok(&["status"]);
    assert!(!status.contains("MIXED RELEASES"), "{status}");
    c.assert_holder_stays(Duration::from_secs(2), &next, "after the last upgrade");
    // Each server rebuilt db's failover history from its log: the same
    // changes everywhere, with what their entries said (a time and an
    // asker only where a leader of this build proposed the entry and the
    // server stored it as it was).
    use hale_control::Cause;
    let mut seen = Vec::new();
    for a in &c.agents {
        let h = wait_for(Duration::from_secs(10), "the history is read", || {
            call(a.api().history("db", None)).ok()
        })
        .changes;
        let changes: Vec<_> = h.iter().map(|c| (c.epoch, c.holder.clone())).collect();
        assert_eq!(h[0].cause, Cause::FirstGrant, "{h:?}");
        let granted = (held.1, Some(held.0.clone()));
        let at = changes.iter().position(|c| *c == granted).unwrap();
        assert!(matches!(h[at + 1].cause, Cause::Paused { .. }), "{h:?}");
        assert!(matches!(h[at + 2].cause, Cause::Resumed { .. }), "{h:?}");
        let last = h.last().unwrap();
        assert_eq!(
            (last.epoch, last.holder.clone()),
            (next.1, Some(next.0.clone()))
        );
        let from_n0 = match &last.cause {
            Cause::AfterRelease { previous, .. } => previous.as_deref() == Some("n0"),
            Cause::LeaseExpired { previous } => previous == "n0",
            _ => false,
        };
        assert!(from_n0, "{h:?}");
        seen.push(changes);
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
}
