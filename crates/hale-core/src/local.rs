//! What a node says about itself: its identity, cluster and ring position,
//! incarnation, metadata and generation.

use crate::freshness::Generation;
use crate::identity::Identity;
use crate::ring::{ring_position_from, ring_seed, tag};
use crate::wire::Message;

thread_local! {
    /// The buffer identities are encoded into to hash them onto the ring:
    /// one per thread, so that reading a ring position borrows nothing.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(128));
}

/// This node's own record, as every packet's header carries it.
///
/// Invariants: the identity, cluster and ring position never change; the
/// incarnation only rises (saturating); the metadata is at most `MAX_META`
/// bytes (checked by `Node::set_metadata`).
#[derive(Debug)]
pub(crate) struct Local<I> {
    me: I,
    cluster: u64,
    /// Where ring positions in the cluster start (`ring::ring_seed`).
    ring_seed: u64,
    ring: u64,
    /// What pings meant for this node carry from wire version 3 on
    /// (`ring::tag` of `ring`).
    tag: u32,
    incarnation: u32,
    meta: Box<[u8]>,
    /// This run's generation and the notices about others' (`freshness.rs`).
    generation: Generation,
}

impl<I: Identity> Local<I> {
    /// `me` in `cluster`, at incarnation 0.
    pub(crate) fn new(me: I, cluster: u64, meta: Vec<u8>, generation: u64) -> Local<I> {
        let seed = ring_seed(cluster);
        let ring = SCRATCH.with_borrow_mut(|scratch| ring_position_from(seed, &me, scratch));
        Local {
            me,
            cluster,
            ring_seed: seed,
            ring,
            tag: tag(ring),
            incarnation: 0,
            meta: meta.into_boxed_slice(),
            generation: Generation::new(generation),
        }
    }

    /// This node's identity.
    pub(crate) fn id(&self) -> &I {
        &self.me
    }

    /// The cluster's id.
    pub(crate) fn cluster(&self) -> u64 {
        self.cluster
    }

    /// This node's ring position.
    pub(crate) fn ring(&self) -> u64 {
        self.ring
    }

    /// The tag that pings meant for this node carry (version 3 on).
    pub(crate) fn tag(&self) -> u32 {
        self.tag
    }

    /// The ring position of `id`.
    pub(crate) fn ring_of(&self, id: &I) -> u64 {
        SCRATCH.with_borrow_mut(|scratch| ring_position_from(self.ring_seed, id, scratch))
    }

    /// This node's incarnation.
    pub(crate) fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// Raises the incarnation above both its own and `observed`.
    pub(crate) fn raise_incarnation(&mut self, observed: u32) {
        self.incarnation = self.incarnation.max(observed).saturating_add(1);
    }

    /// This node's metadata.
    pub(crate) fn meta(&self) -> &[u8] {
        &self.meta
    }

    /// This node's own word that it is alive, at its incarnation.
    pub(crate) fn alive(&self) -> Message<I> {
        Message::Alive {
            member: self.me.clone(),
            incarnation: self.incarnation,
            meta: self.meta.clone(),
        }
    }

    /// Replaces the metadata.
    pub(crate) fn set_meta(&mut self, meta: Vec<u8>) {
        self.meta = meta.into_boxed_slice();
    }

    /// The generation and the notices sent.
    pub(crate) fn generation(&mut self) -> &mut Generation {
        &mut self.generation
    }

    /// The generation this node's packets carry.
    pub(crate) fn my_generation(&self) -> u64 {
        self.generation.mine()
    }
}
