//! Every knob of the failure detector, with the `lan`, `wan` and `local` profiles.

use std::time::Duration;

use crate::wire::MAX_META;

/// A preset of timing knobs for a kind of network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// One datacenter: probe every 1 s, probe timeout 500 ms (the default).
    #[default]
    Lan,
    /// Across datacenters: probe every 5 s, timeout 3 s, slower suspicion.
    Wan,
    /// One machine or rack: probe every 1 s, timeout 200 ms, faster suspicion.
    Local,
}

impl std::str::FromStr for Profile {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "lan" => Ok(Profile::Lan),
            "wan" => Ok(Profile::Wan),
            "local" => Ok(Profile::Local),
            other => Err(ConfigError::new(
                "profile",
                format!("unknown profile {other:?}; expected lan, wan or local"),
            )),
        }
    }
}

/// Test-only deliberate faults, to prove that tests catch real bugs.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The second incident's bug: every probe period visits the first member
    /// of the walk instead of the next one, so one sibling is probed N times
    /// per round and the others never.
    RepeatFirstTarget,
    /// No corroboration: this node's own failed probe convicts alone, as if
    /// every confirmation had arrived (after `suspicion_min`), whatever its
    /// health and even when it is the one cut off (the nemesis's planted bug
    /// `one-observer-convicts`).
    ConvictAlone,
}

