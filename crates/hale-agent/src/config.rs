//! `hale.toml`: every knob of the agent, environment overrides, validation.
//!
//! ```toml
//! [agent]
//! name = "db-1"                  # unique in the cluster; [A-Za-z0-9._-]{1,64}
//! bind = "0.0.0.0:7946"          # gossip: UDP and TCP on the same port
//! advertise = "10.0.0.5:7946"    # address others reach us at (default: bind)
//! http = "127.0.0.1:7947"        # HTTP API, dashboard and /metrics
//! seeds = ["10.0.0.6:7946"]      # members to join through
//! api_token = "secret"           # required by mutating endpoints, if set;
//!                                # required at all when http is not loopback
//!
//! [cluster]
//! name = "prod"                  # packets of other clusters are rejected
//! profile = "lan"                # lan | wan | local
//! keys = ["<base64 32 bytes>"]   # first encrypts; all decrypt (rotation)
//!
//! [membership]                   # optional overrides of the profile
//! probe_interval = "1s"
//!
//! [relay]                        # optional: no section, no relay
//! primary = { dsn = "https://key@sentry-a.internal/1", member = "sentry-a" }
//! standby = { dsn = "https://key@sentry-b.internal/1" }
//! spool_dir = "/var/lib/hale/spool"
//! ```
//!
//! Environment variables override the file: `HALE_NAME`, `HALE_BIND`,
//! `HALE_ADVERTISE`, `HALE_HTTP`, `HALE_SEEDS` (comma-separated),
//! `HALE_CLUSTER`, `HALE_PROFILE`, `HALE_KEYS` (comma-separated),
//! `HALE_API_TOKEN`, `HALE_STATE_DIR`.
//!
//! Room: configuration and reload. Parsing, validation and the difference
//! between two loaded files ([`diff`]) are plain data, which every room
//! may import; [`reload`] is the one part that acts: it applies a
//! difference to the running agent (roles, checks, relay, membership
//! settings), all of it or nothing. Only the composition root (`lib.rs`)
//! and the HTTP surface (`POST /v1/reload`) use [`reload`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use hale_core::{Config as CoreConfig, NodeId, Profile};

use hale_keyring::{Key, Keyring};

mod diff;
pub mod reload;
mod role;
mod service;

pub use diff::{diff, ConfigDiff, LoadedConfig, RoleDiff, HELD_LIVE};
pub use role::{parse_servers, ControlPlan, ControlSection, RoleSpec};
pub use service::{CheckSection, CheckSpec, Probe, ServiceSection, ServiceSpec};

/// The keyring file's name in `[agent] state_dir`.
pub const KEYRING_FILE: &str = "keyring";

/// The agent's configuration file, as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// `[agent]`.
    pub agent: AgentSection,
    /// `[cluster]`.
    pub cluster: ClusterSection,
    /// `[membership]`.
    pub membership: MembershipSection,
    /// `[control]`: the control plane for roles.
    pub control: Option<role::ControlSection>,
    /// `[[service]]`: this node's services and their checks.
    #[serde(rename = "service")]
    pub services: Vec<service::ServiceSection>,
    /// `[[role]]`: this node's candidacies.
    #[serde(rename = "role")]
    pub roles: Vec<RoleSpec>,
    /// `[relay]`: the Sentry-compatible relay (absent: disabled).
    pub relay: Option<RelaySection>,
}

/// `[relay]`: a Sentry-compatible relay mounted on the HTTP API, forwarding
/// to a primary upstream Sentry (and a standby while the primary is down).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RelaySection {
    /// The primary upstream (required when the section is present).
    pub primary: Option<UpstreamSection>,
    /// The standby upstream.
    pub standby: Option<UpstreamSection>,
    /// Keys clients must present (`sentry_key`); empty: any.
    pub keys: Vec<String>,
    /// Cap on bytes held in memory (default 8 MiB).
    pub queue_bytes: Option<usize>,
    /// Disk spool directory (default: no spool).
    pub spool_dir: Option<String>,
    /// Cap on the spool's bytes (default 256 MiB).
    pub spool_bytes: Option<u64>,
    /// Spooled envelopes older than this are deleted (default 24h).
    #[serde(default, with = "humantime_serde")]
    pub spool_ttl: Option<Duration>,
    /// Envelopes per second read back from the spool (default 200).
    pub spool_drain_per_sec: Option<u32>,
    /// Largest request body, compressed or not (default 1 MiB).
    pub body_limit: Option<usize>,
    /// Path prefix of the ingestion routes (default none: `/api/{id}/envelope/`).
    pub path_prefix: Option<String>,
}

