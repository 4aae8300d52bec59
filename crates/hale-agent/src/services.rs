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

use serde::Deserialize;
use tokio::time::Instant;

use crate::config::{invalid, ConfigError};
use crate::view::{CheckResult, CheckView, ServiceView};

/// `[[service]]` in hale.toml.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSection {
    /// Service name, unique on this node.
    pub name: String,
    /// Whether the service is essential (its failure can move roles).
    #[serde(default)]
    pub essential: bool,
    /// Its checks.
    #[serde(default, rename = "check")]
    pub checks: Vec<CheckSection>,
}

/// `[[service.check]]`: exactly one of `http`, `tcp`, `command`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSection {
    /// Name shown in reports (default: derived from the target).
    pub name: Option<String>,
    /// URL to GET.
    pub http: Option<String>,
    /// Expected HTTP status (default 200).
    pub expect_status: Option<u16>,
    /// Address to connect to.
    pub tcp: Option<String>,
    /// Program and arguments to run.
    pub command: Option<Vec<String>>,
    /// Expected exit code (default 0).
    pub expect_exit: Option<i32>,
    /// Time between runs (default 1 s).
    #[serde(default, with = "humantime_serde")]
    pub interval: Option<Duration>,
    /// Hard limit on one run (default 1 s): a run still going then fails.
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    /// A readiness check: gates promotion, does not make the service unhealthy.
    #[serde(default)]
    pub ready: bool,
}

/// What a check does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// GET the URL, expect the status.
    Http {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
    },
    /// Connect to the address.
    Tcp(String),
    /// Run the command, expect the exit code.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// The exit code.
        exit: i32,
    },
}

/// A validated check.
#[derive(Debug, Clone)]
pub struct CheckSpec {
    /// Its name.
    pub name: String,
    /// What it does.
    pub probe: Probe,
    /// Time between runs.
    pub interval: Duration,
    /// Hard limit on one run.
    pub timeout: Duration,
    /// Readiness (true) or liveness (false).
    pub ready: bool,
}

/// A validated service.
#[derive(Debug, Clone)]
pub struct ServiceSpec {
    /// Name.
    pub name: String,
    /// Essential or not.
    pub essential: bool,
    /// Checks.
    pub checks: Vec<CheckSpec>,
}

impl ServiceSection {
    /// Validates the section; `i` is its index, for error messages.
    pub fn validate(&self, i: usize) -> Result<ServiceSpec, ConfigError> {
        let field = |f: &str| format!("service[{i}].{f}");
        if self.name.is_empty() {
            return Err(invalid(&field("name"), "is empty"));
        }
        let mut checks = Vec::new();
        for (j, c) in self.checks.iter().enumerate() {
            let cf = |f: &str| format!("service[{i}].check[{j}].{f}");
            let probe = match (&c.http, &c.tcp, &c.command) {
                (Some(url), None, None) => {
                    if !url.starts_with("http://") {
                        let problem = format!("{url:?} must start with http://");
                        return Err(invalid(&cf("http"), problem));
                    }
                    Probe::Http {
                        url: url.clone(),
                        status: c.expect_status.unwrap_or(200),
                    }
                }
                (None, Some(addr), None) => Probe::Tcp(addr.clone()),
                (None, None, Some(argv)) if !argv.is_empty() => Probe::Command {
                    argv: argv.clone(),
                    exit: c.expect_exit.unwrap_or(0),
                },
                _ => {
                    let problem = "a check needs exactly one of http, tcp or command (non-empty)";
                    return Err(invalid(&cf("http"), problem));
                }
            };
            let interval = c.interval.unwrap_or(Duration::from_secs(1));
            let timeout = c.timeout.unwrap_or(Duration::from_secs(1));
            if interval.is_zero() || timeout.is_zero() {
                let problem = "interval and timeout must be greater than zero";
                return Err(invalid(&cf("interval"), problem));
            }
            let name = c.name.clone().unwrap_or_else(|| match &probe {
                Probe::Http { url, .. } => format!("http {url}"),
                Probe::Tcp(a) => format!("tcp {a}"),
                Probe::Command { argv, .. } => format!("command {}", argv[0]),
            });
            checks.push(CheckSpec {
                name,
                probe,
                interval,
                timeout,
                ready: c.ready,
            });
        }
        Ok(ServiceSpec {
            name: self.name.clone(),
            essential: self.essential,
            checks,
        })
    }
}

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
