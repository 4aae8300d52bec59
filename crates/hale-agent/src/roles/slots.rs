//! The agent's hook slots: how many hooks run at once over all its roles
//! (`[agent] hooks_at_once`), and the order the others start in: every
//! queued demote before any queued promote, each class first come, first
//! served. A demote ends a holding (the sooner the better, and the next
//! holder may be waiting for it); a promote waits behind it.
//!
//! Without a bound, 1,000 roles lapsing at once (a control plane stalled
//! on its disk) started thousands of processes and the storm fed itself
//! (BENCHMARKS.md, Roles); with the bound but in arrival order, a failover's
//! demotes waited behind promotes of roles that had nothing to do with it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Which queue a hook waits in; earlier variants start first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HookClass {
    /// A demote hook (a holding ending).
    Demote,
    /// A promote hook.
    Promote,
}

/// The slots (see the module).
#[derive(Debug)]
pub struct HookSlots {
    state: Mutex<SlotState>,
}

#[derive(Debug)]
struct SlotState {
    limit: usize,
    running: usize,
    seq: u64,
    queue: BTreeMap<(HookClass, u64), oneshot::Sender<()>>,
}

/// A slot held: released (handed to the next in line) when dropped.
#[derive(Debug)]
pub struct HookPermit {
    slots: Arc<HookSlots>,
}

impl Drop for HookPermit {
    fn drop(&mut self) {
        self.slots.release();
    }
}

/// How many hooks run and wait now (a shape of the API: [`crate::view`]).
pub use crate::view::SlotCounts;

impl HookSlots {
    /// `limit` slots (at least one).
    pub fn new(limit: usize) -> Arc<HookSlots> {
        Arc::new(HookSlots {
            state: Mutex::new(SlotState {
                limit: limit.max(1),
                running: 0,
                seq: 0,
                queue: BTreeMap::new(),
            }),
        })
    }

    /// Waits for a slot in `class`'s queue.
    pub async fn acquire(self: &Arc<Self>, class: HookClass) -> HookPermit {
        let (key, rx) = {
            let mut s = self.state.lock().expect("hook slots lock");
            if s.running < s.limit && s.queue.is_empty() {
                s.running += 1;
                return HookPermit {
                    slots: self.clone(),
                };
            }
            s.seq += 1;
            let key = (class, s.seq);
            let (tx, rx) = oneshot::channel();
            s.queue.insert(key, tx);
            (key, rx)
        };
        let mut waiting = Waiting {
            slots: self.clone(),
            key,
            rx: Some(rx),
        };
        let granted = match waiting.rx.as_mut() {
            Some(rx) => rx.await.is_ok(),
            None => false,
        };
        waiting.rx = None;
        debug_assert!(granted, "a queued sender is dropped only by handing over");
        HookPermit {
            slots: self.clone(),
        }
    }

    /// Hands a slot to the first in line still waiting, or frees it. The
    /// hand-over happens under the lock (see [`Waiting`]'s drop).
    fn release(&self) {
        let mut s = self.state.lock().expect("hook slots lock");
        while let Some((_, tx)) = s.queue.pop_first() {
            if tx.send(()).is_ok() {
                return;
            }
        }
        s.running = s.running.saturating_sub(1);
    }

    /// How many run and wait now.
    pub fn counts(&self) -> SlotCounts {
        let s = self.state.lock().expect("hook slots lock");
        SlotCounts {
            running: s.running,
            queued: s.queue.len(),
            limit: s.limit,
        }
    }
}

/// A place in a queue. Dropped before its slot came (the hook's task was
/// cancelled), it leaves the queue; dropped after the slot was handed to
/// it but before it was taken, it hands the slot on. Both are decided
/// under the lock, which [`HookSlots::release`] hands over under.
struct Waiting {
    slots: Arc<HookSlots>,
    key: (HookClass, u64),
    rx: Option<oneshot::Receiver<()>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.rx.take().is_none() {
            return;
        }
        let left = {
            let mut s = self.slots.state.lock().expect("hook slots lock");
            s.queue.remove(&self.key).is_some()
        };
        if !left {
            self.slots.release();
        }
    }
}

/// Four slots per core, from 4 to 32: enough that a failover's hooks run
/// side by side, few enough that they leave the host's cores to its work.
pub fn default_limit() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (4 * cores).clamp(4, 32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    #[tokio::test]
    async fn queued_demotes_start_before_queued_promotes_and_each_class_in_arrival_order() {
        let slots = HookSlots::new(1);
        let first = slots.acquire(HookClass::Promote).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, class) in [
            (1, HookClass::Promote),
            (2, HookClass::Demote),
            (3, HookClass::Promote),
            (4, HookClass::Demote),
        ] {
            let (s, order) = (slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _p = s.acquire(class).await;
                order.lock().unwrap().push(i);
            }));
            // Each queued before the next.
            while slots.counts().queued < i {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(
            slots.counts(),
            SlotCounts {
                running: 1,
                queued: 4,
                limit: 1
            }
        );
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![2, 4, 1, 3]);
        assert_eq!(
            slots.counts(),
            SlotCounts {
                running: 0,
                queued: 0,
                limit: 1
            }
        );
    }

    #[tokio::test]
    async fn a_waiter_cancelled_in_the_queue_neither_keeps_nor_loses_a_slot() {
        let slots = HookSlots::new(1);
        let held = slots.acquire(HookClass::Promote).await;
        let s2 = slots.clone();
        let cancelled = tokio::spawn(async move { s2.acquire(HookClass::Demote).await });
        while slots.counts().queued < 1 {
            tokio::task::yield_now().await;
        }
        cancelled.abort();
        let _ = cancelled.await;
        assert_eq!(slots.counts().queued, 0);
        drop(held);
        assert_eq!(slots.counts().running, 0);
        let _again = slots.acquire(HookClass::Promote).await;
        assert_eq!(slots.counts().running, 1);
    }
}
