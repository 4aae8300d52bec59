//! (e) Every lost lease demotes once: for every promote hook started on a
//! node at epoch `e`, the node's demote hook for `e` (the agent's or its
//! watchdog's) finishes at most once, and starts at least once, unless the
//! node still holds `e` at the end or its whole host was killed after the
//! promote began (nothing is left to demote; the register starts fenced).

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
    // The latest epoch each node promoted at (what it may still hold).
    let mut latest: BTreeMap<&str, u64> = BTreeMap::new();
    for (&(node, epoch), r) in &runs {
        if r.0.is_some() {
            let l = latest.entry(node).or_insert(epoch);
            *l = (*l).max(epoch);
        }
    }
    for (&(node, epoch), &(promoted, starts, ends)) in &runs {
        let Some(at) = promoted else { continue };
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
        let holds = h.final_primaries.iter().any(|p| p == node) && latest.get(node) == Some(&epoch);
        let host_killed = h.faults.iter().any(|f| {
            matches!(f.fault, Fault::KillHost(_))
                && f.hosts.iter().any(|x| x == node)
                && f.heal_ns.is_none_or(|heal| heal >= at)
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
    fn a_lease_still_held_at_the_end_needs_no_demote() {
        let mut h = promoted_then(0);
        h.final_primaries = vec!["h0".into()];
        assert_eq!(check(&h), Ok(()));
    }
}
