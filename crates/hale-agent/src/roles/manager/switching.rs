//! Switchovers: an order the control plane's answer to a renewal carries,
//! and what the holder does about it (hand over when due and its target
//! has caught up: [`crate::roles::switchover::readiness`]).

use hale_control::Holder;
use hale_core::Time;

use super::RoleManager;
use crate::roles::changes::RoleChange;
use crate::roles::switchover;
use crate::view::{AgentEvent, SwitchoverStep};

/// The switchover order last seen in a renewal's answer, and what the
/// holder did about it.
#[derive(Debug, Default)]
pub(super) struct Switching {
    order: Option<hale_control::Switchover>,
    /// A `waiting` event was published for it.
    said_waiting: bool,
    /// The holder stepped down for it.
    handed: bool,
}

impl RoleManager {
    /// A switchover ordered for this holding came with a renewal's answer:
    /// hand over if it is due and its target has caught up
    /// ([`switchover::readiness`]); a `waiting` event once per order while
    /// it has not, a `handing-over` event as it goes.
    pub(super) fn switch_over(
        &self,
        sm: &mut Holder,
        seen: &mut Switching,
        order: hale_control::Switchover,
        paused: bool,
        now: Time,
    ) {
        if order.to == self.ctx.node {
            return;
        }
        if seen.order.as_ref() != Some(&order) {
            *seen = Switching {
                order: Some(order.clone()),
                ..Switching::default()
            };
        }
        if seen.handed {
            return;
        }
        let postgres = self.spec.max_lag().and_then(|max| {
            let pg = self.views.read(|v| v.and_then(|v| v.postgres.clone()));
            pg.map(|p| (p, max))
        });
        let ready = switchover::readiness(
            &order,
            crate::view::unix_ms(),
            paused,
            postgres.as_ref().map(|(p, m)| (p, *m)),
        );
        let (step, reason) = match ready {
            switchover::Readiness::NotDue => return,
            switchover::Readiness::Waiting(_) if seen.said_waiting => return,
            switchover::Readiness::Waiting(why) => {
                seen.said_waiting = true;
                (SwitchoverStep::Waiting, Some(why.to_string()))
            }
            switchover::Readiness::Go => {
                seen.handed = true;
                sm.handle_handover(now, Some(order.to.clone()));
                (SwitchoverStep::HandingOver, None)
            }
        };
        (self.ctx.on_change)(RoleChange::Event(AgentEvent::Switchover {
            role: self.spec.name.clone(),
            to: order.to,
            step,
            reason,
        }));
    }
}
