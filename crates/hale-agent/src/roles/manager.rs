//! A role manager: the task that carries out, for one role, what its
//! [`Holder`] state machine asks (see [`super`]).
//!
//! The manager's loop ([`RoleManager::run`]) settles (takes a pending
//! retune, carries out the machine's actions, publishes the role's view),
//! then waits for one wake-up and hands it to the step that owns it:
//!
//! - the machine's own timers, and the 100 ms check of the role's service
//!   ([`RoleManager::on_checks`]), which also notices pauses;
//! - what the tasks it started report ([`Input`]): control-plane answers
//!   ([`RoleManager::on_response`]: renewals count in the view, a lagging
//!   refusal shows there, a switchover order goes to [`switching`]), and
//!   hook and watchdog news (`executor.rs`: hooks, claims, the fencing
//!   watchdog);
//! - the agent's handovers and orders ([`RoleManager::on_order`]), the
//!   keeper's measurements of the data, and the agent's stop.
//!
//! Its view is written through its own [`RoleViewWriter`] (`events.rs`:
//! the machine's events become view changes and reported role changes).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use hale_control::raft::api::{Answer, Refusal};
use hale_control::{
    Action, DataState, Holder, HolderConfig, HookExit, HookId, LeaseResponse, RequestId, RoleState,
    ServiceStatus,
};
use hale_core::Time;

use super::changes::RoleOrder;
use super::set::RoleContext;
use super::views::RoleViewWriter;
use crate::config::RoleSpec;
use crate::view::Lagging;

mod events;
mod executor;
mod leaving;
mod switching;

use executor::Running;
use leaving::Leaving;
use switching::Switching;

/// What reaches a role manager's loop from the tasks it started (and
/// from the agent's watchdog, [`super::Watchdogs`]).
pub(super) enum Input {
    Response(RequestId, Answer<LeaseResponse>),
    /// A hook run got its slot and started, in this process group.
    HookStarted(HookId, u32),
    HookExit(HookId, HookExit),
    /// The watchdog's answer to a `disarm` of holding `.0` (`None`: it
    /// exited before answering; holding 0: it could not be asked).
    Watchdog(u64, Option<bool>),
    /// `DISARM_WAIT` (`executor.rs`) has passed since the `disarm` of holding `.0`.
    DisarmLate(u64),
    /// The watchdog fenced holding `.0` on its own, unasked: its deadline
    /// passed before a renewal reached it.
    Fenced(u64),
    /// The control plane's table says this node holds the role, paused, at
    /// this epoch (and whether it records the holding as kept): adopt it.
    Adopt(u64, bool),
    /// The nodes that may take the role, best first, for a holder that
    /// may not be promoted (`leaving.rs`).
    Successors(Vec<String>),
}

/// One role's manager: see the module documentation. Built with
/// `RoleManager::new`, run with [`RoleManager::run`].
pub struct RoleManager {
    /// The candidacy.
    spec: RoleSpec,
    /// What every role manager of the agent shares: this node's name, the
    /// control plane through the agent's batches, the agent's time origin
    /// (their holders' renewals fall on the same instants and travel in
    /// one batch), services, lease timing, fencing watchdog, hook slots
    /// ([`super::slots`]) and where role changes are reported.
    ctx: Arc<RoleContext>,
    /// Where this role's state is published (its view only).
    views: RoleViewWriter,
    /// Fires when the agent stops: hand the role over at once.
    stop: watch::Receiver<bool>,
    /// Operator handovers: step down and let the next candidate (or the
    /// named one) take over.
    handover: mpsc::Receiver<Option<String>>,
    /// The agent's orders (see [`RoleOrder`]).
    orders: mpsc::UnboundedReceiver<RoleOrder>,
    /// A replicated role: what its keeper measures of the data
    /// ([`super::postgres::Keeper`]).
    data: Option<watch::Receiver<DataState>>,
}

/// The agent's side of a role manager: where its handovers and orders go.
#[derive(Debug, Clone)]
pub(crate) struct ManagerHandle {
    handover: mpsc::Sender<Option<String>>,
    orders: mpsc::UnboundedSender<RoleOrder>,
}

impl ManagerHandle {
    /// Where operator handovers go.
    pub(crate) fn handover(&self) -> mpsc::Sender<Option<String>> {
        self.handover.clone()
    }

    /// Sends the manager new settings (see [`RoleOrder::Retune`]).
    pub(crate) fn retune(&self, spec: RoleSpec) {
        let _ = self.orders.send(RoleOrder::Retune(Box::new(spec)));
    }

    /// Asks the manager to retire (see [`RoleOrder::Retire`]): false if it
    /// is gone.
    pub(crate) fn retire(&self, done: oneshot::Sender<bool>) -> bool {
        self.orders.send(RoleOrder::Retire(done)).is_ok()
    }
}