/// One upstream Sentry of the relay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSection {
    /// Its DSN: `https://KEY@host/PROJECT_ID`.
    pub dsn: String,
    /// The hale member hosting it: when it is declared dead the relay stops
    /// sending to it at once.
    pub member: Option<String>,
}

/// `[agent]`: this node.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSection {
    /// Unique node name (default: `hale-<port>`).
    pub name: Option<String>,
    /// Gossip bind address, UDP and TCP (default `127.0.0.1:7946`).
    pub bind: Option<String>,
    /// Address other members use to reach this one (default: `bind`).
    pub advertise: Option<String>,
    /// HTTP API address (default `127.0.0.1:7947`).
    pub http: Option<String>,
    /// Addresses of members to join through.
    pub seeds: Vec<String>,
    /// Token required by mutating HTTP endpoints.
    pub api_token: Option<String>,
    /// Metadata published with this member (at most 512 bytes, UTF-8).
    pub meta: Option<String>,
    /// The `hale` executable used to start role watchdogs (default: this program).
    pub watchdog: Option<std::path::PathBuf>,
    /// Where the agent keeps state across restarts: the keyring a live
    /// rotation gave it (`keyring`, preferred over `[cluster] keys` while it
    /// exists) and the generation its packets carry (`generation`, for
    /// replay protection). Unset: live key changes are lost on restart.
    pub state_dir: Option<std::path::PathBuf>,
    /// How many nice levels above the processes it starts (hooks, checks,
    /// PostgreSQL tools) the agent's own threads run (default 10; 0: the
    /// same). Needs `CAP_SYS_NICE` (root has it); see `priority.rs`.
    pub priority_boost: Option<u8>,
    /// Whether the raised threads also run real-time (`SCHED_RR` at its
    /// lowest priority; default true; see `priority.rs`).
    pub realtime: Option<bool>,
    /// How many hooks the agent runs at once over all its roles (default:
    /// four per core, from 4 to 32); the others queue, demotes first.
    pub hooks_at_once: Option<usize>,
}

/// `[cluster]`: what all members share.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSection {
    /// Cluster name (default `hale`).
    pub name: Option<String>,
    /// Timing profile: `lan` (default), `wan` or `local`.
    pub profile: Option<String>,
    /// Base64 keys of 32 bytes; the first encrypts, all decrypt.
    pub keys: Vec<String>,
    /// Send cluster traffic unencrypted (only for debugging on loopback).
    pub insecure_plaintext: bool,
}

