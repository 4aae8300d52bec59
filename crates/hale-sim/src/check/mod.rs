//! Invariants checked after (or during) a run, one per file.

mod convergence;
mod detection;
mod no_false_death;
mod probe_coverage;

pub use convergence::views_converged;
pub use detection::{every_fault_detected, OBSERVER_GRACE};
pub use no_false_death::no_false_death;
pub use probe_coverage::probe_coverage;

use hale_core::Time;

/// An invariant that did not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A healthy member was declared dead.
    #[error(
        "{count} healthy member(s) declared dead; first: node {member} by node {observer} at {at}"
    )]
    FalseDeath {
        /// How many times.
        count: usize,
        /// First victim.
        member: u32,
        /// First observer.
        observer: u32,
        /// When.
        at: Time,
    },
    /// A round of the probe walk did not visit every other member exactly once.
    #[error("node {observer}, round {round}: {problem}")]
    ProbeCoverage {
        /// The observer.
        observer: u32,
        /// The round.
        round: u64,
        /// What was wrong.
        problem: String,
    },
    /// A live member's view disagrees with the truth after healing.
    #[error("node {observer} sees node {member} as {seen}, but it is {truth}")]
    Diverged {
        /// The observer.
        observer: u32,
        /// The member.
        member: u32,
        /// What the observer sees.
        seen: String,
        /// The truth.
        truth: String,
    },
    /// A fault went undetected by some healthy observer.
    #[error("{kind} of node {node} at {at} not detected by {missing} healthy observer(s), e.g. node {example}")]
    Undetected {
        /// Fault kind.
        kind: &'static str,
        /// Faulty node.
        node: u32,
        /// When it happened.
        at: Time,
        /// Observers that never held it dead.
        missing: usize,
        /// One of them.
        example: u32,
    },
}
