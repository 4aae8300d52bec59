//! The agent's API contract: every shape its HTTP API answers and accepts
//! (stable JSON for the API and the CLI, states typed as enums with the
//! wire's names), the error body, and the routes ([`routes`]). The
//! handlers, [`crate::Client`] and the `hale` commands all use these
//! types; this module imports nothing else of the agent.

use serde::{Deserialize, Serialize};

use hale_control::{HookOutcome, StepDownReason};
use hale_core::{DeathEvidence, Event, Member, NodeId, Time};

mod history;
mod ops;
mod reload;
mod role;
pub mod routes;

/// The control plane's view of one server, as `/v1/health` shows it.
pub use hale_control::raft::{ControlState, ControlStatus};
/// The state of a circuit breaker (`closed`, `open`, `half-open`).
pub use hale_relay::BreakerGauge as BreakerState;
pub use hale_relay::UpstreamRole;
/// Clocks that disagree with this process's (`/v1/health`'s `clock`).
pub use hale_seal::{ClockReport, ServerOffset, StampsRefused};
pub use history::{Cause, Change, HistoryView, ReleaseReason};
pub use ops::{
    DrillView, ErrorBody, Fault, FaultView, KeyOp, KeyOpError, KeyReport, KeyRequest, KeyView,
    KeysView, RelayView, RestoredView, TrafficView, UpstreamView, DEFAULT_DISK_DELAY,
    MAX_DISK_DELAY, MAX_FAULT,
};
pub use reload::{ChangeKind, ConfigChange, RefusalReason, RefusedKey, ReloadRefusal, ReloadView};
pub use role::{
    CandidateView, CheckFailure, CheckResult, CheckView, ClusterRoleView, ClusterRolesView,
    ClusterServicesView, HandoverView, Lagging, LeaseView, NodeServicesView, PauseView,
    PostgresView, PrimaryView, ReplicaView, RoleTags, RoleView, RolesView, ServiceView,
    SwitchoverRequest, SwitchoverStep, SwitchoverView,
};

/// Wall-clock milliseconds since the Unix epoch.
pub use hale_seal::unix_ms;

/// An agent's health, as `/v1/health` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// A member, and its control-plane server (if any) works.
    Ok,
    /// Its control-plane server's storage failed.
    Degraded,
    /// It left the cluster.
    Left,
}

hale_core::named_enum! {
    /// A member's state, as the API shows it: `alive`, `suspect`, `dead`, `left`.
    /// It mirrors `hale_core::MemberState` on purpose: this is the API's
    /// contract, owned by the agent and serialised, while the sans-IO core has
    /// no serde and may change its own type; `From` converts the core's.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum MemberState {
        /// Answering probes, or not yet shown otherwise.
        Alive => "alive",
        /// Failed a probe; may still refute.
        Suspect => "suspect",
        /// Declared dead on corroborated evidence.
        Dead => "dead",
        /// Left the cluster gracefully.
        Left => "left",
    }
}

impl MemberState {
    /// Alive or suspect: still probed and gossiped to.
    pub fn is_live(self) -> bool {
        matches!(self, MemberState::Alive | MemberState::Suspect)
    }
}

impl From<hale_core::MemberState> for MemberState {
    fn from(s: hale_core::MemberState) -> MemberState {
        match s {
            hale_core::MemberState::Alive => MemberState::Alive,
            hale_core::MemberState::Suspect => MemberState::Suspect,
            hale_core::MemberState::Dead => MemberState::Dead,
            hale_core::MemberState::Left => MemberState::Left,
        }
    }
}

/// One member as the API and `hale members --json` show it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemberView {
    /// Node name.
    pub name: String,
    /// Gossip address.
    pub addr: String,
    /// `alive`, `suspect`, `dead` or `left`.
    pub state: MemberState,
    /// Incarnation.
    pub incarnation: u32,
    /// Local health score it advertised (0 is healthy); for this node, its own.
    pub health: u8,
    /// Milliseconds since this agent last heard from it (None: never).
    pub last_heard_ms_ago: Option<u64>,
    /// Milliseconds since it entered its state.
    pub state_for_ms: u64,
    /// Its metadata, as UTF-8 (lossy).
    pub meta: String,
    /// Whether this entry is the agent itself.
    pub is_self: bool,
    /// Why it was declared dead, if it is.
    pub evidence: Option<EvidenceView>,
}

