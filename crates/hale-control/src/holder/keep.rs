//! Restarting the holder's agent without moving its role: a role held
//! while paused is kept when the agent stops, and adopted by its next run.
//!
//! * **Stop while paused keeps the role.** The stopping holder sends one
//!   more renewal, a [`LeaseRequest::Keep`] naming this node's identity;
//!   when one sent since the stop commits and still says paused, the table
//!   records the holding as kept and it keeps the role: no demote hook, no
//!   release, the watchdog is told to exit without fencing
//!   ([`Action::KeepWatchdog`]). The lease stays in the table with this
//!   node as holder. Nobody can be granted a paused role, and resuming it
//!   is refused while the holding is kept (unless forced, a lease and the
//!   drift margin after its last renewal: `lease::resume_check`), so the
//!   service runs on alone.
//!   If the answer says the role was resumed meanwhile, it steps down as
//!   any stopping holder does.
//! * **The next run adopts it.** [`Holder::handle_adopt`]: the agent read
//!   in the control plane's table that the role is paused and held by this
//!   node at `epoch`. The candidate adopts it at that epoch
//!   ([`LeaseRequest::Adopt`], with its identity: only the identity that
//!   kept the holding may, and a holding never kept, whose agent crashed and
//!   whose watchdog fenced, may not); once that commits it is the holder,
//!   with a watchdog armed with the lease's end, without running the
//!   promote hook (the service never stopped). Refused because another
//!   node holds the role or a newer epoch, it does what a lost lease does:
//!   it runs the demote hook (reason `fenced`) and releases nothing.
//!   Refused because the holding was never kept by this identity
//!   (`NotKeeper`: the previous run demoted it, or crashed and its watchdog
//!   fenced it), it demotes nothing a second time and stays a candidate
//!   ([`HolderEvent::NotAdopted`]).
//! * **Older servers.** Until every control-plane server speaks protocol 3,
//!   `Keep` and `Adopt` are refused as too new ([`Holder::handle_too_new`]):
//!   the keep and the adoption then go by plain renewals, as in 0.2.0, and
//!   a kept holding is protected by the silence rule alone.

use hale_core::Time;

use super::{
    Action, ControlRequest, DataState, HeldLease, Holder, HolderEvent, LeaseRequest, LeaseResponse,
    Phase, RequestId, Step, StepDownReason, Watchdog,
};
use crate::lease::LeaseRejection;

/// An adoption under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Adopting {
    /// The epoch the table says this node holds.
    epoch: u64,
    /// The table records the holding as kept ([`LeaseRequest::Keep`]):
    /// every server applied a protocol-3 entry, so a `too-new` refusal of
    /// the adoption is a leader that has not heard every server yet, and
    /// the adoption is asked again as it is, never by a plain renewal.
    kept: bool,
    /// Since when the adoption has been refused as too new, if it has: a
    /// plain renewal is used only once that has lasted [`TOO_NEW_FOR`]. A
    /// leader refuses as too new only on hearing an older server (one it
    /// has not heard is waited for: `crate::protocol`); this is a second
    /// guard (nemesis seed 40003, where an adoption by renewal took a
    /// holding its crashed predecessor's watchdog had fenced).
    too_new_since: Option<Time>,
    /// The renewal in flight, and when it was sent.
    request: Option<(RequestId, Time)>,
    /// When to send the next one.
    next: Time,
}

/// How long an adoption must be refused as too new before it goes by a
/// plain renewal (a server of an older release, not a leader that has not
/// heard every server yet).
const TOO_NEW_FOR: std::time::Duration = std::time::Duration::from_secs(5);

impl Holder {
    /// The control plane's table says this node holds the role, paused, at
    /// `epoch` (an earlier run of this agent kept it when it stopped):
    /// adopt it by a renewal at that epoch, without a promote hook. Ignored
    /// unless this node is a candidate, not stopping. `kept`: the table
    /// records the holding as kept (an older release's keep does not).
    pub fn handle_adopt(&mut self, now: Time, epoch: u64, kept: bool) {
        if self.stopping() || self.adopting.is_some() {
            return;
        }
        // (An acquisition in flight is refused: the role is paused.)
        if !matches!(self.phase, Phase::Candidate { .. }) {
            return;
        }
        self.adopting = Some(Adopting {
            epoch,
            kept,
            too_new_since: None,
            request: None,
            next: now,
        });
        self.handle_timeout(now);
    }

