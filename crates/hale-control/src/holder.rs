//! The candidate's and holder's logic for one role, as a sans-IO state
//! machine: what a node does to take a role, keep it, and give it up.
//!
//! It is shaped like `hale-core`'s `Node`: inputs are `handle_*(now, ..)`
//! calls, outputs are [`Action`]s taken with [`Holder::poll_action`], and
//! [`Holder::poll_timeout`] gives the next instant at which
//! [`Holder::handle_timeout`] has something to do (a spurious timeout does
//! nothing). It reads no clock, starts no process and sends nothing: the
//! agent carries the actions out, and the lease-history model
//! (`tests/it/lease_histories.rs`) drives this same code on virtual time.
//!
//! # Rules it keeps
//!
//! * **Renewals never wait for hooks.** A holder renews every `renew_every`
//!   from the moment it is granted, while its promote hook runs, and while a
//!   voluntary demote hook runs; several renewals may be in flight.
//! * **An unanswered renewal is retried after a fifth of `renew_every`**:
//!   when the control plane's leader dies, its successor is elected in
//!   about a second and should hear a renewal before the lease's end.
//! * **The watchdog is armed by renewals only**: started at the grant with
//!   the granted lease's end, re-armed with each committed renewal's end.
//! * **Promote and demote never overlap on one node.** Whatever ends a
//!   holding (lease run out, renewal refused, checks failing, handover,
//!   failed or timed-out promotion, the agent stopping), a running promote
//!   hook is killed and its exit awaited before anything else.
//! * **A lost lease runs the demote hook once.** The watchdog is released
//!   first; if it has already fenced (the agent was frozen past the lease),
//!   its fence was the demote and no second one runs.
//! * **A voluntary step-down keeps the lease until its demote hook has
//!   succeeded**, then releases it: the next holder's promote starts only
//!   after this node's demote succeeded, as long as it can renew. Cut off
//!   from the control plane meanwhile, its lease runs out during the demote
//!   and the rest of the demote is covered by the fencing epoch, as after a
//!   lost lease.
//! * **A demote that fails is never taken for done.** It runs again after
//!   a backoff (0.5 s doubling to 5 s, [`HolderEvent::DemoteFailed`] each
//!   time), for as long as it fails: the holding is not released, and a
//!   voluntary step-down keeps renewing its lease, so no other node is
//!   promoted (a node that cannot demote keeps the role unless it dies or
//!   is cut off, when its lease runs out as a dead host's does). The
//!   watchdog, disarmed but keeping its deadline, is re-armed by renewals
//!   until the demote has been failing for `hook_timeout`; past that bound
//!   it fences at the lease's end (its fence is the same demote, under the
//!   same claim, after killing what the promote hook left): the
//!   escalation. A lost lease's failed demote is retried the same way; the
//!   node does not ask for the role meanwhile.
//! * **A renewal answered after the lease ended changes nothing**: the
//!   holding is over on this node's clock, whatever the answer says.
//! * **A promotion that fails or outlives `hook_timeout` is abandoned**: the
//!   hook is killed, the node demotes, releases the role and stands aside
//!   for one lease so that the next candidate takes it.
//! * **A node that may not be promoted never asks for the role**
//!   ([`HolderConfig::promotable`]): it stands by as a standby, gives back
//!   a grant that answers an earlier ask, and, holding when it is retuned
//!   so, keeps renewing until the agent hands the role over.
//! * **A hook's `hook_timeout` runs from when it started**: time it waited
//!   for one of the agent's hook slots ([`Holder::handle_hook_queued`],
//!   [`Holder::handle_hook_started`]), however long,
//!   or the node was stopped ([`Holder::handle_pause`]), does not count.

use std::collections::VecDeque;
use std::time::Duration;

use hale_core::Time;

use crate::history::HookKind;
use crate::lease::{AcquireRequest, HeldLease, LeaseRequest, LeaseResponse, Origin, ReleaseReason};
use crate::replication::Standing;