/// Configuration of a [`crate::Node`]. Build it from a profile with
/// [`Config::new`], change fields, and [`Config::validate`] (done by
/// `Node::new`).
#[derive(Debug, Clone)]
pub struct Config {
    /// Cluster name; packets from other clusters are rejected.
    pub cluster: String,
    /// Seed of the node's random generator (probe order, gossip targets).
    /// Give every node a different one.
    pub rng_seed: u64,
    /// The probe period: a probe that has no ack (directly or through
    /// indirect probers) this long after its ping fails.
    pub probe_interval: Duration,
    /// Time between visits of the randomized round-robin walk (each probes
    /// the walk's next member unless it was heard from within a probe
    /// interval). The walk finds what the ring monitors cannot (a member
    /// whose neighbours all failed with it, one-way paths) and spreads news;
    /// the monitors bound the time to the first probe of a failed member.
    pub walk_interval: Duration,
    /// How long a ring neighbour may stay quiet before it is pinged (see
    /// `monitors`): the bound on the time from a member's last packet to
    /// its first probe.
    pub monitor_interval: Duration,
    /// How long a direct ping waits for its ack before indirect probes start.
    pub probe_timeout: Duration,
    /// Members asked to ping the target on our behalf when the direct ping fails.
    pub indirect_probes: usize,
    /// Also ping over the stream channel (TCP) when the direct ping fails,
    /// so that datagram-only loss does not make a member look dead.
    pub stream_fallback_probe: bool,
    /// Ring neighbours on each side. Each node pings its `monitors` closest
    /// predecessors on a hash ring whenever one is quiet for a
    /// `monitor_interval`, and expects its `monitors` closest successors to
    /// ping it: every member has `2 × monitors` watchers for `monitors`
    /// exchanges a period, whatever the cluster's size. 0 turns them off.
    pub monitors: usize,
    /// Ring neighbours before this node get a [`crate::wire::Message::Heartbeat`]
    /// by turn instead of a ping (to members written wire version 3 or
    /// later, while this node's local health is perfect): the watcher's
    /// proof of life for one datagram a period instead of two, and the
    /// watcher pings only when they stop. A node whose local health is
    /// not perfect pings by turn, unscaled, so that acks bring it back.
    /// Off: each neighbour pair is one ping and its ack a period.
    pub ring_heartbeats: bool,
    /// Skip probing a member heard from (any packet or application traffic)
    /// within the last probe interval: the saving under load.
    pub skip_fresh: bool,
    /// Lifeguard local health maximum: probe interval and timeout are scaled
    /// by up to this factor when this node misses acks and nacks.
    pub awareness_max: u8,
    /// Shortest suspicion time for an observer that itself failed to reach
    /// the suspect (reached with enough independent confirmations).
    pub suspicion_min: Duration,
    /// Longest suspicion time; also the time after which an observer with no
    /// direct evidence accepts a corroborated suspicion on its own.
    pub suspicion_max: Duration,
    /// Use closed-port evidence (the runtime's [`crate::Node::handle_unreachable`]:
    /// ICMP port unreachable, connection refused) as a distinct accusation:
    /// with `corroboration` independent observers finding a member's port
    /// closed, the verdict needs only `closed_port_min`, not the silence
    /// suspicion time. A stalled or frozen process keeps its port open and
    /// never produces it.
    pub closed_port_evidence: bool,
    /// Suspicion time of a verdict on corroborated closed-port evidence,
    /// from this node's own finding.
    pub closed_port_min: Duration,
    /// Lifeguard's K: independent confirmations that shrink the suspicion
    /// time from its maximum to its minimum.
    pub expected_confirmations: usize,
    /// Independent healthy accusers needed before anyone declares a member
    /// dead (fewer when the cluster is too small to have that many).
    pub corroboration: usize,
    /// Accusations from an observer whose local health score is at least
    /// this are discounted: an unhealthy node is likely the problem itself.
    pub health_discount: u8,
    /// Window over which accusations per accuser are counted.
    pub accusation_window: Duration,
    /// An accuser that suspects more than this share of the cluster (and at
    /// least three members) within the window is discounted.
    pub accusation_burst: f64,
    /// Time between gossip rounds while there is news to spread.
    pub gossip_interval: Duration,
    /// Members each gossip round sends to.
    pub gossip_fanout: usize,
    /// Gossip also goes to members declared dead for this long, so that a
    /// wrongly declared member learns it and refutes.
    pub gossip_to_dead: Duration,
    /// Each piece of news is sent `retransmit_mult * ceil(log10(N + 1))` times.
    pub retransmit_mult: usize,
    /// Times each node sends a suspicion or a confirmation of one (at most
    /// the retransmit limit of other news). Suspicions are soft news: a
    /// member that misses one learns the verdict, and the suspect hears of
    /// it from its prober directly; fewer sends keep stall storms cheap.
    pub suspicion_retransmits: usize,
    /// Send each accusation only to the suspect, its ring neighbours and
    /// the other accusers, and each refutation only back to them (see
    /// `targeted.rs`), instead of gossiping both to the whole cluster; the
    /// verdict is gossiped to everyone either way. Off: Lifeguard's
    /// cluster-wide suspicion gossip.
    pub targeted_suspicions: bool,
    /// Most pieces of news queued; the least urgent are dropped beyond it.
    pub max_broadcasts: usize,
    /// Mean interval of the periodic sync with a random member (a summary
    /// of the view, then digests where views differ; `digest.rs`).
    pub push_pull_interval: Duration,
    /// Below wire version 4 (where a disagreement costs two whole
    /// digests), the sync interval is multiplied by
    /// `ceil(N / push_pull_scale)`, which keeps its bandwidth per node flat
    /// as the cluster grows. From version 4 on a disagreement costs what
    /// differs, and the interval stays put.
    pub push_pull_scale: usize,
    /// Most full-state replies this node sends per second (joins included).
    pub sync_replies_per_sec: u32,
    /// How often a node with no live member contacts its seeds again.
    pub seed_retry_interval: Duration,
    /// How often to try a push/pull with a random member declared dead, so
    /// that partitions heal.
    pub reconnect_interval: Duration,
    /// How long dead and left members are remembered before being forgotten.
    pub tombstone_ttl: Duration,
    /// A gap this much larger than the next timer means this node was paused
    /// (stop-the-world, SIGSTOP): probes in flight are dropped unjudged.
    pub pause_threshold: Duration,
    /// This run of this node: must grow every time a node with the same
    /// identity starts again (the agent uses the wall clock in milliseconds,
    /// never below the last value it used; the simulator the virtual start
    /// time). Every packet carries it, so a receiver can tell a restarted
    /// member's packets from replays of the previous run's.
    pub generation: u64,
    /// Replay protection: a packet that arrives this much later than the
    /// sender's clock says it could have (measured against the fastest
    /// packet seen from that sender) is dropped as a replay; a packet from an
    /// older generation is always dropped. Packets late by more than
    /// `probe_timeout` are processed but are not proof of life. Zero turns
    /// the check off.
    pub replay_window: Duration,
    /// The wire versions this node decodes and may write (within
    /// [`crate::wire::SPOKEN`], the default). Narrowing it (say, to the
    /// newest alone once every member is upgraded) makes packets of the
    /// versions left out dropped and reported.
    pub wire_versions: crate::wire::Versions,
    /// This node's metadata (at most 512 bytes).
    pub meta: Vec<u8>,
    /// Emit an [`crate::Event::ProbeVisit`] for every round-robin visit.
    pub trace_probes: bool,
    /// Most events kept before the oldest are dropped (and counted).
    pub max_events: usize,
    /// Test-only deliberate fault.
    #[cfg(feature = "fault-injection")]
    pub fault: Option<Fault>,
}