/// The evidence behind a death verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EvidenceView {
    /// Who reached the verdict.
    pub declared_by: String,
    /// Healthy accusers known here.
    pub accusers: Vec<String>,
    /// Accusers discounted (unhealthy, or accusing too many).
    pub discounted: usize,
    /// Independent healthy confirmations.
    pub confirmations: usize,
    /// Milliseconds from first suspicion to the verdict (None: learned directly).
    pub suspected_ms_before_verdict: Option<u64>,
    /// Milliseconds from the last time heard to the verdict.
    pub silent_ms_before_verdict: Option<u64>,
    /// Unix time of the verdict, in milliseconds.
    pub declared_at_unix_ms: u64,
}

/// One event, as the bus carries it, the history keeps it, `/v1/events`
/// streams it and the dashboard reads it: where and when it was seen, and
/// what happened ([`AgentEvent`], whose `kind` and `detail` are fields of
/// this object on the wire).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EventView {
    /// Sequence number, increasing from 1 for this agent's lifetime.
    pub seq: u64,
    /// Unix time in milliseconds.
    pub unix_ms: u64,
    /// The agent that observed it.
    pub observer: String,
    /// What happened: `kind` and, for kinds that have one, `detail`.
    #[serde(flatten)]
    pub event: AgentEvent,
    /// The member it is about (None for events about the observer itself).
    pub member: Option<String>,
    /// Incarnation, where it applies.
    pub incarnation: Option<u32>,
}

/// Which side of the control plane noticed a clock skew.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ClockSide {
    /// This agent, as a client of a control-plane server.
    Client,
    /// This agent's control-plane server, refusing a member's requests.
    Server,
}

