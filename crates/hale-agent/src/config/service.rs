//! `[[service]]` and its checks.

use std::time::Duration;

use serde::Deserialize;

use super::{invalid, ConfigError};

/// `[[service]]` in hale.toml: its checks as written ([`CheckSection`],
/// the [`ServiceSection`] the file holds) or, once validated, as the agent
/// runs them ([`CheckSpec`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceSpec<C = CheckSpec> {
    /// Service name, unique on this node.
    pub name: String,
    /// Whether the service is essential (its failure can move roles).
    #[serde(default)]
    pub essential: bool,
    /// Its checks.
    #[serde(default = "Vec::new", rename = "check")]
    pub checks: Vec<C>,
}

/// `[[service]]` as written in hale.toml.
pub type ServiceSection = ServiceSpec<CheckSection>;

/// `[[service.check]]`: exactly one of `http`, `tcp`, `command`, `postgres`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
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
    /// The `[role.postgres]` role whose server this check proves does its
    /// job (`hale_postgres::check`: a primary commits a write, a replica
    /// answers, both have disk to spare), not only accepts connections.
    pub postgres: Option<String>,
    /// Time between runs (default 1 s).
    #[serde(default, with = "humantime_serde")]
    pub interval: Option<Duration>,
    /// Hard limit on one run (default 1 s): a run still going then fails.
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    /// A readiness check: gates promotion, does not make the service unhealthy.
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
    /// Prove that a `[role.postgres]` role's local server does its job.
    Postgres {
        /// The role.
        role: String,
        /// Its server's settings (the role's `[role.postgres]`).
        server: Box<hale_postgres::PostgresConfig>,
    },
}

/// A validated check.
#[derive(Debug, Clone, PartialEq, Eq)]
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

impl ServiceSection {
    /// Validates the section; `i` is its index, for error messages;
    /// `postgres` finds a `[role.postgres]` role's settings by its name.
    pub fn validate(
        &self,
        i: usize,
        postgres: &dyn Fn(&str) -> Option<hale_postgres::PostgresConfig>,
    ) -> Result<ServiceSpec, ConfigError> {
        if self.name.is_empty() {
            return Err(invalid(&format!("service[{i}].name"), "is empty"));
        }
        let mut checks = Vec::new();
        for (j, c) in self.checks.iter().enumerate() {
            let cf = |f: &str| format!("service[{i}].check[{j}].{f}");
            let probe = match (&c.http, &c.tcp, &c.command, &c.postgres) {
                (None, None, None, Some(role)) => match postgres(role) {
                    Some(server) => Probe::Postgres {
                        role: role.clone(),
                        server: Box::new(server),
                    },
                    None => {
                        let problem = format!("no [[role]] named {role:?} with [role.postgres]");
                        return Err(invalid(&cf("postgres"), problem));
                    }
                },
                (Some(url), None, None, None) => {
                    if !url.starts_with("http://") {
                        let problem = format!("{url:?} must start with http://");
                        return Err(invalid(&cf("http"), problem));
                    }
                    Probe::Http {
                        url: url.clone(),
                        status: c.expect_status.unwrap_or(200),
                    }
                }
                (None, Some(addr), None, None) => Probe::Tcp(addr.clone()),
                (None, None, Some(argv), None) if !argv.is_empty() => Probe::Command {
                    argv: argv.clone(),
                    exit: c.expect_exit.unwrap_or(0),
                },
                _ => {
                    let problem =
                        "a check needs exactly one of http, tcp, command (non-empty) or postgres";
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
                Probe::Postgres { role, .. } => format!("postgres {role}"),
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