/// Declares `[membership]` (each field an optional override of the
/// `hale_core::Config` field of the same name) and `apply`, which overrides.
macro_rules! membership_section {
    ($($(#[$attr:meta])* $field:ident: $ty:ty,)*) => {
        /// `[membership]`: optional overrides of the profile's knobs (see
        /// `hale_core::Config` for what each does).
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(missing_docs)] // Each field is documented on hale_core::Config, which it overrides.
        pub struct MembershipSection {
            $($(#[$attr])* pub $field: Option<$ty>,)*
        }

        impl MembershipSection {
            fn apply(&self, c: &mut CoreConfig) {
                $(if let Some(v) = self.$field {
                    c.$field = v.into();
                })*
            }

            /// The knobs this section may override whose values differ
            /// between `a` and `b`, by name.
            pub(crate) fn differing(a: &CoreConfig, b: &CoreConfig) -> Vec<&'static str> {
                let mut out = Vec::new();
                $(if a.$field != b.$field {
                    out.push(stringify!($field));
                })*
                out
            }
        }
    };
}

membership_section! {
    #[serde(default, with = "humantime_serde")]
    probe_interval: Duration,
    #[serde(default, with = "humantime_serde")]
    walk_interval: Duration,
    #[serde(default, with = "humantime_serde")]
    monitor_interval: Duration,
    #[serde(default, with = "humantime_serde")]
    probe_timeout: Duration,
    indirect_probes: usize,
    stream_fallback_probe: bool,
    monitors: usize,
    ring_heartbeats: bool,
    skip_fresh: bool,
    awareness_max: u8,
    #[serde(default, with = "humantime_serde")]
    suspicion_min: Duration,
    #[serde(default, with = "humantime_serde")]
    suspicion_max: Duration,
    expected_confirmations: usize,
    corroboration: usize,
    health_discount: u8,
    #[serde(default, with = "humantime_serde")]
    gossip_interval: Duration,
    gossip_fanout: usize,
    retransmit_mult: usize,
    suspicion_retransmits: usize,
    targeted_suspicions: bool,
    #[serde(default, with = "humantime_serde")]
    push_pull_interval: Duration,
    #[serde(default, with = "humantime_serde")]
    seed_retry_interval: Duration,
    #[serde(default, with = "humantime_serde")]
    tombstone_ttl: Duration,
    closed_port_evidence: bool,
    #[serde(default, with = "humantime_serde")]
    closed_port_min: Duration,
    #[serde(default, with = "humantime_serde")]
    replay_window: Duration,
    wire_versions: WireVersions,
}

/// `[membership] wire_versions = "2-3"`: the wire versions this agent
/// speaks (default: every one this build does). Narrow it to the newest
/// once every member runs a release that speaks it, so that an old agent
/// started by mistake is refused (and reported) rather than holding the
/// whole cluster to its version.
#[derive(Debug, Clone, Copy)]
pub struct WireVersions(hale_core::Versions);

impl<'de> Deserialize<'de> for WireVersions {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map(WireVersions)
            .map_err(serde::de::Error::custom)
    }
}

impl From<WireVersions> for hale_core::Versions {
    fn from(w: WireVersions) -> hale_core::Versions {
        w.0
    }
}

/// A configuration problem. Nothing was started.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (unknown key, wrong type).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, naming the key.
        message: String,
    },
    /// A value is out of range.
    #[error("invalid `{field}`: {problem}")]
    Invalid {
        /// The field, as `section.key`.
        field: String,
        /// What is wrong.
        problem: String,
    },
}

pub(crate) fn invalid(field: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.to_owned(),
        problem: problem.into(),
    }
}

/// Where the agent's configuration comes from: a file (or none: the
/// defaults) and the `HALE_*` environment overrides, taken once at start,
/// so that a reload reads the file again under the same overrides.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    path: Option<PathBuf>,
    env: BTreeMap<String, String>,
}

impl ConfigSource {
    /// The file at `path` (None: no file, the defaults), without overrides.
    pub fn new(path: Option<PathBuf>) -> ConfigSource {
        ConfigSource {
            path,
            env: BTreeMap::new(),
        }
    }

    /// The same source with the `HALE_*` variables among `vars` as its
    /// overrides (`std::env::vars()` for the process's own).
    pub fn with_env(mut self, vars: impl IntoIterator<Item = (String, String)>) -> ConfigSource {
        self.env = vars
            .into_iter()
            .filter(|(k, _)| k.starts_with("HALE_"))
            .collect();
        self
    }