    /// Whether an adoption is under way.
    pub fn is_adopting(&self) -> bool {
        self.adopting.is_some()
    }

    /// When the adoption's next renewal is due (none while one is in flight).
    pub(super) fn adopt_due(&self) -> Option<Time> {
        let a = self.adopting.as_ref()?;
        a.request.is_none().then_some(a.next)
    }

    /// Sends the adoption's renewal if it is due.
    pub(super) fn adopt_renew(&mut self, now: Time) {
        let Some(a) = self.adopting else { return };
        if a.request.is_some() || now < a.next || self.stopping() {
            return;
        }
        let id = self.id();
        self.adopting = Some(Adopting {
            request: Some((id, now)),
            ..a
        });
        let request = if self.keep_by_renewal {
            self.renew_request(a.epoch)
        } else {
            ControlRequest::Lease(LeaseRequest::Adopt {
                role: self.cfg.role.clone(),
                holder: self.cfg.node.clone(),
                epoch: a.epoch,
                identity: self.cfg.identity.clone(),
                run: self.cfg.instance,
            })
        };
        self.actions.push_back(Action::Send {
            id,
            request,
            deadline: now + self.cfg.acquire_timeout,
        });
    }

    /// A renewal of this role at `epoch`: while the agent stops keeping
    /// the role, a [`LeaseRequest::Keep`] (which records the keep in the
    /// table), else a plain renewal.
    pub(super) fn renewal(&self, epoch: u64) -> ControlRequest {
        if self.keeping.is_some() && !self.keep_by_renewal {
            return ControlRequest::Lease(LeaseRequest::Keep {
                role: self.cfg.role.clone(),
                holder: self.cfg.node.clone(),
                epoch,
                identity: self.cfg.identity.clone(),
            });
        }
        self.renew_request(epoch)
    }

    fn renew_request(&self, epoch: u64) -> ControlRequest {
        ControlRequest::Lease(LeaseRequest::Renew {
            role: self.cfg.role.clone(),
            holder: self.cfg.node.clone(),
            epoch,
            mark: match &self.data {
                DataState::Primary(mark) => Some(mark.clone()),
                DataState::Unknown | DataState::Copy(_) => None,
            },
        })
    }

    /// The control plane could not write request `id`'s kind: a server
    /// speaks an older protocol than the request needs (a rolling upgrade
    /// under way). A keep or an adoption then goes by plain renewals, as
    /// the previous release's did; every request counts as unanswered.
    pub fn handle_too_new(&mut self, now: Time, id: RequestId) {
        if let Some(a) = self
            .adopting
            .as_mut()
            .filter(|a| a.request.is_some_and(|(rid, _)| rid == id))
        {
            let since = *a.too_new_since.get_or_insert(now);
            if !a.kept && now.saturating_since(since) >= TOO_NEW_FOR {
                self.keep_by_renewal = true;
            }
        } else if self.keeping.is_some() {
            self.keep_by_renewal = true;
        }
        self.handle_response(now, id, None);
    }

