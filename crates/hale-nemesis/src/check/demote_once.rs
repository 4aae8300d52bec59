//! (e) Every lost lease demotes once: for every promote hook started on a
//! node at epoch `e`, the node's demote hook for `e` (the agent's or its
//! watchdog's) finishes at most once, and starts at least once, unless the
//! node still holds `e` at the end (the primary seen when the cluster
//! settled, or promoted after that at the newest epoch) or its whole host was killed while `e`
//! was the newest epoch promoted anywhere (nothing was left to demote; the
//! register starts fenced), or while it was frozen whole (`stop-host`)
//! since before then (nothing on it ran in between: seed 70070, frozen in
//! its promote, killed frozen). A host killed after a newer epoch's
//! promote began, and running meanwhile, excuses nothing: the lease was
//! already lost by then. Promotes that
//! begin once the harness is stopping the cluster (its first host killed,
//! the role moving to the next) are not the run's.

use std::collections::BTreeMap;

use super::Violation;
use crate::history::History;
use crate::hook::{HookKind, Phase};
use crate::schedule::Fault;

/// Checks (e).
pub fn check(h: &History) -> Result<(), Violation> {
    // (node, epoch) -> (promote start, demote starts, demote ends)
    let mut runs: BTreeMap<(&str, u64), (Option<u64>, u32, u32)> = BTreeMap::new();
    for l in &h.hooks {
        let e = runs.entry((l.node.as_str(), l.epoch)).or_default();
        match (l.kind, l.phase) {
            (HookKind::Promote, Phase::Start) => {
                e.0 = Some(e.0.map_or(l.t, |t: u64| t.min(l.t)));
            }
            (HookKind::Demote, Phase::Start) => e.1 += 1,
            (HookKind::Demote, Phase::End) => e.2 += 1,
            _ => {}
        }
    }
    // The latest epoch each node promoted at (what it may still hold): runs
    // are in (node, epoch) order, so a node's last one is its highest.
    let mut latest: BTreeMap<&str, u64> = BTreeMap::new();
    for (&(node, epoch), r) in &runs {
        if r.0.is_some() {
            latest.insert(node, epoch);
        }
    }
    let stopping = h.stopping();
    for (&(node, epoch), &(promoted, starts, ends)) in &runs {
        let Some(at) = promoted.filter(|&at| at < stopping) else {
            continue;
        };
        if ends > 1 {
            return Err(Violation::new(
                "demote-once",
                format!("{node} demoted epoch {epoch} {ends} times"),
                at,
                h.end_ns.max(at),
            ));
        }
        if starts > 0 {
            continue;
        }
        // When the next epoch's promote began anywhere: the lease was lost by then.
        let superseded = runs
            .iter()
            .filter(|((_, e), r)| *e > epoch && r.0.is_some() && r.0 < Some(stopping))
            .filter_map(|(_, r)| r.0)
            .min()
            .unwrap_or(u64::MAX);
        // It holds `epoch` at the end: the primary last seen when the cluster
        // settled, or promoted after that look (a failover in the settling
        // seconds) at the newest epoch promoted before the harness began
        // stopping.
        let after_last_look = h.settled_ns.is_some_and(|t| at >= t);
        let holds = latest.get(node) == Some(&epoch)
            && (h.final_primaries.iter().any(|p| p == node)
                || (after_last_look && superseded == u64::MAX));
        let on = |f: &&crate::history::FaultRecord| f.hosts.iter().any(|x| x == node);
        // Frozen whole (`stop-host`) from before the lease was lost and
        // still frozen at `t`: nothing on it ran in between.
        let frozen_through = |t: u64| {
            h.faults.iter().filter(on).any(|f| {
                matches!(f.fault, Fault::StopHost(_))
                    && f.start_ns < superseded
                    && f.start_ns <= t
                    && f.heal_ns.is_none_or(|heal| t <= heal)
            })
        };
        let host_killed = h.faults.iter().filter(on).any(|f| {
            matches!(f.fault, Fault::KillHost(_))
                && f.start_ns >= at
                && (f.start_ns < superseded || frozen_through(f.start_ns))
        });
        if !holds && !host_killed {
            return Err(Violation::new(
                "demote-once",
                format!("{node} promoted at epoch {epoch} and never demoted it"),
                at,
                h.end_ns.max(at),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::HookLine;

    fn line(t: u64, node: &str, kind: HookKind, phase: Phase, epoch: u64) -> HookLine {
        HookLine {
            t,
            node: node.into(),
            kind,
            phase,
            epoch,
            reason: None,
        }
    }

    fn promoted_then(demotes: u32) -> History {
        let mut hooks = vec![
            line(1, "h0", HookKind::Promote, Phase::Start, 4),
            line(2, "h0", HookKind::Promote, Phase::End, 4),
        ];
        for i in 0..demotes {
            hooks.push(line(
                10 + u64::from(i),
                "h0",
                HookKind::Demote,
                Phase::Start,
                4,
            ));
            hooks.push(line(
                11 + u64::from(i),
                "h0",
                HookKind::Demote,
                Phase::End,
                4,
            ));
        }
        History {
            hooks,
            end_ns: 100,
            ..History::default()
        }
    }

    #[test]
    fn a_lease_lost_and_demoted_once_passes() {
        assert_eq!(check(&promoted_then(1)), Ok(()));
    }

    #[test]
    fn a_lease_demoted_twice_is_caught() {
        assert!(check(&promoted_then(2))
            .expect_err("the check catches it")
            .what
            .contains("2 times"));
    }

    #[test]
    fn a_lease_lost_without_a_demote_is_caught() {
        assert!(check(&promoted_then(0))
            .expect_err("the check catches it")
            .what
            .contains("never demoted"));
    }

    #[test]
    fn a_failover_after_the_cluster_was_seen_settled_leaves_the_new_holder_holding() {
        let mut h = promoted_then(0);
        h.settled_ns = Some(1);
        assert_eq!(check(&h), Ok(()));
        h.hooks
            .push(line(50, "h1", HookKind::Promote, Phase::Start, 5));
        assert!(
            check(&h).is_err(),
            "superseded before the end: it lost the lease"
        );
    }

    #[test]
    fn a_promote_begun_once_the_harness_is_stopping_the_cluster_is_not_the_runs() {
        let mut h = promoted_then(0);
        h.stopping_ns = Some(1);
        assert_eq!(check(&h), Ok(()));
    }

    fn host_killed_at(mut h: History, t: u64) -> History {
        h.faults.push(crate::history::FaultRecord {
            fault: Fault::KillHost(crate::schedule::Target::Host(0)),
            hosts: vec!["h0".into()],
            start_ns: t,
            heal_ns: Some(t + 5),
            note: String::new(),
        });
        h
    }

    #[test]
    fn a_host_killed_while_it_held_the_lease_needs_no_demote() {
        assert_eq!(check(&host_killed_at(promoted_then(0), 5)), Ok(()));
    }

    #[test]
    fn a_host_killed_after_another_node_took_over_does_not_excuse_a_missing_demote() {
        let mut h = host_killed_at(promoted_then(0), 50);
        h.hooks
            .push(line(20, "h1", HookKind::Promote, Phase::Start, 5));
        h.final_primaries = vec!["h1".into()];
        let v = check(&h).expect_err("the check catches it");
        assert!(v.what.contains("h0 promoted at epoch 4"), "{v}");
    }

    #[test]
    fn a_host_frozen_before_another_node_took_over_and_killed_frozen_needs_no_demote() {
        let mut h = host_killed_at(promoted_then(0), 50);
        h.hooks
            .push(line(20, "h1", HookKind::Promote, Phase::Start, 5));
        h.final_primaries = vec!["h1".into()];
        let stop = |start, heal| crate::history::FaultRecord {
            fault: Fault::StopHost(crate::schedule::Target::Host(0)),
            hosts: vec!["h0".into()],
            start_ns: start,
            heal_ns: Some(heal),
            note: String::new(),
        };
        h.faults.push(stop(10, 60));
        assert_eq!(check(&h), Ok(()));
        // Thawed before the kill: it ran meanwhile and had to demote.
        h.faults.pop();
        h.faults.push(stop(10, 40));
        assert!(check(&h).is_err());
        // Frozen only after the other node took over: the same.
        h.faults.pop();
        h.faults.push(stop(30, 60));
        assert!(check(&h).is_err());
    }

    #[test]
    fn a_lease_still_held_at_the_end_needs_no_demote() {
        let mut h = promoted_then(0);
        h.final_primaries = vec!["h0".into()];
        assert_eq!(check(&h), Ok(()));
    }
}