    /// The file, if there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Reads the file (the defaults without one) and applies the overrides.
    pub fn read(&self) -> Result<FileConfig, ConfigError> {
        let mut file = match &self.path {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        file.apply_env(|k| self.env.get(k).cloned());
        Ok(file)
    }
}

/// The validated configuration the agent runs with.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// This node's identity (name and advertised address).
    pub id: NodeId,
    /// Gossip bind address.
    pub bind: SocketAddr,
    /// HTTP API address.
    pub http: SocketAddr,
    /// Addresses to join through.
    pub seeds: Vec<SocketAddr>,
    /// Token for mutating endpoints.
    pub api_token: Option<String>,
    /// Encryption keys (None: plaintext, only when asked for).
    pub keyring: Option<Keyring>,
    /// Whether the key was generated because none was configured.
    pub ephemeral_key: bool,
    /// Where state survives restarts (`[agent] state_dir`).
    pub state_dir: Option<std::path::PathBuf>,
    /// Whether the keys came from the keyring file in `state_dir` (saved by
    /// a live rotation) rather than from `[cluster] keys`.
    pub keys_from_state: bool,
    /// The membership core's configuration.
    pub core: CoreConfig,
    /// The profile in use.
    pub profile: Profile,
    /// This node's services.
    pub services: Vec<service::ServiceSpec>,
    /// This node's candidacies.
    pub roles: Vec<RoleSpec>,
    /// The control plane, if roles are used.
    pub control: Option<role::ControlPlan>,
    /// The `hale` executable that runs role watchdogs.
    pub watchdog_exe: std::path::PathBuf,
    /// The relay, if configured.
    pub relay: Option<hale_relay::RelayConfig>,
    /// `[agent] priority_boost` (see [`crate::host::priority`]).
    pub priority_boost: u8,
    /// `[agent] realtime`, resolved.
    pub realtime: bool,
    /// `[agent] hooks_at_once`, resolved.
    pub hooks_at_once: usize,
}

