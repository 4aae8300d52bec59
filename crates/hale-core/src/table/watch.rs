//! Copies of the few records a node reads after every input: its ring
//! neighbours'.
//!
//! A node's next deadline is the earliest time a ring neighbour is due for
//! a ping, which depends on that neighbour's record. In a simulator of
//! 10,000 nodes each record is a cache miss (the tables hold 10^8), and
//! reading the neighbours' records after every event was a sixth of a
//! 10,000-member run. The table keeps copies of the records it is asked to
//! watch beside its other fields, where the node's own state already is,
//! and keeps them equal to the records through every change.

use super::{Rec, Slot, Table};
use crate::identity::Identity;

/// How many records a table keeps copies of: a node's ring neighbours
/// with the default of one on each side, and a suspected one each side.
/// Further neighbours are read from the table.
pub(crate) const WATCH: usize = 4;

/// The watched records.
///
/// Invariant: an entry `Some((id, slot, copy))` names a member stored at
/// `slot`, and `copy` equals its record. Every change of a record through
/// the table refreshes its copy; forgetting the member drops the entry
/// (its slot may be reused by another member).
#[derive(Debug)]
pub(super) struct Watch<I> {
    entries: [Option<(I, Slot, Rec)>; WATCH],
}

impl<I> Default for Watch<I> {
    fn default() -> Self {
        Watch {
            entries: [const { None }; WATCH],
        }
    }
}

impl<I: Identity> Watch<I> {
    /// Refreshes the copy of the record at `slot`, if watched.
    pub(super) fn refresh(&mut self, slot: Slot, rec: Rec) {
        for (_, s, copy) in self.entries.iter_mut().flatten() {
            if *s == slot {
                *copy = rec;
            }
        }
    }

    /// Stops watching the member at `slot` (it was forgotten).
    pub(super) fn drop_slot(&mut self, slot: Slot) {
        for e in &mut self.entries {
            if e.as_ref().is_some_and(|(_, s, _)| *s == slot) {
                *e = None;
            }
        }
    }
}

impl<I: Identity> Table<I> {
    /// Keeps copies of the records of the first [`WATCH`] of `ids` (in
    /// that order, for [`Table::watched`]), and of no others.
    pub(crate) fn watch<'a>(&mut self, ids: impl IntoIterator<Item = &'a I>)
    where
        I: 'a,
    {
        let mut ids = ids.into_iter();
        for k in 0..WATCH {
            let entry = ids.next().and_then(|id| {
                let slot = self.slot(id)?;
                Some((id.clone(), slot, *self.rec(slot)?))
            });
            self.watch.entries[k] = entry;
        }
    }

    /// The record of `id`, which is the `k`-th member given to
    /// [`Table::watch`]: read from its copy when there is one, from the
    /// table otherwise. Always the same answer as [`Table::get`].
    pub(crate) fn watched(&self, k: usize, id: &I) -> Option<&Rec> {
        match self.watch.entries.get(k) {
            Some(Some((w, _, copy))) if w == id => {
                debug_assert_eq!(
                    Some(copy),
                    self.get(id),
                    "a watched copy differs from its record"
                );
                Some(copy)
            }
            _ => self.get(id),
        }
    }

    /// Refreshes the copies of every watched record (after a change of
    /// many records).
    pub(super) fn refresh_watched(&mut self) {
        for k in 0..WATCH {
            let fresh = match &self.watch.entries[k] {
                Some((_, slot, _)) => self.rec(*slot).copied(),
                None => continue,
            };
            match (fresh, &mut self.watch.entries[k]) {
                (Some(rec), Some((_, _, copy))) => *copy = rec,
                (None, e) => *e = None,
                (Some(_), None) => {}
            }
        }
    }

    /// A hint for cache warming: reads the copies.
    pub(crate) fn warm_watched(&self) -> u64 {
        self.watch
            .entries
            .iter()
            .flatten()
            .fold(0, |acc, (_, s, r)| {
                acc ^ u64::from(*s) ^ u64::from(r.incarnation)
            })
    }
}
