//! Invariant: once faults have healed, every healthy node's view matches
//! the truth: healthy nodes alive, crashed and departed nodes dead or left
//! (or forgotten).

use hale_core::MemberState;

use super::Violation;
use crate::engine::{Sim, Status};
use crate::id::SimId;

/// Compares every healthy node's member list with the ground truth now.
///
/// Each observer's member list is walked once (sequentially: at N = 10,000
/// that is 10^8 records), and a member missing from it is looked for only
/// when the count of healthy members seen alive is short.
pub fn views_converged(sim: &Sim) -> Result<(), Violation> {
    let statuses = sim.statuses();
    let healthy = sim.healthy_nodes();
    let mut is_healthy = vec![false; statuses.len()];
    for &i in &healthy {
        is_healthy[i as usize] = true;
    }
    let diverged = |o: u32, m: u32, seen: Option<MemberState>| Violation::Diverged {
        observer: o,
        member: m,
        seen: seen.map_or("unknown", |s| s.as_str()).to_owned(),
        truth: format!("{:?}", statuses[m as usize]),
    };
    for &o in &healthy {
        let node = sim.node(o).expect("up nodes have state");
        let mut healthy_alive = 0usize;
        for member in node.members() {
            let m = member.id().0;
            let Some(status) = statuses.get(m as usize) else {
                continue;
            };
            if m == o {
                continue;
            }
            let seen = member.state();
            let ok = match status {
                Status::Up if is_healthy[m as usize] => {
                    healthy_alive += usize::from(seen == MemberState::Alive);
                    seen == MemberState::Alive
                }
                Status::Crashed | Status::Left => {
                    !matches!(seen, MemberState::Alive | MemberState::Suspect)
                }
                // Frozen, stalled or impaired members may be seen either way.
                _ => true,
            };
            if !ok {
                return Err(diverged(o, m, Some(seen)));
            }
        }
        if healthy_alive + 1 < healthy.len() {
            let missing = healthy
                .iter()
                .copied()
                .find(|&m| m != o && node.member(&SimId(m)).is_none())
                .expect("a healthy member is missing from the view");
            return Err(diverged(o, missing, None));
        }
    }
    Ok(())
}
