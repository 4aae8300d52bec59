//! Invariant: every injected crash, freeze, cut-off or one-way isolation is
//! detected by every healthy observer while the fault lasts.

use std::time::Duration;

use super::Violation;
use crate::engine::Sim;

/// An observer that was itself crashed, frozen or cut off within this long
/// after a fault (or at its start) is not expected to detect it.
pub const OBSERVER_GRACE: Duration = Duration::from_secs(10);

/// Fails if some fault was not held dead by every node that is healthy now
/// (other than the faulty node itself, nodes that joined after it, and nodes
/// that were themselves faulty then: see [`OBSERVER_GRACE`]).
pub fn every_fault_detected(sim: &Sim) -> Result<(), Violation> {
    let healthy = sim.healthy_nodes();
    for f in &sim.observer.faults {
        let missing: Vec<u32> = healthy
            .iter()
            .copied()
            .filter(|&o| o != f.node && o < sim.len() as u32 && !f.dead_at.contains_key(&o))
            .filter(|&o| sim.observer.added_before(o, f.at))
            .filter(|&o| !sim.observer.faulty_during(o, f.at, f.at + OBSERVER_GRACE))
            .collect();
        if let Some(&example) = missing.first() {
            return Err(Violation::Undetected {
                kind: f.kind.as_str(),
                node: f.node,
                at: f.at,
                missing: missing.len(),
                example,
            });
        }
    }
    Ok(())
}
