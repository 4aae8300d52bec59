//! Roles: this node's candidacies, held through leases from the control plane.
//!
//! Each role this node is a candidate for has a manager task that carries
//! out what the role's [`Holder`] state machine (in `hale-control`) asks:
//! control-plane requests (each on a task of its own, so that renewals
//! never wait for anything), hooks (each in a process group of its own,
//! killed as a group), and the fencing watchdog process. The decisions —
//! when to ask for the role, renew, give it up, kill a hook, demote — are
//! the state machine's, and the lease-history model checks them. A failing
//! non-essential service never moves a role.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use hale_control::{
    Action, ControlRequest, Holder, HolderConfig, HolderEvent, HookExit, HookId, HookKind,
    LeaseResponse, LeaseTiming, RequestId, RoleState, ServiceStatus,
};
use hale_core::Time;

use crate::config::{invalid, ConfigError};
use crate::control_client::ControlClient;
use crate::services::Services;
use crate::view::{AgentEvent, RoleView};

/// `[control]` in hale.toml: where the control plane is.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlSection {
    /// Run a control-plane server with this id (1, 2, ...). Omit on agents
    /// that only use the control plane.
    pub id: Option<u64>,
    /// The server's Raft/HTTP listener (default 127.0.0.1:7948).
    pub bind: Option<String>,
    /// Every server, as `id=host:port`.
    #[serde(default)]
    pub servers: Vec<String>,
    /// Initialise a new control plane from this server (exactly one server,
    /// once; harmless afterwards).
    #[serde(default)]
    pub bootstrap: bool,
    /// Where the server keeps its log and snapshots (default `hale-data/<name>`).
    pub data_dir: Option<PathBuf>,
    /// How long a lease lasts (default 2 s). Shorter: faster failover when
    /// a holder's host dies, but a control-plane hiccup (an election, a
    /// slow disk) of that length costs the holder its role. Must be the
    /// same on every agent of the cluster.
    #[serde(default, with = "humantime_serde")]
    pub lease: Option<Duration>,
    /// How often a holder renews (default 500 ms; at most a third of the lease).
    #[serde(default, with = "humantime_serde")]
    pub renew_every: Option<Duration>,
}

impl ControlSection {
    /// The lease timing these settings give (defaults where unset).
    pub fn timing(&self) -> Result<LeaseTiming, ConfigError> {
        let d = LeaseTiming::default();
        let lease = self.lease.unwrap_or(d.lease);
        let renew_every = self.renew_every.unwrap_or(d.renew_every);
        let bad = |field: &str, problem: String| invalid(&format!("control.{field}"), problem);
        if lease < Duration::from_millis(500) || lease > Duration::from_secs(300) {
            return Err(bad("lease", format!("{lease:?} is outside 500ms..300s")));
        }
        if renew_every < Duration::from_millis(50) {
            return Err(bad("renew_every", format!("{renew_every:?} is below 50ms")));
        }
        if renew_every * 3 > lease {
            return Err(bad(
                "renew_every",
                format!(
                    "{renew_every:?} is more than a third of control.lease ({lease:?}): \
                     a holder must be able to miss two renewals and keep its lease"
                ),
            ));
        }
        Ok(LeaseTiming {
            lease,
            renew_every,
            // Tolerates clocks running 20% apart over one lease.
            drift_margin: lease / 5,
        })
    }
}

/// `[[role]]`: this node's candidacy for a role.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSection {
    /// The role (e.g. `db-primary`).
    pub name: String,
    /// The service on this node that backs the role: its checks gate holding it.
    pub service: String,
    /// Higher wins among healthy, ready candidates (default 0).
    #[serde(default)]
    pub priority: i64,
    /// Command run when this node becomes holder (`HALE_ROLE`, `HALE_EPOCH` set).
    #[serde(default)]
    pub promote: Vec<String>,
    /// Command run when this node stops being holder (also the watchdog's fence).
    #[serde(default)]
    pub demote: Vec<String>,
    /// Hard limit on a hook (default 10 s).
    #[serde(default, with = "humantime_serde")]
    pub hook_timeout: Option<Duration>,
    /// Hand the role over when the service's essential checks fail this long (default 3 s).
    #[serde(default, with = "humantime_serde")]
    pub fail_after: Option<Duration>,
}

