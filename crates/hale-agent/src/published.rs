//! What this agent publishes about itself in the membership protocol
//! ([`AgentMeta`]), kept current: the operator's text (`[agent] meta`,
//! changed by a reload), where its HTTP API listens, and its candidacies
//! (added and removed by reloads, their priority and eligibility as they
//! change). Operators' tools (dashboard, `hale status`, `hale drill`) find
//! an agent's API there even when it has no roles.

use std::sync::{Arc, Mutex};

use crate::meta::{AgentMeta, Candidacy};
use crate::runtime::Shared;

/// This agent's published metadata, and the driver it goes to.
#[derive(Debug)]
pub(crate) struct Published {
    meta: Mutex<AgentMeta>,
    runtime: Arc<Shared>,
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
            meta: Mutex::new(AgentMeta {
                user,
                http: Some(http),
                roles: Default::default(),
                wire: Some(wire),
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
        f(&mut meta);
        self.runtime.publish_meta(meta.encode());
    }

    /// Changes the published candidacy for `role`, if it is one.
    pub(crate) fn candidacy(&self, role: &str, f: impl FnOnce(&mut Candidacy)) {
        self.update(|m| {
            if let Some(c) = m.roles.get_mut(role) {
                f(c);
            }
        });
    }
}