mod io;
mod keep;
mod phase;
mod runs;
mod step_down;

pub use io::{
    Action, ControlRequest, DataState, HolderConfig, HolderEvent, HookExit, HookId, HookOutcome,
    HookReason, RequestId, RoleState, ServiceStatus, StepDownReason,
};
use phase::{Candidacy, Claim, Handover, Phase, Run, Step, Tenure, Watchdog};

pub use step_down::{DEMOTE_RETRY_FIRST, DEMOTE_RETRY_MAX};

/// Whether the agent is stopping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// Serving the role.
    Running,
    /// Giving the role up before stopping (then [`Phase::Stopped`]).
    Stopping,
}

/// One role's candidacy on this node: see the module documentation.
///
/// What only one phase (or a group of phases) knows lives in `Phase`;
/// the fields here are those every phase reads.
#[derive(Debug, Clone)]
pub struct Holder {
    /// The settings: every phase reads them, and a reload changes them
    /// whatever the phase ([`Holder::retune`]).
    cfg: HolderConfig,
    /// Where the candidacy stands, with what only that phase knows.
    phase: Phase,
    /// What the service's checks say: a candidate asks by them, a holder
    /// steps down by them, and they are reported whatever the phase.
    status: ServiceStatus,
    /// What a replicated service says of its data (see [`DataState`]): a
    /// candidate asks with its copy's position, a holder renews with its
    /// mark; measured by the agent whatever the phase.
    data: DataState,
    /// The role is paused, as the last committed renewal said: no step
    /// down for failing checks (an operator's maintenance). It outlives a
    /// holding: [`HolderEvent::Paused`] reports changes, from one committed
    /// renewal to the next, whichever holding sent it.
    paused: bool,
    /// Whether the last published eligibility was true: published on every
    /// change of the checks, whatever the phase.
    eligible: Option<bool>,
    /// Whether the agent is stopping: a stop asked in any phase is carried
    /// out by the phases that follow, and no new holding begins.
    life: Lifecycle,
    /// The last request or hook id handed out: ids are unique across
    /// phases, so that a late answer is never taken for a newer request's.
    next_id: u64,
    /// This candidacy episode's acquisition attempt (see
    /// [`ControlRequest::Acquire`]): the same while it asks again, a new
    /// one after each holding, so it outlives each phase.
    attempt: u64,
    /// The actions not yet taken, in order, whatever phase produced them.
    actions: VecDeque<Action>,
}

