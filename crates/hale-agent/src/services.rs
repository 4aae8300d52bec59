//! Services and their health checks.
//!
//! A check is an HTTP request with an expected status, a TCP connect, or a
//! command with an expected exit code, run every `interval` under a hard
//! `timeout`: a check that hangs is a failing check (a command that times out
//! is killed). A service is healthy while all its liveness checks pass;
//! `ready` checks (replication lag, say) only gate promotion of a standby.
//! A failing non-essential service is only reported: it never triggers a
//! failover and never changes this node's membership.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{CheckSpec, Probe, ServiceSpec};
use crate::view::{CheckResult, CheckView, ServiceView};

/// Live state of one check.
#[derive(Debug, Clone)]
pub struct CheckState {
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
        self.checks
            .iter()
            .filter(|c| !c.spec.ready)
            .all(|c| c.recent.back().is_some_and(|r| r.ok))
    }

    /// Whether every readiness check passed last time.
    pub fn ready(&self) -> bool {
        self.checks
            .iter()
            .filter(|c| c.spec.ready)
            .all(|c| c.recent.back().is_some_and(|r| r.ok))
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

/// Starts one task per check; they stop when the returned handles are dropped or aborted.
pub fn start(specs: Vec<ServiceSpec>) -> (Services, Vec<tokio::task::JoinHandle<()>>) {
    let services: Services = Arc::new(Mutex::new(
        specs
            .iter()
            .map(|s| ServiceState {
                spec: s.clone(),
                checks: s
                    .checks
                    .iter()
                    .map(|c| CheckState {
                        spec: c.clone(),
                        recent: VecDeque::new(),
                        failing_since: None,
                        runs: 0,
                        failures: 0,
                    })
                    .collect(),
            })
            .collect(),
    ));
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for (si, s) in specs.iter().enumerate() {
        for (ci, c) in s.checks.iter().enumerate() {
            let (services, spec, client) = (services.clone(), c.clone(), client.clone());
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(spec.interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let r = run_check(&client, &spec).await;
                    let now = Instant::now();
                    let mut all = services.lock().expect("services lock");
                    let st = &mut all[si].checks[ci];
                    st.runs += 1;
                    if r.ok {
                        st.failing_since = None;
                    } else {
                        st.failures += 1;
                        st.failing_since.get_or_insert(now);
                    }
                    if st.recent.len() >= 20 {
                        st.recent.pop_front();
                    }
                    st.recent.push_back(r);
                }
            }));
        }
    }
    (services, tasks)
}

/// Runs one check under its hard timeout.
pub async fn run_check(client: &reqwest::Client, spec: &CheckSpec) -> CheckResult {
    let start = Instant::now();
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
                let child = tokio::process::Command::new(&argv[0])
                    .args(&argv[1..])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .status()
                    .await;
                match child {
                    Ok(s) if s.code() == Some(*exit) => Ok(format!("exit {exit}")),
                    Ok(s) => Err(format!("exit {:?} (expected {exit})", s.code())),
                    Err(e) => Err(format!("cannot run {}: {e}", argv[0])),
                }
            }
        }
    })
    .await;
    let took_ms = start.elapsed().as_millis() as u64;
    let (ok, detail) = match outcome {
        Ok(Ok(detail)) => (true, detail),
        Ok(Err(detail)) => (false, detail),
        Err(_) => (false, format!("timed out after {:?}", spec.timeout)),
    };
    CheckResult {
        ok,
        detail,
        took_ms,
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
