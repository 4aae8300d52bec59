//! (f) Fenced first: hale fences an old primary before it lets a new one
//! be promoted. No register accepts a write (passes its own epoch check)
//! at epoch `e` after another register was promoted at a higher epoch, by
//! the shared clock — except while nothing on the old primary's host could
//! fence it ([`super::frozen`]: its hale processes frozen, its fence action
//! itself frozen, its watchdog frozen while its agent is out), until 2 s
//! after that heals.
//!
//! This is hale's own fencing, checked apart from the register's: the
//! registers need a majority and check epochs ([`super::fencing`]), so a
//! stale primary's writes are refused there whatever hale does; this check
//! sees the stale primary *serving* before the register's check saves it.
//! The exceptions are what no process on a host can do: a process that
//! does not run cannot fence anything (the database's own epoch check, or
//! a kernel watchdog, is the answer there: README, "What the epoch
//! guarantees").

use super::Violation;
use crate::history::History;
use crate::register::RegisterRecord;

/// How long after a freeze heals the old primary may still serve: the
/// agent and watchdog find the lease gone and fence within it.
const AFTER_THAW_NS: u64 = 2_000_000_000;

/// Whether `node`'s fencing was frozen at `t` ([`super::frozen`]), or
/// thawed less than [`AFTER_THAW_NS`] before.
fn frozen(h: &History, node: &str, t: u64) -> bool {
    super::frozen::freezes(h, node)
        .iter()
        .any(|f| f.from <= t && f.thaw.is_none_or(|thaw| t <= thaw + AFTER_THAW_NS))
}

/// Checks (f).
pub fn check(h: &History) -> Result<(), Violation> {
    let mut promotes: Vec<(u64, u64, &str)> = Vec::new();
    for (node, r) in h.records() {
        if let RegisterRecord::Promote { t, epoch } = r {
            promotes.push((*t, *epoch, node));
        }
    }
    promotes.sort_unstable();
    for (node, r) in h.records() {
        let RegisterRecord::Accepted {
            t, epoch, value, ..
        } = r
        else {
            continue;
        };
        let newer = promotes
            .iter()
            .take_while(|p| p.0 < *t)
            .find(|p| p.1 > *epoch && p.2 != node);
        if let Some(&(pt, pe, pn)) = newer {
            if frozen(h, node, *t) {
                continue;
            }
            return Err(Violation::new(
                "fenced-first",
                format!(
                    "{node} served value {value} at epoch {epoch} {:.3} s after {pn} was promoted at epoch {pe}, its host not frozen",
                    (t - pt) as f64 / 1e9
                ),
                pt.saturating_sub(3_000_000_000),
                t + 1_000_000_000,
            )
            .about(vec![*value]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::tests::accepted;
    use crate::history::FaultRecord;
    use crate::schedule::{Fault, Target};

    fn promote(t: u64, epoch: u64) -> RegisterRecord {
        RegisterRecord::Promote {
            t: t * 1_000_000_000,
            epoch,
        }
    }

    fn history(faults: Vec<FaultRecord>) -> History {
        History {
            registers: [
                ("h0".to_owned(), vec![promote(0, 1), accepted(5, 1, 7)]),
                ("h1".to_owned(), vec![promote(4, 2)]),
            ]
            .into(),
            faults,
            ..History::default()
        }
    }

    fn frozen_from(fault: Fault, start: u64, heal: u64) -> FaultRecord {
        FaultRecord {
            fault,
            hosts: vec!["h0".into()],
            start_ns: start * 1_000_000_000,
            heal_ns: Some(heal * 1_000_000_000),
            note: String::new(),
        }
    }

    #[test]
    fn an_old_primary_serving_after_a_newer_promotion_is_caught() {
        let v = check(&history(Vec::new())).expect_err("the check catches it");
        assert!(v.what.contains("h0 served value 7 at epoch 1"), "{v}");
    }

    #[test]
    fn an_old_primary_whose_hale_was_frozen_is_excused_until_two_seconds_after_the_thaw() {
        let stop = frozen_from(Fault::StopHale(Target::Host(0)), 2, 4);
        assert_eq!(check(&history(vec![stop])), Ok(()));
        let long_ago = frozen_from(Fault::StopHale(Target::Host(0)), 1, 2);
        assert!(check(&history(vec![long_ago])).is_err());
    }

    #[test]
    fn a_fault_that_leaves_the_fence_running_excuses_nothing() {
        let kill = frozen_from(Fault::KillAgent(Target::Host(0)), 2, 6);
        assert!(check(&history(vec![kill])).is_err());
    }

    #[test]
    fn a_write_before_the_newer_promotion_passes() {
        let h = History {
            registers: [
                ("h0".to_owned(), vec![promote(0, 1), accepted(3, 1, 7)]),
                ("h1".to_owned(), vec![promote(4, 2), accepted(5, 2, 8)]),
            ]
            .into(),
            ..History::default()
        };
        assert_eq!(check(&h), Ok(()));
    }
}
