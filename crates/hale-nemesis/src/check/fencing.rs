//! (a) Fencing: across every register, no write is accepted at epoch `e`
//! after a write was accepted at a higher epoch (by the shared clock), and
//! no epoch has two writers. "Accepted" is a register's `accepted` record:
//! the primary's epoch check passed, a majority's epoch checks passed, and
//! they logged it durably. A write is accepted when its last counted epoch
//! check passed: the latest of the primary's check and its replicas'
//! copies (a primary frozen after its replicas answered records the write
//! when it resumes, but every check it needed passed before).

use std::collections::BTreeMap;

use super::Violation;
use crate::history::History;
use crate::register::RegisterRecord;

/// Checks (a).
pub fn check(h: &History) -> Result<(), Violation> {
    // (register, primary, epoch, value) -> when the copy was checked and logged.
    let copies: BTreeMap<(&str, &str, u64, u64), u64> = h
        .records()
        .filter_map(|(node, r)| match r {
            RegisterRecord::Replica {
                t,
                epoch,
                value,
                from,
            } => Some(((node, from.as_str(), *epoch, *value), *t)),
            _ => None,
        })
        .collect();
    let mut accepted: Vec<(u64, u64, &str, u64)> = Vec::new();
    for (node, r) in h.records() {
        if let RegisterRecord::Accepted {
            t,
            epoch,
            value,
            replicas,
            ..
        } = r
        {
            let last_check = replicas
                .iter()
                .filter_map(|rep| copies.get(&(rep.as_str(), node, *epoch, *value)))
                .fold(*t, |a, &b| a.max(b));
            accepted.push((last_check, *epoch, node, *value));
        }
    }
    accepted.sort();
    let mut writers: BTreeMap<u64, &str> = BTreeMap::new();
    let mut highest: Option<(u64, u64, &str, u64)> = None;
    for &(t, epoch, node, value) in &accepted {
        if let Some(w) = writers.insert(epoch, node).filter(|w| *w != node) {
            let first = accepted
                .iter()
                .find(|a| a.1 == epoch && a.2 == w)
                .map_or(t, |a| a.0);
            return Err(Violation::new(
                "fencing",
                format!("two writers at epoch {epoch}: {w} and {node} (value {value})"),
                first,
                t,
            )
            .about(vec![value]));
        }
        if let Some(hi) = highest.filter(|hi| hi.1 > epoch) {
            return Err(Violation::new(
                "fencing",
                format!(
                    "{node} accepted value {value} at epoch {epoch} after {} accepted value {} at epoch {}",
                    hi.2, hi.3, hi.1
                ),
                hi.0.saturating_sub(2_000_000_000),
                t + 1_000_000_000,
            )
            .about(vec![hi.3, value]));
        }
        if highest.is_none_or(|hi| epoch > hi.1) {
            highest = Some((t, epoch, node, value));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::accepted;

    fn history(regs: &[(&str, Vec<RegisterRecord>)]) -> History {
        History {
            registers: regs
                .iter()
                .map(|(n, r)| ((*n).to_owned(), r.clone()))
                .collect(),
            ..History::default()
        }
    }

    #[test]
    fn epochs_that_only_grow_across_registers_pass() {
        let h = history(&[
            ("h0", vec![accepted(1, 1, 1), accepted(2, 1, 2)]),
            ("h1", vec![accepted(3, 2, 3), accepted(4, 2, 4)]),
        ]);
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_write_at_an_old_epoch_after_a_newer_one_elsewhere_is_caught() {
        let h = history(&[
            ("h0", vec![accepted(1, 1, 1), accepted(5, 1, 2)]),
            ("h1", vec![accepted(3, 2, 3)]),
        ]);
        let v = check(&h).expect_err("the check catches it");
        assert!(
            v.what.contains("h0 accepted value 2 at epoch 1 after h1"),
            "{v}"
        );
    }

    #[test]
    fn a_write_is_accepted_when_its_last_replica_checked_it_not_when_the_primary_logged_it() {
        // h0 checked value 2 at 1 s, its replicas copied it by 1.5 s, then h0
        // was frozen and logged it at 9 s: all its checks passed before h1's
        // epoch 2 existed, so nothing is wrong.
        let frozen = RegisterRecord::Accepted {
            t: 1_000_000_000,
            epoch: 1,
            value: 2,
            client: 0,
            replicas: vec!["h2".into(), "h3".into()],
        };
        let copy = |t: u64| RegisterRecord::Replica {
            t,
            epoch: 1,
            value: 2,
            from: "h0".into(),
        };
        let h = history(&[
            ("h0", vec![frozen.clone()]),
            ("h1", vec![accepted(3, 2, 3)]),
            ("h2", vec![copy(1_200_000_000)]),
            ("h3", vec![copy(1_500_000_000)]),
        ]);
        assert_eq!(check(&h), Ok(()));
        // But a copy checked after the newer write makes it a late write.
        let h = history(&[
            ("h0", vec![frozen]),
            ("h1", vec![accepted(3, 2, 3)]),
            ("h2", vec![copy(1_200_000_000)]),
            ("h3", vec![copy(4_000_000_000)]),
        ]);
        let v = check(&h).expect_err("the check catches it");
        assert!(v.what.contains("h0 accepted value 2 at epoch 1"), "{v}");
    }

    #[test]
    fn two_writers_at_one_epoch_are_caught() {
        let h = history(&[
            ("h0", vec![accepted(1, 3, 1)]),
            ("h1", vec![accepted(2, 3, 2)]),
        ]);
        let v = check(&h).expect_err("the check catches it");
        assert!(v.what.contains("two writers at epoch 3"), "{v}");
    }
}