/// What happened, one variant per kind. On the wire it is `"kind"` (the
/// variant's name in kebab-case) and `"detail"` (its fields, absent for
/// kinds without any).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", content = "detail", rename_all = "kebab-case")]
pub enum AgentEvent {
    /// A member joined.
    Joined,
    /// A member is suspected.
    Suspected {
        /// Who suspects it.
        accuser: String,
    },
    /// A member was declared dead, with the evidence.
    Dead(EvidenceView),
    /// A suspected or dead member proved alive.
    Recovered {
        /// Whether it had been declared dead.
        was_dead: bool,
    },
    /// A member left gracefully.
    Left,
    /// A member's metadata changed.
    Metadata,
    /// This agent refuted a suspicion (or a verdict) about itself.
    Refuted {
        /// Whether it had been declared dead.
        was_dead: bool,
    },
    /// No member answered: the agent fell back to its seeds.
    SeedFallback,
    /// The agent's process was paused (its clock jumped).
    Paused {
        /// How long, in milliseconds.
        gap_ms: u64,
    },
    /// A peer (the event's `member`) had heard a newer generation from this
    /// agent than its packets carried, so it dropped them as replays: the
    /// agent restarted with its wall clock behind a previous run's. Its
    /// packets now carry a generation above the one the peer named.
    GenerationRaised {
        /// The generation its packets carried.
        previous: u64,
        /// The generation they carry now.
        generation: u64,
    },
    /// A packet in a wire version this agent does not speak was dropped
    /// (its sender is the event's `member`, when the packet names it), or
    /// a member advertises versions that share none with this agent's: the
    /// two cannot hear each other. Upgrade the older one.
    UnsupportedWireVersion {
        /// The version of its packet (the newest it speaks, for a member
        /// known by what it advertises).
        version: u8,
        /// The versions it speaks (`"3"`, `"3-4"`), when it says.
        speaks: Option<String>,
        /// The versions this agent speaks.
        ours: String,
    },
    /// This node was granted a role; its promote hook is running.
    Promoting {
        /// The role.
        role: String,
        /// The fencing epoch granted.
        epoch: u64,
    },
    /// This node holds a role (its promote hook succeeded).
    Promoted {
        /// The role.
        role: String,
        /// The fencing epoch.
        epoch: u64,
        /// Always true: a failed promote hook ends in `demoted`.
        hook_ok: bool,
    },
    /// This node is giving a role up.
    Demoting {
        /// The role.
        role: String,
        /// The fencing epoch it held.
        epoch: u64,
        /// Why.
        reason: StepDownReason,
    },
    /// This node gave a role up.
    Demoted {
        /// The role.
        role: String,
        /// The fencing epoch it held.
        epoch: u64,
        /// Why.
        reason: StepDownReason,
        /// Whether the demote hook did its job.
        hook_ok: bool,
        /// How the demote hook ended.
        demote: HookOutcome,
        /// How the promote hook ended, if it ran during this holding.
        promote: Option<HookOutcome>,
    },
    /// A role changed hands (seen by a control-plane server).
    Holder {
        /// The role.
        role: String,
        /// The previous holder.
        from: Option<String>,
        /// The new holder (None: released).
        to: Option<String>,
        /// The lease's epoch.
        epoch: u64,
    },
    /// A role this node holds was paused (`true`: maintenance, its checks
    /// no longer move it) or resumed, as its committed renewal said.
    RolePaused {
        /// The role.
        role: String,
        /// Paused, or resumed.
        paused: bool,
    },
    /// This node's demote hook failed: the role is not released; the
    /// demote runs again in `retry_in_ms` (the lease is kept meanwhile, and
    /// the watchdog fences at the lease's end as last armed).
    DemoteFailed {
        /// The role.
        role: String,
        /// The fencing epoch held.
        epoch: u64,
        /// Why the holding is ending.
        reason: StepDownReason,
        /// How this run ended.
        outcome: HookOutcome,
        /// Failed runs so far.
        failures: u32,
        /// Milliseconds until the next run.
        retry_in_ms: u64,
    },
    /// The agent stopped keeping a paused role it holds: no demote, no
    /// release, its watchdog exited without fencing; its next run adopts it.
    RoleKept {
        /// The role.
        role: String,
        /// The fencing epoch kept.
        epoch: u64,
    },
    /// The agent adopted a paused role its previous run kept: held again at
    /// the same epoch, without a promote hook.
    RoleAdopted {
        /// The role.
        role: String,
        /// The fencing epoch.
        epoch: u64,
    },
    /// The control plane will not grant this node a replicated role: its
    /// copy lags the holder's last mark by more than `max_lag_on_failover`
    /// (said when the refusal begins; the role's view shows it while it lasts).
    NotEligible {
        /// The role.
        role: String,
        /// How far its copy lags (bytes).
        lag: u64,
        /// The most it may (bytes).
        max_lag: u64,
    },
    /// A PostgreSQL role (`[role.postgres]`): this node's server, not
    /// streaming from the holder `upstream`, starts rejoining it (fenced,
    /// and stopped unless only its upstream changes).
    Rejoining {
        /// The role.
        role: String,
        /// The holder it rejoins.
        upstream: String,
    },
    /// Its diverged timeline was rewound onto the holder's (`pg_rewind`).
    Rewound {
        /// The role.
        role: String,
        /// The holder it rejoins.
        upstream: String,
    },
    /// Its data directory was cloned afresh from the holder (`pg_basebackup`).
    Recloned {
        /// The role.
        role: String,
        /// The holder it rejoins.
        upstream: String,
    },
    /// It streams from the holder again; its fence is lifted.
    Streaming {
        /// The role.
        role: String,
        /// The holder it streams from.
        upstream: String,
    },
    /// A rejoin did not complete (tried again 5 s later); the server stays fenced.
    RejoinFailed {
        /// The role.
        role: String,
        /// The holder it was rejoining.
        upstream: String,
        /// What failed.
        error: String,
    },
    /// A planned switchover of `role` to `to`: `ordered` or `cancelled`
    /// (on the member that was asked), `waiting` for the target to catch
    /// up (on the holder, with why, once per order) and `handing-over` (on
    /// the holder, as it steps down).
    Switchover {
        /// The role.
        role: String,
        /// The candidate it goes to.
        to: String,
        /// How far it got.
        step: SwitchoverStep,
        /// Why it waits (`waiting` only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// This node's server ran as a primary while no node held the role:
    /// fenced (it must rejoin before it may be promoted).
    PostgresFenced {
        /// The role.
        role: String,
        /// How it was stopped.
        how: hale_postgres::Fenced,
    },
    /// Wall clocks disagree by more than the control plane's replay window
    /// (30 s). `side` `client`: this agent's clock is `skew_ms` off
    /// control-plane server `server`'s; it stamps its requests to that
    /// server in the server's time from now on. `side` `server`: this
    /// agent's server `server` refused a request stamped `skew_ms` from its
    /// clock (a member whose clock is off) and told it the server's time.
    /// Nothing stops working; fix the clocks (NTP).
    ClockSkew {
        /// The control-plane server concerned.
        server: u64,
        /// The other clock minus the server's, in ms.
        skew_ms: i64,
        /// Which side noticed.
        side: ClockSide,
    },
    /// This agent's control-plane server stopped on a fatal error.
    ControlStopped {
        /// The server's id.
        server: u64,
        /// Why it stopped.
        error: String,
    },
    /// The control plane's churn breaker, on this agent's server while it
    /// leads, opened (after an election, or when many leases ran out
    /// within a few leases: run-out roles go back to their living holders
    /// rather than move) or closed.
    ChurnBreaker {
        /// The server's id.
        server: u64,
        /// Open, or closed.
        open: bool,
    },
    /// A relay upstream's circuit breaker changed state.
    Breaker {
        /// The upstream (its DSN without the key).
        upstream: String,
        /// `primary` or `standby`.
        role: UpstreamRole,
        /// The previous state (`closed`, `open`, `half-open`).
        from: BreakerState,
        /// The new state.
        to: BreakerState,
    },
    /// A drill set a fault on this agent.
    DrillSet {
        /// The fault.
        fault: Fault,
        /// For how long, in milliseconds.
        duration_ms: u64,
    },
    /// A drill's fault was lifted.
    DrillRestored {
        /// The fault.
        fault: Fault,
        /// Why (`expired`, `restored`, ...).
        reason: String,
    },
    /// This agent applied a changed configuration file (`hale reload`,
    /// SIGHUP): what changed. No role it holds moved because of it.
    ConfigReloaded(ReloadView),
    /// This agent refused a changed configuration file: why, and the keys
    /// concerned. Nothing changed.
    ConfigReloadRefused(ReloadRefusal),
    /// A kind this version does not know (from a newer agent).
    #[serde(other)]
    Unknown,
}

impl AgentEvent {
    /// The kind, as on the wire.
    pub fn kind(&self) -> String {
        self.wire().kind
    }

