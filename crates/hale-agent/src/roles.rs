//! Roles: this node's candidacies, held through leases from the control plane.
//!
//! Each role this node is a candidate for has a manager task that carries
//! out what the role's [`Holder`] state machine (in `hale-control`) asks:
//! control-plane requests (each on a task of its own, so that renewals
//! never wait for anything, carried in the agent's batches: `requests.rs`), hooks (each in a process group of its own,
//! killed as a group), and the fencing watchdog process. The decisions —
//! when to ask for the role, renew, give it up, kill a hook, demote — are
//! the state machine's, and the lease-history model checks them. A failing
//! non-essential service never moves a role.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use hale_control::raft::api::{Answer, Refusal};
use hale_control::{
    Action, DataState, Holder, HolderConfig, HolderEvent, HookExit, HookId, HookKind, HookReason,
    LeaseResponse, RequestId, RoleState, ServiceStatus,
};
use hale_core::Time;

use crate::config::RoleSpec;
use crate::view::{AgentEvent, Lagging, RoleView, SwitchoverStep};
use crate::watchdog::demote_once_argv;
pub mod identity;
pub mod kept;
pub mod postgres;
mod requests;
mod set;
pub mod slots;
pub mod switchover;
mod watchdog;
pub use requests::LeaseRequests;
pub use set::{RoleContext, RoleSet, StillHeld};
pub use watchdog::Watchdogs;

/// What a role manager reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleChange {
    /// This node became (un)able to hold `role`: its published candidacy
    /// changes, no event is published.
    Eligible {
        /// The role.
        role: String,
        /// Whether it may hold it now.
        eligible: bool,
    },
    /// An event to publish (`promoting`, `promoted`, `demoting`, `demoted`).
    Event(AgentEvent),
}

/// Reports role changes.
pub type OnRoleChange = Arc<dyn Fn(RoleChange) + Send + Sync>;

/// What the agent asks of a running role manager besides handovers (a
/// configuration reload). Neither ever demotes or promotes.
#[derive(Debug)]
pub enum RoleOrder {
    /// New settings for the candidacy: its priority at once; its service,
    /// hooks, `hook_timeout` and `fail_after` at once when this node holds
    /// no lease of the role, else when its holding has ended (its watchdog
    /// fences with the demote hook the holding started with).
    Retune(Box<RoleSpec>),
    /// Stop being a candidate, unless this node holds a lease of the role
    /// now: answers whether the manager stopped.
    Retire(tokio::sync::oneshot::Sender<bool>),
}

/// Shared role views.
pub type RoleViews = Arc<Mutex<BTreeMap<String, RoleView>>>;

/// What reaches a role manager's loop from the tasks it started.
enum Input {
    Response(RequestId, Answer<LeaseResponse>),
    /// A hook run got its slot and started, in this process group.
    HookStarted(HookId, u32),
    HookExit(HookId, HookExit),
    /// The watchdog's answer to a `disarm` of holding `.0` (`None`: it
    /// exited before answering; holding 0: it could not be asked).
    Watchdog(u64, Option<bool>),
    /// [`DISARM_WAIT`] has passed since the `disarm` of holding `.0`.
    DisarmLate(u64),
    /// The watchdog fenced holding `.0` on its own, unasked: its deadline
    /// passed before a renewal reached it.
    Fenced(u64),
    /// The control plane's table says this node holds the role, paused, at
    /// this epoch (and whether it records the holding as kept): adopt it.
    Adopt(u64, bool),
}

/// Everything a role manager needs.
pub struct RoleManager {
    /// The candidacy.
    pub spec: RoleSpec,
    /// What every role manager of the agent shares: this node's name, the
    /// control plane through the agent's batches, the agent's time origin
    /// (their holders' renewals fall on the same instants and travel in
    /// one batch), services, lease timing, fencing watchdog, hook slots
    /// ([`slots`]) and where role changes are reported.
    pub ctx: Arc<RoleContext>,
    /// Where to publish this role's state.
    pub views: RoleViews,
    /// Fires when the agent stops: hand the role over at once.
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// Operator handovers: step down and let the next candidate (or the
    /// named one) take over.
    pub handover: tokio::sync::mpsc::Receiver<Option<String>>,
    /// The agent's orders (see [`RoleOrder`]).
    pub orders: mpsc::UnboundedReceiver<RoleOrder>,
    /// A replicated role: what its keeper measures of the data
    /// ([`postgres::Keeper`]).
    pub data: Option<tokio::sync::watch::Receiver<DataState>>,
}

