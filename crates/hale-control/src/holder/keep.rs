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
//!   any stopping holder does. So does a holding that ends before the keep
//!   is confirmed (its lease ran out, a handover, its watchdog fenced):
//!   the keep belongs to the holding, and the step-down's renewals are
//!   plain ones, so a holding whose service is being demoted is never
//!   recorded as kept for the next run to adopt as promoted.
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

use super::phase::{Adopting, Candidacy, Claim, Keep, Tenure};
use super::{
    Action, ControlRequest, DataState, HeldLease, Holder, HolderEvent, LeaseRequest, LeaseResponse,
    Phase, RequestId, Step, StepDownReason, Watchdog,
};
use crate::lease::LeaseRejection;

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
        if self.stopping() {
            return;
        }
        // (An acquisition in flight is refused: the role is paused.)
        let Phase::Candidate(Candidacy {
            adopting: adopting @ None,
            ..
        }) = &mut self.phase
        else {
            return;
        };
        *adopting = Some(Adopting {
            epoch,
            kept,
            too_new_since: None,
            by_renewal: false,
            request: None,
            next: now,
        });
        self.handle_timeout(now);
    }

    /// Whether an adoption is under way.
    pub fn is_adopting(&self) -> bool {
        self.adopting().is_some()
    }

    /// The adoption under way (a candidate's).
    fn adopting(&self) -> Option<&Adopting> {
        match &self.phase {
            Phase::Candidate(c) => c.adopting.as_ref(),
            _ => None,
        }
    }

    /// Sets the adoption under way (a candidate's).
    fn set_adopting(&mut self, adopting: Option<Adopting>) {
        if let Phase::Candidate(c) = &mut self.phase {
            c.adopting = adopting;
        }
    }

    /// Sends the adoption's renewal if it is due.
    pub(super) fn adopt_renew(&mut self, now: Time) {
        let Some(&a) = self.adopting() else { return };
        if a.request.is_some() || now < a.next || self.stopping() {
            return;
        }
        let id = self.id();
        self.set_adopting(Some(Adopting {
            request: Some((id, now)),
            ..a
        }));
        let request = if a.by_renewal {
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
        if let Phase::Holding {
            keep: Some(Keep {
                by_renewal: false, ..
            }),
            ..
        } = &self.phase
        {
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
        match &mut self.phase {
            Phase::Candidate(Candidacy {
                adopting: Some(a), ..
            }) if a.request.is_some_and(|(rid, _)| rid == id) => {
                let since = *a.too_new_since.get_or_insert(now);
                if !a.kept && now.saturating_since(since) >= TOO_NEW_FOR {
                    a.by_renewal = true;
                }
            }
            Phase::Holding { keep: Some(k), .. } => k.by_renewal = true,
            _ => {}
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
        let Some(&a) = self.adopting() else {
            return false;
        };
        let Some((rid, sent)) = a.request else {
            return false;
        };
        if rid != id {
            return false;
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
                if self.cfg.after_older_release && !a.by_renewal =>
            {
                self.set_adopting(Some(Adopting {
                    by_renewal: true,
                    request: None,
                    next: now,
                    ..a
                }));
            }
            Some(LeaseResponse::Rejected(LeaseRejection::NotKeeper { epoch })) => {
                self.set_adopting(None);
                self.event(HolderEvent::NotAdopted { epoch: *epoch });
            }
            // Refused while the table records no keep (and none went by a
            // plain renewal): the previous run handed the role over (its
            // release not yet applied where the lookup read) or crashed and
            // was fenced; its demote ran. Demoting again would be a second
            // demote of that holding (nemesis seed 30010).
            Some(LeaseResponse::Rejected(_)) if !a.kept && !a.by_renewal => {
                self.set_adopting(None);
                self.event(HolderEvent::NotAdopted { epoch: a.epoch });
            }
            Some(LeaseResponse::Rejected(_)) => self.adoption_refused(now, a.epoch),
            // No answer (or a strange one): ask again soon.
            _ => {
                self.set_adopting(Some(Adopting {
                    request: None,
                    next: now + self.cfg.timing.renew_every / 5,
                    ..a
                }));
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
            if let Some(&a) = self.adopting() {
                self.set_adopting(Some(Adopting {
                    request: None,
                    next: now,
                    ..a
                }));
            }
            return;
        }
        let deadline = lease.valid_until();
        self.actions
            .push_back(Action::StartWatchdog { epoch, deadline });
        let next_renewal = super::next_tick(now, self.cfg.timing.renew_every);
        self.phase = Phase::Holding {
            lease,
            tenure: Tenure::new(next_renewal, Watchdog::Armed),
            keep: None,
        };
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
            // No watchdog runs: the previous run's exited with it.
            tenure: Tenure::new(now, Watchdog::None),
            claim: Claim::Refused,
            reason,
            next: None,
            promote: None,
            step: Step::DisarmingWatchdog,
        };
        self.after_promote_stopped(now);
    }

    /// Stopping while holding a paused role: renew at once; the answer to
    /// a renewal sent from now on decides ([`Holder::keep_or_leave`]).
    pub(super) fn keep_when_confirmed(&mut self, now: Time) {
        let Phase::Holding { tenure, keep, .. } = &mut self.phase else {
            return;
        };
        *keep = Some(Keep {
            since: now,
            by_renewal: false,
        });
        tenure.next_renewal = now;
        self.handle_timeout(now);
    }

    /// A renewal sent at `sent` committed, saying whether the role is
    /// paused: if the agent is stopping and it was sent since the stop,
    /// keep the role (still paused) or step down (resumed meanwhile).
    pub(super) fn keep_or_leave(&mut self, now: Time, sent: Time, paused: bool) {
        let Phase::Holding {
            lease,
            tenure,
            keep: keep @ Some(_),
        } = &mut self.phase
        else {
            return;
        };
        if keep.is_some_and(|k| sent < k.since) {
            return;
        }
        *keep = None;
        if !paused {
            return self.step_down(now, StepDownReason::Leaving, None);
        }
        let (epoch, watchdog) = (lease.epoch, tenure.watchdog);
        if watchdog != Watchdog::None {
            self.actions.push_back(Action::KeepWatchdog);
        }
        self.event(HolderEvent::Kept { epoch });
        self.stop_done();
    }
}
