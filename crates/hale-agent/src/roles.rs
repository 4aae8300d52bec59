//! Roles: this node's candidacies, held through leases from the control plane.
//!
//! Each role this node is a candidate for has a manager task. As a standby
//! it asks the control plane for the role when its service is healthy and
//! ready and no better candidate is (the control-plane leader's grantor
//! decides when the role may change hands). As the holder it renews every
//! `renew_every`, re-arms its watchdog, and demotes itself — demote hook,
//! then release — when its lease would run out, when a renewal is refused
//! (fenced), or when its service's essential checks have failed for
//! `fail_after`. A failing non-essential service never moves a role.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use hale_control::{HeldLease, LeaseRequest, LeaseResponse, LeaseTiming};
use hale_core::Time;

use crate::config::ConfigError;
use crate::control_client::ControlClient;
use crate::services::Services;

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
            return Err(ConfigError::Invalid {
                field: f("name"),
                problem: "must be 1 to 64 bytes".into(),
            });
        }
        if !services.contains(&self.service) {
            return Err(ConfigError::Invalid {
                field: f("service"),
                problem: format!("no [[service]] named {:?} on this node", self.service),
            });
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
            }));
        };
        let servers = parse_servers(&c.servers)?;
        let server = match c.id {
            Some(id) => {
                let bind = c.bind.as_deref().unwrap_or("127.0.0.1:7948");
                let addr: SocketAddr = bind.parse().map_err(|_| ConfigError::Invalid {
                    field: "control.bind".into(),
                    problem: format!("{bind:?} is not an address"),
                })?;
                Some((id, addr))
            }
            None => None,
        };
        if server.is_none() && servers.is_empty() {
            return Err(ConfigError::Invalid {
                field: "control.servers".into(),
                problem: "name at least one server, or give this agent an id to run one".into(),
            });
        }
        Ok(Some(ControlPlan {
            server,
            servers,
            bootstrap: c.bootstrap,
            data_dir: c.data_dir.clone().unwrap_or(default_dir),
        }))
    }
}

/// Parses `id=host:port` server entries.
pub fn parse_servers(list: &[String]) -> Result<BTreeMap<u64, SocketAddr>, ConfigError> {
    let mut out = BTreeMap::new();
    for s in list {
        let bad = || ConfigError::Invalid {
            field: "control.servers".into(),
            problem: format!("{s:?} is not like 1=10.0.0.5:7948"),
        };
        let (id, addr) = s.split_once('=').ok_or_else(bad)?;
        out.insert(
            id.trim().parse().map_err(|_| bad())?,
            addr.trim().parse().map_err(|_| bad())?,
        );
    }
    Ok(out)
}

/// This node's view of one of its roles, for the API.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoleView {
    /// The role.
    pub role: String,
    /// This node's priority.
    pub priority: i64,
    /// `holder`, `promoting` (granted, promote hook running), `standby` or `ineligible`.
    pub state: String,
    /// The fencing epoch held, if holder.
    pub epoch: Option<u64>,
    /// Milliseconds of lease left, if holder.
    pub lease_left_ms: Option<u64>,
    /// Why the last change happened.
    pub last_change: Option<String>,
    /// Unix time (ms) this node became holder, if holder.
    #[serde(default)]
    pub held_since_unix_ms: Option<u64>,
    /// Promotions and demotions so far.
    pub promotions: u64,
    /// Demotions so far.
    pub demotions: u64,
    /// Renewals committed.
    pub renewals: u64,
}

/// Reports a role change: its kind (`promoted`, `demoted`, `eligible`) and detail.
pub type OnRoleChange = Arc<dyn Fn(&str, serde_json::Value) + Send + Sync>;

/// Shared role views.
pub type RoleViews = Arc<Mutex<BTreeMap<String, RoleView>>>;

struct Watchdog(Child);

