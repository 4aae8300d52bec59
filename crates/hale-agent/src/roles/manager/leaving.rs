//! A holder that may not keep the role: it may not be promoted
//! (`promotable = false`, set by a reload while it held the role, or a
//! paused role it adopted), or its service fails only for want of disk
//! ([`crate::view::CheckFailure::ShortOfDisk`]). It hands the role
//! over as a switchover would, to the best node that may take it
//! ([`peers::successors`]) once that node has caught up
//! ([`switchover::readiness`]); until one can, it keeps the role (never
//! dropped with nobody to take it) and its view says why
//! (`handover_waits`). A paused role waits for its resume.
//!
//! The other candidates are read from this node's membership view by a task
//! of their own (at most once per [`LOOK_EVERY`]), whose answer comes back
//! as an [`Input::Successors`].

use std::time::Duration;

use tokio::sync::mpsc;

use hale_control::{Holder, RoleState, Switchover};
use hale_core::Time;

use super::{Input, RoleManager};
use crate::roles::changes::RoleChange;
use crate::roles::{peers, switchover};
use crate::view::{AgentEvent, SwitchoverStep};

/// How often the other candidates are looked up while a holder that may
/// not be promoted finds none to hand over to.
pub(super) const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Where a holder that may not be promoted stands with its handover.
#[derive(Debug, Default)]
pub(super) struct Leaving {
    /// When the last lookup of the other candidates started.
    looked: Option<Time>,
    /// A lookup's answer is awaited.
    looking: bool,
    /// The holding (its epoch) that was handed over.
    handed: Option<u64>,
    /// Why it last said it keeps the role (said once per reason).
    said: Option<String>,
}

impl RoleManager {
    /// On every wake-up: a holder that may not be promoted looks up who
    /// may take the role (not more than once per [`LOOK_EVERY`]).
    pub(super) fn maybe_leave(
        &self,
        sm: &Holder,
        leaving: &mut Leaving,
        tx: &mpsc::UnboundedSender<Input>,
        now: Time,
    ) {
        if self.must_leave(sm, leaving).is_none() {
            if leaving.said.take().is_some() {
                self.view(|v| v.handover_waits = None);
            }
            return;
        }
        let due = leaving
            .looked
            .is_none_or(|t| now.saturating_since(t) >= LOOK_EVERY);
        if leaving.looking || !due {
            return;
        }
        leaving.looked = Some(now);
        leaving.looking = true;
        let (cmds, role) = (self.ctx.cmds.clone(), self.spec.name.clone());
        let tx = tx.clone();
        tokio::spawn(async move {
            let found = peers::of_role(&cmds, &role).await.unwrap_or_default();
            let _ = tx.send(Input::Successors(peers::successors(&found)));
        });
    }

    /// Why this node must hand the role over, if it must: it holds the
    /// role, may not keep it, has not handed this holding over yet, and the
    /// role is not paused.
    fn must_leave(&self, sm: &Holder, leaving: &Leaving) -> Option<&'static str> {
        // Asked on every wake-up of the manager: the cheap tests first, the
        // services' lock only for a holder that has not handed over yet.
        if sm.state() != RoleState::Holder || leaving.handed.is_some_and(|e| Some(e) == sm.epoch())
        {
            return None;
        }
        let why = if !self.spec.promotable {
            "this node may not be promoted (promotable = false)"
        } else if self.short_of_disk() {
            "this node's disk is short of room (its postgres check's min_free_bytes)"
        } else {
            return None;
        };
        let paused = self.views.read(|v| v.is_some_and(|v| v.paused));
        (!paused).then_some(why)
    }

    /// The nodes that may take the role, best first: the first that has
    /// caught up is handed the role; with none, the view says why.
    pub(super) fn on_successors(
        &self,
        sm: &mut Holder,
        leaving: &mut Leaving,
        found: Vec<String>,
        now: Time,
    ) {
        leaving.looking = false;
        let Some(reason) = self.must_leave(sm, leaving) else {
            return;
        };
        // A PostgreSQL role not measured yet waits (`NotMeasured`).
        let pg = self.views.read(|v| v.and_then(|v| v.postgres.clone()));
        let pg = pg.unwrap_or_default();
        let postgres = self.spec.max_lag().map(|m| (&pg, m));
        let mut behind = Vec::new();
        for to in found {
            let order = Switchover {
                to: to.clone(),
                at_unix_ms: 0,
            };
            match switchover::readiness(&order, crate::view::unix_ms(), false, postgres) {
                switchover::Readiness::Go => {
                    leaving.handed = sm.epoch();
                    leaving.said = None;
                    self.view(|v| v.handover_waits = None);
                    tracing::info!(role = %self.spec.name, %to, "{reason}: handing the role over");
                    sm.handle_handover(now, Some(to.clone()));
                    (self.ctx.on_change)(RoleChange::Event(AgentEvent::Switchover {
                        role: self.spec.name.clone(),
                        to,
                        step: SwitchoverStep::HandingOver,
                        reason: Some(reason.into()),
                    }));
                    return;
                }
                switchover::Readiness::Waiting(why) => behind.push(why.to_string()),
                switchover::Readiness::NotDue => {}
            }
        }
        let why = if behind.is_empty() {
            "no other live candidate may take the role (its checks pass and it may be promoted)"
                .to_owned()
        } else {
            format!("no other candidate has caught up: {}", behind.join("; "))
        };
        if leaving.said.as_ref() != Some(&why) {
            tracing::warn!(
                role = %self.spec.name, %why,
                "{reason}, but it keeps the role until another node can take it"
            );
            let shown = format!("{reason}: keeps the role until another node can take it: {why}");
            self.view(|v| v.handover_waits = Some(shown));
            leaving.said = Some(why);
        }
    }
}
