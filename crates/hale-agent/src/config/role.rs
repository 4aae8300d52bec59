//! `[control]` and `[[role]]`: where the control plane is, and this node's
//! candidacies.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use hale_control::LeaseTiming;

use super::{invalid, ConfigError};
use crate::view::RoleTags;

/// `[control]` in hale.toml: where the control plane is.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ControlSection {
    /// Run a control-plane server with this id (1, 2, ...). Omit on agents
    /// that only use the control plane.
    pub id: Option<u64>,
    /// The server's Raft/HTTP listener (default 127.0.0.1:7948).
    pub bind: Option<String>,
    /// Every server, as `id=host:port`.
    pub servers: Vec<String>,
    /// Initialise a new control plane from this server (exactly one server,
    /// once; harmless afterwards).
    pub bootstrap: bool,
    /// Where the server keeps its log and snapshots (default `hale-data/<name>`).
    pub data_dir: Option<PathBuf>,
    /// How long a lease lasts (default 2 s). Shorter: faster failover when
    /// a holder's host dies, but a control-plane hiccup (an election, a
    /// slow disk) of that length costs the holder its role. Must be the
    /// same on every agent of the cluster.
    #[serde(default, with = "humantime_serde")]
    pub lease: Option<Duration>,
    /// How often a holder renews (default 250 ms; at most a third of the
    /// lease; what the lease rides out is checked against the control
    /// plane's election timing: [`LeaseTiming::check`]).
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
        let timing = LeaseTiming {
            lease,
            renew_every,
            // Tolerates clocks running 20% apart over one lease.
            drift_margin: lease / 5,
        };
        // Named after the knob set by hand (the lease, if it was).
        let knob = self.lease.map_or("renew_every", |_| "lease");
        timing.check().map_err(|e| bad(knob, e.to_string()))?;
        Ok(timing)
    }
}

/// `[[role]]`: this node's candidacy for a role, as written and (once
/// [`RoleSpec::validate`] accepts it) as the agent runs it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    /// The role (e.g. `db-primary`).
    pub name: String,
    /// The service on this node that backs the role: its checks gate holding it.
    pub service: String,
    /// Higher wins among healthy, ready candidates (default 0).
    #[serde(default)]
    pub priority: i64,
    /// This node may take the role (default true). `false` (Patroni's
    /// `nofailover`): it runs the role's service and follows the holder as
    /// any standby (a PostgreSQL server streams, rejoins, is cloned) but
    /// never asks for the role, so it is never granted it: not on failover,
    /// not by a switchover or handover naming it (refused), not as the last
    /// node standing (the role stays unheld). Nor is it ever a synchronous
    /// standby. Set on the holder by a reload, the holder hands the role
    /// over once another node can take it, and keeps it until then.
    #[serde(default = "yes")]
    pub promotable: bool,
    /// Load balancers may send this node reads (default true). `false`
    /// (Patroni's `noloadbalance`): `GET /v1/roles/{role}/replica` and
    /// `/read-only` answer 503 while it is a standby, saying why; as the
    /// holder it answers as any holder.
    #[serde(default = "yes")]
    pub load_balance: bool,
    /// A `[role.postgres]` role: the primary may wait for this standby's
    /// flush (default true). `false` (Patroni's `nosync`): the holder never
    /// names it in `synchronous_standby_names` (nor in its mark, so the
    /// control plane never ranks it as a synchronous copy).
    #[serde(default = "yes")]
    pub synchronous_standby: bool,
    /// Command run when this node becomes holder (`HALE_ROLE`, `HALE_EPOCH` set).
    #[serde(default)]
    pub promote: Vec<String>,
    /// Command run when this node stops being holder (also the watchdog's fence).
    #[serde(default)]
    pub demote: Vec<String>,
    /// Hard limit on a hook (default 10 s).
    #[serde(default = "default_hook_timeout", with = "humantime_serde")]
    pub hook_timeout: Duration,
    /// Hand the role over when the service's essential checks fail this long (default 3 s).
    #[serde(default = "default_fail_after", with = "humantime_serde")]
    pub fail_after: Duration,
    /// `[role.postgres]`: the role is a PostgreSQL primary. hale promotes
    /// and fences the local server itself (its hooks are `hale postgres
    /// promote` and `hale postgres fence`, so `promote` and `demote` stay
    /// unset), keeps it following the holder (rejoin by `pg_rewind` or a
    /// fresh clone), and grants the role only to a candidate whose copy
    /// lags by at most `max_lag_on_failover`, a synchronous standby first.
    #[serde(default)]
    pub postgres: Option<hale_postgres::PostgresConfig>,
}

fn yes() -> bool {
    true
}

fn default_hook_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_fail_after() -> Duration {
    Duration::from_secs(3)
}

impl RoleSpec {
    /// Validates against the node's services; `i` is its index, for error messages.
    pub fn validate(&self, i: usize, services: &[String]) -> Result<(), ConfigError> {
        let f = |x: &str| format!("role[{i}].{x}");
        if self.name.is_empty() || self.name.len() > 64 {
            return Err(invalid(&f("name"), "must be 1 to 64 bytes"));
        }
        if !services.contains(&self.service) {
            let problem = format!("no [[service]] named {:?} on this node", self.service);
            return Err(invalid(&f("service"), problem));
        }
        if !self.synchronous_standby && self.postgres.is_none() {
            let problem = "only a [role.postgres] role has synchronous standbys: \
                           remove it or add [role.postgres]";
            return Err(invalid(&f("synchronous_standby"), problem));
        }
        if let Some(pg) = &self.postgres {
            for (key, set) in [("promote", &self.promote), ("demote", &self.demote)] {
                if !set.is_empty() {
                    let problem = "a [role.postgres] role runs hale's own hooks (hale postgres promote, fence): leave it unset";
                    return Err(invalid(&f(key), problem));
                }
            }
            pg.validate()
                .map_err(|e| invalid(&f("postgres"), e.to_string()))?;
        }
        Ok(())
    }

    /// The role as the agent runs it: a `[role.postgres]` role gets hale's
    /// own hooks, `exe postgres promote|fence --settings JSON` (the
    /// settings travel with the command, so that the watchdog's fence needs
    /// nothing else, whatever happens to the configuration file).
    pub fn with_hooks(mut self, exe: &std::path::Path) -> Result<RoleSpec, ConfigError> {
        let Some(pg) = &self.postgres else {
            return Ok(self);
        };
        let settings = serde_json::to_string(pg)
            .map_err(|e| invalid(&format!("role {}.postgres", self.name), e.to_string()))?;
        let hook = |op: &str| {
            vec![
                exe.display().to_string(),
                "postgres".to_owned(),
                op.to_owned(),
                "--settings".to_owned(),
                settings.clone(),
            ]
        };
        self.promote = hook("promote");
        self.demote = hook("fence");
        Ok(self)
    }

    /// What sets this node apart among the role's candidates
    /// (`promotable`, `load_balance`, `synchronous_standby`).
    pub fn tags(&self) -> RoleTags {
        RoleTags {
            promotable: self.promotable,
            load_balance: self.load_balance,
            synchronous_standby: self.synchronous_standby,
        }
    }

    /// The most a candidate's copy may lag for it to take the role (a
    /// `[role.postgres]` role's `max_lag_on_failover`); `None` for a role
    /// that does not replicate.
    pub fn max_lag(&self) -> Option<u64> {
        self.postgres.as_ref().map(|p| p.max_lag_on_failover)
    }
}

/// Where this agent finds (and maybe runs) the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
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
