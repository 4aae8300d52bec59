//! What this agent publishes about itself in the membership protocol
//! ([`AgentMeta`]), kept current: the operator's text (`[agent] meta`,
//! changed by a reload), where its HTTP API listens, and its candidacies
//! (added and removed by reloads, their priority, tags and eligibility as
//! they change: eligible while the role's checks pass, if the node may be
//! promoted). Operators' tools (dashboard, `hale status`, `hale drill`) find
//! an agent's API there even when it has no roles.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::membership::meta::{AgentMeta, Candidacy};
use crate::membership::runtime::Shared;
use crate::view::RoleTags;

/// This agent's published metadata, and the driver it goes to.
#[derive(Debug)]
pub(crate) struct Published {
    meta: Mutex<Meta>,
    runtime: Arc<Shared>,
}

/// The metadata, and what each candidacy's `eligible` is made of.
#[derive(Debug)]
struct Meta {
    published: AgentMeta,
    /// Per role: whether its checks pass (a candidacy is published
    /// eligible when they do and it may be promoted).
    checks: BTreeMap<String, bool>,
}

impl Published {
    /// Metadata with the operator's text `user`, the API at `http` and the
    /// wire versions this agent speaks, no candidacies yet; published at once.
    pub(crate) fn new(
        runtime: Arc<Shared>,
        user: String,
        http: String,
        wire: hale_core::Versions,
    ) -> Published {
        let p = Published {
            meta: Mutex::new(Meta {
                published: AgentMeta {
                    user,
                    http: Some(http),
                    roles: Default::default(),
                    wire: Some(wire),
                },
                checks: BTreeMap::new(),
            }),
            runtime,
        };
        p.update(|_| {});
        p
    }

    /// Changes the metadata with `f` and publishes it (never waits, and
    /// never lost: the driver applies the newest it was given).
    pub(crate) fn update(&self, f: impl FnOnce(&mut AgentMeta)) {
        let mut meta = self.meta.lock().expect("published metadata lock");
        f(&mut meta.published);
        self.runtime.publish_meta(meta.published.encode());
    }

    /// Publishes a new candidacy for `role` at `priority` with `tags`,
    /// not eligible until its checks pass.
    pub(crate) fn start(&self, role: &str, priority: i64, tags: RoleTags) {
        let mut meta = self.meta.lock().expect("published metadata lock");
        meta.checks.insert(role.to_owned(), false);
        let c = Candidacy {
            priority,
            eligible: false,
            tags,
        };
        meta.published.roles.insert(role.to_owned(), c);
        self.runtime.publish_meta(meta.published.encode());
    }

    /// The candidacy for `role` is gone.
    pub(crate) fn remove(&self, role: &str) {
        let mut meta = self.meta.lock().expect("published metadata lock");
        meta.checks.remove(role);
        meta.published.roles.remove(role);
        self.runtime.publish_meta(meta.published.encode());
    }

    /// Whether the checks of `role`'s service pass now.
    pub(crate) fn checks(&self, role: &str, pass: bool) {
        self.change(role, |checks, _| *checks = pass);
    }

    /// The candidacy for `role` was retuned: its priority and tags.
    pub(crate) fn retune(&self, role: &str, priority: i64, tags: RoleTags) {
        self.change(role, |_, c| {
            c.priority = priority;
            c.tags = tags;
        });
    }

    /// Changes the candidacy for `role`, if it is one, and publishes it
    /// eligible when its checks pass and it may be promoted.
    fn change(&self, role: &str, f: impl FnOnce(&mut bool, &mut Candidacy)) {
        let mut guard = self.meta.lock().expect("published metadata lock");
        let meta = &mut *guard;
        let (Some(checks), Some(c)) = (
            meta.checks.get_mut(role),
            meta.published.roles.get_mut(role),
        ) else {
            return;
        };
        f(checks, c);
        c.eligible = *checks && c.tags.promotable;
        self.runtime.publish_meta(meta.published.encode());
    }
}
