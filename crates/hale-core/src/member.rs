//! What a node knows about each member.

use crate::time::Time;
use crate::wire::WireState;

named_enum! {
    /// A member's state in this node's view (its lower-case name is what
    /// the CLI and API show).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum MemberState {
        /// Answering probes, or not yet shown otherwise.
        Alive => "alive",
        /// Failed a probe; may still refute.
        Suspect => "suspect",
        /// Declared dead on corroborated evidence.
        Dead => "dead",
        /// Left the cluster gracefully.
        Left => "left",
    }
}

impl MemberState {
    /// Alive or suspect: still probed and gossiped to.
    pub fn is_live(self) -> bool {
        matches!(self, MemberState::Alive | MemberState::Suspect)
    }

    pub(crate) fn wire(self) -> WireState {
        match self {
            MemberState::Alive => WireState::Alive,
            MemberState::Suspect => WireState::Suspect,
            MemberState::Dead => WireState::Dead,
            MemberState::Left => WireState::Left,
        }
    }
}

/// One member as this node saw it when [`crate::Node::member`] or
/// [`crate::Node::members`] was called: a copy, not a live view (the node
/// keeps its table in a compact form of its own).
#[derive(Debug, Clone)]
pub struct Member<I> {
    pub(crate) id: I,
    pub(crate) incarnation: u32,
    pub(crate) state: MemberState,
    /// Last local health score the member advertised in a packet header.
    pub(crate) health: u8,
    pub(crate) meta: Box<[u8]>,
    pub(crate) last_heard: Time,
    pub(crate) state_since: Time,
}

impl<I> Member<I> {
    /// The member's identity.
    pub fn id(&self) -> &I {
        &self.id
    }
    /// Its incarnation: raised only by the member itself, to refute or to
    /// publish new metadata.
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }
    /// Its state.
    pub fn state(&self) -> MemberState {
        self.state
    }
    /// The local health score it last advertised (0 is healthy).
    pub fn advertised_health(&self) -> u8 {
        self.health
    }
    /// Its metadata.
    pub fn meta(&self) -> &[u8] {
        &self.meta
    }
    /// When this node last heard from it (any packet, or application traffic).
    pub fn last_heard(&self) -> Time {
        self.last_heard
    }
    /// When it entered its current state.
    pub fn state_since(&self) -> Time {
        self.state_since
    }
}