/// A configuration value that is out of range. Nothing was built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid config field `{field}`: {problem}")]
pub struct ConfigError {
    /// The field's name.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl ConfigError {
    fn new(field: &'static str, problem: impl Into<String>) -> Self {
        ConfigError {
            field,
            problem: problem.into(),
        }
    }
}

/// The knobs a running [`crate::Node`] takes new values of
/// ([`crate::Node::retune`], an agent's configuration reload). Each is read
/// afresh wherever it is used and nothing is derived from it and kept:
/// the gossip period and its fanout (each round), the retransmit limit
/// (each time news is counted), the push/pull and seed-retry periods (each
/// time their timer is set again: a timer already set keeps its deadline),
/// the tombstone time (each reap). The other knobs shape state the node
/// keeps (the walk and its phase, ring monitors, suspicions and their
/// timeouts, the replay reference, the wire's limits) and only take effect
/// in a new node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// [`Config::gossip_interval`].
    pub gossip_interval: Duration,
    /// [`Config::gossip_fanout`].
    pub gossip_fanout: usize,
    /// [`Config::retransmit_mult`].
    pub retransmit_mult: usize,
    /// [`Config::push_pull_interval`].
    pub push_pull_interval: Duration,
    /// [`Config::seed_retry_interval`].
    pub seed_retry_interval: Duration,
    /// [`Config::tombstone_ttl`].
    pub tombstone_ttl: Duration,
}

impl Tuning {
    /// The names of its fields, as in [`Config`].
    pub const FIELDS: [&'static str; 6] = [
        "gossip_interval",
        "gossip_fanout",
        "retransmit_mult",
        "push_pull_interval",
        "seed_retry_interval",
        "tombstone_ttl",
    ];
}

impl Default for Config {
    fn default() -> Self {
        Config::new(Profile::Lan)
    }
}

impl Config {
    /// The knobs of `profile`, with cluster `"hale"` and RNG seed 0.
    pub fn new(profile: Profile) -> Config {
        let ms = Duration::from_millis;
        // Lan and local: a heartbeat to the neighbour before after 0.75 s
        // of quiet, the walk every 5 s (about 1.7 packets a second per node
        // when idle: 1.33 heartbeats, 0.4 for the walk's ping and ack);
        // wan: both at 5 s. With heartbeats a 2 s walk bought nothing in
        // the simulator's scenarios (`bench/results/heartbeats-20261203/`).
        let (walk, monitor) = match profile {
            Profile::Lan | Profile::Local => (ms(5000), ms(750)),
            Profile::Wan => (ms(5000), ms(5000)),
        };
        // Milliseconds, but the push/pull interval in seconds.
        let (interval, timeout, smin, smax, gossip, pp, dead_gossip) = match profile {
            Profile::Lan => (1000, 500, 2500, 10_000, 200, 30, 30_000),
            Profile::Wan => (5000, 3000, 9000, 54_000, 500, 60, 60_000),
            Profile::Local => (1000, 200, 2200, 8000, 100, 15, 15_000),
        };
        Config {
            cluster: "hale".to_owned(),
            rng_seed: 0,
            probe_interval: ms(interval),
            walk_interval: walk,
            monitor_interval: monitor,
            probe_timeout: ms(timeout),
            indirect_probes: 3,
            stream_fallback_probe: true,
            monitors: 1,
            ring_heartbeats: true,
            skip_fresh: true,
            awareness_max: 8,
            suspicion_min: ms(smin),
            suspicion_max: ms(smax),
            expected_confirmations: 1,
            closed_port_evidence: true,
            closed_port_min: Duration::ZERO,
            corroboration: 2,
            health_discount: 2,
            accusation_window: ms(10_000),
            accusation_burst: 0.1,
            gossip_interval: ms(gossip),
            gossip_fanout: 3,
            gossip_to_dead: ms(dead_gossip),
            retransmit_mult: 4,
            suspicion_retransmits: 8,
            targeted_suspicions: true,
            max_broadcasts: 4096,
            push_pull_interval: Duration::from_secs(pp),
            push_pull_scale: 200,
            sync_replies_per_sec: 20,
            seed_retry_interval: ms(5000),
            reconnect_interval: ms(10_000),
            tombstone_ttl: Duration::from_secs(15 * 60),
            pause_threshold: ms(700),
            generation: 0,
            replay_window: ms(smin),
            wire_versions: crate::wire::SPOKEN,
            meta: Vec::new(),
            trace_probes: false,
            max_events: 65_536,
            #[cfg(feature = "fault-injection")]
            fault: None,
        }
    }

