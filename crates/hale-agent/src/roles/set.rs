//! This node's candidacies as a set that changes while the agent runs: a
//! [`RoleManager`] (and a [`postgres::Keeper`] for a `[role.postgres]`
//! role) per role, each with its own stop, handover and order channels.
//! The agent starts its roles here; a reload adds roles, retunes them and
//! retires those this node does not hold; the agent's stop hands every
//! role over.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use hale_control::raft::ControlClient;
use hale_control::LeaseTiming;

use super::changes::OnRoleChange;
use super::manager::ManagerHandle;
use super::manager::RoleManager;
use super::postgres;
use super::requests::LeaseRequests;
use super::views::RoleViewTable;
use super::views::RoleViews;
use super::watchdogs::Watchdogs;
use crate::config::RoleSpec;
use crate::membership::published::Published;
use crate::membership::runtime::Command;
use crate::roles::services::Services;

/// What every role manager of the agent shares.
pub struct RoleContext {
    /// This node's name.
    pub node: String,
    /// This node's identity beyond its name (keep and adopt:
    /// [`super::identity`]).
    pub identity: String,
    /// This run follows one of an older release on the same `state_dir`
    /// (the agent migrated its files): adoption by plain renewal allowed
    /// (`HolderConfig::after_older_release`).
    pub after_older_release: bool,
    /// The control plane, through the agent's batches.
    pub requests: LeaseRequests,
    /// The control plane for keepers (the lease table), gated by drills.
    pub control: ControlClient,
    /// The managers' shared time origin (their renewals fall together).
    pub origin: Instant,
    /// This node's services.
    pub services: Services,
    /// Lease timing.
    pub timing: LeaseTiming,
    /// The agent's fencing watchdog.
    pub watchdogs: Watchdogs,
    /// The agent's hook slots.
    pub hook_slots: Arc<super::slots::HookSlots>,
    /// The agent's readings of the table, for kept roles to adopt.
    pub kept: super::kept::KeptTables,
    /// Where role changes are reported.
    pub on_change: OnRoleChange,
    /// The membership driver (keepers read the holder's address).
    pub cmds: mpsc::Sender<Command>,
}

/// One running candidacy.
struct Running {
    stop: watch::Sender<bool>,
    manager: ManagerHandle,
    tasks: Vec<JoinHandle<()>>,
}

/// This node holds (or is taking or giving up) a lease of the role: it
/// was not retired.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this node holds role {0:?}")]
pub struct StillHeld(pub String);

/// Every candidacy of this node.
pub struct RoleSet {
    /// What managers share; `None` without a control plane (no role can
    /// run) and once the agent stops.
    ctx: Mutex<Option<Arc<RoleContext>>>,
    /// The role views' owner ([`super::views`]).
    views: RoleViewTable,
    published: Arc<Published>,
    running: Mutex<BTreeMap<String, Running>>,
}

impl std::fmt::Debug for RoleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoleSet")
            .field("roles", &self.names())
            .finish_non_exhaustive()
    }
}

impl RoleSet {
    /// No candidacies yet, with `ctx` to run them (None: this agent has no
    /// control plane), publishing candidacies in `published` and role
    /// states in its role views ([`RoleSet::views`]).
    pub(crate) fn new(ctx: Option<RoleContext>, published: Arc<Published>) -> RoleSet {
        RoleSet {
            ctx: Mutex::new(ctx.map(Arc::new)),
            views: RoleViewTable::new(),
            published,
            running: Mutex::new(BTreeMap::new()),
        }
    }

    /// A reader of this node's role views.
    pub fn views(&self) -> RoleViews {
        self.views.readers()
    }

    /// Whether roles can run here (the agent has a control plane and is
    /// not stopping).
    pub fn can_run(&self) -> bool {
        self.ctx.lock().expect("role context lock").is_some()
    }