impl Watchdog {
    fn arm(&mut self, left: Duration) {
        if let Some(stdin) = self.0.stdin.as_mut() {
            let _ = writeln!(stdin, "arm {}", left.as_millis());
        }
    }
    fn release(mut self) {
        if let Some(stdin) = self.0.stdin.as_mut() {
            let _ = writeln!(stdin, "release");
        }
        let _ = self.0.wait();
    }
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
            state: "standby".into(),
            ..RoleView::default()
        });
        f(e);
    }

    async fn hook(&self, argv: Vec<String>, epoch: u64, reason: &'static str) -> bool {
        let env = self.env(epoch);
        let t = self.spec.hook_timeout;
        tokio::task::spawn_blocking(move || crate::watchdog::run_hook(&argv, &env, reason, t))
            .await
            .unwrap_or(false)
    }

    fn start_watchdog(&self, epoch: u64, left: Duration) -> Option<Watchdog> {
        let mut cmd = std::process::Command::new(&self.watchdog_exe);
        cmd.arg("watchdog")
            .arg("--deadline-ms")
            .arg(left.as_millis().to_string())
            .arg("--hook-timeout-ms")
            .arg(self.spec.hook_timeout.as_millis().to_string())
            .arg("--")
            .args(&self.spec.demote)
            .envs(self.env(epoch))
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        cmd.spawn().ok().map(Watchdog)
    }

    /// Runs until the task is aborted; on abort the watchdog, if any, fences
    /// (its standard input closes).
    pub async fn run(mut self) {
        let origin = Instant::now();
        let mut eligible_published: Option<bool> = None;
        let mut hold_off_until: Option<Instant> = None;
        let now = || Time::from_nanos(origin.elapsed().as_nanos() as u64);
        let mut held: Option<(HeldLease, Option<Watchdog>)> = None;
        // Standbys poll twice per renewal period, so that a grantable role is
        // taken quickly; holders renew once per period.
        let mut tick = tokio::time::interval(self.timing.renew_every / 2);
        let mut last_renewal: Option<Instant> = None;
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.stop.changed() => {
                    if let Some((lease, wd)) = held.take() {
                        self.demote(lease.epoch, wd, "leaving").await;
                    }
                    return;
                }
                Some(to) = self.handover.recv() => {
                    if let Some((lease, wd)) = held.take() {
                        self.demote_to(lease.epoch, wd, "handover", to).await;
                        // Let the next candidate take it.
                        hold_off_until = Some(Instant::now() + self.timing.lease);
                    }
                    continue;
                }
            }
            let (healthy, ready, failing_for) = {
                let all = self.services.lock().expect("services lock");
                let s = all.iter().find(|s| s.spec.name == self.spec.service);
                match s {
                    Some(s) => (s.healthy(), s.ready(), s.failing_for(Instant::now())),
                    None => (false, false, None),
                }
            };
            if let Some((lease, _)) = &held {
                let epoch = lease.epoch;
                let reason = if lease.expired(now()) {
                    Some("lease-expired")
                } else if failing_for.is_some_and(|d| d >= self.spec.fail_after) {
                    Some("service-failing")
                } else {
                    None
                };
                if let Some(reason) = reason {
                    let (_, wd) = held.take().expect("held");
                    self.demote(epoch, wd, reason).await;
                    continue;
                }
                if last_renewal.is_some_and(|t| t.elapsed() < self.timing.renew_every) {
                    continue;
                }
                last_renewal = Some(Instant::now());
                let sent = now();
                let req = LeaseRequest::Renew {
                    role: self.spec.name.clone(),
                    holder: self.node.clone(),
                    epoch,
                };
                let left = lease.valid_until().saturating_since(sent);
                match self
                    .control
                    .write(&req, left.max(Duration::from_millis(50)))
                    .await
                {
                    Some(LeaseResponse::Renewed { .. }) => {
                        if let Some((lease, wd)) = held.as_mut() {
                            lease.renewed(sent);
                            let left = lease.valid_until().saturating_since(now());
                            if let Some(w) = wd.as_mut() {
                                w.arm(left);
                            }
                            self.view(|v| {
                                v.renewals += 1;
                                v.lease_left_ms = Some(left.as_millis() as u64);
                            });
                        }
                    }
                    Some(LeaseResponse::Rejected(_)) => {
                        let (_, wd) = held.take().expect("held");
                        self.demote(epoch, wd, "fenced").await;
                    }
                    _ => {
                        let left = held
                            .as_ref()
                            .map(|(l, _)| l.valid_until().saturating_since(now()));
                        self.view(|v| v.lease_left_ms = left.map(|d| d.as_millis() as u64));
                    }
                }
                continue;
            }
            let eligible = healthy && ready;
            if eligible_published != Some(eligible) {
                eligible_published = Some(eligible);
                (self.on_change)(
                    "eligible",
                    serde_json::json!({ "role": self.spec.name, "eligible": eligible }),
                );
            }
            if !eligible {
                self.view(|v| v.state = "ineligible".into());
                continue;
            }
            if hold_off_until.is_some_and(|t| Instant::now() < t) {
                continue;
            }
            self.view(|v| v.state = "standby".into());
            let sent = now();
            let r = self
                .control
                .acquire(
                    &self.spec.name,
                    &self.node,
                    self.spec.priority,
                    Duration::from_millis(1500),
                )
                .await;
            if let Some(LeaseResponse::Granted { epoch }) = r {
                let lease = HeldLease::granted(self.timing, &self.spec.name, epoch, sent);
                if lease.expired(now()) {
                    continue; // Granted too late to use; it lapses and is granted again.
                }
                let left = lease.valid_until().saturating_since(now());
                let wd = self.start_watchdog(epoch, left);
                // Granted: promoting until the hook has run. A handover asked
                // for meanwhile is taken once the promotion completes.
                self.view(|v| {
                    v.state = "promoting".into();
                    v.epoch = Some(epoch);
                });
                let ok = self.hook(self.spec.promote.clone(), epoch, "promote").await;
                self.view(|v| {
                    v.state = "holder".into();
                    v.epoch = Some(epoch);
                    v.held_since_unix_ms = Some(crate::view::unix_ms());
                    v.promotions += 1;
                    v.last_change = Some(
                        if ok {
                            "promoted"
                        } else {
                            "promote hook failed"
                        }
                        .into(),
                    );
                });
                (self.on_change)(
                    "promoted",
                    serde_json::json!({ "role": self.spec.name, "epoch": epoch, "hook_ok": ok }),
                );
                held = Some((lease, wd));
                if !ok {
                    let (_, wd) = held.take().expect("held");
                    self.demote(epoch, wd, "promote-hook-failed").await;
                }
            }
        }
    }

    async fn demote(&self, epoch: u64, wd: Option<Watchdog>, reason: &'static str) {
        self.demote_to(epoch, wd, reason, None).await;
    }

    async fn demote_to(
        &self,
        epoch: u64,
        wd: Option<Watchdog>,
        reason: &'static str,
        next: Option<String>,
    ) {
        let ok = self.hook(self.spec.demote.clone(), epoch, reason).await;
        if let Some(w) = wd {
            let _ = tokio::task::spawn_blocking(move || w.release()).await;
        }
        let req = LeaseRequest::Release {
            role: self.spec.name.clone(),
            holder: self.node.clone(),
            epoch,
            next,
        };
        // Best effort: if the release is lost, the lease lapses on its own.
        let _ = self.control.write(&req, Duration::from_millis(500)).await;
        self.view(|v| {
            v.state = "standby".into();
            v.epoch = None;
            v.lease_left_ms = None;
            v.held_since_unix_ms = None;
            v.demotions += 1;
            v.last_change = Some(reason.into());
        });
        (self.on_change)(
            "demoted",
            serde_json::json!({ "role": self.spec.name, "epoch": epoch, "reason": reason, "hook_ok": ok }),
        );
    }
}