/// A validated candidacy.
#[derive(Debug, Clone)]
pub struct RoleSpec {
    /// Role name.
    pub name: String,
    /// Backing service.
    pub service: String,
    /// Priority.
    pub priority: i64,
    /// Promote hook.
    pub promote: Vec<String>,
    /// Demote hook.
    pub demote: Vec<String>,
    /// Hook time limit.
    pub hook_timeout: Duration,
    /// Failing-checks threshold.
    pub fail_after: Duration,
}

impl RoleSection {
    /// Validates against the node's services.
    pub fn validate(&self, i: usize, services: &[String]) -> Result<RoleSpec, ConfigError> {
        let f = |x: &str| format!("role[{i}].{x}");
        if self.name.is_empty() || self.name.len() > 64 {
            return Err(invalid(&f("name"), "must be 1 to 64 bytes"));
        }
        if !services.contains(&self.service) {
            let problem = format!("no [[service]] named {:?} on this node", self.service);
            return Err(invalid(&f("service"), problem));
        }
        Ok(RoleSpec {
            name: self.name.clone(),
            service: self.service.clone(),
            priority: self.priority,
            promote: self.promote.clone(),
            demote: self.demote.clone(),
            hook_timeout: self.hook_timeout.unwrap_or(Duration::from_secs(10)),
            fail_after: self.fail_after.unwrap_or(Duration::from_secs(3)),
        })
    }
}

/// Where this agent finds (and maybe runs) the control plane.
#[derive(Debug, Clone)]
pub struct ControlPlan {
    /// Run a server: its id and listener.
    pub server: Option<(u64, SocketAddr)>,
    /// Every server's address (this one's added once bound, if missing).
    pub servers: BTreeMap<u64, SocketAddr>,
    /// Initialise the control plane from this server.
    pub bootstrap: bool,
    /// The server's data directory.
    pub data_dir: PathBuf,
    /// Lease timing (`[control] lease`, `renew_every`).
    pub timing: LeaseTiming,
}

impl ControlSection {
    /// The plan for an agent named `node`; a lone agent with roles and no
    /// `[control]` runs a one-server control plane of its own.
    pub fn plan(
        section: Option<&ControlSection>,
        node: &str,
        has_roles: bool,
    ) -> Result<Option<ControlPlan>, ConfigError> {
        let default_dir = PathBuf::from("hale-data").join(node);
        let Some(c) = section else {
            return Ok(has_roles.then(|| ControlPlan {
                server: Some((1, SocketAddr::from(([127, 0, 0, 1], 0)))),
                servers: BTreeMap::new(),
                bootstrap: true,
                data_dir: default_dir,
                timing: LeaseTiming::default(),
            }));
        };
        let servers = parse_servers(&c.servers)?;
        let timing = c.timing()?;
        let bind = c.bind.as_deref().unwrap_or("127.0.0.1:7948");
        let addr = |id| {
            let bad = |_| invalid("control.bind", format!("{bind:?} is not an address"));
            bind.parse().map(|a: SocketAddr| (id, a)).map_err(bad)
        };
        let server = c.id.map(addr).transpose()?;
        if server.is_none() && servers.is_empty() {
            let problem = "name at least one server, or give this agent an id to run one";
            return Err(invalid("control.servers", problem));
        }
        Ok(Some(ControlPlan {
            server,
            servers,
            bootstrap: c.bootstrap,
            data_dir: c.data_dir.clone().unwrap_or(default_dir),
            timing,
        }))
    }
}

/// Parses `id=host:port` server entries.
pub fn parse_servers(list: &[String]) -> Result<BTreeMap<u64, SocketAddr>, ConfigError> {
    let mut out = BTreeMap::new();
    for s in list {
        let bad = || {
            invalid(
                "control.servers",
                format!("{s:?} is not like 1=10.0.0.5:7948"),
            )
        };
        let (id, addr) = s.split_once('=').ok_or_else(bad)?;
        out.insert(
            id.trim().parse().map_err(|_| bad())?,
            addr.trim().parse().map_err(|_| bad())?,
        );
    }
    Ok(out)
}

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

