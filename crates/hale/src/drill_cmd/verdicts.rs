//! Verdicts on a whole cluster: the preflight that refuses a drill on a
//! degraded cluster, and what keeps a cluster from being whole again.

use super::{check, names_or_none, none_check, DrillKind};
use crate::cluster::{self, NodeState};
use crate::drill_report::Check;
use hale_agent::view::BreakerState;
use hale_agent::view::MemberState;

/// What keeps the cluster from being whole: faults in force, members not
/// alive in some agent's view, diverted relays, unreachable agents.
pub(super) fn whole(nodes: &[NodeState], expected: usize) -> Vec<String> {
    let mut problems = Vec::new();
    for n in nodes {
        if let Some(e) = &n.error {
            problems.push(format!("{} unreachable ({e})", n.name));
            continue;
        }
        if n.drill.as_ref().is_some_and(|d| !d.active.is_empty()) {
            problems.push(format!("{} still has drill faults", n.name));
        }
        let not_alive: Vec<String> = n
            .members
            .iter()
            .flatten()
            .filter(|m| m.state == MemberState::Suspect || m.state == MemberState::Dead)
            .map(|m| format!("{} {}", m.name, m.state))
            .collect();
        if !not_alive.is_empty() {
            problems.push(format!("{} sees {}", n.name, not_alive.join(", ")));
        }
        if n.relay.as_ref().is_some_and(|r| r.diverted.is_some()) {
            problems.push(format!("{}'s relay is still diverted", n.name));
        }
    }
    if nodes.len() < expected {
        problems.push(format!("{} of {expected} agents surveyed", nodes.len()));
    }
    problems
}

