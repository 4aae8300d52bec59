//! The role views: what this node shows of each role it is a candidate
//! for (`/v1/roles`, metrics, the dashboard, reloads, switchover checks).
//!
//! One owner, no lock of ours: the [`RoleSet`](super::RoleSet) owns the
//! `RoleViewTable`, a `tokio::sync::watch` channel carrying the whole
//! table as an immutable snapshot (`Arc<BTreeMap<role, RoleView>>`).
//!
//! - Readers hold a [`RoleViews`] (a `watch::Receiver`): a read is a cheap
//!   clone of the current snapshot's `Arc`, never a wait on a writer.
//! - Writers are narrow: each role's manager and keeper get a
//!   `RoleViewWriter` that changes that role's entry only; the table
//!   itself removes a retired role. A write replaces the snapshot
//!   synchronously (copy on write when a reader still holds the old one),
//!   so a read that follows a write — an API answer after a role changed,
//!   an event published after its view — sees it.

use std::collections::BTreeMap;
use std::sync::Arc;

use hale_control::RoleState;
use tokio::sync::watch;

use crate::view::{RoleTags, RoleView};

/// Every role view of this node, by role.
pub type RoleViewMap = BTreeMap<String, RoleView>;

/// The readers' side of the role views: cheap to clone, each read a
/// snapshot of the table as the last write left it.
#[derive(Debug, Clone)]
pub struct RoleViews {
    rx: watch::Receiver<Arc<RoleViewMap>>,
}

impl RoleViews {
    /// The table now (an `Arc` of it: nothing is copied).
    pub fn snapshot(&self) -> Arc<RoleViewMap> {
        self.rx.borrow().clone()
    }

    /// This node's view of `role` now, if it is a candidate for it.
    pub fn get(&self, role: &str) -> Option<RoleView> {
        self.rx.borrow().get(role).cloned()
    }
}

/// The owner of the role views: the only sender of the table. Held by the
/// role set; managers and keepers get [`RoleViewWriter`]s from it.
#[derive(Debug, Clone)]
pub(crate) struct RoleViewTable {
    tx: Arc<watch::Sender<Arc<RoleViewMap>>>,
}

impl RoleViewTable {
    /// An empty table.
    pub(crate) fn new() -> RoleViewTable {
        let (tx, _) = watch::channel(Arc::new(RoleViewMap::new()));
        RoleViewTable { tx: Arc::new(tx) }
    }

    /// A reader of the table.
    pub(crate) fn readers(&self) -> RoleViews {
        RoleViews {
            rx: self.tx.subscribe(),
        }
    }

    /// The writer of `role`'s view; the view, when first written, starts
    /// as not eligible at `priority` with `tags`.
    pub(crate) fn writer(&self, role: &str, priority: i64, tags: RoleTags) -> RoleViewWriter {
        RoleViewWriter {
            role: role.to_owned(),
            priority,
            tags,
            tx: self.tx.clone(),
        }
    }

    /// `role` is no longer a candidacy of this node: its view goes.
    pub(crate) fn remove(&self, role: &str) {
        self.tx.send_if_modified(|t| {
            if !t.contains_key(role) {
                return false;
            }
            Arc::make_mut(t).remove(role);
            true
        });
    }
}

/// Writes one role's view (a manager's or a keeper's handle): it cannot
/// touch another role's.
#[derive(Debug, Clone)]
pub(crate) struct RoleViewWriter {
    role: String,
    /// The priority a view created by this writer starts with.
    priority: i64,
    /// The tags a view created by this writer starts with.
    tags: RoleTags,
    tx: Arc<watch::Sender<Arc<RoleViewMap>>>,
}

impl RoleViewWriter {
    /// Updates the role's view, creating it (not eligible) if it has none.
    pub(crate) fn update(&self, f: impl FnOnce(&mut RoleView)) {
        self.tx.send_modify(|t| {
            let t = Arc::make_mut(t);
            if let Some(e) = t.get_mut(&self.role) {
                return f(e);
            }
            let e = t.entry(self.role.clone()).or_insert_with(|| RoleView {
                role: self.role.clone(),
                priority: self.priority,
                tags: self.tags,
                state: RoleState::Ineligible,
                ..RoleView::default()
            });
            f(e);
        });
    }

    /// Updates the role's view if it has one (a keeper never creates it:
    /// its manager does, and a retired role's stays gone).
    pub(crate) fn update_existing(&self, f: impl FnOnce(&mut RoleView)) {
        self.tx.send_if_modified(|t| {
            if !t.contains_key(&self.role) {
                return false;
            }
            if let Some(e) = Arc::make_mut(t).get_mut(&self.role) {
                f(e);
            }
            true
        });
    }

    /// Reads the role's view now (`None`: it has none).
    pub(crate) fn read<R>(&self, f: impl FnOnce(Option<&RoleView>) -> R) -> R {
        f(self.tx.borrow().get(&self.role))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_read_at_once_and_a_held_snapshot_stays_as_it_was() {
        let table = RoleViewTable::new();
        let readers = table.readers();
        let w = table.writer("db", 7, RoleTags::default());
        w.update_existing(|v| v.renewals = 1);
        assert!(readers.get("db").is_none(), "a keeper creates no view");
        w.update(|v| v.renewals += 1);
        let before = readers.snapshot();
        w.update(|v| v.renewals += 1);
        assert_eq!(before["db"].renewals, 1);
        assert_eq!(before["db"].priority, 7);
        assert_eq!(readers.get("db").map(|v| v.renewals), Some(2));
        assert_eq!(w.read(|v| v.map(|v| v.state)), Some(RoleState::Ineligible));
        table.remove("db");
        assert!(readers.snapshot().is_empty());
    }
}
