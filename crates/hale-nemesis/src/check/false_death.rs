//! (d) No false deaths: no agent ever declares dead a member that no
//! nemesis touched (a host is touched by any fault that named it: its
//! processes, its clock, its disk, its hooks, a partition or loss that cut
//! it), for the whole run. Conservative: a touched host may be declared
//! dead even by a fault that should not make it look dead.

use std::collections::BTreeSet;

use super::Violation;
use crate::history::History;

/// Checks (d).
pub fn check(h: &History) -> Result<(), Violation> {
    let touched: BTreeSet<&str> = h
        .faults
        .iter()
        .flat_map(|f| f.hosts.iter().map(String::as_str))
        .collect();
    match h
        .deaths
        .iter()
        .find(|d| !touched.contains(d.member.as_str()))
    {
        None => Ok(()),
        Some(d) => Err(Violation::new(
            "false-death",
            format!(
                "{} declared {} dead, which no nemesis touched (touched: {touched:?})",
                d.observer, d.member
            ),
            d.seen_ns.saturating_sub(10_000_000_000),
            d.seen_ns + 1_000_000_000,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Death, FaultRecord};
    use crate::schedule::{Fault, Target};

    fn history(dead: &str) -> History {
        History {
            faults: vec![FaultRecord {
                fault: Fault::KillHost(Target::Host(2)),
                hosts: vec!["h2".into()],
                start_ns: 0,
                heal_ns: Some(1),
                note: String::new(),
            }],
            deaths: vec![Death {
                observer: "h0".into(),
                member: dead.into(),
                seen_ns: 5,
            }],
            ..History::default()
        }
    }

    #[test]
    fn a_killed_host_declared_dead_passes() {
        assert_eq!(check(&history("h2")), Ok(()));
    }

    #[test]
    fn an_untouched_host_declared_dead_is_caught() {
        assert!(check(&history("h3"))
            .expect_err("the check catches it")
            .what
            .contains("declared h3 dead"));
    }
}
