//! Invariant: once faults have healed, every healthy node's view matches
//! the truth: healthy nodes alive, crashed and departed nodes dead or left
//! (or forgotten).

use hale_core::MemberState;

use super::Violation;
use crate::engine::{Sim, Status};
use crate::id::SimId;

/// Compares every healthy node's member list with the ground truth now.
pub fn views_converged(sim: &Sim) -> Result<(), Violation> {
    let statuses = sim.statuses();
    let healthy: Vec<u32> = sim
        .up_nodes()
        .into_iter()
        .filter(|&i| !sim.is_impaired(i))
        .collect();
    for &o in &healthy {
        let node = sim.node(o).expect("up nodes have state");
        for (m, status) in statuses.iter().enumerate() {
            let m = m as u32;
            if m == o {
                continue;
            }
            let seen = node.member(&SimId(m)).map(|x| x.state());
            let ok = match status {
                Status::Up if healthy.contains(&m) => seen == Some(MemberState::Alive),
                Status::Crashed | Status::Left => {
                    !matches!(seen, Some(MemberState::Alive | MemberState::Suspect))
                }
                // Frozen, stalled or impaired members may be seen either way.
                _ => true,
            };
            if !ok {
                return Err(Violation::Diverged {
                    observer: o,
                    member: m,
                    seen: seen.map_or("unknown", |s| s.as_str()).to_owned(),
                    truth: format!("{status:?}"),
                });
            }
        }
    }
    Ok(())
}