    /// The knobs a running node can take new values of.
    pub fn tuning(&self) -> Tuning {
        Tuning {
            gossip_interval: self.gossip_interval,
            gossip_fanout: self.gossip_fanout,
            retransmit_mult: self.retransmit_mult,
            push_pull_interval: self.push_pull_interval,
            seed_retry_interval: self.seed_retry_interval,
            tombstone_ttl: self.tombstone_ttl,
        }
    }

    /// This configuration with the knobs of `t`.
    pub fn with_tuning(mut self, t: Tuning) -> Config {
        let Tuning {
            gossip_interval,
            gossip_fanout,
            retransmit_mult,
            push_pull_interval,
            seed_retry_interval,
            tombstone_ttl,
        } = t;
        self.gossip_interval = gossip_interval;
        self.gossip_fanout = gossip_fanout;
        self.retransmit_mult = retransmit_mult;
        self.push_pull_interval = push_pull_interval;
        self.seed_retry_interval = seed_retry_interval;
        self.tombstone_ttl = tombstone_ttl;
        self
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let nonzero = |field, d: Duration| {
            if d.is_zero() {
                Err(ConfigError::new(field, "must be greater than zero"))
            } else {
                Ok(())
            }
        };
        if self.cluster.is_empty() || self.cluster.len() > 64 {
            return Err(ConfigError::new("cluster", "must be 1 to 64 bytes long"));
        }
        nonzero("probe_interval", self.probe_interval)?;
        nonzero("probe_timeout", self.probe_timeout)?;
        nonzero("walk_interval", self.walk_interval)?;
        nonzero("monitor_interval", self.monitor_interval)?;
        nonzero("gossip_interval", self.gossip_interval)?;
        nonzero("push_pull_interval", self.push_pull_interval)?;
        nonzero("seed_retry_interval", self.seed_retry_interval)?;
        nonzero("reconnect_interval", self.reconnect_interval)?;
        nonzero("suspicion_min", self.suspicion_min)?;
        if !self.wire_versions.is_spoken() {
            return Err(ConfigError::new(
                "wire_versions",
                format!(
                    "{} is not within the versions this build speaks ({})",
                    self.wire_versions,
                    crate::wire::SPOKEN
                ),
            ));
        }
        if self.probe_timeout >= self.probe_interval {
            return Err(ConfigError::new(
                "probe_timeout",
                format!(
                    "{:?} must be shorter than probe_interval ({:?})",
                    self.probe_timeout, self.probe_interval
                ),
            ));
        }
        if self.suspicion_max < self.suspicion_min {
            return Err(ConfigError::new(
                "suspicion_max",
                "must be at least suspicion_min",
            ));
        }
        // `field` in `lo..=hi` (no upper bound: `usize::MAX`).
        let within = |field, v: usize, lo: usize, hi: usize| {
            let problem = match (lo, hi) {
                (_, usize::MAX) => format!("must be at least {lo}"),
                (0, _) => format!("must be at most {hi}"),
                _ => format!("must be {lo} to {hi}"),
            };
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError::new(field, problem))
            }
        };
        let at_least = |field, v: usize, lo: usize| within(field, v, lo, usize::MAX);
        within("awareness_max", self.awareness_max.into(), 1, 32)?;
        within("indirect_probes", self.indirect_probes, 0, 16)?;
        within("monitors", self.monitors, 0, 16)?;
        within("gossip_fanout", self.gossip_fanout, 1, 16)?;
        at_least("retransmit_mult", self.retransmit_mult, 1)?;
        at_least("suspicion_retransmits", self.suspicion_retransmits, 1)?;
        within("corroboration", self.corroboration, 1, 16)?;
        at_least("expected_confirmations", self.expected_confirmations, 1)?;
        if !(self.accusation_burst > 0.0 && self.accusation_burst <= 1.0) {
            return Err(ConfigError::new("accusation_burst", "must be in (0, 1]"));
        }
        at_least("push_pull_scale", self.push_pull_scale, 1)?;
        let sync_replies = self.sync_replies_per_sec as usize;
        at_least("sync_replies_per_sec", sync_replies, 1)?;
        at_least("max_broadcasts", self.max_broadcasts, 16)?;
        at_least("max_events", self.max_events, 1)?;
        if self.meta.len() > MAX_META {
            return Err(ConfigError::new(
                "meta",
                format!("{} bytes; at most {MAX_META}", self.meta.len()),
            ));
        }
        Ok(())
    }
}
