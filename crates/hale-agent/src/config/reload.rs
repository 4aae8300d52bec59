//! Reloading the configuration file while the agent runs (`hale reload`,
//! `POST /v1/reload`, SIGHUP): the file is read and validated again (with
//! the `HALE_*` overrides of the start), compared with the running
//! configuration key by key (`config::diff`), and either applied, all of
//! it, or refused, with the keys named and nothing changed.
//!
//! What can change live, and how it is applied: services and their checks
//! ([`Checks::apply`]: unchanged checks keep running with their history);
//! roles added (a new candidacy, published in the member metadata),
//! removed (only a role this node does not hold: its manager decides, so
//! that a grant that came meanwhile is never given up for a reload) and
//! retuned ([`RoleSet::retune`]: the priority and the tags `promotable`,
//! `load_balance`, `synchronous_standby` always; service, hooks,
//! `hook_timeout` and `fail_after` only of a role this node does not hold);
//! `agent.meta`; the relay's client keys and body limit
//! ([`hale_relay::Relay::set_access`]); the membership knobs the core
//! takes live ([`hale_core::Tuning`]). A reload never demotes or promotes
//! by itself: removing a role this node holds, or changing more than its
//! priority and tags, is refused (hand the role over first); a holder set
//! `promotable = false` hands the role over as a switchover would, once
//! another node can take it (its role manager decides when).
//!
//! All or nothing: what can be refused is decided before anything is
//! applied; the two steps that can still fail (the core refusing its
//! tuning, a role taken meanwhile refusing to retire) come first and are
//! undone if a later one fails; the rest cannot fail. Reloads run one at a
//! time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::mpsc;

use hale_control::RoleState;
use hale_keyring::SharedKeyring;

use crate::config::{
    diff, ConfigDiff, ConfigError, ConfigSource, LoadedConfig, RoleDiff, HELD_LIVE,
};
use crate::membership::published::Published;
use crate::membership::runtime::{Command, Shared};
use crate::roles::services::Checks;
use crate::roles::{RoleSet, RoleViews};
use crate::view::{AgentEvent, RefusalReason, RefusedKey, ReloadRefusal, ReloadView};

/// Why a reload was refused. In every case nothing changed: the agent
/// runs the configuration it ran before.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The agent was started without a configuration file.
    #[error(
        "this agent was started without a configuration file: nothing to reload; nothing changed"
    )]
    NoFile,
    /// The file cannot be read or is not a valid configuration.
    #[error("{0}; nothing changed")]
    Invalid(#[from] ConfigError),
    /// Keys changed that cannot change while the agent runs.
    #[error("cannot apply while the agent runs: {}; nothing changed", list(.keys))]
    Unreloadable {
        /// The keys, each with why.
        keys: Vec<RefusedKey>,
    },
    /// The agent is stopping.
    #[error("the agent is stopping; nothing changed")]
    Stopping,
}

fn list(keys: &[RefusedKey]) -> String {
    let each = keys.iter().map(|k| match k.key.as_str() {
        "" => k.problem.clone(),
        key => format!("{key} ({})", k.problem),
    });
    each.collect::<Vec<_>>().join(", ")
}

impl ReloadError {
    /// The refusal as the API and the events show it.
    pub fn refusal(&self) -> ReloadRefusal {
        let (reason, keys) = match self {
            ReloadError::NoFile => (RefusalReason::NoFile, Vec::new()),
            ReloadError::Invalid(e) => {
                let (reason, key, problem) = match e {
                    ConfigError::Read { source, .. } => {
                        (RefusalReason::Unreadable, String::new(), source.to_string())
                    }
                    ConfigError::Parse { message, .. } => {
                        (RefusalReason::Invalid, String::new(), message.clone())
                    }
                    ConfigError::Invalid { field, problem } => {
                        (RefusalReason::Invalid, field.clone(), problem.clone())
                    }
                };
                (reason, vec![RefusedKey { key, problem }])
            }
            ReloadError::Unreloadable { keys } => (RefusalReason::Unreloadable, keys.clone()),
            ReloadError::Stopping => (RefusalReason::Stopping, Vec::new()),
        };
        ReloadRefusal {
            error: self.to_string(),
            reason,
            keys,
        }
    }

