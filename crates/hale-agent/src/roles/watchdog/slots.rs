//! How many fences the watchdog runs at once.
//!
//! A watchdog whose agent was frozen or died fences every holding it
//! guarded, each on a thread of its own. All at once, at the agent's raised
//! nice value, a host holding a hundred roles started a hundred demote
//! processes that took every core for seconds: the host's own checks (at
//! the children's priority) timed out, and on a machine running several
//! agents, every other agent's services were reported failing and their
//! roles moved (issue 41). At most `[agent] hooks_at_once` run at once, the
//! agent's own bound on hooks; the rest wait their turn, so that the first
//! fences also finish sooner.

use std::sync::{Condvar, Mutex};

/// The name of the variable through which the agent tells its watchdog
/// the bound.
pub const ENV: &str = "HALE_WATCHDOG_FENCES_AT_ONCE";

/// A counting semaphore of fence slots.
#[derive(Debug)]
pub(super) struct FenceSlots {
    free: Mutex<usize>,
    freed: Condvar,
}

/// One slot, given back when dropped.
pub(super) struct Slot<'a>(&'a FenceSlots);

impl FenceSlots {
    /// `n` slots (at least one).
    pub(super) fn new(n: usize) -> FenceSlots {
        FenceSlots {
            free: Mutex::new(n.max(1)),
            freed: Condvar::new(),
        }
    }

    /// The bound the agent passed in [`ENV`], else the agent's default for
    /// hooks at once.
    pub(super) fn from_env() -> FenceSlots {
        let n = std::env::var(ENV)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(crate::roles::slots::default_limit);
        FenceSlots::new(n)
    }

    /// Waits for a free slot.
    pub(super) fn acquire(&self) -> Slot<'_> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|p| p.into_inner());
        }
        *free -= 1;
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(|p| p.into_inner());
        *free += 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn no_more_than_the_bound_hold_a_slot_at_once_and_every_waiter_gets_one() {
        let slots = Arc::new(FenceSlots::new(3));
        let (now, most, done) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let threads: Vec<_> = (0..20)
            .map(|_| {
                let (slots, now, most, done) =
                    (slots.clone(), now.clone(), most.clone(), done.clone());
                std::thread::spawn(move || {
                    let _slot = slots.acquire();
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(5)); // work held in the slot
                    now.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(done.load(Ordering::SeqCst), 20);
        assert!(most.load(Ordering::SeqCst) <= 3);
    }
}