/// How long a step-down waits for the watchdog's answer to its `disarm`
/// before it demotes anyway: well inside the lease's drift margin (400 ms
/// by default), which the demote must start within.
const DISARM_WAIT: Duration = Duration::from_millis(100);

/// A hook run: its process group once it has started, whether it is the
/// promote hook, whether a kill was asked (before it started, it is
/// killed as it starts), and the claim a demote runs under.
struct HookRun {
    pgid: Option<u32>,
    promote: bool,
    kill: bool,
    claim: Option<PathBuf>,
}

/// The switchover order last seen in a renewal's answer, and what the
/// holder did about it.
#[derive(Debug, Default)]
struct Switching {
    order: Option<hale_control::Switchover>,
    /// A `waiting` event was published for it.
    said_waiting: bool,
    /// The holder stepped down for it.
    handed: bool,
}

/// The executor's own state: running hooks and the watchdog.
struct Running {
    origin: Instant,
    tx: mpsc::UnboundedSender<Input>,
    hooks: BTreeMap<HookId, HookRun>,
    /// The holding the watchdog guards (its id there).
    watchdog: Option<u64>,
    /// A `disarm` awaits its answer.
    disarming: bool,
}

/// Notices that the role manager was stopped: its 100 ms check tick keeps
/// it awake, so a gap of over a second between two wake-ups is a pause.
struct PauseWatch {
    last: Time,
}

impl PauseWatch {
    /// Tells `sm` of the pause before `now`, if the last wake-up was long
    /// enough ago.
    fn check(&mut self, sm: &mut Holder, now: Time) {
        let gap = now.saturating_since(self.last);
        self.last = now;
        if gap > Duration::from_secs(1) {
            sm.handle_pause(gap);
        }
    }
}

impl Running {
    fn now(&self) -> Time {
        Time::from_nanos(self.origin.elapsed().as_nanos() as u64)
    }

    fn left(&self, t: Time) -> Duration {
        t.saturating_since(self.now())
    }
}

impl RoleManager {
    fn env(&self, epoch: u64) -> Vec<(String, String)> {
        vec![
            ("HALE_ROLE".into(), self.spec.name.clone()),
            ("HALE_EPOCH".into(), epoch.to_string()),
            ("HALE_NODE".into(), self.ctx.node.clone()),
        ]
    }

    /// Updates this role's published view. Called on every wake-up of the
    /// manager (ten a second per role): the name is cloned only the first
    /// time, when the view is created.
    fn view(&self, f: impl FnOnce(&mut RoleView)) {
        let mut v = self.views.lock().expect("role views lock");
        if let Some(e) = v.get_mut(&self.spec.name) {
            return f(e);
        }
        let e = v.entry(self.spec.name.clone()).or_insert_with(|| RoleView {
            role: self.spec.name.clone(),
            priority: self.spec.priority,
            state: RoleState::Ineligible,
            ..RoleView::default()
        });
        f(e);
    }

    fn status(&self, now: Time) -> ServiceStatus {
        let all = self.ctx.services.lock().expect("services lock");
        match all.iter().find(|s| s.spec.name == self.spec.service) {
            Some(s) => ServiceStatus {
                healthy: s.healthy(),
                ready: s.ready(),
                failing_since: s.failing_for(Instant::now()).map(|d| now - d),
            },
            None => ServiceStatus::default(),
        }
    }

