//! (b) Durability: every write the client saw acknowledged is, at the end,
//! in the logs of a majority of the registers (the one that accepted it
//! and its synchronous replicas): the acknowledgement meant a majority of
//! hosts' disks, not one process's word.

use std::collections::{BTreeMap, BTreeSet};

use super::Violation;
use crate::history::{History, Outcome};
use crate::register::RegisterRecord;

/// Checks (b).
pub fn check(h: &History) -> Result<(), Violation> {
    let mut holders: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for (node, r) in h.records() {
        if let RegisterRecord::Accepted { value, .. } | RegisterRecord::Replica { value, .. } = r {
            holders.entry(*value).or_default().insert(node);
        }
    }
    let registers = h.nodes.len().max(h.registers.len());
    let need = registers / 2 + 1;
    for op in &h.ops {
        if !matches!(op.outcome, Outcome::Ack { .. }) {
            continue;
        }
        let on = holders.get(&op.value).map_or(0, BTreeSet::len);
        if on < need {
            return Err(Violation::new(
                "durability",
                format!(
                    "value {} acknowledged by {} is on {on} register(s) at the end, not a majority of {registers}",
                    op.value, op.node
                ),
                op.invoke_ns.saturating_sub(1_000_000_000),
                op.complete_ns + 1_000_000_000,
            )
            .about(vec![op.value]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::{accepted, replica};
    use crate::history::Op;

    /// Three hosts: a majority is two registers.
    fn three() -> Vec<String> {
        vec!["h0".into(), "h1".into(), "h2".into()]
    }

    fn acked(value: u64) -> Op {
        Op {
            client: 0,
            value,
            node: "h0".into(),
            invoke_ns: 0,
            complete_ns: 1,
            outcome: Outcome::Ack { epoch: 1 },
        }
    }

    #[test]
    fn an_acknowledged_write_on_primary_and_replica_passes() {
        let h = History {
            ops: vec![acked(7)],
            nodes: three(),
            registers: [
                ("h0".to_owned(), vec![accepted(1, 1, 7)]),
                ("h1".to_owned(), vec![replica(1, 1, 7, "h0")]),
            ]
            .into(),
            ..History::default()
        };
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn an_acknowledged_write_on_one_register_only_is_caught() {
        let h = History {
            ops: vec![acked(7)],
            nodes: three(),
            registers: [("h0".to_owned(), vec![accepted(1, 1, 7)])].into(),
            ..History::default()
        };
        assert!(check(&h)
            .expect_err("the check catches it")
            .what
            .contains("value 7"));
    }

    #[test]
    fn an_acknowledged_write_that_vanished_is_caught_but_a_refused_one_need_not_exist() {
        let mut refused = acked(8);
        refused.outcome = Outcome::Refused("not primary".into());
        let h = History {
            ops: vec![refused.clone()],
            nodes: three(),
            ..History::default()
        };
        assert_eq!(check(&h), Ok(()));
        let h = History {
            ops: vec![refused, acked(9)],
            nodes: three(),
            ..History::default()
        };
        assert!(check(&h)
            .expect_err("the check catches it")
            .what
            .contains("value 9"));
    }
}
