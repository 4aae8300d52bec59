//! (c) Liveness: after the last fault heals, within the history's bound
//! (`liveness_bound_ns`, 30 s by default), exactly one agent reports
//! itself primary (`GET /v1/roles/db/primary` answers 200 on one agent
//! only) while every agent sees every other alive.

use super::Violation;
use crate::history::History;

/// Checks (c).
pub fn check(h: &History) -> Result<(), Violation> {
    if h.never_formed {
        return Err(Violation::new(
            "liveness",
            format!(
                "the cluster never formed with one primary in {} s (no fault was carried out): primaries {:?}",
                crate::run::FORMATION.as_secs(),
                h.final_primaries
            ),
            h.faults_start_ns.saturating_sub(crate::run::FORMATION.as_nanos() as u64),
            h.end_ns,
        ));
    }
    let by = h.heal_ns + h.liveness_bound_ns;
    match h.settled_ns {
        Some(t) if t <= by => Ok(()),
        _ => {
            let not_alive: Vec<String> = h
                .final_members
                .iter()
                .flat_map(|(obs, view)| {
                    h.nodes
                        .iter()
                        .filter(move |n| {
                            *n != obs && view.get(*n).map(String::as_str) != Some("alive")
                        })
                        .map(move |n| format!("{obs} sees {n} {:?}", view.get(n)))
                })
                .collect();
            Err(Violation::new(
                "liveness",
                format!(
                    "not settled {:.1} s after the last heal: primaries {:?}, agents answering {}/{}, {}",
                    h.liveness_bound_ns as f64 / 1e9,
                    h.final_primaries,
                    h.final_members.len(),
                    h.nodes.len(),
                    if not_alive.is_empty() {
                        "membership converged".to_owned()
                    } else {
                        not_alive.join(", ")
                    }
                ),
                h.heal_ns.saturating_sub(5_000_000_000),
                h.end_ns,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(settled: Option<u64>) -> History {
        History {
            heal_ns: 100,
            liveness_bound_ns: 30,
            settled_ns: settled,
            nodes: vec!["h0".into(), "h1".into()],
            ..History::default()
        }
    }

    #[test]
    fn settling_within_the_bound_passes() {
        assert_eq!(check(&history(Some(120))), Ok(()));
    }

    #[test]
    fn settling_after_the_bound_is_caught() {
        assert!(check(&history(Some(131))).is_err());
    }

    #[test]
    fn a_cluster_that_never_formed_is_caught() {
        let mut h = history(Some(120));
        h.never_formed = true;
        let v = check(&h).expect_err("the check catches it");
        assert!(v.what.contains("never formed"), "{v}");
    }

    #[test]
    fn never_settling_is_caught_and_names_who_sees_whom() {
        let mut h = history(None);
        h.final_members
            .insert("h0".into(), [("h1".to_owned(), "dead".to_owned())].into());
        let v = check(&h).expect_err("the check catches it");
        assert!(v.what.contains("h0 sees h1 Some(\"dead\")"), "{v}");
    }
}
