//! Scenario files: a cluster, a network, traffic and a schedule of faults,
//! read from TOML.
//!
//! Every table rejects unknown keys, and every error names the key at fault.
//! The format is documented by the files under `scenarios/` at the
//! repository root; [`Scenario::plan`] turns a scenario into the timed
//! [`Action`](crate::engine::Action)s of one run, drawing every random choice from the seed.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use hale_core::{Config, Profile, Time};

mod plan;
mod step;

pub use plan::Plan;
pub use step::{Step, StepKind};

/// A duration written as a string of numbers with units: `"500ms"`, `"2s"`,
/// `"1.5s"`, `"10m"`, `"24h"`, `"1h30m"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct Dur(pub Duration);

impl Dur {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }

    /// The time this long after the origin.
    pub fn as_time(self) -> Time {
        Time::ZERO + self.0
    }
}

impl TryFrom<String> for Dur {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        parse_duration(&s).map(Dur)
    }
}

impl From<Dur> for String {
    fn from(d: Dur) -> String {
        d.to_string()
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms.is_multiple_of(3_600_000) && ms > 0 {
            write!(f, "{}h", ms / 3_600_000)
        } else if ms.is_multiple_of(60_000) && ms > 0 {
            write!(f, "{}m", ms / 60_000)
        } else if ms.is_multiple_of(1000) {
            write!(f, "{}s", ms / 1000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

/// Parses `"1h30m"`, `"2.5s"`, `"500ms"`...
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || {
        format!("invalid duration {s:?}: expected a number with a unit (ms, s, m, h), e.g. \"90s\" or \"1h30m\"")
    };
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = 0.0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > 1e9 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(total))
}

/// A timing profile of `hale-core`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileName {
    /// One datacenter.
    #[default]
    Lan,
    /// Across datacenters.
    Wan,
    /// One machine or rack.
    Local,
}

impl From<ProfileName> for Profile {
    fn from(p: ProfileName) -> Profile {
        match p {
            ProfileName::Lan => Profile::Lan,
            ProfileName::Wan => Profile::Wan,
            ProfileName::Local => Profile::Local,
        }
    }
}

/// Optional overrides of `hale_core::Config` knobs (same names).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // Each field is the `hale_core::Config` field of the same name.
pub struct ConfigOverrides {
    pub probe_interval: Option<Dur>,
    pub walk_interval: Option<Dur>,
    pub monitor_interval: Option<Dur>,
    pub probe_timeout: Option<Dur>,
    pub indirect_probes: Option<usize>,
    pub stream_fallback_probe: Option<bool>,
    pub monitors: Option<usize>,
    pub ring_heartbeats: Option<bool>,
    pub skip_fresh: Option<bool>,
    pub awareness_max: Option<u8>,
    pub suspicion_min: Option<Dur>,
    pub suspicion_max: Option<Dur>,
    pub expected_confirmations: Option<usize>,
    pub corroboration: Option<usize>,
    pub health_discount: Option<u8>,
    pub accusation_window: Option<Dur>,
    pub accusation_burst: Option<f64>,
    pub gossip_interval: Option<Dur>,
    pub gossip_fanout: Option<usize>,
    pub gossip_to_dead: Option<Dur>,
    pub retransmit_mult: Option<usize>,
    pub suspicion_retransmits: Option<usize>,
    pub targeted_suspicions: Option<bool>,
    pub max_broadcasts: Option<usize>,
    pub push_pull_interval: Option<Dur>,
    pub push_pull_scale: Option<usize>,
    pub sync_replies_per_sec: Option<u32>,
    pub seed_retry_interval: Option<Dur>,
    pub reconnect_interval: Option<Dur>,
    pub tombstone_ttl: Option<Dur>,
    pub pause_threshold: Option<Dur>,
    /// `"2"` or `"2-3"`: the wire versions every node speaks; each writes
    /// the newest of them, as a cluster of one build negotiates.
    #[serde(
        default,
        deserialize_with = "versions_from",
        serialize_with = "versions_to",
        skip_serializing_if = "Option::is_none"
    )]
    pub wire_versions: Option<hale_core::Versions>,
}

fn versions_from<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<hale_core::Versions>, D::Error> {
    let text = String::deserialize(d)?;
    let v: hale_core::Versions = text.parse().map_err(serde::de::Error::custom)?;
    if !v.is_spoken() {
        return Err(serde::de::Error::custom(format!(
            "wire_versions {v}: this build speaks {}",
            hale_core::wire::SPOKEN
        )));
    }
    Ok(Some(v))
}

fn versions_to<S: serde::Serializer>(
    v: &Option<hale_core::Versions>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_str(&v.to_string()),
        None => s.serialize_none(),
    }
}

macro_rules! apply {
    ($cfg:ident, $o:ident; dur: $($d:ident),*; val: $($v:ident),*) => {
        $( if let Some(x) = $o.$d { $cfg.$d = x.get(); } )*
        $( if let Some(x) = $o.$v { $cfg.$v = x; } )*
    };
}

