//! Services and their health checks.
//!
//! A check is an HTTP request with an expected status, a TCP connect, or a
//! command with an expected exit code, run every `interval` under a hard
//! `timeout`: a check that hangs is a failing check (a command that times out
//! is killed). A service is healthy while all its liveness checks pass;
//! `ready` checks (replication lag, say) only gate promotion of a standby.
//! A failing non-essential service is only reported: it never triggers a
//! failover and never changes this node's membership.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{CheckSpec, Probe, ServiceSpec};
use crate::view::{CheckFailure, CheckResult, CheckView, ServiceView};

/// Live state of one check.
#[derive(Debug, Clone)]
pub struct CheckState {
    /// Its id in this agent (its task's).
    pub id: u64,
    /// The check.
    pub spec: CheckSpec,
    /// Recent results, newest last (at most 20).
    pub recent: VecDeque<CheckResult>,
    /// Since when the current failing streak lasts, if failing.
    pub failing_since: Option<Instant>,
    /// Runs so far.
    pub runs: u64,
    /// Failed runs so far.
    pub failures: u64,
}

impl CheckState {
    /// Check `id`, not run yet.
    fn new(id: u64, spec: CheckSpec) -> CheckState {
        CheckState {
            id,
            spec,
            recent: VecDeque::new(),
            failing_since: None,
            runs: 0,
            failures: 0,
        }
    }
}

/// Live state of one service.
#[derive(Debug, Clone)]
pub struct ServiceState {
    /// The service.
    pub spec: ServiceSpec,
    /// Its checks.
    pub checks: Vec<CheckState>,
}

impl ServiceState {
    /// Whether every liveness check has run and passed last time.
    pub fn healthy(&self) -> bool {
        self.passing(false)
    }

    /// Whether every readiness check passed last time.
    pub fn ready(&self) -> bool {
        self.passing(true)
    }

    /// Whether every readiness (or liveness) check passed last time.
    fn passing(&self, ready: bool) -> bool {
        let mut checks = self.checks.iter().filter(|c| c.spec.ready == ready);
        checks.all(|c| c.recent.back().is_some_and(|r| r.ok))
    }

    /// Whether some liveness check failed last time, and each that did was
    /// short of disk ([`CheckFailure::ShortOfDisk`]): the service works.
    pub fn short_of_disk_only(&self) -> bool {
        let mut failed = self
            .checks
            .iter()
            .filter(|c| !c.spec.ready)
            .filter_map(|c| c.recent.back())
            .filter(|r| !r.ok)
            .peekable();
        failed.peek().is_some() && failed.all(|r| r.failure == Some(CheckFailure::ShortOfDisk))
    }

    /// How long some liveness check has been failing (the longest streak).
    pub fn failing_for(&self, now: Instant) -> Option<Duration> {
        self.checks
            .iter()
            .filter(|c| !c.spec.ready)
            .filter_map(|c| c.failing_since.map(|s| now.duration_since(s)))
            .max()
    }
}

/// Every service of this node, shared between the checkers and readers.
pub type Services = Arc<Mutex<Vec<ServiceState>>>;

/// The checks of this node's services, one task each: started at once,
/// then changed as the configuration changes ([`Checks::apply`]). Dropping
/// it leaves the tasks running; [`Checks::stop`] ends them.
#[derive(Debug)]
pub struct Checks {
    services: Services,
    client: reqwest::Client,
    /// The task of each check, by its id.
    tasks: Mutex<BTreeMap<u64, tokio::task::JoinHandle<()>>>,
    last_id: AtomicU64,
}

impl Checks {
    /// Starts one task per check of `specs`.
    pub fn start(specs: Vec<ServiceSpec>) -> Checks {
        let checks = Checks {
            services: Arc::new(Mutex::new(Vec::new())),
            client: reqwest::Client::new(),
            tasks: Mutex::new(BTreeMap::new()),
            last_id: AtomicU64::new(0),
        };
        checks.apply(specs);
        checks
    }

    /// The services and the state of their checks.
    pub fn services(&self) -> &Services {
        &self.services
    }

    /// Runs `specs` from now on, in their order: a check whose settings
    /// did not change keeps running, with its history; a new or changed
    /// one starts afresh (it has not run yet: its service is not healthy
    /// until it has, which stops no holder, see `roles`); one gone stops.
    pub fn apply(&self, specs: Vec<ServiceSpec>) {
        let mut started = Vec::new();
        let mut stopped = Vec::new();
        let mut all = self.services.lock().expect("services lock");
        let mut old = std::mem::take(&mut *all);
        for spec in specs {
            let mut kept = old
                .iter_mut()
                .find(|o| o.spec.name == spec.name)
                .map(|o| std::mem::take(&mut o.checks))
                .unwrap_or_default();
            let checks = spec
                .checks
                .iter()
                .map(|c| match kept.iter().position(|k| &k.spec == c) {
                    Some(i) => kept.remove(i),
                    None => {
                        let id = self.last_id.fetch_add(1, Ordering::Relaxed) + 1;
                        started.push((id, c.clone()));
                        CheckState::new(id, c.clone())
                    }
                })
                .collect();
            stopped.extend(kept.iter().map(|c| c.id));
            all.push(ServiceState { spec, checks });
        }
        stopped.extend(old.iter().flat_map(|o| o.checks.iter().map(|c| c.id)));
        drop(all);
        let mut tasks = self.tasks.lock().expect("check tasks lock");
        for id in stopped {
            if let Some(t) = tasks.remove(&id) {
                t.abort();
            }
        }
        for (id, spec) in started {
            tasks.insert(id, self.spawn(id, spec));
        }
    }