impl FileConfig {
    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_owned(),
            message: e.to_string(),
        })
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        FileConfig::parse(&text, &path.display().to_string())
    }

    /// Applies `HALE_*` environment overrides read through `get`.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) {
        let list = |v: String| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let a = &mut self.agent;
        let c = &mut self.cluster;
        for (var, field) in [
            ("HALE_NAME", &mut a.name),
            ("HALE_BIND", &mut a.bind),
            ("HALE_ADVERTISE", &mut a.advertise),
            ("HALE_HTTP", &mut a.http),
            ("HALE_API_TOKEN", &mut a.api_token),
            ("HALE_CLUSTER", &mut c.name),
            ("HALE_PROFILE", &mut c.profile),
        ] {
            if let Some(v) = get(var) {
                *field = Some(v);
            }
        }
        for (var, field) in [("HALE_SEEDS", &mut a.seeds), ("HALE_KEYS", &mut c.keys)] {
            if let Some(v) = get(var) {
                *field = list(v);
            }
        }
        if let Some(v) = get("HALE_STATE_DIR") {
            a.state_dir = Some(v.into());
        }
    }

    /// Validates everything and builds the agent's configuration.
    pub fn validate(&self) -> Result<AgentConfig, ConfigError> {
        self.validate_with(None)
    }

    /// [`FileConfig::validate`] for a reload of the agent `running` runs:
    /// without `[agent] watchdog`, its hooks run the executable the agent
    /// runs (not what `/proc/self/exe` says now, which an upgrade of the
    /// package may have replaced).
    pub fn validate_for_reload(&self, running: &AgentConfig) -> Result<AgentConfig, ConfigError> {
        self.validate_with(Some(&running.watchdog_exe))
    }

    fn validate_with(&self, running_exe: Option<&Path>) -> Result<AgentConfig, ConfigError> {
        let addr =
            |field: &str, v: &Option<String>, default: &str| -> Result<SocketAddr, ConfigError> {
                let s = v.as_deref().unwrap_or(default);
                s.parse().map_err(|_| {
                    invalid(
                        field,
                        format!("{s:?} is not an address like 127.0.0.1:7946"),
                    )
                })
            };
        let bind = addr("agent.bind", &self.agent.bind, "127.0.0.1:7946")?;
        let advertise = match &self.agent.advertise {
            Some(_) => addr("agent.advertise", &self.agent.advertise, "")?,
            None => bind,
        };
        if advertise.ip().is_unspecified() {
            return Err(invalid(
                "agent.advertise",
                "bind is a wildcard address: set advertise to the address others reach this node at",
            ));
        }
        let http = addr("agent.http", &self.agent.http, "127.0.0.1:7947")?;
        let name = self
            .agent
            .name
            .clone()
            .unwrap_or_else(|| format!("hale-{}", advertise.port()));
        let id = NodeId::new(name, advertise).map_err(|e| invalid("agent.name", e.to_string()))?;
        let seeds = self
            .agent
            .seeds
            .iter()
            .map(|s| {
                s.parse::<SocketAddr>()
                    .map_err(|_| invalid("agent.seeds", format!("{s:?} is not an address")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if self.agent.api_token.as_deref() == Some("") {
            return Err(invalid(
                "agent.api_token",
                "is empty; remove it or set a value",
            ));
        }
        if !http.ip().is_loopback() && self.agent.api_token.is_none() {
            return Err(invalid(
                "agent.api_token",
                format!(
                    "is required when `agent.http` ({http}) is not a loopback address: \
                     anyone who reaches it could make this agent leave, hand over roles \
                     or freeze it; set a token (HALE_API_TOKEN) or bind the API to 127.0.0.1"
                ),
            ));
        }
        let profile: Profile = self
            .cluster
            .profile
            .as_deref()
            .unwrap_or("lan")
            .parse()
            .map_err(|e: hale_core::ConfigError| invalid("cluster.profile", e.problem))?;
        let mut core = CoreConfig::new(profile);
        if let Some(c) = &self.cluster.name {
            core.cluster = c.clone();
        }
        if let Some(m) = &self.agent.meta {
            core.meta = m.as_bytes().to_vec();
        }
        self.membership.apply(&mut core);
        core.validate().map_err(|e| {
            let section = match e.field {
                "cluster" => "cluster.name".to_owned(),
                "meta" => "agent.meta".to_owned(),
                knob => format!("membership.{knob}"),
            };
            invalid(&section, e.problem)
        })?;
        let saved = self.saved_keyring()?;
        let (keyring, ephemeral_key) = if self.cluster.insecure_plaintext {
            if !self.cluster.keys.is_empty() {
                return Err(invalid(
                    "cluster.insecure_plaintext",
                    "keys are set too: choose encryption or plaintext",
                ));
            }
            (None, false)
        } else if let Some(ring) = saved.clone() {
            (Some(ring), false)
        } else if self.cluster.keys.is_empty() {
            (Some(Keyring::new(Key::generate(), Vec::new())), true)
        } else {
            let mut keys = Vec::new();
            for (i, k) in self.cluster.keys.iter().enumerate() {
                keys.push(
                    Key::from_base64(k)
                        .map_err(|e| invalid(&format!("cluster.keys[{i}]"), e.to_string()))?,
                );
            }
            let primary = keys.remove(0);
            (Some(Keyring::new(primary, keys)), false)
        };
        let services = self
            .services
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.validate(i, &|role| {
                    let r = self.roles.iter().find(|r| r.name == role)?;
                    r.postgres.clone()
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = services.iter().map(|s| s.name.clone()).collect();
        // Services and roles are known by name (checks, reloads, the API).
        for (i, n) in names.iter().enumerate() {
            if names[..i].contains(n) {
                let problem = format!("another [[service]] is named {n:?}");
                return Err(invalid(&format!("service[{i}].name"), problem));
            }
        }
        for (i, r) in self.roles.iter().enumerate() {
            r.validate(i, &names)?;
            if self.roles[..i].iter().any(|o| o.name == r.name) {
                let problem = format!("another [[role]] is named {:?}", r.name);
                return Err(invalid(&format!("role[{i}].name"), problem));
            }
        }
        let control =
            role::ControlSection::plan(self.control.as_ref(), id.name(), !self.roles.is_empty())?;
        let watchdog_exe = match (&self.agent.watchdog, running_exe) {
            (Some(p), _) => p.clone(),
            (None, Some(p)) => p.to_path_buf(),
            (None, None) => std::env::current_exe().map_err(|e| {
                invalid("agent.watchdog", format!("cannot locate this program: {e}"))
            })?,
        };
        let roles = self
            .roles
            .iter()
            .map(|r| r.clone().with_hooks(&watchdog_exe))
            .collect::<Result<Vec<_>, _>>()?;
        let relay = match &self.relay {
            Some(r) => Some(r.validate()?),
            None => None,
        };
        let hooks_at_once = match self.agent.hooks_at_once {
            Some(0) => return Err(invalid("agent.hooks_at_once", "must be at least 1")),
            Some(n) => n,
            None => crate::roles::slots::default_limit(),
        };
        Ok(AgentConfig {
            watchdog_exe,
            services,
            roles,
            control,
            relay,
            id,
            bind,
            http,
            seeds,
            api_token: self.agent.api_token.clone(),
            keys_from_state: saved.is_some() && !self.cluster.insecure_plaintext,
            keyring,
            ephemeral_key,
            state_dir: self.agent.state_dir.clone(),
            core,
            profile,
            priority_boost: self
                .agent
                .priority_boost
                .unwrap_or(crate::host::priority::DEFAULT_BOOST),
            realtime: self
                .agent
                .realtime
                .unwrap_or(crate::host::priority::DEFAULT_REALTIME),
            hooks_at_once,
        })
    }

    /// The keyring a live rotation saved in `[agent] state_dir`, if any.
    fn saved_keyring(&self) -> Result<Option<Keyring>, ConfigError> {
        let Some(dir) = &self.agent.state_dir else {
            return Ok(None);
        };
        hale_keyring::file::load(&dir.join(KEYRING_FILE))
            .map_err(|e| invalid("agent.state_dir", e.to_string()))
    }
}

impl UpstreamSection {
    fn validate(&self, field: &str) -> Result<hale_relay::UpstreamConfig, ConfigError> {
        let dsn = self
            .dsn
            .parse()
            .map_err(|e: hale_relay::DsnError| invalid(&format!("{field}.dsn"), e.to_string()))?;
        if self.member.as_deref() == Some("") {
            return Err(invalid(&format!("{field}.member"), "is empty"));
        }
        Ok(hale_relay::UpstreamConfig {
            dsn,
            member: self.member.clone(),
        })
    }
}

impl RelaySection {
    fn validate(&self) -> Result<hale_relay::RelayConfig, ConfigError> {
        let primary = self
            .primary
            .as_ref()
            .ok_or_else(|| invalid("relay.primary", "is required when [relay] is present"))?
            .validate("relay.primary")?;
        let mut p = hale_relay::PipelineConfig::new(primary);
        if let Some(s) = &self.standby {
            p.standby = Some(s.validate("relay.standby")?);
        }
        if let Some(q) = self.queue_bytes {
            if q < 4096 {
                return Err(invalid("relay.queue_bytes", "must be at least 4096"));
            }
            p.queue_bytes = q;
        }
        if let Some(dir) = &self.spool_dir {
            if dir.is_empty() {
                return Err(invalid("relay.spool_dir", "is empty"));
            }
            let mut s = hale_relay::SpoolConfig::new(dir);
            if let Some(b) = self.spool_bytes {
                s.max_bytes = b;
            }
            if let Some(t) = self.spool_ttl {
                s.ttl = t;
            }
            if let Some(r) = self.spool_drain_per_sec {
                if r == 0 {
                    return Err(invalid("relay.spool_drain_per_sec", "must be positive"));
                }
                s.drain_per_sec = r;
            }
            p.spool = Some(s);
        } else if self.spool_bytes.is_some() || self.spool_ttl.is_some() {
            return Err(invalid(
                "relay.spool_dir",
                "spool_bytes or spool_ttl is set without it",
            ));
        }
        let mut r = hale_relay::RelayConfig::new(p);
        r.keys = self.keys.clone();
        if let Some(b) = self.body_limit {
            if b == 0 {
                return Err(invalid("relay.body_limit", "must be positive"));
            }
            r.body_limit = b;
        }
        if let Some(prefix) = &self.path_prefix {
            if !prefix.is_empty() && (!prefix.starts_with('/') || prefix.contains('{')) {
                return Err(invalid(
                    "relay.path_prefix",
                    "must start with / (like /sentry)",
                ));
            }
            r.prefix = prefix.clone();
        }
        Ok(r)
    }
}
