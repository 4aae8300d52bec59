//! The bounded hand-off from callers to the worker: a byte budget reserved
//! with a compare-and-swap before a `std::sync::mpsc::sync_channel` slot is
//! taken. Both checks fail without allocating, blocking or syscalls.
//!
//! Drop policy: **drop newest**. When the budget or the slots are exhausted
//! the offered event is refused (and counted by the caller as `overflow`);
//! what is already queued is kept, because it is older and, in an incident,
//! usually the first and most useful report.
//!
//! The budget covers an event from the moment it is offered until the worker
//! is done with it (delivered, dropped or spooled), so the bytes held in
//! memory by the reporter never exceed the cap.
//!
//! Refusals cost loads only. A full budget fails on its first load; full
//! slots (a burst faster than the worker drains, with bytes to spare) would
//! cost a reserve, a failed send and a release — two read-modify-writes on
//! the line every producer shares — so the first producer to find them full
//! sets a `slots_full` hint and wakes the worker, and later offers refuse on
//! a load until the worker's next turn empties the channel and clears it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use tokio::sync::Notify;

/// Why an offer was refused. Nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// No room (bytes or slots).
    Full,
    /// The queue is closed.
    Closed,
}

/// The state both ends share.
#[derive(Debug)]
pub(crate) struct Budget {
    used: AtomicUsize,
    cap: usize,
    closed: AtomicBool,
    /// The channel's slots were found full; cleared by the worker when it
    /// has emptied the channel.
    slots_full: AtomicBool,
    /// Set by the worker while it waits for work; producers only notify then.
    idle: AtomicBool,
    pub(crate) notify: Notify,
}

impl Budget {
    /// Reserves `n` bytes, or fails if that would pass the cap.
    fn reserve(&self, n: usize) -> bool {
        let add = |cur: usize| cur.checked_add(n).filter(|next| *next <= self.cap);
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, add)
            .is_ok()
    }

    /// Gives back `n` bytes reserved earlier.
    pub(crate) fn release(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// Bytes reserved now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The cap.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Refuses every later offer and wakes the worker.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Wakes the worker (e.g. for a flush).
    pub(crate) fn wake(&self) {
        self.notify.notify_one();
    }

    /// Marks the worker idle (true) or busy (false).
    pub(crate) fn set_idle(&self, idle: bool) {
        self.idle.store(idle, Ordering::SeqCst);
    }
}

/// The producer side; cheap to clone.
#[derive(Debug)]
pub(crate) struct Producer<T> {
    tx: SyncSender<(T, usize)>,
    pub(crate) budget: Arc<Budget>,
}

impl<T> Clone for Producer<T> {
    fn clone(&self) -> Self {
        Producer {
            tx: self.tx.clone(),
            budget: self.budget.clone(),
        }
    }
}

/// The consumer side, owned by the worker.
#[derive(Debug)]
pub(crate) struct Consumer<T> {
    rx: Receiver<(T, usize)>,
    pub(crate) budget: Arc<Budget>,
}

/// A queue of at most `cap` bytes and `slots` entries.
pub(crate) fn bounded<T>(cap: usize, slots: usize) -> (Producer<T>, Consumer<T>) {
    let (tx, rx) = sync_channel(slots.max(1));
    let budget = Arc::new(Budget {
        used: AtomicUsize::new(0),
        cap,
        closed: AtomicBool::new(false),
        slots_full: AtomicBool::new(false),
        idle: AtomicBool::new(false),
        notify: Notify::new(),
    });
    (
        Producer {
            tx,
            budget: budget.clone(),
        },
        Consumer { rx, budget },
    )
}

impl<T> Producer<T> {
    /// Offers `item`, accounted as `bytes`. On refusal the item is given
    /// back so the caller decides where it is dropped; nothing allocates.
    pub(crate) fn offer(&self, item: T, bytes: usize) -> Result<(), (T, Refused)> {
        if self.budget.closed.load(Ordering::Relaxed) {
            return Err((item, Refused::Closed));
        }
        if self.budget.slots_full.load(Ordering::Relaxed) || !self.budget.reserve(bytes) {
            return Err((item, Refused::Full));
        }
        match self.tx.try_send((item, bytes)) {
            Ok(()) => {
                if self.budget.idle.load(Ordering::SeqCst) {
                    self.budget.notify.notify_one();
                }
                Ok(())
            }
            Err(TrySendError::Full((item, _))) => {
                self.budget.release(bytes);
                // Wake the worker (or leave it a permit) so that its next
                // turn empties the channel and clears the hint: it never
                // outlives the full channel by more than one turn.
                self.budget.slots_full.store(true, Ordering::SeqCst);
                self.budget.notify.notify_one();
                Err((item, Refused::Full))
            }
            Err(TrySendError::Disconnected((item, _))) => {
                self.budget.release(bytes);
                Err((item, Refused::Closed))
            }
        }
    }
}

impl<T> Consumer<T> {
    /// The next item and its accounted bytes, if any. The bytes stay
    /// reserved until the caller releases them.
    /// Finding the channel empty clears the `slots_full` hint.
    pub(crate) fn pop(&self) -> Option<(T, usize)> {
        let item = self.rx.try_recv().ok();
        if item.is_none() && self.budget.slots_full.load(Ordering::SeqCst) {
            self.budget.slots_full.store(false, Ordering::SeqCst);
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_slots_refuse_until_the_worker_empties_the_channel_then_accept_again() {
        let (p, c) = bounded::<u32>(1 << 20, 2);
        assert!(p.offer(1, 10).is_ok());
        assert!(p.offer(2, 10).is_ok());
        // Slots full, bytes to spare: refused, and the hint is set.
        assert_eq!(p.offer(3, 10).map_err(|e| e.1), Err(Refused::Full));
        assert!(p.budget.slots_full.load(Ordering::SeqCst));
        assert_eq!(p.budget.used(), 20, "a refusal holds no bytes");
        // One slot freed is not enough while the hint stands...
        assert_eq!(c.pop().map(|x| x.0), Some(1));
        assert_eq!(p.offer(4, 10).map_err(|e| e.1), Err(Refused::Full));
        // ...emptying the channel clears it.
        assert_eq!(c.pop().map(|x| x.0), Some(2));
        assert!(c.pop().is_none());
        assert!(!p.budget.slots_full.load(Ordering::SeqCst));
        assert!(p.offer(5, 10).is_ok());
    }

    #[test]
    fn a_full_budget_refuses_without_setting_the_slots_hint() {
        let (p, _c) = bounded::<u32>(100, 64);
        assert!(p.offer(1, 60).is_ok());
        assert_eq!(p.offer(2, 60).map_err(|e| e.1), Err(Refused::Full));
        assert!(!p.budget.slots_full.load(Ordering::SeqCst));
    }
}