    /// Stops every check.
    pub fn stop(&self) {
        let tasks = std::mem::take(&mut *self.tasks.lock().expect("check tasks lock"));
        for t in tasks.into_values() {
            t.abort();
        }
    }

    /// The task of check `id`: runs it every interval and records the
    /// result, until it is aborted or its check is gone.
    fn spawn(&self, id: u64, spec: CheckSpec) -> tokio::task::JoinHandle<()> {
        let (services, client) = (self.services.clone(), self.client.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(spec.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let r = run_check(&client, &spec).await;
                let now = Instant::now();
                let mut all = services.lock().expect("services lock");
                let mut checks = all
                    .iter_mut()
                    .flat_map(|s| s.checks.iter_mut().map(|c| (&s.spec.name, c)));
                let Some((service, st)) = checks.find(|(_, c)| c.id == id) else {
                    return;
                };
                st.runs += 1;
                // A streak's start and end are logged: why a role stepped
                // down for a failing service is in the log, not only in the
                // last 20 results `hale status` shows.
                if r.ok {
                    if let Some(since) = st.failing_since.take() {
                        tracing::info!(%service, failed_for = ?now.duration_since(since), "check passes again");
                    }
                } else {
                    st.failures += 1;
                    if st.failing_since.is_none() {
                        tracing::warn!(%service, detail = %r.detail, took_ms = r.took_ms, "check failing");
                    }
                    st.failing_since.get_or_insert(now);
                }
                if st.recent.len() >= 20 {
                    st.recent.pop_front();
                }
                st.recent.push_back(r);
            }
        })
    }
}

/// Runs one check under its hard timeout.
pub async fn run_check(client: &reqwest::Client, spec: &CheckSpec) -> CheckResult {
    let start = Instant::now();
    let mut failure = None;
    let outcome = tokio::time::timeout(spec.timeout, async {
        match &spec.probe {
            Probe::Http { url, status } => match client.get(url).send().await {
                Ok(r) if r.status().as_u16() == *status => {
                    Ok(format!("status {}", r.status().as_u16()))
                }
                Ok(r) => Err(format!(
                    "status {} (expected {status})",
                    r.status().as_u16()
                )),
                Err(e) => Err(format!("request failed: {e}")),
            },
            Probe::Tcp(addr) => match tokio::net::TcpStream::connect(addr).await {
                Ok(_) => Ok("connected".to_owned()),
                Err(e) => Err(format!("connect failed: {e}")),
            },
            Probe::Command { argv, exit } => {
                let mut cmd = tokio::process::Command::new(&argv[0]);
                cmd.args(&argv[1..])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true);
                // Started below the agent's priority (`priority.rs`).
                let child = match crate::host::priority::spawn(cmd).await {
                    Ok(mut c) => c.wait().await,
                    Err(e) => Err(e),
                };
                match child {
                    Ok(s) if s.code() == Some(*exit) => Ok(format!("exit {exit}")),
                    Ok(s) => Err(format!("exit {:?} (expected {exit})", s.code())),
                    Err(e) => Err(format!("cannot run {}: {e}", argv[0])),
                }
            }
            Probe::Postgres { server, .. } => match hale_postgres::check(server).await {
                Ok(working) => Ok(working.to_string()),
                Err(e) => {
                    if matches!(e, hale_postgres::CheckError::DiskFull { .. }) {
                        failure = Some(CheckFailure::ShortOfDisk);
                    }
                    Err(e.to_string())
                }
            },
        }
    })
    .await;
    let took_ms = start.elapsed().as_millis() as u64;
    let (ok, detail, failure) = match outcome {
        Ok(Ok(detail)) => (true, detail, None),
        Ok(Err(detail)) => (false, detail, failure),
        Err(_) => (false, format!("timed out after {:?}", spec.timeout), None),
    };
    CheckResult {
        ok,
        detail,
        took_ms,
        failure,
    }
}

/// The API view of every service.
pub fn views(services: &Services) -> Vec<ServiceView> {
    let now = Instant::now();
    services
        .lock()
        .expect("services lock")
        .iter()
        .map(|s| ServiceView {
            name: s.spec.name.clone(),
            essential: s.spec.essential,
            healthy: s.healthy(),
            ready: s.ready(),
            failing_for_ms: s.failing_for(now).map(|d| d.as_millis() as u64),
            checks: s
                .checks
                .iter()
                .map(|c| CheckView {
                    name: c.spec.name.clone(),
                    ready: c.spec.ready,
                    runs: c.runs,
                    failures: c.failures,
                    recent: c.recent.iter().cloned().collect(),
                })
                .collect(),
        })
        .collect()
}
