//! The member table's side of [`super::watch::Watch`]: which records it
//! keeps copies of, and reading them.

use super::watch::WATCH;
use super::{Rec, Table};
use crate::identity::Identity;

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