/// A running manager's state, in parts that each own theirs.
struct Live {
    /// The decisions: the role's state machine.
    sm: Holder,
    /// What carries them out: requests, hooks and the watchdog.
    run: Running,
    /// Notices the manager was stopped (a pause of the process).
    paused: PauseWatch,
    /// The switchover order last seen, and what was done about it.
    switching: Switching,
    /// A holder that may not be promoted: its handover.
    leaving: Leaving,
    /// New settings that wait for the holding to end.
    retuned: Option<RoleSpec>,
    /// The agent's stop was passed to the machine.
    stopping: bool,
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

impl RoleManager {
    /// The manager of candidacy `spec`, sharing `ctx`, publishing its view
    /// through `views`, stopping (handing the role over) when `stop`
    /// fires; with the handle its handovers and orders go through.
    pub(crate) fn new(
        spec: RoleSpec,
        ctx: Arc<RoleContext>,
        views: RoleViewWriter,
        stop: watch::Receiver<bool>,
    ) -> (RoleManager, ManagerHandle) {
        let (handover, handover_rx) = mpsc::channel(1);
        let (orders, orders_rx) = mpsc::unbounded_channel();
        let mgr = RoleManager {
            spec,
            ctx,
            views,
            stop,
            handover: handover_rx,
            orders: orders_rx,
            data: None,
        };
        (mgr, ManagerHandle { handover, orders })
    }

    /// A replicated role: the manager follows what its keeper measures of
    /// the data.
    pub(crate) fn with_data(mut self, data: Option<watch::Receiver<DataState>>) -> RoleManager {
        self.data = data;
        self
    }

    /// Runs until the agent's stop has been carried out (the role given up)
    /// or the task is aborted; on abort the watchdog, if any, fences (its
    /// standard input closes).
    pub async fn run(mut self) {
        let (mut live, mut rx) = self.begin();
        let mut checks = tokio::time::interval(Duration::from_millis(100));
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.settle(&mut live);
            if live.sm.is_stopped() {
                return;
            }
            let wake = live
                .sm
                .poll_timeout()
                .map(|t| live.run.origin + Duration::from_nanos(t.as_nanos()));
            tokio::select! {
                _ = sleep_until(wake) => {
                    let now = live.run.now();
                    live.paused.check(&mut live.sm, now);
                    live.sm.handle_timeout(now);
                }
                Some(input) = rx.recv() => self.on_input(&mut live, input),
                _ = checks.tick() => self.on_checks(&mut live),
                Some(to) = self.handover.recv() => live.sm.handle_handover(live.run.now(), to),
                Some(order) = self.orders.recv() => self.on_order(&mut live, order),
                Some(data) = next_data(&mut self.data) => live.sm.handle_data(live.run.now(), data),
                _ = self.stop.changed(), if !live.stopping => {
                    live.stopping = true;
                    live.sm.handle_stop(live.run.now());
                }
            }
        }
    }

    /// The manager's state as it starts: a fresh state machine, nothing
    /// running; a kept role is looked for.
    fn begin(&self) -> (Live, mpsc::UnboundedReceiver<Input>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let run = Running::new(self.ctx.origin, tx);
        let sm = Holder::new(
            HolderConfig {
                role: self.spec.name.clone(),
                node: self.ctx.node.clone(),
                priority: self.spec.priority,
                promotable: self.spec.promotable,
                timing: self.ctx.timing,
                hook_timeout: self.spec.hook_timeout,
                fail_after: self.spec.fail_after,
                acquire_timeout: Duration::from_millis(1500),
                instance: crate::membership::seed::fresh_seed(),
                max_lag: self.spec.max_lag(),
                identity: self.ctx.identity.clone(),
                after_older_release: self.ctx.after_older_release,
            },
            run.now(),
        );
        self.look_for_kept_role(&run.tx);
        let live = Live {
            paused: PauseWatch { last: run.now() },
            sm,
            run,
            switching: Switching::default(),
            leaving: Leaving::default(),
            retuned: None,
            stopping: false,
        };
        (live, rx)
    }

    /// Before each wait: a pending retune is taken, a holder that may not
    /// be promoted looks for a successor, the machine's actions carried
    /// out, the role's view published.
    fn settle(&mut self, live: &mut Live) {
        if let Some(spec) = live.retuned.take() {
            live.retuned = self.retune(&mut live.sm, spec);
        }
        let now = live.run.now();
        self.maybe_leave(&live.sm, &mut live.leaving, &live.run.tx, now);
        while let Some(a) = live.sm.poll_action() {
            if let Action::StartHook { id, .. } = a {
                // It waits for a hook slot first; its timeout begins
                // at `Input::HookStarted`.
                live.sm.handle_hook_queued(id);
            }
            self.carry_out(&mut live.run, a);
        }
        self.publish_view(&live.sm, &live.run);
    }

