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

/// How many records a table keeps copies of: a node's ring neighbours
/// with the default of one on each side, and a suspected one each side.
/// Further neighbours are read from the table.
pub(crate) const WATCH: usize = 4;

/// The watched records (of type `R`, the table's `Rec`, by slot).
///
/// Invariant: an entry `Some((id, slot, copy))` names a member stored at
/// `slot`, and `copy` equals its record. Every change of a record through
/// the table refreshes its copy; forgetting the member drops the entry
/// (its slot may be reused by another member).
#[derive(Debug)]
pub(super) struct Watch<I, R> {
    /// The member, the slot it is stored at, and the copy of its record.
    pub(super) entries: [Option<(I, u32, R)>; WATCH],
}

impl<I, R> Default for Watch<I, R> {
    fn default() -> Self {
        Watch {
            entries: [const { None }; WATCH],
        }
    }
}

impl<I, R: Copy> Watch<I, R> {
    /// Refreshes the copy of the record at `slot`, if watched.
    pub(super) fn refresh(&mut self, slot: u32, rec: R) {
        for (_, s, copy) in self.entries.iter_mut().flatten() {
            if *s == slot {
                *copy = rec;
            }
        }
    }

    /// Stops watching the member at `slot` (it was forgotten).
    pub(super) fn drop_slot(&mut self, slot: u32) {
        for e in &mut self.entries {
            if e.as_ref().is_some_and(|(_, s, _)| *s == slot) {
                *e = None;
            }
        }
    }
}