/// Shared role views.
pub type RoleViews = Arc<Mutex<BTreeMap<String, RoleView>>>;

/// The watchdog process of one holding, and the thread reading its answers.
struct Watchdog {
    child: Child,
    /// Tells its answers from an earlier watchdog's.
    gen: u64,
}

impl Watchdog {
    /// Sends one line; false if the watchdog is gone (its pipe is closed).
    fn send(&mut self, line: &str) -> bool {
        match self.child.stdin.as_mut() {
            Some(stdin) => writeln!(stdin, "{line}")
                .and_then(|()| stdin.flush())
                .is_ok(),
            None => false,
        }
    }

    /// Tells it to exit without fencing, and reaps it off the runtime.
    fn stop(mut self) {
        self.send("stop");
        std::thread::spawn(move || {
            let _ = self.child.wait();
        });
    }
}

/// What reaches a role manager's loop from the tasks it started.
enum Input {
    Response(RequestId, Option<LeaseResponse>),
    HookExit(HookId, HookExit),
    /// Watchdog `gen`'s answer to `disarm` (`None`: it exited).
    Watchdog(u64, Option<bool>),
}

/// Everything a role manager needs.
pub struct RoleManager {
    /// The candidacy.
    pub spec: RoleSpec,
    /// This node's name.
    pub node: String,
    /// The control plane.
    pub control: ControlClient,
    /// This node's services.
    pub services: Services,
    /// Lease timing.
    pub timing: LeaseTiming,
    /// Where to publish this role's state.
    pub views: RoleViews,
    /// The `hale` executable, to start the watchdog.
    pub watchdog_exe: PathBuf,
    /// Reports role changes as (kind, detail).
    pub on_change: OnRoleChange,
    /// Fires when the agent stops: hand the role over at once.
    pub stop: tokio::sync::watch::Receiver<bool>,
    /// Operator handovers: step down and let the next candidate (or the
    /// named one) take over.
    pub handover: tokio::sync::mpsc::Receiver<Option<String>>,
}

