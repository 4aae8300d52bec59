//! Invariant: no healthy member is ever declared dead, by anyone.

use super::Violation;
use crate::observe::Observer;

/// Fails if any node declared (or accepted) the death of a member that was
/// up, or only stalled, and reachable at the time.
pub fn no_false_death(o: &Observer) -> Result<(), Violation> {
    match o.false_deaths.first() {
        None => Ok(()),
        Some(f) => Err(Violation::FalseDeath {
            count: o.false_deaths.len(),
            member: f.member,
            observer: f.observer,
            at: f.at,
        }),
    }
}
