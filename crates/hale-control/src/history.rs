//! The history checker: from a timeline of promote and demote hooks, prove
//! that no two nodes ever acted as holder of the same role at once, and that
//! fencing epochs strictly increase.

use std::collections::BTreeMap;

/// What a hook did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookKind {
    /// The node started acting as holder (its promote hook ran).
    Promote,
    /// The node stopped acting as holder (its demote hook ran, or it was fenced).
    Demote,
}

/// One hook run, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookEvent {
    /// When, in nanoseconds on one clock (the simulator's, or the test host's).
    pub at_nanos: u64,
    /// The node.
    pub node: String,
    /// The role.
    pub role: String,
    /// The fencing epoch of the lease.
    pub epoch: u64,
    /// Promote or demote.
    pub kind: HookKind,
}

/// A property the history breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryViolation {
    /// Two nodes held the role at once.
    #[error("role {role}: {second} promoted at {at_nanos} ns while {first} still held it (epoch {first_epoch})")]
    Overlap {
        /// The role.
        role: String,
        /// The node already holding it.
        first: String,
        /// Its epoch.
        first_epoch: u64,
        /// The node promoted on top of it.
        second: String,
        /// When.
        at_nanos: u64,
    },
    /// A promotion's epoch was not above every earlier one.
    #[error("role {role}: {node} promoted at epoch {epoch} after epoch {previous} had been used")]
    EpochNotIncreasing {
        /// The role.
        role: String,
        /// The node.
        node: String,
        /// Its epoch.
        epoch: u64,
        /// The highest earlier epoch.
        previous: u64,
    },
}

/// Checks a history. Intervals are half-open: a demote and a promote at the
/// same instant do not overlap. Demotes of a node that does not hold the role
/// are harmless (a fence that ran twice).
pub fn check(events: &[HookEvent]) -> Result<(), HistoryViolation> {
    let mut sorted: Vec<&HookEvent> = events.iter().collect();
    // At equal times, demotes first.
    sorted.sort_by_key(|e| (e.at_nanos, e.kind == HookKind::Promote));
    let mut holders: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
    let mut max_epoch: BTreeMap<&str, u64> = BTreeMap::new();
    for e in sorted {
        match e.kind {
            HookKind::Demote => {
                if holders
                    .get(e.role.as_str())
                    .is_some_and(|(n, _)| *n == e.node)
                {
                    holders.remove(e.role.as_str());
                }
            }
            HookKind::Promote => {
                if let Some((first, first_epoch)) = holders.get(e.role.as_str()) {
                    return Err(HistoryViolation::Overlap {
                        role: e.role.clone(),
                        first: (*first).to_owned(),
                        first_epoch: *first_epoch,
                        second: e.node.clone(),
                        at_nanos: e.at_nanos,
                    });
                }
                let prev = max_epoch.get(e.role.as_str()).copied().unwrap_or(0);
                if e.epoch <= prev {
                    return Err(HistoryViolation::EpochNotIncreasing {
                        role: e.role.clone(),
                        node: e.node.clone(),
                        epoch: e.epoch,
                        previous: prev,
                    });
                }
                max_epoch.insert(&e.role, e.epoch);
                holders.insert(&e.role, (&e.node, e.epoch));
            }
        }
    }
    Ok(())
}