    /// Starts the candidacy `spec` (published at once, not eligible until
    /// its checks pass). Without a control plane, or when this node is a
    /// candidate for the role already, nothing starts.
    pub fn start(&self, spec: RoleSpec) {
        let Some(ctx) = self.ctx.lock().expect("role context lock").clone() else {
            return;
        };
        if self.is_candidate(&spec.name) {
            return;
        }
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let data = spec.postgres.as_ref().map(|pg| {
            let (data, rx) = watch::channel(hale_control::DataState::Unknown);
            let keeper = postgres::Keeper::new(
                pg.clone(),
                spec.name.clone(),
                ctx.clone(),
                self.views.writer(&spec.name, spec.priority, spec.tags()),
                data,
                stop_rx.clone(),
            );
            tasks.push(tokio::spawn(keeper.run()));
            rx
        });
        let (name, priority, tags) = (spec.name.clone(), spec.priority, spec.tags());
        let view = self.views.writer(&spec.name, spec.priority, tags);
        let (mgr, manager) = RoleManager::new(spec, ctx, view, stop_rx);
        let mgr = mgr.with_data(data);
        // Published before the manager runs: its first `Eligible` would
        // otherwise find no candidacy to change, and the role would stay
        // published as not eligible while its checks pass.
        self.published.start(&name, priority, tags);
        tasks.push(tokio::spawn(mgr.run()));
        let running = Running {
            stop,
            manager,
            tasks,
        };
        self.running
            .lock()
            .expect("role set lock")
            .insert(name, running);
    }

    /// The agent's hooks now (`None` without a control plane, or stopped).
    pub fn hook_counts(&self) -> Option<super::slots::SlotCounts> {
        let ctx = self.ctx.lock().expect("role set lock");
        ctx.as_ref().map(|c| c.hook_slots.counts())
    }

    /// The roles this node is a candidate for.
    pub fn names(&self) -> Vec<String> {
        let running = self.running.lock().expect("role set lock");
        running.keys().cloned().collect()
    }

    /// Whether this node is a candidate for `role`.
    pub fn is_candidate(&self, role: &str) -> bool {
        self.running
            .lock()
            .expect("role set lock")
            .contains_key(role)
    }

    /// Where handovers of `role` go, if this node is a candidate for it.
    pub fn handover(&self, role: &str) -> Option<mpsc::Sender<Option<String>>> {
        let running = self.running.lock().expect("role set lock");
        running.get(role).map(|r| r.manager.handover())
    }

    /// Gives the candidacy its new settings `spec` (see
    /// `RoleOrder::Retune`); its new priority and tags are published at
    /// once.
    pub fn retune(&self, spec: RoleSpec) {
        let (name, priority, tags) = (spec.name.clone(), spec.priority, spec.tags());
        if let Some(r) = self.running.lock().expect("role set lock").get(&name) {
            r.manager.retune(spec);
        }
        self.published.retune(&name, priority, tags);
    }

    /// Ends the candidacy for `role` unless this node holds a lease of it
    /// (its manager decides, so that a grant that came meanwhile is never
    /// given up for it): once stopped, it is no longer published, shown or
    /// handed over to.
    pub async fn retire(&self, role: &str) -> Result<(), StillHeld> {
        let (tx, rx) = oneshot::channel();
        let sent = {
            let running = self.running.lock().expect("role set lock");
            running.get(role).is_some_and(|r| r.manager.retire(tx))
        };
        // A manager that is gone (or never ran) holds nothing.
        if sent && rx.await == Ok(false) {
            return Err(StillHeld(role.to_owned()));
        }
        let gone = self.running.lock().expect("role set lock").remove(role);
        if let Some(r) = gone {
            let _ = r.stop.send(true);
            for t in r.tasks {
                let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
            }
        }
        self.views.remove(role);
        self.published.remove(role);
        Ok(())
    }

    /// The agent is stopping: every role is handed over (demote hooks,
    /// releases) within 15 s each, and no role starts any more.
    pub async fn stop_all(&self) {
        self.ctx.lock().expect("role context lock").take();
        let all = std::mem::take(&mut *self.running.lock().expect("role set lock"));
        for r in all.values() {
            let _ = r.stop.send(true);
        }
        for r in all.into_values() {
            for t in r.tasks {
                let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
            }
        }
    }
}