    /// The HTTP status `POST /v1/reload` answers it with.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ReloadError::NoFile | ReloadError::Unreloadable { .. } => StatusCode::CONFLICT,
            ReloadError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ReloadError::Stopping => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// What a reload changes in the running agent.
pub(crate) struct Parts {
    /// The checks of this node's services.
    pub(crate) checks: Arc<Checks>,
    /// This node's candidacies.
    pub(crate) roles: Arc<RoleSet>,
    /// Their states (which roles this node holds).
    pub(crate) views: RoleViews,
    /// The member metadata.
    pub(crate) published: Arc<Published>,
    /// The relay, if one runs.
    pub(crate) relay: Option<hale_relay::Relay>,
    /// The membership driver.
    pub(crate) cmds: mpsc::Sender<Command>,
    /// The keyring in use.
    pub(crate) keys: Option<SharedKeyring>,
    /// Events.
    pub(crate) shared: Arc<Shared>,
}

/// The agent's reloads: where its configuration comes from, what runs, and
/// how many reloads were applied and refused.
pub struct Reloader {
    source: Option<ConfigSource>,
    /// What runs (None: started without a file); its lock makes reloads
    /// run one at a time.
    running: tokio::sync::Mutex<Option<LoadedConfig>>,
    parts: Parts,
    applied: AtomicU64,
    refused: AtomicU64,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("file", &self.source.as_ref().and_then(ConfigSource::path))
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl Reloader {
    /// Reloads of the agent made of `parts`, running `running`, read from
    /// `source` (both None: started without a file, every reload refused).
    pub(crate) fn new(
        source: Option<ConfigSource>,
        running: Option<LoadedConfig>,
        parts: Parts,
    ) -> Reloader {
        Reloader {
            source,
            running: tokio::sync::Mutex::new(running),
            parts,
            applied: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Reads the file again and applies it, all of it or nothing; publishes
    /// a `config-reloaded` or `config-reload-refused` event and counts it.
    pub async fn reload(&self) -> Result<ReloadView, ReloadError> {
        let r = self.try_reload().await;
        let event = match &r {
            Ok(v) => {
                self.applied.fetch_add(1, Ordering::Relaxed);
                tracing::info!(changes = ?v.changes, "configuration reloaded");
                AgentEvent::ConfigReloaded(v.clone())
            }
            Err(e) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "configuration reload refused");
                AgentEvent::ConfigReloadRefused(e.refusal())
            }
        };
        self.parts.shared.emit(event, None);
        r
    }

    /// Reloads applied and refused so far.
    pub fn counts(&self) -> (u64, u64) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (get(&self.applied), get(&self.refused))
    }

    async fn try_reload(&self) -> Result<ReloadView, ReloadError> {
        let Some(source) = &self.source else {
            return Err(ReloadError::NoFile);
        };
        let mut running = self.running.lock().await;
        let Some(old) = running.as_ref() else {
            return Err(ReloadError::NoFile);
        };
        let file = source.read()?;
        let agent = file.validate_for_reload(&old.agent)?;
        let mut new = LoadedConfig { file, agent };
        let keys = self.parts.keys.as_ref().map(SharedKeyring::current);
        let mut d = diff(old, &new, keys.as_deref());
        self.refuse_held(&mut d);
        if !d.refused.is_empty() {
            return Err(ReloadError::Unreloadable { keys: d.refused });
        }
        let added = d.roles.iter().any(|r| matches!(r, RoleDiff::Added(_)));
        if added && !self.parts.roles.can_run() {
            return Err(ReloadError::Stopping);
        }
        self.apply(old, &d).await?;
        if new.agent.control.is_none() {
            // No roles left: the control plane that runs keeps running.
            new.agent.control = old.agent.control.clone();
        }
        *running = Some(new);
        Ok(ReloadView { changes: d.changes })
    }

