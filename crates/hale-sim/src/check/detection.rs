//! Invariant: every injected crash, freeze, cut-off or one-way isolation is
//! detected by every healthy observer while the fault lasts.

use super::Violation;
use crate::engine::Sim;

/// Fails if some fault was not held dead by every node that is healthy now
/// (other than the faulty node itself).
pub fn every_fault_detected(sim: &Sim) -> Result<(), Violation> {
    let healthy: Vec<u32> = sim
        .up_nodes()
        .into_iter()
        .filter(|&i| !sim.is_impaired(i))
        .collect();
    for f in &sim.observer.faults {
        let missing: Vec<u32> = healthy
            .iter()
            .copied()
            .filter(|&o| o != f.node && o < sim.len() as u32 && !f.dead_at.contains_key(&o))
            .filter(|&o| sim.observer.added_before(o, f.at))
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