/// The executor's own state: running hooks and the watchdog.
struct Running {
    origin: Instant,
    tx: mpsc::UnboundedSender<Input>,
    /// Hook runs: process group, and whether it is the promote hook.
    hooks: BTreeMap<HookId, (u32, bool)>,
    watchdog: Option<Watchdog>,
    /// The last watchdog started (its generation).
    watchdog_gen: u64,
    /// The holding the watchdog guards: its epoch and the lease's end, to
    /// start another if it dies.
    guarded: Option<(u64, Time)>,
    /// A `disarm` awaits its answer.
    disarming: bool,
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
            ("HALE_NODE".into(), self.node.clone()),
        ]
    }

    fn view(&self, f: impl FnOnce(&mut RoleView)) {
        let mut v = self.views.lock().expect("role views lock");
        let e = v.entry(self.spec.name.clone()).or_insert_with(|| RoleView {
            role: self.spec.name.clone(),
            priority: self.spec.priority,
            state: RoleState::Ineligible,
            ..RoleView::default()
        });
        f(e);
    }

    fn status(&self, now: Time) -> ServiceStatus {
        let all = self.services.lock().expect("services lock");
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
            origin: Instant::now(),
            tx,
            hooks: BTreeMap::new(),
            watchdog: None,
            watchdog_gen: 0,
            guarded: None,
            disarming: false,
        };
        let mut sm = Holder::new(
            HolderConfig {
                role: self.spec.name.clone(),
                node: self.node.clone(),
                priority: self.spec.priority,
                timing: self.timing,
                hook_timeout: self.spec.hook_timeout,
                fail_after: self.spec.fail_after,
                acquire_timeout: Duration::from_millis(1500),
                instance: crate::fresh_seed(),
            },
            run.now(),
        );
        let mut checks = tokio::time::interval(Duration::from_millis(100));
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stopping = false;
        loop {
            while let Some(a) = sm.poll_action() {
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
                _ = sleep_until(wake) => sm.handle_timeout(run.now()),
                Some(input) = rx.recv() => match input {
                    Input::Response(id, r) => {
                        if matches!(r, Some(LeaseResponse::Renewed { .. })) {
                            self.view(|v| v.renewals += 1);
                        }
                        sm.handle_response(run.now(), id, r);
                    }
                    Input::HookExit(id, exit) => {
                        if let Some((_, true)) = run.hooks.remove(&id) {
                            if let Some(w) = run.watchdog.as_mut() {
                                w.send("promote-done");
                            }
                        }
                        sm.handle_hook_exit(run.now(), id, exit);
                    }
                    Input::Watchdog(gen, answer) => {
                        let current = run.watchdog.as_ref().map(|w| w.gen);
                        match answer {
                            // An earlier watchdog, stopped on purpose.
                            None if current != Some(gen) => {}
                            // It died while guarding a holding (killed,
                            // say): the holding must not go unguarded.
                            None if !run.disarming => self.restart_watchdog(&mut run),
                            _ if current.is_some() && current != Some(gen) => {}
                            _ => {
                                if answer.is_none() {
                                    run.watchdog = None;
                                }
                                if std::mem::take(&mut run.disarming) {
                                    let fenced = answer.unwrap_or(false);
                                    sm.handle_watchdog_released(run.now(), fenced);
                                }
                            }
                        }
                    }
                },
                _ = checks.tick() => {
                    let now = run.now();
                    sm.handle_checks(now, self.status(now));
                }
                Some(to) = self.handover.recv() => sm.handle_handover(run.now(), to),
                r = self.stop.changed(), if !stopping => {
                    let _ = r;
                    stopping = true;
                    sm.handle_stop(run.now());
                }
            }
        }
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
                let (control, tx) = (self.control.clone(), run.tx.clone());
                tokio::spawn(async move {
                    let call = async {
                        match &request {
                            ControlRequest::Acquire {
                                role,
                                holder,
                                priority,
                                attempt,
                            } => {
                                control
                                    .acquire(role, holder, *priority, *attempt, limit)
                                    .await
                            }
                            ControlRequest::Lease(r) => control.write(r, limit).await,
                        }
                    };
                    let r = tokio::time::timeout(limit, call).await.ok().flatten();
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
                if let Some((pgid, _)) = run.hooks.get(&id) {
                    crate::watchdog::kill_group(*pgid);
                }
            }
            Action::StartWatchdog { epoch, deadline } => {
                if let Some(old) = run.watchdog.take() {
                    old.stop();
                }
                run.guarded = Some((epoch, deadline));
                run.watchdog = self.start_watchdog(run, epoch, run.left(deadline));
            }
            Action::ArmWatchdog { deadline } => {
                if let Some((_, until)) = run.guarded.as_mut() {
                    *until = deadline;
                }
                let ms = run.left(deadline).as_millis();
                if let Some(w) = run.watchdog.as_mut() {
                    w.send(&format!("arm {ms}"));
                }
            }
            Action::DisarmWatchdog => {
                run.disarming = true;
                let asked = run.watchdog.as_mut().is_some_and(|w| w.send("disarm"));
                if !asked {
                    // None runs, or it is gone (its pipe closed): the agent
                    // demotes itself (the claim keeps a fence the dead one
                    // may have started from running the demote twice).
                    if let Some(dead) = run.watchdog.take() {
                        dead.stop();
                    }
                    let _ = run.tx.send(Input::Watchdog(0, Some(false)));
                }
            }
            Action::StopWatchdog => {
                run.guarded = None;
                if let Some(w) = run.watchdog.take() {
                    w.stop();
                }
            }
            Action::Event(e) => self.event(e),
        }
    }

    fn start_hook(
        &self,
        run: &mut Running,
        id: HookId,
        kind: HookKind,
        epoch: u64,
        reason: &'static str,
    ) {
        let claimed;
        let argv = match kind {
            HookKind::Promote => &self.spec.promote,
            // Under the holding's claim, shared with its watchdog's fence,
            // so that the demote runs once (see `watchdog.rs`).
            HookKind::Demote if self.spec.demote.is_empty() => &self.spec.demote,
            HookKind::Demote => {
                let claim = self.claim(epoch);
                claimed = [
                    self.watchdog_exe.display().to_string(),
                    "demote-once".to_owned(),
                    "--claim".to_owned(),
                    claim.display().to_string(),
                    "--".to_owned(),
                ]
                .into_iter()
                .chain(self.spec.demote.iter().cloned())
                .collect::<Vec<_>>();
                &claimed
            }
        };
        let tx = run.tx.clone();
        let Some(cmd) = crate::watchdog::hook_command(argv, &self.env(epoch), reason) else {
            let _ = tx.send(Input::HookExit(id, HookExit::Succeeded));
            return;
        };
        let mut cmd = tokio::process::Command::from(cmd);
        let child = cmd.kill_on_drop(false).spawn();
        let Ok(mut child) = child else {
            tracing::warn!(role = %self.spec.name, ?kind, "cannot start hook {argv:?}");
            let _ = tx.send(Input::HookExit(id, HookExit::NotStarted));
            return;
        };
        let pgid = child.id().unwrap_or(0);
        let promote = kind == HookKind::Promote;
        run.hooks.insert(id, (pgid, promote));
        if promote {
            if let Some(w) = run.watchdog.as_mut() {
                w.send(&format!("promote {pgid}"));
            }
        }
        tokio::spawn(async move {
            let exit = match child.wait().await {
                Ok(s) if s.success() => HookExit::Succeeded,
                _ => HookExit::Failed,
            };
            let _ = tx.send(Input::HookExit(id, exit));
        });
    }

    /// The claim file this holding's demote and its watchdog's fence share.
    fn claim(&self, epoch: u64) -> PathBuf {
        crate::watchdog::claim_path(std::process::id(), &self.spec.name, epoch)
    }

    /// The watchdog died while guarding a holding: starts another with the
    /// holding's deadline, told of a running promote hook.
    fn restart_watchdog(&self, run: &mut Running) {
        if let Some(dead) = run.watchdog.take() {
            dead.stop();
        }
        let Some((epoch, deadline)) = run.guarded else {
            return;
        };
        tracing::warn!(
            role = %self.spec.name,
            epoch,
            "the fencing watchdog exited while guarding a holding: starting another"
        );
        run.watchdog = self.start_watchdog(run, epoch, run.left(deadline));
        let promote = run.hooks.values().find(|(_, p)| *p).map(|(g, _)| *g);
        if let (Some(w), Some(pgid)) = (run.watchdog.as_mut(), promote) {
            w.send(&format!("promote {pgid}"));
        }
    }

    fn start_watchdog(&self, run: &mut Running, epoch: u64, left: Duration) -> Option<Watchdog> {
        run.watchdog_gen += 1;
        let gen = run.watchdog_gen;
        let mut cmd = std::process::Command::new(&self.watchdog_exe);
        cmd.arg("watchdog")
            .arg("--deadline-ms")
            .arg(left.as_millis().to_string())
            .arg("--hook-timeout-ms")
            .arg(self.spec.hook_timeout.as_millis().to_string())
            .arg("--claim")
            .arg(self.claim(epoch))
            .arg("--")
            .args(&self.spec.demote)
            .envs(self.env(epoch))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(role = %self.spec.name, "cannot start the watchdog: {e}");
                return None;
            }
        };
        let out = child.stdout.take();
        let tx = run.tx.clone();
        std::thread::spawn(move || {
            if let Some(out) = out {
                for line in std::io::BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send(Input::Watchdog(gen, Some(line.trim() == "fenced")));
                }
            }
            let _ = tx.send(Input::Watchdog(gen, None));
        });
        Some(Watchdog { child, gen })
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
            HolderEvent::Stopped => return,
        };
        (self.on_change)(change);
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