    /// Its `detail`, as the wire has it (None for kinds without one).
    pub fn detail(&self) -> Option<serde_json::Value> {
        self.wire().detail
    }

    /// Its `kind` and `detail`, read back from its serialized form (events
    /// are a few a second at most; a new variant needs no list updated).
    fn wire(&self) -> EventWire {
        serde_json::to_value(self)
            .and_then(serde_json::from_value)
            .unwrap_or_default()
    }

    /// The event about `member` (or about the observer itself, with
    /// None), stamped with `seq`, now, and the `observer`'s name.
    pub fn stamped(
        self,
        seq: u64,
        observer: &str,
        member: Option<String>,
        incarnation: Option<u32>,
    ) -> EventView {
        EventView {
            seq,
            unix_ms: unix_ms(),
            observer: observer.to_owned(),
            event: self,
            member,
            incarnation,
        }
    }
}

#[derive(Default, Deserialize)]
struct EventWire {
    kind: String,
    detail: Option<serde_json::Value>,
}

fn ms_between(later: Time, earlier: Time) -> u64 {
    later.saturating_since(earlier).as_millis() as u64
}

/// The view of a member; `now` is the core's current time.
pub fn member_view(m: &Member<NodeId>, now: Time, evidence: Option<EvidenceView>) -> MemberView {
    MemberView {
        name: m.id().name().to_owned(),
        addr: m.id().addr().to_string(),
        state: m.state().into(),
        incarnation: m.incarnation(),
        health: m.advertised_health(),
        last_heard_ms_ago: (m.last_heard() > Time::ZERO).then(|| ms_between(now, m.last_heard())),
        state_for_ms: ms_between(now, m.state_since()),
        meta: String::from_utf8_lossy(m.meta()).into_owned(),
        is_self: false,
        evidence,
    }
}

/// The view of a death verdict.
pub fn evidence_view(e: &DeathEvidence<NodeId>) -> EvidenceView {
    EvidenceView {
        declared_by: e.declared_by.name().to_owned(),
        accusers: e.accusers.iter().map(|a| a.name().to_owned()).collect(),
        discounted: e.discounted,
        confirmations: e.confirmations,
        suspected_ms_before_verdict: e.suspected_at.map(|s| ms_between(e.declared_at, s)),
        silent_ms_before_verdict: (e.last_heard > Time::ZERO)
            .then(|| ms_between(e.declared_at, e.last_heard)),
        declared_at_unix_ms: unix_ms(),
    }
}

/// The view of an event, or None for diagnostic events not shown to users.
pub fn event_view(seq: u64, observer: &NodeId, e: &Event<NodeId>) -> Option<EventView> {
    // Most events are about a member, at an incarnation.
    let about = |m: &NodeId, inc: &u32| (Some(m.name().to_owned()), Some(*inc));
    let (event, (member, inc)) = match e {
        Event::Joined {
            member,
            incarnation,
        } => (AgentEvent::Joined, about(member, incarnation)),
        Event::Suspected {
            member,
            incarnation,
            accuser,
        } => {
            let accuser = accuser.name().to_owned();
            (
                AgentEvent::Suspected { accuser },
                about(member, incarnation),
            )
        }
        Event::Dead {
            member,
            incarnation,
            evidence,
        } => (
            AgentEvent::Dead(evidence_view(evidence)),
            about(member, incarnation),
        ),
        Event::Recovered {
            member,
            incarnation,
            was_dead,
        } => {
            let was_dead = *was_dead;
            (
                AgentEvent::Recovered { was_dead },
                about(member, incarnation),
            )
        }
        Event::Left {
            member,
            incarnation,
        } => (AgentEvent::Left, about(member, incarnation)),
        Event::MetadataUpdated {
            member,
            incarnation,
        } => (AgentEvent::Metadata, about(member, incarnation)),
        Event::Refuted {
            incarnation,
            was_dead,
        } => {
            let was_dead = *was_dead;
            (AgentEvent::Refuted { was_dead }, (None, Some(*incarnation)))
        }
        Event::SeedFallback => (AgentEvent::SeedFallback, (None, None)),
        Event::Paused { gap_ms } => (AgentEvent::Paused { gap_ms: *gap_ms }, (None, None)),
        Event::GenerationRaised {
            previous,
            generation,
            by,
        } => (
            AgentEvent::GenerationRaised {
                previous: *previous,
                generation: *generation,
            },
            (Some(by.name().to_owned()), None),
        ),
        Event::UnsupportedVersion {
            sender,
            version,
            speaks,
            ours,
        } => (
            AgentEvent::UnsupportedWireVersion {
                version: *version,
                speaks: speaks.map(|s| s.to_string()),
                ours: ours.to_string(),
            },
            (sender.as_ref().map(|s| s.name().to_owned()), None),
        ),
        Event::ProbeVisit { .. } => return None,
    };
    Some(event.stamped(seq, observer.name(), member, inc))
}

/// Members per state, as `GET /v1/health` counts them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemberCounts {
    /// Alive.
    pub alive: usize,
    /// Suspected.
    pub suspect: usize,
    /// Declared dead.
    pub dead: usize,
    /// Left gracefully.
    pub left: usize,
}

