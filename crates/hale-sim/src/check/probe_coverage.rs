//! Invariant: in every complete round of its walk, each node visits every
//! other member exactly once (probing it, or skipping it as recently heard).
//! This is what the second incident's bug broke: one sibling visited N times,
//! the others never.

use std::collections::BTreeSet;

use super::Violation;
use crate::observe::Observer;

/// Checks the visits recorded with `trace_probes` in a stable cluster of
/// `n` nodes (ids `0..n`). The last round of each node is still running and
/// is not checked. Fails too if a node recorded no complete round at all.
pub fn probe_coverage(o: &Observer, n: u32) -> Result<(), Violation> {
    for observer in 0..n {
        let Some(rounds) = o.visits.get(&observer) else {
            return Err(Violation::ProbeCoverage {
                observer,
                round: 0,
                problem: "no probe visits recorded".into(),
            });
        };
        let complete: Vec<_> = rounds.iter().take(rounds.len().saturating_sub(1)).collect();
        if complete.is_empty() {
            return Err(Violation::ProbeCoverage {
                observer,
                round: 0,
                problem: "no complete round".into(),
            });
        }
        let expected: BTreeSet<u32> = (0..n).filter(|&m| m != observer).collect();
        for (&round, visits) in complete {
            let seen: BTreeSet<u32> = visits.iter().copied().collect();
            if visits.len() != expected.len() || seen != expected {
                let missing = expected.difference(&seen).count();
                let max_repeat = seen
                    .iter()
                    .map(|m| visits.iter().filter(|v| *v == m).count())
                    .max()
                    .unwrap_or(0);
                return Err(Violation::ProbeCoverage {
                    observer,
                    round,
                    problem: format!(
                        "{} visits, {} members never visited, a member visited up to {} times",
                        visits.len(),
                        missing,
                        max_repeat
                    ),
                });
            }
        }
    }
    Ok(())
}