impl ConfigOverrides {
    /// Applies the overrides to `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        let o = self;
        apply!(cfg, o;
            dur: probe_interval, walk_interval, monitor_interval, probe_timeout, suspicion_min, suspicion_max, accusation_window,
                 gossip_interval, gossip_to_dead, push_pull_interval, seed_retry_interval,
                 reconnect_interval, tombstone_ttl, pause_threshold;
            val: indirect_probes, stream_fallback_probe, monitors, ring_heartbeats, skip_fresh, awareness_max,
                 expected_confirmations, corroboration, health_discount, accusation_burst,
                 gossip_fanout, retransmit_mult, suspicion_retransmits, targeted_suspicions, max_broadcasts,
                 push_pull_scale,
                 sync_replies_per_sec);
        if let Some(v) = o.wire_versions {
            cfg.wire_versions = v;
        }
    }
}

/// The virtual network.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// One-way latency of every link, in milliseconds.
    #[serde(default = "default_latency")]
    pub latency_ms: f64,
    /// Uniform extra latency in `[0, jitter_ms)`.
    #[serde(default = "default_latency")]
    pub jitter_ms: f64,
    /// Probability that any datagram is lost (the baseline, restored when the
    /// heal phase starts).
    #[serde(default)]
    pub loss: f64,
}

fn default_latency() -> f64 {
    0.5
}

impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            latency_ms: default_latency(),
            jitter_ms: default_latency(),
            loss: 0.0,
        }
    }
}

/// One change of the application traffic rate.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficPoint {
    /// When.
    pub at: Dur,
    /// Messages per second per node from then on.
    pub rate: f64,
}

/// A sweep: one rate after another, each held for `hold`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficSweep {
    /// When the first rate starts.
    #[serde(default)]
    pub start: Dur,
    /// How long each rate is held.
    pub hold: Dur,
    /// The rates, in order (messages per second per node).
    pub rates: Vec<f64>,
}

/// Application traffic: request/response pairs between random nodes, which
/// spare probes (`note_traffic`) but cost no protocol bandwidth.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficSpec {
    /// Rate at time zero (messages per second per node).
    #[serde(default)]
    pub rate: f64,
    /// Later changes of the rate.
    #[serde(default)]
    pub schedule: Vec<TrafficPoint>,
    /// An optional sweep of rates.
    pub sweep: Option<TrafficSweep>,
}

/// A chaos phase (faults happen) then a heal phase (the network is repaired
/// and the runner checks that every view converged at its end).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Phases {
    /// Length of the chaos phase (default: the duration less the heal phase).
    pub chaos: Option<Dur>,
    /// Length of the heal phase, at the end of the run.
    pub heal: Dur,
}

/// A scenario file.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name.
    pub name: String,
    /// What it reproduces and what is expected.
    pub description: String,
    /// Nodes at the start.
    pub nodes: u32,
    /// Virtual time of one run.
    pub duration: Dur,
    /// Seed of the first run (runs use seed, seed + 1, ...).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Timing profile.
    #[serde(default)]
    pub profile: ProfileName,
    /// Overrides of the profile's knobs.
    #[serde(default)]
    pub config: ConfigOverrides,
    /// Start with every node knowing every other (true), or joining through node 0.
    #[serde(default = "default_true")]
    pub warm_start: bool,
    /// The network.
    #[serde(default)]
    pub network: NetworkSpec,
    /// Application traffic.
    #[serde(default)]
    pub traffic: TrafficSpec,
    /// Chaos then heal.
    pub phases: Option<Phases>,
    /// Record every probe visit and check probe coverage (needs a stable membership).
    #[serde(default)]
    pub trace_probes: bool,
    /// Bandwidth sampling interval (default 10 s).
    pub sample_every: Option<Dur>,
    /// Timed fault steps.
    #[serde(default, rename = "step")]
    pub steps: Vec<Step>,
}

fn default_seed() -> u64 {
    1
}

fn default_true() -> bool {
    true
}

/// A scenario that cannot be read or makes no sense.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown key, or a value of the wrong type (the
    /// message names the key and shows the line).
    #[error(transparent)]
    Parse(#[from] toml::de::Error),
    /// A value of the right type that makes no sense.
    #[error("invalid `{key}`: {problem}")]
    Invalid {
        /// Path of the key, e.g. `step[2].duration`.
        key: String,
        /// What is wrong.
        problem: String,
    },
}

pub(crate) fn invalid(key: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        key: key.into(),
        problem: problem.into(),
    }
}

