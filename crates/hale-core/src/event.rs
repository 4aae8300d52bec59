//! What a node reports to its user.

use crate::time::Time;
use crate::wire::Versions;

/// Why a member was declared dead, so that a verdict read at 3 a.m. can be trusted or questioned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeathEvidence<I> {
    /// Who reached the verdict (this node, or the node whose verdict we accepted).
    pub declared_by: I,
    /// The healthy observers that failed to reach it, as known here.
    pub accusers: Vec<I>,
    /// Accusers discounted because they were unhealthy or accusing too many.
    pub discounted: usize,
    /// Independent healthy accusers the verdict rested on.
    pub confirmations: usize,
    /// Accusers, as known here, that found its port closed (its host
    /// answered, its process was gone): positive evidence of a crash.
    pub closed_port: usize,
    /// When this node first suspected it (None if it learned of the death directly).
    pub suspected_at: Option<Time>,
    /// When this node last heard from it.
    pub last_heard: Time,
    /// When this node accepted the verdict.
    pub declared_at: Time,
}

/// Outcome of one visit of the round-robin probe walk (diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeVisit {
    /// A ping was sent.
    Probed,
    /// The member was heard from within the last probe interval; no ping needed.
    SkippedFresh,
}

/// Something that happened to the membership, in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<I> {
    /// A member was learned of (or came back after leaving).
    Joined {
        /// The member.
        member: I,
        /// Its incarnation.
        incarnation: u32,
    },
    /// A member is suspected.
    Suspected {
        /// The member.
        member: I,
        /// Its incarnation.
        incarnation: u32,
        /// Who suspects it.
        accuser: I,
    },
    /// A member was declared dead.
    Dead {
        /// The member.
        member: I,
        /// Its incarnation.
        incarnation: u32,
        /// What the verdict rests on.
        evidence: Box<DeathEvidence<I>>,
    },
    /// A suspected or dead member proved alive with a higher incarnation.
    Recovered {
        /// The member.
        member: I,
        /// Its new incarnation.
        incarnation: u32,
        /// Whether it had been declared dead (otherwise only suspected).
        was_dead: bool,
    },
    /// A member left gracefully.
    Left {
        /// The member.
        member: I,
        /// Its final incarnation.
        incarnation: u32,
    },
    /// A member published new metadata.
    MetadataUpdated {
        /// The member.
        member: I,
        /// Its incarnation.
        incarnation: u32,
    },
    /// This node was suspected or declared dead and refuted it.
    Refuted {
        /// Our new incarnation.
        incarnation: u32,
        /// Whether we had been declared dead (a rejoin).
        was_dead: bool,
    },
    /// This node has no live member left and is contacting its seeds.
    SeedFallback,
    /// A peer had heard a newer generation from this node than its packets
    /// carried (it restarted with its wall clock behind a previous run's)
    /// and dropped them as replays; this run now carries `generation`.
    GenerationRaised {
        /// The generation its packets carried.
        previous: u64,
        /// The generation they carry now.
        generation: u64,
        /// The peer that told it.
        by: I,
    },
    /// A packet in a wire version this node does not speak was dropped
    /// (reported at most once a minute per sender; see `versions.rs`).
    UnsupportedVersion {
        /// Its sender, when the packet's prefix names it.
        sender: Option<I>,
        /// The packet's version.
        version: u8,
        /// The versions its sender speaks, when the packet says.
        speaks: Option<Versions>,
        /// The versions this node speaks.
        ours: Versions,
    },
    /// This node was paused (no input for longer than the pause threshold).
    Paused {
        /// How long the pause lasted beyond the expected timer.
        gap_ms: u64,
    },
    /// A round-robin probe visit (only with `trace_probes`).
    ProbeVisit {
        /// The member visited.
        target: I,
        /// Whether it was pinged.
        outcome: ProbeVisit,
        /// Which round of this node's walk the visit belongs to.
        round: u64,
    },
}