    /// What a task this manager started reports.
    fn on_input(&mut self, live: &mut Live, input: Input) {
        let Live {
            sm, run, leaving, ..
        } = live;
        match input {
            Input::Response(id, r) => self.on_response(live, id, r),
            Input::HookStarted(id, pgid) => {
                self.hook_started(run, id, pgid, sm.lease_valid_until());
                sm.handle_hook_started(run.now(), id);
            }
            Input::HookExit(id, exit) => self.on_hook_exit(sm, run, id, exit),
            Input::Watchdog(h, answer) => self.on_watchdog_answer(sm, run, h, answer),
            Input::DisarmLate(h) => self.on_disarm_late(sm, run, h),
            Input::Fenced(h) => self.on_fenced(sm, run, h),
            Input::Adopt(epoch, kept) => {
                tracing::info!(role = %self.spec.name, epoch, kept, "adopting the paused role this node holds");
                sm.handle_adopt(run.now(), epoch, kept);
            }
            Input::Successors(found) => {
                let now = run.now();
                self.on_successors(sm, leaving, found, now);
            }
        }
    }

    /// The control plane's answer to request `id`: renewals are counted,
    /// a lagging refusal (or a grant, which ends it) shown in the view, a
    /// switchover order that came with a renewal considered.
    fn on_response(&mut self, live: &mut Live, id: RequestId, r: Answer<LeaseResponse>) {
        let mut ordered = None;
        match &r {
            Ok(LeaseResponse::Renewed {
                switchover, paused, ..
            }) => {
                self.view(|v| v.renewals += 1);
                ordered = switchover.clone().map(|o| (o, *paused));
            }
            Ok(LeaseResponse::Granted { .. }) => self.refused(None),
            Err(Refusal::Lagging { lag, max_lag }) => {
                self.refused(Some(Lagging {
                    lag: *lag,
                    max_lag: *max_lag,
                }));
            }
            _ => {}
        }
        let now = live.run.now();
        match r {
            Err(Refusal::TooNew { .. }) => live.sm.handle_too_new(now, id),
            r => live.sm.handle_response(now, id, r.ok()),
        }
        if let Some((order, paused)) = ordered {
            let now = live.run.now();
            self.switch_over(&mut live.sm, &mut live.switching, order, paused, now);
        }
    }

    /// The 100 ms check: a pause is noticed, the service's status given to
    /// the machine.
    fn on_checks(&self, live: &mut Live) {
        let now = live.run.now();
        live.paused.check(&mut live.sm, now);
        let holding = live.sm.state() == RoleState::Holder;
        live.sm.handle_checks(now, self.status(now, holding));
    }

    /// An order of the agent's (see [`RoleOrder`]).
    fn on_order(&self, live: &mut Live, order: RoleOrder) {
        match order {
            RoleOrder::Retune(spec) => live.retuned = Some(*spec),
            RoleOrder::Retire(done) => {
                let free = live.sm.epoch().is_none();
                if free {
                    live.sm.handle_stop(live.run.now());
                }
                let _ = done.send(free);
            }
        }
    }

    /// Takes the candidacy's new settings `spec` (see [`RoleOrder::Retune`]):
    /// its priority and tags at once, what must wait for the holding to end
    /// given back.
    fn retune(&mut self, sm: &mut Holder, spec: RoleSpec) -> Option<RoleSpec> {
        let (priority, tags) = (spec.priority, spec.tags());
        self.spec.priority = priority;
        self.spec.promotable = tags.promotable;
        self.spec.load_balance = tags.load_balance;
        self.spec.synchronous_standby = tags.synchronous_standby;
        self.view(|v| {
            v.priority = priority;
            v.tags = tags;
        });
        let later = if sm.epoch().is_some() {
            (spec != self.spec).then_some(spec)
        } else {
            self.spec = spec;
            None
        };
        let s = &self.spec;
        sm.retune(s.priority, s.promotable, s.hook_timeout, s.fail_after);
        later
    }

    /// The role's service as its checks see it now (a service with no
    /// checks: the default status).
    /// The role's service as the holder machine reads it. A holder whose
    /// only failing checks are short of disk is given them as passing: it
    /// does not drop the role with nobody to take it, and hands it to a
    /// node with room instead (`leaving.rs`).
    fn status(&self, now: Time, holding: bool) -> ServiceStatus {
        let all = self.ctx.services.lock().expect("services lock");
        match all.iter().find(|s| s.spec.name == self.spec.service) {
            Some(s) if holding && s.short_of_disk_only() => ServiceStatus {
                healthy: true,
                ready: s.ready(),
                failing_since: None,
            },
            Some(s) => ServiceStatus {
                healthy: s.healthy(),
                ready: s.ready(),
                failing_since: s.failing_for(Instant::now()).map(|d| now - d),
            },
            None => ServiceStatus::default(),
        }
    }

    /// Whether the role's service fails only for want of disk (see
    /// [`crate::roles::services::ServiceState::short_of_disk_only`]).
    fn short_of_disk(&self) -> bool {
        let all = self.ctx.services.lock().expect("services lock");
        all.iter()
            .find(|s| s.spec.name == self.spec.service)
            .is_some_and(|s| s.short_of_disk_only())
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