/// The preflight verdicts: anything failing refuses the drill.
pub(super) fn preflight(
    kind: &DrillKind,
    members: &[hale_agent::MemberView],
    nodes: &[NodeState],
) -> Vec<Check> {
    let mut out = Vec::new();
    let degraded: Vec<String> = members
        .iter()
        .filter(|m| m.state == MemberState::Suspect || m.state == MemberState::Dead)
        .map(|m| format!("{} is {}", m.name, m.state))
        .collect();
    out.push(none_check(
        "every member is alive",
        &degraded,
        format!("{} members", members.len()),
        "",
        ", ",
    ));
    let unreachable: Vec<String> = nodes
        .iter()
        .filter(|n| {
            members
                .iter()
                .any(|m| m.name == n.name && m.state == MemberState::Alive)
        })
        .filter_map(|n| Some(format!("{}: {}", n.name, n.error.as_ref()?)))
        .collect();
    out.push(none_check(
        "every live member's agent answers",
        &unreachable,
        "all answered",
        "",
        "; ",
    ));
    let leases = cluster::leases(nodes);
    let cands = cluster::candidates(members);
    let mut no_holder = Vec::new();
    for role in cands.keys() {
        match leases.as_ref().map(|l| l.get(role)) {
            None => no_holder.push(format!("{role} (control plane unreachable)")),
            Some(Some((Some(_), _))) => {}
            Some(_) => no_holder.push(role.clone()),
        }
    }
    out.push(none_check(
        "every role has a holder",
        &no_holder,
        format!("roles: {}", names_or_none(cands.keys())),
        "no holder: ",
        ", ",
    ));
    let failing: Vec<String> = nodes
        .iter()
        .flat_map(|n| {
            n.failing_essential()
                .into_iter()
                .map(move |s| format!("{s} on {}", n.name))
        })
        .collect();
    out.push(none_check(
        "no essential check is failing",
        &failing,
        "all passing",
        "",
        ", ",
    ));
    let open: Vec<String> = nodes
        .iter()
        .flat_map(|n| {
            n.relay.iter().flat_map(move |r| {
                r.upstreams
                    .iter()
                    .filter(|u| u.breaker == BreakerState::Open)
                    .map(move |u| format!("{}'s {} upstream is {}", n.name, u.role, u.breaker))
            })
        })
        .collect();
    out.push(none_check(
        "no relay breaker is open",
        &open,
        "all closed",
        "",
        ", ",
    ));
    let faults: Vec<String> = nodes
        .iter()
        .filter(|n| n.drill.as_ref().is_some_and(|d| !d.active.is_empty()))
        .map(|n| n.name.clone())
        .collect();
    out.push(none_check(
        "no drill fault is in force",
        &faults,
        "none",
        "faults set on ",
        ", ",
    ));
    match kind {
        DrillKind::NodeFreeze { node } => out.push(check(
            format!("{node} is a live member"),
            members
                .iter()
                .any(|m| &m.name == node && m.state == MemberState::Alive),
            "the node to freeze",
        )),
        DrillKind::Handover { role } => {
            let holder = leases
                .as_ref()
                .and_then(|l| l.get(role).cloned())
                .and_then(|(h, _)| h);
            let standbys = cands
                .get(role)
                .into_iter()
                .flatten()
                .filter(|c| c.2 && Some(&c.0) != holder.as_ref())
                .count();
            out.push(check(
                format!("{role} has a holder and an eligible standby"),
                holder.is_some() && standbys > 0,
                format!(
                    "holder {}, {standbys} eligible standbys",
                    holder.as_deref().unwrap_or("none")
                ),
            ));
        }
        DrillKind::SinkBlackhole => out.push(check(
            "an agent runs a relay",
            nodes.iter().any(|n| n.relay.is_some()),
            "the relay to divert",
        )),
        DrillKind::Quiet => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_agent::MemberView;

    fn member(name: &str, state: MemberState, meta: &str) -> MemberView {
        MemberView {
            name: name.into(),
            addr: "127.0.0.1:1".into(),
            state,
            incarnation: 0,
            health: 0,
            last_heard_ms_ago: Some(0),
            state_for_ms: 0,
            meta: meta.into(),
            is_self: name == "a",
            evidence: None,
        }
    }

    fn node(name: &str, holder: Option<&str>) -> NodeState {
        NodeState {
            name: name.into(),
            http: Some("127.0.0.1:2".into()),
            error: None,
            members: None,
            services: Some(Vec::new()),
            roles: Some(hale_agent::view::RolesView {
                control_plane: true,
                leader: Some(1),
                leases: Some(
                    [(
                        "db".to_owned(),
                        hale_agent::view::LeaseView {
                            holder: holder.map(str::to_owned),
                            epoch: 1,
                            paused: false,
                            switchover: None,
                            kept: false,
                        },
                    )]
                    .into(),
                ),
                local: Vec::new(),
            }),
            relay: None,
            drill: None,
            clock: None,
        }
    }

    const META: &str = r#"{"meta":"","http":"127.0.0.1:2","roles":{"db":[100,true]}}"#;

    fn failed(checks: &[Check]) -> Vec<&str> {
        checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect()
    }

    #[test]
    fn a_healthy_cluster_passes_the_preflight() {
        let members = [
            member("a", MemberState::Alive, META),
            member("b", MemberState::Alive, META),
        ];
        let nodes = [node("a", Some("a")), node("b", Some("a"))];
        let c = preflight(&DrillKind::Quiet, &members, &nodes);
        assert!(failed(&c).is_empty(), "{c:?}");
    }

    #[test]
    fn a_suspect_member_a_role_without_holder_and_a_missing_node_refuse_a_drill() {
        let members = [
            member("a", MemberState::Alive, META),
            member("b", MemberState::Suspect, META),
        ];
        let nodes = [node("a", None)];
        let kind = DrillKind::NodeFreeze { node: "c".into() };
        let c = preflight(&kind, &members, &nodes);
        assert_eq!(
            failed(&c),
            [
                "every member is alive",
                "every role has a holder",
                "c is a live member"
            ]
        );
    }

    #[test]
    fn a_cluster_with_a_fault_left_or_a_member_down_is_not_whole() {
        let mut n = node("a", Some("a"));
        n.members = Some(vec![
            member("a", MemberState::Alive, ""),
            member("b", MemberState::Dead, ""),
        ]);
        n.drill = Some(hale_agent::view::DrillView {
            node: "a".into(),
            active: vec![hale_agent::view::FaultView {
                fault: hale_agent::view::Fault::Quiet,
                since_unix_ms: 0,
                until_unix_ms: 1,
                divert: None,
                delay_ms: None,
            }],
            traffic_ignored: 0,
        });
        let problems = whole(&[n], 2);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[1].contains("b dead"), "{problems:?}");
    }
}
