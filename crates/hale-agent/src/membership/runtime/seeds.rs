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
//! views merge, and the island is gone. A seed that stays missing is asked
//! half as often each time, down to once every [`SEED_CHECK_MAX`]: a seed
//! that is down, or one named by an address no member advertises (a load
//! balancer's, a DNS name's other interface), costs next to nothing.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use hale_core::{Node, NodeId};

/// How soon a seed missing from the view is synced with.
pub const SEED_CHECK: Duration = Duration::from_secs(10);

/// The longest wait between syncs with a seed that stays missing.
pub const SEED_CHECK_MAX: Duration = Duration::from_secs(320);

/// One seed: when to look at it next, and the wait after that.
#[derive(Debug)]
struct Seed {
    addr: SocketAddr,
    next: Instant,
    wait: Duration,
}

/// The seeds and when to look for missing ones next.
#[derive(Debug, Default)]
pub(super) struct Seeds {
    seeds: Vec<Seed>,
}

impl Seeds {
    pub(super) fn new() -> Seeds {
        Seeds::default()
    }

    /// The agent joined through `addrs`.
    pub(super) fn joined(&mut self, addrs: &[SocketAddr]) {
        let next = Instant::now() + SEED_CHECK;
        self.seeds = addrs
            .iter()
            .map(|&addr| Seed {
                addr,
                next,
                wait: SEED_CHECK,
            })
            .collect();
    }

    /// When to look next.
    pub(super) fn deadline(&self) -> Instant {
        self.seeds
            .iter()
            .map(|s| s.next)
            .min()
            .unwrap_or_else(|| Instant::now() + SEED_CHECK_MAX)
    }

    /// The seeds due a sync now: those whose address no live member of
    /// `node`'s view has (this node's own excepted), each once its wait is
    /// over; the wait doubles while it stays missing and is reset once it
    /// is live.
    pub(super) fn missing(&mut self, node: &Node<NodeId>) -> Vec<SocketAddr> {
        let now = Instant::now();
        if now < self.deadline() {
            return Vec::new();
        }
        let me = node.id().addr();
        let live: Vec<SocketAddr> = node
            .members()
            .filter(|m| m.state().is_live())
            .map(|m| m.id().addr())
            .collect();
        let mut due = Vec::new();
        for s in &mut self.seeds {
            if s.addr == me || live.contains(&s.addr) {
                s.wait = SEED_CHECK;
                s.next = now + SEED_CHECK;
            } else if now >= s.next {
                due.push(s.addr);
                s.next = now + s.wait;
                s.wait = (s.wait * 2).min(SEED_CHECK_MAX);
            }
        }
        due
    }
}