    /// Refuses what would touch a role this node holds: removing it, or
    /// changing more than its priority and tags ([`HELD_LIVE`]).
    fn refuse_held(&self, d: &mut ConfigDiff) {
        let views = self.parts.views.snapshot();
        let held = |role: &str| {
            views.get(role).is_some_and(|v| {
                matches!(
                    v.state,
                    RoleState::Promoting | RoleState::Holder | RoleState::Demoting
                )
            })
        };
        let hand_over = |role: &str| {
            format!(
                "this node holds role {role:?} and a reload never moves a role: \
                 hand it over first (hale roles handover {role}), then reload"
            )
        };
        for r in &d.roles {
            match r {
                RoleDiff::Removed(role) if held(role) => d.refused.push(RefusedKey {
                    key: format!("role[{role}]"),
                    problem: hand_over(role),
                }),
                RoleDiff::Changed { spec, keys } if held(&spec.name) => {
                    for k in keys.iter().filter(|k| !HELD_LIVE.contains(k)) {
                        d.refused.push(RefusedKey {
                            key: format!("role[{}].{k}", spec.name),
                            problem: hand_over(&spec.name),
                        });
                    }
                }
                _ => {}
            }
        }
    }

    /// Applies `d` (nothing of it refused) to the agent running `old`.
    async fn apply(&self, old: &LoadedConfig, d: &ConfigDiff) -> Result<(), ReloadError> {
        let p = &self.parts;
        // What can still fail comes first, and is undone if what follows fails.
        if let Some(t) = d.tuning {
            self.retune(t).await?;
        }
        let mut retired = Vec::new();
        for r in &d.roles {
            let RoleDiff::Removed(role) = r else {
                continue;
            };
            if let Err(held) = p.roles.retire(role).await {
                // Taken meanwhile: everything goes back as it was.
                for name in retired {
                    if let Some(spec) = old.agent.roles.iter().find(|s| s.name == name) {
                        p.roles.start(spec.clone());
                    }
                }
                if d.tuning.is_some() {
                    let _ = self.retune(old.agent.core.tuning()).await;
                }
                let problem = format!("{held} now: hand it over first, then reload");
                return Err(unreloadable(format!("role[{role}]"), problem));
            }
            retired.push(role.clone());
        }
        // Nothing below fails.
        if let Some(services) = &d.services {
            p.checks.apply(services.clone());
        }
        for r in &d.roles {
            match r {
                RoleDiff::Added(spec) => p.roles.start(spec.clone()),
                RoleDiff::Changed { spec, .. } => p.roles.retune(spec.clone()),
                RoleDiff::Removed(_) => {}
            }
        }
        if let (Some((keys, limit)), Some(relay)) = (&d.relay_access, &p.relay) {
            if keys.is_empty() {
                tracing::warn!(
                    "the relay now accepts events with ANY sentry_key: set [relay] keys"
                );
            }
            relay.set_access(keys.clone(), *limit);
        }
        if let Some(meta) = &d.meta {
            p.published.update(|m| m.user = meta.clone());
        }
        Ok(())
    }

    /// The membership core takes new knobs, or refuses them (nothing changed).
    async fn retune(&self, t: hale_core::Tuning) -> Result<(), ReloadError> {
        let r =
            crate::membership::runtime::ask(&self.parts.cmds, |tx| Command::Retune(t, tx)).await;
        match r {
            None => Err(ReloadError::Stopping),
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(unreloadable(format!("membership.{}", e.field), e.problem)),
        }
    }
}

/// A reload refused for one `key`, `problem`.
fn unreloadable(key: String, problem: String) -> ReloadError {
    ReloadError::Unreloadable {
        keys: vec![RefusedKey { key, problem }],
    }
}