impl Holder {
    /// A candidacy that starts as a standby waiting for its service's checks.
    pub fn new(cfg: HolderConfig, now: Time) -> Holder {
        Holder {
            attempt: cfg.instance.max(1),
            cfg,
            phase: Phase::Candidate(Candidacy::new(now)),
            status: ServiceStatus::default(),
            data: DataState::Unknown,
            paused: false,
            eligible: None,
            life: Lifecycle::Running,
            next_id: 0,
            actions: VecDeque::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &HolderConfig {
        &self.cfg
    }

    /// New settings for this candidacy (an agent's configuration reload):
    /// its `priority` is asked with from the next acquisition on; whether
    /// it is `promotable` decides from the next poll on whether it asks at
    /// all (a grant answering an earlier ask is given straight back); its
    /// `hook_timeout` and `fail_after` bound the hook runs and failing
    /// streaks from the next deadline on (a run under way is timed from
    /// its start with the new limit). Nothing else changes: no request,
    /// hook or step-down comes of it by itself (a holder that may no longer
    /// be promoted keeps its holding until the agent hands it over).
    pub fn retune(
        &mut self,
        priority: i64,
        promotable: bool,
        hook_timeout: Duration,
        fail_after: Duration,
    ) {
        self.cfg.priority = priority;
        self.cfg.promotable = promotable;
        self.cfg.hook_timeout = hook_timeout;
        self.cfg.fail_after = fail_after;
    }

    /// Where the candidacy stands.
    pub fn state(&self) -> RoleState {
        match &self.phase {
            Phase::Candidate(_) | Phase::Releasing { .. } | Phase::Stopped if self.may_follow() => {
                RoleState::Standby
            }
            Phase::Candidate(_) | Phase::Releasing { .. } | Phase::Stopped => RoleState::Ineligible,
            Phase::Promoting { .. } => RoleState::Promoting,
            Phase::Holding { .. } => RoleState::Holder,
            Phase::SteppingDown { .. } => RoleState::Demoting,
        }
    }

    /// The fencing epoch held (while promoting, holding or stepping down).
    pub fn epoch(&self) -> Option<u64> {
        self.phase.epoch()
    }

    /// The last instant this node may act as holder, if it holds a lease.
    pub fn lease_valid_until(&self) -> Option<Time> {
        self.lease().map(HeldLease::valid_until)
    }

    /// Whether the agent's stop has been carried out.
    pub fn is_stopped(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// The next action to carry out, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next instant at which [`Holder::handle_timeout`] has work.
    pub fn poll_timeout(&self) -> Option<Time> {
        let (hook, failing) = match &self.phase {
            Phase::Stopped | Phase::Releasing { .. } => return None,
            Phase::Candidate(c) => return self.candidate_due(c),
            Phase::Promoting { run, .. } => (Some(run), true),
            Phase::Holding { .. } => (None, true),
            // A promote hook being killed is not timed: its exit is awaited.
            Phase::SteppingDown { step, .. } => match step {
                Step::Demoting { run, .. } => (Some(run), false),
                Step::StoppingPromote(_) | Step::DisarmingWatchdog => (None, false),
                Step::RetryingDemote { at, .. } => {
                    return [Some(*at), self.renewal_due()].into_iter().flatten().min();
                }
            },
        };
        // While a lease is held: its next renewal and its end; the hook's
        // timeout unless it was killed; a failing service's grace period.
        let lease = self.lease();
        let failing = self.status.failing_since.filter(|_| failing);
        [
            self.renewal_due(),
            lease.map(HeldLease::valid_until),
            hook.and_then(|run| run.times_out_at(self.cfg.hook_timeout)),
            failing.map(|since| since + self.cfg.fail_after),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When a candidate has work: its adoption's next renewal, or its next
    /// poll (not before its hold-off ends) while it asks.
    fn candidate_due(&self, c: &Candidacy) -> Option<Time> {
        if let Some(a) = &c.adopting {
            return a.due();
        }
        let asks = !self.stopping() && c.acquiring.is_none() && self.may_ask();
        let held_off = c.hold_off_until.unwrap_or(Time::ZERO);
        asks.then(|| c.next_poll.max(held_off))
    }

    /// The next renewal, while a lease is held or asked back.
    fn renewal_due(&self) -> Option<Time> {
        let tenure = self.phase.tenure()?;
        (self.lease().is_some() || self.reclaiming()).then_some(tenure.next_renewal)
    }

    /// Time has passed: renew, poll, and enforce deadlines that are due.
    pub fn handle_timeout(&mut self, now: Time) {
        let lease_length = self.cfg.timing.lease;
        if let Some(tenure) = self.phase.tenure_mut() {
            tenure
                .renewals
                .retain(|_, sent| now.saturating_since(*sent) <= lease_length);
        }
        match &mut self.phase {
            Phase::Stopped | Phase::Releasing { .. } => {}
            Phase::Candidate(c) if c.adopting.is_some() => self.adopt_renew(now),
            Phase::Candidate(_) => self.maybe_ask(now),
            Phase::Promoting { lease, .. } | Phase::Holding { lease, .. } => {
                let expired = lease.expired(now);
                let promote_late = matches!(&self.phase, Phase::Promoting { run, .. }
                    if run.times_out_at(self.cfg.hook_timeout).is_some_and(|t| now >= t));
                let reason = if expired {
                    Some(StepDownReason::LeaseExpired)
                } else if promote_late {
                    Some(StepDownReason::PromoteTimedOut)
                } else {
                    self.failing_long(now)
                        .then_some(StepDownReason::ServiceFailing)
                };
                match reason {
                    Some(reason) => self.step_down(now, reason, None),
                    None => self.maybe_renew(now),
                }
            }
            Phase::SteppingDown { claim, step, .. } => {
                if matches!(claim, Claim::Leased(lease) if lease.expired(now)) {
                    *claim = Claim::Reclaiming;
                }
                match step {
                    Step::Demoting { run, .. } => {
                        if run
                            .times_out_at(self.cfg.hook_timeout)
                            .is_some_and(|t| now >= t)
                        {
                            run.killed = true;
                            run.timed_out = true;
                            let id = run.id;
                            self.actions.push_back(Action::KillHook { id });
                        }
                    }
                    Step::RetryingDemote { at, .. } if now >= *at => self.start_demote(now),
                    Step::RetryingDemote { .. }
                    | Step::StoppingPromote(_)
                    | Step::DisarmingWatchdog => {}
                }
                self.maybe_renew(now);
            }
        }
    }

    /// A candidate asks for the role if it may and its next poll is due.
    fn maybe_ask(&mut self, now: Time) {
        let Phase::Candidate(c) = &self.phase else {
            return;
        };
        let held_off = c.hold_off_until.is_some_and(|t| now < t);
        let due = c.acquiring.is_none() && !held_off && now >= c.next_poll;
        if !due || self.stopping() || !self.may_ask() {
            return;
        }
        let id = self.id();
        if let Phase::Candidate(c) = &mut self.phase {
            c.next_poll = next_tick(now, self.cfg.timing.renew_every);
            c.acquiring = Some((id, now));
        }
        self.actions.push_back(Action::Send {
            id,
            request: ControlRequest::Acquire(AcquireRequest {
                role: self.cfg.role.clone(),
                holder: self.cfg.node.clone(),
                priority: self.cfg.priority,
                attempt: self.attempt,
                standing: self.standing().flatten(),
            }),
            deadline: now + self.cfg.acquire_timeout,
        });
    }

    /// What a replicated service says of its data now (measured by the
    /// agent; ignored unless [`HolderConfig::max_lag`] is set). A candidate
    /// asks with its copy's position; a holder publishes its mark with its
    /// renewals.
    pub fn handle_data(&mut self, now: Time, data: DataState) {
        self.data = data;
        self.handle_timeout(now);
    }

    /// The service's checks changed (or were re-read).
    pub fn handle_checks(&mut self, now: Time, status: ServiceStatus) {
        self.status = status;
        let eligible = self.is_eligible();
        if self.eligible != Some(eligible) {
            self.eligible = Some(eligible);
            self.event(HolderEvent::Eligible(eligible));
        }
        self.handle_timeout(now);
    }

    /// The answer to request `id` (`None`: no server answered in time).
    pub fn handle_response(&mut self, now: Time, id: RequestId, response: Option<LeaseResponse>) {
        match self.phase {
            Phase::Stopped => return,
            Phase::Releasing { id: release } if release == id => return self.stop_done(),
            _ => {}
        }
        if self.adopt_answered(now, id, &response) {
            return;
        }
        if let Phase::Candidate(c) = &mut self.phase {
            if let Some((aid, sent)) = c.acquiring {
                if aid == id {
                    c.acquiring = None;
                    if let Some(LeaseResponse::Granted { epoch }) = response {
                        self.granted(now, epoch, sent);
                    }
                    self.handle_timeout(now);
                    return;
                }
            }
        }
        if let Some(LeaseResponse::Granted { epoch: e }) = response {
            // Granted after this node moved on (stopping, or a late answer):
            // give it straight back.
            let _ = self.send_release(now, e, None, ReleaseReason::Unused);
            return;
        }
        // A renewal is this tenure's (all of one epoch), or too old to
        // count, or not a renewal.
        let Some(tenure) = self.phase.tenure_mut() else {
            return;
        };
        let Some(sent) = tenure.renewals.remove(&id) else {
            return;
        };
        let Some(epoch) = self.epoch() else { return };
        match response {
            Some(LeaseResponse::Renewed {
                epoch: e, paused, ..
            }) if e == epoch => {
                // Answered after the lease ended: it changes nothing (the
                // holding is over on this node's clock; its timeout steps
                // down, and the watchdog may have fenced already).
                if self.lease().is_some_and(|l| l.expired(now)) && !planted("renew-after-expiry") {
                    return self.handle_timeout(now);
                }
                self.set_paused(paused);
                self.reclaimed(now, sent);
                let rearm = self.rearms_watchdog(now);
                if let Some(lease) = self.phase.lease_mut() {
                    lease.renewed(sent);
                    let deadline = lease.valid_until();
                    if rearm {
                        self.actions.push_back(Action::ArmWatchdog { deadline });
                    }
                }
                self.keep_or_leave(now, sent, paused);
            }
            Some(LeaseResponse::Rejected(_)) => match &mut self.phase {
                Phase::Promoting { .. } | Phase::Holding { .. } => {
                    self.step_down(now, StepDownReason::Fenced, None);
                }
                Phase::SteppingDown { claim, .. } => *claim = Claim::Refused,
                Phase::Candidate(_) | Phase::Releasing { .. } | Phase::Stopped => {}
            },
            // No server could serve it (an election under way, the leader
            // gone): ask again soon rather than a whole interval later, so
            // that the new leader hears from this holder within a fifth of
            // `renew_every` of its election.
            None => {
                let retry = now + self.cfg.timing.renew_every / 5;
                if let Some(tenure) = self.phase.tenure_mut() {
                    tenure.next_renewal = tenure.next_renewal.min(retry);
                }
            }
            Some(_) => {}
        }
    }

    /// Hook run `id` has exited.
    pub fn handle_hook_exit(&mut self, now: Time, id: HookId, exit: HookExit) {
        match &mut self.phase {
            Phase::Promoting { run, .. } if run.id == id => {
                let outcome = run.outcome(exit);
                self.promote_exited(now, outcome);
            }
            Phase::SteppingDown {
                step: Step::StoppingPromote(run),
                promote,
                ..
            } if run.id == id => {
                *promote = Some(run.outcome(exit));
                self.after_promote_stopped(now);
            }
            Phase::SteppingDown {
                step: Step::Demoting { run, .. },
                ..
            } if run.id == id => {
                let outcome = run.outcome(exit);
                if outcome.ok() || planted("release-after-failed-demote") {
                    self.finish(now, outcome);
                } else {
                    self.demote_failed(now, outcome);
                }
            }
            _ => {}
        }
    }

    /// The promote hook ended with `outcome`: the node holds the role (and
    /// takes a handover asked meanwhile), or steps down.
    fn promote_exited(&mut self, now: Time, outcome: HookOutcome) {
        if outcome != HookOutcome::Succeeded {
            let reason = if outcome == HookOutcome::TimedOut {
                StepDownReason::PromoteTimedOut
            } else {
                StepDownReason::PromoteFailed
            };
            return self.step_down_after_promote(now, reason, outcome);
        }
        let Phase::Promoting {
            lease,
            tenure,
            handover,
            ..
        } = &mut self.phase
        else {
            return;
        };
        let (lease, tenure) = (lease.clone(), std::mem::take(tenure));
        let handover = std::mem::take(handover);
        let epoch = lease.epoch;
        self.phase = Phase::Holding {
            lease,
            tenure,
            keep: None,
        };
        self.event(HolderEvent::Promoted { epoch });
        match handover {
            _ if self.stopping() => self.step_down(now, StepDownReason::Leaving, None),
            Handover::NotAsked => self.handle_timeout(now),
            Handover::ToBest => self.step_down(now, StepDownReason::Handover, None),
            Handover::To(next) => self.step_down(now, StepDownReason::Handover, Some(next)),
        }
    }

    /// The watchdog has ended: `fenced` if it had already run the demote
    /// command (the lease ran out while this agent could not renew).
    pub fn handle_watchdog_released(&mut self, now: Time, fenced: bool) {
        if let Some(tenure) = self.phase.tenure_mut() {
            if tenure.watchdog == Watchdog::Armed {
                tenure.watchdog = Watchdog::Disarmed;
            }
        }
        let Phase::SteppingDown {
            step: Step::DisarmingWatchdog,
            ..
        } = &self.phase
        else {
            return;
        };
        if fenced {
            return self.finish(now, HookOutcome::FencedByWatchdog);
        }
        self.start_demote(now);
    }

    /// An operator asked for a handover (to `next`, or to the best other candidate).
    pub fn handle_handover(&mut self, now: Time, next: Option<String>) {
        match &mut self.phase {
            Phase::Promoting { handover, .. } => {
                *handover = next.map_or(Handover::ToBest, Handover::To);
            }
            Phase::Holding { .. } => self.step_down(now, StepDownReason::Handover, next),
            Phase::Candidate(_)
            | Phase::SteppingDown { .. }
            | Phase::Releasing { .. }
            | Phase::Stopped => {}
        }
    }

    /// The agent is stopping: give the role up (demote, release), then
    /// report [`HolderEvent::Stopped`]. A role held while paused (as the
    /// last committed renewal said) is kept instead, once a renewal sent
    /// from now on confirms it is still paused: no demote, no release, the
    /// watchdog told to exit without fencing ([`Action::KeepWatchdog`]), so
    /// that the agent's next run adopts it ([`Holder::handle_adopt`]).
    pub fn handle_stop(&mut self, now: Time) {
        if self.stopping() {
            return;
        }
        self.life = Lifecycle::Stopping;
        match &self.phase {
            Phase::Candidate(_) => self.stop_done(),
            Phase::Holding { .. } if self.paused => self.keep_when_confirmed(now),
            Phase::Promoting { .. } | Phase::Holding { .. } => {
                self.step_down(now, StepDownReason::Leaving, None)
            }
            Phase::SteppingDown { .. } | Phase::Releasing { .. } | Phase::Stopped => {}
        }
    }

    /// Notes whether the role is paused, as a committed renewal said.
    fn set_paused(&mut self, paused: bool) {
        if self.paused != paused {
            self.paused = paused;
            self.event(HolderEvent::Paused(paused));
        }
    }

    /// Reports `event`, in order with the other actions.
    fn event(&mut self, event: HolderEvent) {
        self.actions.push_back(Action::Event(event));
    }

    /// The stop is carried out: nothing more happens.
    fn stop_done(&mut self) {
        self.phase = Phase::Stopped;
        self.event(HolderEvent::Stopped);
    }

    /// Stopping, or stopped.
    fn stopping(&self) -> bool {
        self.life == Lifecycle::Stopping
    }

    fn is_eligible(&self) -> bool {
        self.status.healthy && self.status.ready
    }

    /// The standing a candidate asks with: `Some(None)` for a role that
    /// does not replicate, `Some(Some(_))` for a replicated role's copy,
    /// `None` when a replicated role's candidate has no copy to offer (its
    /// data unknown, or a primary's: it must rejoin first).
    fn standing(&self) -> Option<Option<Standing>> {
        let Some(max_lag) = self.cfg.max_lag else {
            return Some(None);
        };
        match self.data {
            DataState::Copy(position) => Some(Some(Standing { position, max_lag })),
            DataState::Unknown | DataState::Primary(_) => None,
        }
    }

    /// Whether a candidate stands by as a standby: its checks pass, and a
    /// replicated role's candidate has a copy to offer.
    fn may_follow(&self) -> bool {
        self.is_eligible() && self.standing().is_some()
    }

    /// Whether a candidate asks for the role: it stands by
    /// ([`Holder::may_follow`]) and it may be promoted
    /// ([`HolderConfig::promotable`]).
    fn may_ask(&self) -> bool {
        self.may_follow() && self.cfg.promotable
    }

    fn failing_long(&self, now: Time) -> bool {
        !self.paused
            && self
                .status
                .failing_since
                .is_some_and(|s| now.saturating_since(s) >= self.cfg.fail_after)
    }

    fn id(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId(self.next_id)
    }

    fn hook_id(&mut self) -> HookId {
        self.next_id += 1;
        HookId(self.next_id)
    }

    fn lease(&self) -> Option<&HeldLease> {
        self.phase.lease()
    }

    /// Whether this step-down, without a lease, asks to renew its epoch
    /// anyway (see [`Claim::Reclaiming`]).
    fn reclaiming(&self) -> bool {
        self.phase.reclaiming()
    }

    fn granted(&mut self, now: Time, epoch: u64, sent: Time) {
        let lease = HeldLease::granted(self.cfg.timing, &self.cfg.role, epoch, sent);
        if lease.expired(now) || self.stopping() || !self.may_ask() {
            // Too late to use, or no longer wanted: give it back.
            let _ = self.send_release(now, epoch, None, ReleaseReason::Unused);
            return;
        }
        let deadline = lease.valid_until();
        self.actions
            .push_back(Action::StartWatchdog { epoch, deadline });
        let id = self.hook_id();
        self.phase = Phase::Promoting {
            lease,
            // The grant counts as the first renewal.
            tenure: Tenure::new(now + self.cfg.timing.renew_every, Watchdog::Armed),
            run: Run::new(id, now),
            handover: Handover::NotAsked,
        };
        self.event(HolderEvent::Promoting { epoch });
        self.actions.push_back(Action::StartHook {
            id,
            kind: HookKind::Promote,
            epoch,
            reason: HookReason::Promote,
        });
    }

    fn maybe_renew(&mut self, now: Time) {
        if self.reclaiming() {
            return self.reclaim(now);
        }
        let (Some(lease), Some(tenure)) = (self.lease(), self.phase.tenure()) else {
            return;
        };
        if now < tenure.next_renewal || lease.expired(now) {
            return;
        }
        let (epoch, until) = (lease.epoch, lease.valid_until());
        self.send_renewal(now, epoch, until.max(now + Duration::from_millis(50)));
    }

    /// Sends a renewal of `epoch` now (answer awaited until `deadline`) and
    /// sets the next one on the grid.
    pub(super) fn send_renewal(&mut self, now: Time, epoch: u64, deadline: Time) {
        let id = self.id();
        let request = self.renewal(epoch);
        let every = self.cfg.timing.renew_every;
        let Some(tenure) = self.phase.tenure_mut() else {
            return;
        };
        tenure.next_renewal = next_tick(now, every);
        tenure.renewals.insert(id, now);
        self.actions.push_back(Action::Send {
            id,
            request,
            deadline,
        });
    }

    fn send_release(
        &mut self,
        now: Time,
        epoch: u64,
        next: Option<String>,
        reason: ReleaseReason,
    ) -> RequestId {
        let id = self.id();
        self.actions.push_back(Action::Send {
            id,
            request: ControlRequest::Lease(LeaseRequest::Release {
                role: self.cfg.role.clone(),
                holder: self.cfg.node.clone(),
                epoch,
                next,
                reason: Some(reason),
                origin: Origin::default(),
            }),
            deadline: now + Duration::from_millis(500),
        });
        id
    }
}

/// Whether planted bug `name` is selected (test builds with the
/// `planted-bugs` feature only; see `planted.rs`): always false otherwise.
fn planted(name: &str) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        crate::planted::active(name)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = name;
        false
    }
}

/// The first instant after `now` on the grid of `every` (from time zero).
/// The holders of one agent share a time origin, so their renewals, and
/// their polls, fall on the same instants and travel in one batch; none
/// waits longer than `every`.
fn next_tick(now: Time, every: Duration) -> Time {
    let every = every.as_nanos().max(1) as u64;
    Time::from_nanos((now.as_nanos() / every + 1) * every)
}