    /// The answer to request `id`, if it is the adoption's renewal: true
    /// when it was (and has been handled).
    pub(super) fn adopt_answered(
        &mut self,
        now: Time,
        id: RequestId,
        response: &Option<LeaseResponse>,
    ) -> bool {
        let Some(a) = self.adopting else { return false };
        let Some((rid, sent)) = a.request else {
            return false;
        };
        if rid != id {
            return false;
        }
        if !matches!(self.phase, Phase::Candidate { .. }) {
            // Granted meanwhile: that holding stands; this answer is stale.
            self.adopting = None;
            return true;
        }
        match response {
            Some(LeaseResponse::Renewed { epoch, paused, .. }) if *epoch == a.epoch => {
                self.adopted(now, a.epoch, sent, *paused);
            }
            // Never kept (its previous run handed it over, or crashed and
            // its watchdog fenced it), or kept by another identity: not
            // this run's to adopt, and nothing of it runs here to demote
            // (a second demote of a fenced holding). The role stays paused
            // under the old holding until resumed, which the leader then
            // accepts as for any holder that died.
            // The previous run was of an older release, which kept the
            // role by plain renewals and could not record it: adopted the
            // same way (the README's upgrade from 0.1.0).
            Some(LeaseResponse::Rejected(LeaseRejection::NotKeeper { .. }))
                if self.cfg.after_older_release && !self.keep_by_renewal =>
            {
                self.keep_by_renewal = true;
                self.adopting = Some(Adopting {
                    request: None,
                    next: now,
                    ..a
                });
            }
            Some(LeaseResponse::Rejected(LeaseRejection::NotKeeper { epoch })) => {
                self.adopting = None;
                self.event(HolderEvent::NotAdopted { epoch: *epoch });
            }
            // Refused while the table records no keep (and none went by a
            // plain renewal): the previous run handed the role over (its
            // release not yet applied where the lookup read) or crashed and
            // was fenced; its demote ran. Demoting again would be a second
            // demote of that holding (nemesis seed 30010).
            Some(LeaseResponse::Rejected(_)) if !a.kept && !self.keep_by_renewal => {
                self.adopting = None;
                self.event(HolderEvent::NotAdopted { epoch: a.epoch });
            }
            Some(LeaseResponse::Rejected(_)) => {
                self.adopting = None;
                self.adoption_refused(now, a.epoch);
            }
            // No answer (or a strange one): ask again soon.
            _ => {
                self.adopting = Some(Adopting {
                    request: None,
                    next: now + self.cfg.timing.renew_every / 5,
                    ..a
                });
            }
        }
        self.handle_timeout(now);
        true
    }

    /// The adoption's renewal, sent at `sent`, committed: this node holds
    /// the role again, promoted all along.
    fn adopted(&mut self, now: Time, epoch: u64, sent: Time, paused: bool) {
        let lease = HeldLease::granted(self.cfg.timing, &self.cfg.role, epoch, sent);
        if lease.expired(now) {
            // Committed too late to count on: renew again at once.
            if let Some(a) = &mut self.adopting {
                a.request = None;
                a.next = now;
            }
            return;
        }
        self.adopting = None;
        self.keep_by_renewal = false;
        let deadline = lease.valid_until();
        self.watchdog = Watchdog::Armed;
        self.actions
            .push_back(Action::StartWatchdog { epoch, deadline });
        self.phase = Phase::Holding { lease };
        self.next_renewal = super::next_tick(now, self.cfg.timing.renew_every);
        self.event(HolderEvent::Adopted { epoch });
        self.set_paused(paused);
    }

    /// The table no longer gives this node the role at `epoch`: whatever
    /// it still runs as holder is demoted, as after a lost lease.
    fn adoption_refused(&mut self, now: Time, epoch: u64) {
        let reason = StepDownReason::Fenced;
        self.event(HolderEvent::SteppingDown { epoch, reason });
        self.phase = Phase::SteppingDown {
            epoch,
            lease: None,
            reason,
            next: None,
            promote: None,
            step: Step::DisarmingWatchdog,
            failures: None,
            refused: true,
        };
        self.after_promote_stopped(now);
    }

    /// Stopping while holding a paused role: renew at once; the answer to
    /// a renewal sent from now on decides ([`Holder::keep_or_leave`]).
    pub(super) fn keep_when_confirmed(&mut self, now: Time) {
        self.keeping = Some(now);
        self.next_renewal = now;
        self.handle_timeout(now);
    }

    /// A renewal sent at `sent` committed, saying whether the role is
    /// paused: if the agent is stopping and it was sent since the stop,
    /// keep the role (still paused) or step down (resumed meanwhile).
    pub(super) fn keep_or_leave(&mut self, now: Time, sent: Time, paused: bool) {
        let Some(since) = self.keeping else { return };
        if sent < since || !matches!(self.phase, Phase::Holding { .. }) {
            return;
        }
        self.keeping = None;
        self.keep_by_renewal = false;
        if !paused {
            return self.step_down(now, StepDownReason::Leaving, None);
        }
        let Some(epoch) = self.epoch() else { return };
        if self.watchdog != Watchdog::None {
            self.watchdog = Watchdog::None;
            self.actions.push_back(Action::KeepWatchdog);
        }
        self.phase = Phase::Candidate { acquiring: None };
        self.renewals.clear();
        self.event(HolderEvent::Kept { epoch });
        self.stop_done();
    }
}