/// `GET /v1/health`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HealthView {
    /// `ok`, `left` (it left the cluster) or `degraded` (its control-plane
    /// server's storage failed).
    pub status: HealthStatus,
    /// This agent's control-plane server, if it runs one.
    pub control: Option<hale_control::raft::ControlStatus>,
    /// Clocks that disagree with this agent's by more than the control
    /// plane's window, both sides (empty when all agree).
    #[serde(default)]
    pub clock: ClockReport,
    /// The cluster's name.
    pub cluster: String,
    /// This node's name.
    pub node: String,
    /// Its gossip address.
    pub addr: String,
    /// Its incarnation.
    pub incarnation: u32,
    /// Its local health score (0 is healthy).
    pub local_health: u8,
    /// Members per state.
    pub members: MemberCounts,
    /// The wire versions it speaks and the one it writes (absent from
    /// agents before 0.2.0).
    pub wire: Option<WireView>,
    /// Its hooks now: running, queued, and the bound (absent without a
    /// control plane, and from agents before 0.3.0).
    #[serde(default)]
    pub hooks: Option<SlotCounts>,
}

/// The wire versions of an agent, in `GET /v1/health`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct WireView {
    /// The versions it decodes (`"2-3"`).
    pub speaks: String,
    /// The version it writes: the highest every live member speaks.
    pub writes: u8,
}