    /// Runs until the agent's stop has been carried out (the role given up)
    /// or the task is aborted; on abort the watchdog, if any, fences (its
    /// standard input closes).
    pub async fn run(mut self) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut run = Running {
            origin: self.ctx.origin,
            tx,
            hooks: BTreeMap::new(),
            watchdog: None,
            disarming: false,
        };
        let mut sm = Holder::new(
            HolderConfig {
                role: self.spec.name.clone(),
                node: self.ctx.node.clone(),
                priority: self.spec.priority,
                timing: self.ctx.timing,
                hook_timeout: self.spec.hook_timeout,
                fail_after: self.spec.fail_after,
                acquire_timeout: Duration::from_millis(1500),
                instance: crate::seed::fresh_seed(),
                max_lag: self.spec.max_lag(),
                identity: self.ctx.identity.clone(),
                after_older_release: self.ctx.after_older_release,
            },
            run.now(),
        );
        let mut checks = tokio::time::interval(Duration::from_millis(100));
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stopping = false;
        let mut paused = PauseWatch { last: run.now() };
        let mut switching = Switching::default();
        self.look_for_kept_role(&run.tx);
        let mut retuned: Option<RoleSpec> = None;
        loop {
            if let Some(spec) = retuned.take() {
                retuned = self.retune(&mut sm, spec);
            }
            while let Some(a) = sm.poll_action() {
                if let Action::StartHook { id, .. } = a {
                    // It waits for a hook slot first; its timeout begins
                    // at `Input::HookStarted`.
                    sm.handle_hook_queued(id);
                }
                self.carry_out(&mut run, a);
            }
            self.publish_view(&sm, &run);
            if sm.is_stopped() {
                return;
            }
            let wake = sm
                .poll_timeout()
                .map(|t| run.origin + Duration::from_nanos(t.as_nanos()));
            tokio::select! {
                _ = sleep_until(wake) => {
                    let now = run.now();
                    paused.check(&mut sm, now);
                    sm.handle_timeout(now);
                }
                Some(input) = rx.recv() => match input {
                    Input::Response(id, r) => {
                        let mut ordered = None;
                        match &r {
                            Ok(LeaseResponse::Renewed { switchover, paused, .. }) => {
                                self.view(|v| v.renewals += 1);
                                ordered = switchover.clone().map(|o| (o, *paused));
                            }
                            Ok(LeaseResponse::Granted { .. }) => self.refused(None),
                            Err(Refusal::Lagging { lag, max_lag }) => {
                                self.refused(Some(Lagging { lag: *lag, max_lag: *max_lag }));
                            }
                            _ => {}
                        }
                        match r {
                            Err(Refusal::TooNew { .. }) => sm.handle_too_new(run.now(), id),
                            r => sm.handle_response(run.now(), id, r.ok()),
                        }
                        if let Some((order, paused)) = ordered {
                            self.switch_over(&mut sm, &mut switching, order, paused, run.now());
                        }
                    }
                    Input::HookStarted(id, pgid) => {
                        self.hook_started(&mut run, id, pgid);
                        sm.handle_hook_started(run.now(), id);
                    }
                    Input::HookExit(id, exit) => {
                        let hook = run.hooks.remove(&id);
                        if let (Some(HookRun { promote: true, pgid: Some(_), .. }), Some(h)) =
                            (&hook, run.watchdog)
                        {
                            self.ctx.watchdogs.promote(h, None);
                        }
                        // With no watchdog left to remove it (it could not
                        // be asked), the demote's claim is removed here: no
                        // fence can come for this holding any more.
                        if let (Some(claim), None) = (hook.and_then(|h| h.claim), run.watchdog) {
                            let _ = std::fs::remove_file(claim);
                        }
                        sm.handle_hook_exit(run.now(), id, exit);
                    }
                    // (An answer about an earlier holding is stale.)
                    Input::Watchdog(h, answer) if h == 0 || run.watchdog == Some(h) => {
                        if answer.is_none() {
                            run.watchdog = None;
                        }
                        if std::mem::take(&mut run.disarming) {
                            sm.handle_watchdog_released(run.now(), answer.unwrap_or(false));
                        }
                    }
                    Input::Watchdog(..) => {}
                    // A watchdog that does not answer (frozen, starved)
                    // must not hold up the demote past the drift margin:
                    // the demote runs under the holding's claim, so a
                    // fence the watchdog runs too, or ran, happens once
                    // (nemesis seed 70114: an isolated holder whose
                    // watchdog was stopped demoted only when it thawed,
                    // 0.7 s after the next holder's promote began).
                    Input::DisarmLate(h) if run.watchdog == Some(h) && run.disarming => {
                        tracing::warn!(role = %self.spec.name, "the watchdog did not answer in {DISARM_WAIT:?}: demoting without its answer");
                        run.disarming = false;
                        sm.handle_watchdog_released(run.now(), false);
                    }
                    Input::DisarmLate(_) => {}
                    Input::Fenced(h) if run.watchdog == Some(h) => {
                        tracing::warn!(role = %self.spec.name, "the watchdog fenced this holding (its deadline passed before a renewal reached it): stepping down");
                        sm.handle_watchdog_fenced(run.now());
                    }
                    Input::Fenced(_) => {}
                    Input::Adopt(epoch, kept) => {
                        tracing::info!(role = %self.spec.name, epoch, kept, "adopting the paused role this node holds");
                        sm.handle_adopt(run.now(), epoch, kept);
                    }
                },
                _ = checks.tick() => {
                    let now = run.now();
                    paused.check(&mut sm, now);
                    sm.handle_checks(now, self.status(now));
                }
                Some(to) = self.handover.recv() => sm.handle_handover(run.now(), to),
                Some(order) = self.orders.recv() => match order {
                    RoleOrder::Retune(spec) => retuned = Some(*spec),
                    RoleOrder::Retire(done) => {
                        let free = sm.epoch().is_none();
                        if free {
                            sm.handle_stop(run.now());
                        }
                        let _ = done.send(free);
                    }
                },
                Some(data) = next_data(&mut self.data) => sm.handle_data(run.now(), data),
                _ = self.stop.changed(), if !stopping => {
                    stopping = true;
                    sm.handle_stop(run.now());
                }
            }
        }
    }

    /// Takes the candidacy's new settings `spec` (see [`RoleOrder::Retune`]):
    /// what must wait for the holding to end is given back.
    fn retune(&mut self, sm: &mut Holder, spec: RoleSpec) -> Option<RoleSpec> {
        let priority = spec.priority;
        self.spec.priority = priority;
        self.view(|v| v.priority = priority);
        let later = if sm.epoch().is_some() {
            (spec != self.spec).then_some(spec)
        } else {
            self.spec = spec;
            None
        };
        let s = &self.spec;
        sm.retune(s.priority, s.hook_timeout, s.fail_after);
        later
    }

    fn publish_view(&self, sm: &Holder, run: &Running) {
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

    fn carry_out(&self, run: &mut Running, a: Action) {
        match a {
            Action::Send {
                id,
                request,
                deadline,
            } => {
                let limit = run.left(deadline).max(Duration::from_millis(50));
                let (requests, tx) = (self.ctx.requests.clone(), run.tx.clone());
                tokio::spawn(async move {
                    let r = requests.send(request, limit).await;
                    let _ = tx.send(Input::Response(id, r));
                });
            }
            Action::StartHook {
                id,
                kind,
                epoch,
                reason,
            } => self.start_hook(run, id, kind, epoch, reason),
            Action::KillHook { id } => {
                if let Some(hook) = run.hooks.get_mut(&id) {
                    hook.kill = true;
                    if let Some(pgid) = hook.pgid {
                        crate::watchdog::kill_group(pgid);
                    }
                }
            }
            Action::StartWatchdog { epoch, deadline } => {
                self.forget_watchdog(run, false);
                run.watchdog = Some(self.ctx.watchdogs.guard(
                    run.tx.clone(),
                    self.claim(epoch),
                    self.spec.demote.clone(),
                    self.env(epoch),
                    self.spec.hook_timeout,
                    run.left(deadline),
                ));
            }
            Action::ArmWatchdog { deadline } => {
                if let Some(h) = run.watchdog {
                    self.ctx.watchdogs.arm(h, run.left(deadline));
                }
            }
            Action::DisarmWatchdog => {
                run.disarming = true;
                let asked = run.watchdog.is_some_and(|h| self.ctx.watchdogs.disarm(h));
                if let (true, Some(h)) = (asked, run.watchdog) {
                    let tx = run.tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(DISARM_WAIT).await;
                        let _ = tx.send(Input::DisarmLate(h));
                    });
                }
                if !asked {
                    // None runs, or it is gone (its pipe closed): the agent
                    // demotes itself (the claim keeps a fence the dead one
                    // may have started from running the demote twice).
                    self.forget_watchdog(run, false);
                    let _ = run.tx.send(Input::Watchdog(0, Some(false)));
                }
            }
            Action::StopWatchdog => self.forget_watchdog(run, false),
            Action::KeepWatchdog => self.forget_watchdog(run, true),
            Action::Event(e) => self.event(e),
        }
    }

    /// Stops guarding the holding the watchdog guards, if any (`keep`: the
    /// holding is kept, not released).
    fn forget_watchdog(&self, run: &mut Running, keep: bool) {
        if let Some(h) = run.watchdog.take() {
            self.ctx.watchdogs.forget(h, keep);
        }
    }

    fn start_hook(
        &self,
        run: &mut Running,
        id: HookId,
        kind: HookKind,
        epoch: u64,
        reason: HookReason,
    ) {
        // A demote runs under the holding's claim, shared with its
        // watchdog's fence, so that it runs once (see `watchdog.rs`).
        let demote = kind == HookKind::Demote && !self.spec.demote.is_empty();
        let claim = demote.then(|| self.claim(epoch));
        let argv = match (&claim, kind) {
            (Some(path), _) => {
                demote_once_argv(self.ctx.watchdogs.exe(), path, None, &self.spec.demote)
            }
            (None, HookKind::Promote) => self.spec.promote.clone(),
            (None, HookKind::Demote) => self.spec.demote.clone(),
        };
        let tx = run.tx.clone();
        let Some(cmd) = crate::watchdog::hook_command(&argv, &self.env(epoch), reason.as_str())
        else {
            let _ = tx.send(Input::HookExit(id, HookExit::Succeeded));
            return;
        };
        run.hooks.insert(
            id,
            HookRun {
                pgid: None,
                promote: kind == HookKind::Promote,
                kill: false,
                claim,
            },
        );
        let (slots, role) = (self.ctx.hook_slots.clone(), self.spec.name.clone());
        tokio::spawn(async move {
            // Waits for one of the agent's hook slots (`slots.rs`).
            let class = match kind {
                HookKind::Demote => slots::HookClass::Demote,
                HookKind::Promote => slots::HookClass::Promote,
            };
            let _slot = slots.acquire(class).await;
            let mut cmd = tokio::process::Command::from(cmd);
            cmd.kill_on_drop(false);
            // Started below the agent's priority (`priority.rs`).
            let Ok(mut child) = crate::priority::spawn(cmd).await else {
                tracing::warn!(%role, ?kind, "cannot start hook {argv:?}");
                let _ = tx.send(Input::HookExit(id, HookExit::NotStarted));
                return;
            };
            let _ = tx.send(Input::HookStarted(id, child.id().unwrap_or(0)));
            let exit = match child.wait().await {
                Ok(s) if s.success() => HookExit::Succeeded,
                _ => HookExit::Failed,
            };
            let _ = tx.send(Input::HookExit(id, exit));
        });
    }

    /// Hook run `id` has started in process group `pgid`: killed at once if
    /// a kill was asked while it waited for its slot; the watchdog is told
    /// of a promote hook.
    fn hook_started(&self, run: &mut Running, id: HookId, pgid: u32) {
        let Some(hook) = run.hooks.get_mut(&id) else {
            return;
        };
        hook.pgid = Some(pgid);
        if hook.kill {
            crate::watchdog::kill_group(pgid);
        } else if let (true, Some(h)) = (hook.promote, run.watchdog) {
            self.ctx.watchdogs.promote(h, Some(pgid));
        }
    }

    /// A switchover ordered for this holding came with a renewal's answer:
    /// hand over if it is due and its target has caught up
    /// ([`switchover::readiness`]); a `waiting` event once per order while
    /// it has not, a `handing-over` event as it goes.
    fn switch_over(
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
            let views = self.views.lock().expect("role views lock");
            let pg = views.get(&self.spec.name).and_then(|v| v.postgres.clone());
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

    /// Looks, in the agent's readings of the control plane's table
    /// ([`kept::KeptTables`]), for this node holding the role while it is
    /// paused (an earlier run kept it when it stopped): the manager is then
    /// told to adopt it.
    fn look_for_kept_role(&self, tx: &mpsc::UnboundedSender<Input>) {
        let (tables, tx) = (self.ctx.kept.clone(), tx.clone());
        let (role, node) = (self.spec.name.clone(), self.ctx.node.clone());
        tokio::spawn(async move {
            if let Some((epoch, kept)) = tables.find(&role, &node).await {
                let _ = tx.send(Input::Adopt(epoch, kept));
            }
        });
    }

    /// The claim file this holding's demote and its watchdog's fence share.
    fn claim(&self, epoch: u64) -> PathBuf {
        crate::watchdog::claim_path(std::process::id(), &self.spec.name, epoch)
    }

    /// The control plane refused this candidate the role because its copy
    /// lags, or granted it (`None`): shown in the role's view while it
    /// lasts, and a `not-eligible` event when it begins.
    fn refused(&self, lagging: Option<Lagging>) {
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

    fn event(&self, e: HolderEvent) {
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

/// The next measurement of a replicated role's data (never, for a role
/// without one, or once its keeper has stopped).
async fn next_data(
    data: &mut Option<tokio::sync::watch::Receiver<DataState>>,
) -> Option<DataState> {
    let Some(rx) = data else {
        return std::future::pending().await;
    };
    if rx.changed().await.is_err() {
        *data = None;
        return None;
    }
    let d = rx.borrow_and_update().clone();
    Some(d)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
