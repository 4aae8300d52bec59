//! The seeds an agent joined through, synced with again while one is not
//! a live member of its view.
//!
//! The core contacts its seeds only while it is alone or cut off. When
//! every seed host restarts at once (the seeds of a small cluster are often
//! two or three of its members, restarted together by an upgrade), each
//! joins the other seeds only, which know nobody yet: an island. The rest
//! saw them leave, and a left member is never probed again, so neither side
//! would ever learn of the other. Every [`SEED_CHECK`], a seed whose address
//! no live member has is sent a join's state exchange
//! ([`hale_core::Node::sync_with`]): an island's seed answers, the two
//! views merge, and the island is gone. A seed that is down costs one
//! failed connection per check.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use hale_core::Node;

use crate::NodeId;

/// How often seeds missing from the view are synced with.
pub const SEED_CHECK: Duration = Duration::from_secs(10);

/// The seeds and when to look for missing ones next.
#[derive(Debug)]
pub(super) struct Seeds {
    addrs: Vec<SocketAddr>,
    next: Instant,
}

impl Seeds {
    pub(super) fn new() -> Seeds {
        Seeds {
            addrs: Vec::new(),
            next: Instant::now() + SEED_CHECK,
        }
    }

    /// The agent joined through `addrs`.
    pub(super) fn joined(&mut self, addrs: &[SocketAddr]) {
        self.addrs = addrs.to_vec();
        self.next = Instant::now() + SEED_CHECK;
    }

    /// When to look next.
    pub(super) fn deadline(&self) -> Instant {
        self.next
    }

    /// The seeds due a sync now: those whose address no live member of
    /// `node`'s view has (this node's own excepted). Empty before
    /// [`Seeds::deadline`].
    pub(super) fn missing(&mut self, node: &Node<NodeId>) -> Vec<SocketAddr> {
        let now = Instant::now();
        if now < self.next {
            return Vec::new();
        }
        self.next = now + SEED_CHECK;
        let me = node.id().addr();
        let live: Vec<SocketAddr> = node
            .members()
            .filter(|m| m.state().is_live())
            .map(|m| m.id().addr())
            .collect();
        self.addrs
            .iter()
            .copied()
            .filter(|a| *a != me && !live.contains(a))
            .collect()
    }
}