/// How many hooks run and wait now (`hooks` of [`HealthView`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotCounts {
    /// Hooks holding a slot.
    pub running: usize,
    /// Hooks waiting for one.
    pub queued: usize,
    /// The bound.
    pub limit: usize,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    fn wire(e: &EventView) -> serde_json::Value {
        serde_json::to_value(e).unwrap()
    }

    #[test]
    fn an_events_kind_and_detail_are_fields_of_its_object_on_the_wire() {
        let e = AgentEvent::Demoted {
            role: "db".into(),
            epoch: 7,
            reason: StepDownReason::PromoteFailed,
            hook_ok: true,
            demote: HookOutcome::Succeeded,
            promote: Some(HookOutcome::TimedOut),
        }
        .stamped(3, "n1", None, None);
        let v = wire(&e);
        assert_eq!(v["kind"], "demoted");
        assert_eq!(v["seq"], 3);
        assert_eq!(v["observer"], "n1");
        assert_eq!(v["member"], serde_json::Value::Null);
        assert_eq!(v["detail"]["reason"], "promote-hook-failed");
        assert_eq!(v["detail"]["promote"], "timed-out");
        assert_eq!(v["detail"]["demote"], "succeeded");
        assert_eq!(serde_json::from_value::<EventView>(v).unwrap(), e);
    }

    #[test]
    fn kinds_without_detail_omit_it_and_read_it_back_when_null() {
        let e = AgentEvent::Joined.stamped(1, "n1", Some("n2".into()), Some(4));
        let v = wire(&e);
        assert_eq!(v["kind"], "joined");
        assert!(v.get("detail").is_none(), "{v}");
        // What agents before the typed events sent.
        let old = r#"{"seq":1,"unix_ms":5,"observer":"n1","kind":"joined","member":"n2","incarnation":4,"detail":null}"#;
        let back: EventView = serde_json::from_str(old).unwrap();
        assert_eq!(back.event, AgentEvent::Joined);
        assert_eq!(back.member.as_deref(), Some("n2"));
    }

    #[test]
    fn a_kind_from_a_newer_agent_reads_as_unknown() {
        let raw = r#"{"seq":1,"unix_ms":5,"observer":"n1","kind":"warp","member":null,"incarnation":null}"#;
        let e: EventView = serde_json::from_str(raw).unwrap();
        assert_eq!(e.event, AgentEvent::Unknown);
    }

    #[test]
    fn the_kind_method_names_what_the_wire_says() {
        let e = AgentEvent::Paused { gap_ms: 9 };
        assert_eq!(e.kind(), "paused");
        assert_eq!(e.detail(), Some(serde_json::json!({ "gap_ms": 9 })));
        assert_eq!(AgentEvent::SeedFallback.kind(), "seed-fallback");
        assert_eq!(AgentEvent::SeedFallback.detail(), None);
        assert_eq!(AgentEvent::Unknown.kind(), "unknown");
    }
}