impl Scenario {
    /// Parses and validates a scenario.
    pub fn from_toml(text: &str) -> Result<Scenario, ScenarioError> {
        let sc: Scenario = toml::from_str(text)?;
        sc.validate()?;
        Ok(sc)
    }

    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Scenario::from_toml(&text)
    }

    /// The node configuration: the profile with the overrides applied.
    pub fn node_config(&self) -> Result<Config, ScenarioError> {
        let mut cfg = Config::new(self.profile.into());
        self.config.apply(&mut cfg);
        cfg.validate()
            .map_err(|e| invalid(format!("config.{}", e.field), e.problem))?;
        Ok(cfg)
    }

    /// End of the chaos phase (the whole run without phases).
    pub fn chaos_end(&self) -> Duration {
        match &self.phases {
            Some(p) => p
                .chaos
                .map_or(self.duration.get().saturating_sub(p.heal.get()), Dur::get),
            None => self.duration.get(),
        }
    }

    /// Length of the heal phase (zero without phases).
    pub fn heal_len(&self) -> Duration {
        self.phases
            .as_ref()
            .map_or(Duration::ZERO, |p| p.heal.get())
    }

    /// Bandwidth sampling interval.
    pub fn sample_interval(&self) -> Duration {
        self.sample_every.map_or(Duration::from_secs(10), Dur::get)
    }

    /// Checks everything serde cannot: ranges, and what each step needs.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.name.trim().is_empty() {
            return Err(invalid("name", "must not be empty"));
        }
        if self.nodes == 0 {
            return Err(invalid("nodes", "must be at least 1"));
        }
        if self.duration.get().is_zero() {
            return Err(invalid("duration", "must be greater than zero"));
        }
        self.node_config()?;
        let prob = |key: &str, p: f64| {
            if (0.0..=1.0).contains(&p) {
                Ok(())
            } else {
                Err(invalid(key, format!("{p} is not a probability in [0, 1]")))
            }
        };
        prob("network.loss", self.network.loss)?;
        for (key, v) in [
            ("network.latency_ms", self.network.latency_ms),
            ("network.jitter_ms", self.network.jitter_ms),
        ] {
            if !(v.is_finite() && (0.0..=60_000.0).contains(&v)) {
                return Err(invalid(key, format!("{v} is not in [0, 60000] ms")));
            }
        }
        let rate = |key: String, r: f64| {
            if r.is_finite() && r >= 0.0 {
                Ok(())
            } else {
                Err(invalid(key, format!("{r} is not a rate >= 0")))
            }
        };
        rate("traffic.rate".into(), self.traffic.rate)?;
        for (i, p) in self.traffic.schedule.iter().enumerate() {
            rate(format!("traffic.schedule[{i}].rate"), p.rate)?;
            if p.at.get() > self.duration.get() {
                return Err(invalid(
                    format!("traffic.schedule[{i}].at"),
                    format!("{} is after the end of the run ({})", p.at, self.duration),
                ));
            }
        }
        if let Some(s) = &self.traffic.sweep {
            if s.hold.get().is_zero() {
                return Err(invalid("traffic.sweep.hold", "must be greater than zero"));
            }
            if s.rates.is_empty() {
                return Err(invalid(
                    "traffic.sweep.rates",
                    "must list at least one rate",
                ));
            }
            for (i, r) in s.rates.iter().enumerate() {
                rate(format!("traffic.sweep.rates[{i}]"), *r)?;
            }
        }
        if let Some(p) = &self.phases {
            let chaos = p.chaos.map_or(Duration::ZERO, Dur::get);
            if p.chaos.is_some() && chaos + p.heal.get() != self.duration.get() {
                return Err(invalid(
                    "phases.chaos",
                    format!(
                        "chaos ({}) + heal ({}) must equal the duration ({})",
                        Dur(chaos),
                        p.heal,
                        self.duration
                    ),
                ));
            }
            if p.heal.get() >= self.duration.get() {
                return Err(invalid("phases.heal", "must be shorter than the duration"));
            }
        }
        if let Some(s) = self.sample_every {
            if s.get() < Duration::from_millis(100) {
                return Err(invalid("sample_every", "must be at least 100ms"));
            }
        }
        let chaos_end = self.chaos_end();
        for (i, s) in self.steps.iter().enumerate() {
            s.validate(&format!("step[{i}]"), chaos_end)?;
        }
        Ok(())
    }

    /// Shortens the run to at most `max`: the heal phase keeps at most a
    /// third of it, and steps and traffic changes past the new chaos phase
    /// are dropped. For quick test runs of long scenarios.
    pub fn limit_duration(&mut self, max: Duration) {
        if self.duration.get() <= max {
            return;
        }
        let heal = self.heal_len().min(max / 3);
        let chaos = max - heal;
        self.duration = Dur(max);
        if let Some(p) = self.phases.as_mut() {
            p.heal = Dur(heal);
            p.chaos = Some(Dur(chaos));
        }
        self.steps.retain(|s| s.at.get() < chaos);
        for s in &mut self.steps {
            if let Some(u) = s.until.as_mut() {
                u.0 = u.0.min(chaos);
            }
        }
        self.traffic.schedule.retain(|p| p.at.get() <= max);
    }
}
