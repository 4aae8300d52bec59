//! The role's view and its reported changes: the state machine's events
//! become view changes (through the manager's own
//! [`RoleViewWriter`](crate::roles::views::RoleViewWriter)) and
//! [`RoleChange`]s for the agent to publish.

use std::time::Duration;

use hale_control::{Holder, HolderEvent};

use super::executor::Running;
use super::RoleManager;
use crate::roles::changes::RoleChange;
use crate::view::{AgentEvent, Lagging, RoleView};

impl RoleManager {
    /// Updates this role's published view. Called on every wake-up of the
    /// manager (ten a second per role): the name is cloned only the first
    /// time, when the view is created.
    pub(super) fn view(&self, f: impl FnOnce(&mut RoleView)) {
        self.views.update(f);
    }

    /// Publishes the machine's state, epoch and lease in the role's view.
    pub(super) fn publish_view(&self, sm: &Holder, run: &Running) {
        let until = sm.lease_valid_until();
        let left = until.map(|t| run.left(t).as_millis() as u64);
        let valid_until = until.map(|t| run.origin + Duration::from_nanos(t.as_nanos()));
        self.view(|v| {
            v.state = sm.state();
            v.epoch = sm.epoch();
            v.lease_left_ms = left;
            v.valid_until = valid_until;
            if sm.state() != hale_control::RoleState::Holder {
                v.held_since_unix_ms = None;
            }
        });
    }

    /// The control plane refused this candidate the role because its copy
    /// lags, or granted it (`None`): shown in the role's view while it
    /// lasts, and a `not-eligible` event when it begins.
    pub(super) fn refused(&self, lagging: Option<Lagging>) {
        let mut began = false;
        self.view(|v| {
            began = v.lagging.is_none() && lagging.is_some();
            v.lagging = lagging;
        });
        if let (true, Some(Lagging { lag, max_lag })) = (began, lagging) {
            let role = self.spec.name.clone();
            (self.ctx.on_change)(RoleChange::Event(AgentEvent::NotEligible {
                role,
                lag,
                max_lag,
            }));
        }
    }

    /// A state machine's event: the view changes it makes, and the role
    /// change reported to the agent.
    pub(super) fn event(&self, e: HolderEvent) {
        let role = self.spec.name.clone();
        let change = match e {
            HolderEvent::Eligible(eligible) => RoleChange::Eligible { role, eligible },
            HolderEvent::Promoting { epoch } => {
                self.view(|v| v.last_change = Some("granted".into()));
                RoleChange::Event(AgentEvent::Promoting { role, epoch })
            }
            HolderEvent::Promoted { epoch } => {
                self.view(|v| {
                    v.promotions += 1;
                    v.held_since_unix_ms = Some(crate::view::unix_ms());
                    v.last_change = Some("promoted".into());
                });
                RoleChange::Event(AgentEvent::Promoted {
                    role,
                    epoch,
                    hook_ok: true,
                })
            }
            HolderEvent::SteppingDown { epoch, reason } => {
                self.view(|v| v.last_change = Some(reason.as_str().into()));
                RoleChange::Event(AgentEvent::Demoting {
                    role,
                    epoch,
                    reason,
                })
            }
            HolderEvent::Demoted {
                epoch,
                reason,
                promote,
                demote,
            } => {
                self.view(|v| {
                    v.demotions += 1;
                    v.last_change = Some(reason.as_str().into());
                });
                RoleChange::Event(AgentEvent::Demoted {
                    role,
                    epoch,
                    reason,
                    hook_ok: demote.ok(),
                    demote,
                    promote,
                })
            }
            HolderEvent::DemoteFailed {
                epoch,
                reason,
                outcome,
                failures,
                retry_in,
            } => {
                tracing::warn!(
                    %role, epoch, %outcome, failures,
                    "the demote hook failed: the role is not released; trying again in {retry_in:?}"
                );
                self.view(|v| v.demote_failures += 1);
                RoleChange::Event(AgentEvent::DemoteFailed {
                    role,
                    epoch,
                    reason,
                    outcome,
                    failures,
                    retry_in_ms: retry_in.as_millis() as u64,
                })
            }
            HolderEvent::NotAdopted { epoch } => {
                tracing::warn!(
                    %role, epoch,
                    "the control plane's table says this node holds the paused role, but it was \
                     not kept by this agent (its last run crashed and its watchdog fenced it, or its \
                     host died): nothing adopted, nothing demoted; `hale roles resume {role}` moves \
                     it as any lease that ran out"
                );
                return;
            }
            HolderEvent::Kept { epoch } => {
                tracing::warn!(
                    %role, epoch,
                    "stopping while the role is paused: keeping it (no demote, no release; \
                     the watchdog exits without fencing); the next run adopts it"
                );
                self.view(|v| v.last_change = Some("kept".into()));
                RoleChange::Event(AgentEvent::RoleKept { role, epoch })
            }
            HolderEvent::Adopted { epoch } => {
                tracing::info!(%role, epoch, "adopted the paused role: holder again, no promote hook");
                self.view(|v| {
                    v.held_since_unix_ms = Some(crate::view::unix_ms());
                    v.last_change = Some("adopted".into());
                });
                RoleChange::Event(AgentEvent::RoleAdopted { role, epoch })
            }
            HolderEvent::Paused(paused) => {
                self.view(|v| v.paused = paused);
                RoleChange::Event(AgentEvent::RolePaused { role, paused })
            }
            HolderEvent::Stopped => return,
        };
        (self.ctx.on_change)(change);
    }
}
