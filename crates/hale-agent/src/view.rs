//! What the agent shows about the cluster: stable JSON shapes for the API and CLI.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use hale_core::{DeathEvidence, Event, Member, NodeId, Time};

/// One member as the API and `hale members --json` show it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemberView {
    /// Node name.
    pub name: String,
    /// Gossip address.
    pub addr: String,
    /// `alive`, `suspect`, `dead` or `left`.
    pub state: String,
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

/// One membership event, as streamed by `/v1/events`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EventView {
    /// Sequence number, increasing from 1 for this agent's lifetime.
    pub seq: u64,
    /// Unix time in milliseconds.
    pub unix_ms: u64,
    /// The agent that observed it.
    pub observer: String,
    /// Membership: `joined`, `suspected`, `dead`, `recovered`, `left`,
    /// `metadata`, `refuted`, `seed-fallback`, `paused`. Roles: `promoted`,
    /// `demoted`, `eligible` (this node's candidacies), `holder` (a role
    /// changed hands, seen by a control-plane server). Relay: `breaker`.
    /// Drills: `drill-set`, `drill-restored`.
    pub kind: String,
    /// The member it is about (None for events about the observer itself).
    pub member: Option<String>,
    /// Incarnation, where it applies.
    pub incarnation: Option<u32>,
    /// Extra detail (accuser, evidence, pause length).
    pub detail: Option<serde_json::Value>,
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ms_between(later: Time, earlier: Time) -> u64 {
    later.saturating_since(earlier).as_millis() as u64
}

/// The view of a member; `now` is the core's current time.
pub fn member_view(m: &Member<NodeId>, now: Time, evidence: Option<EvidenceView>) -> MemberView {
    MemberView {
        name: m.id().name().to_owned(),
        addr: m.id().addr().to_string(),
        state: m.state().as_str().to_owned(),
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
    let v = |kind: &str, member: Option<&NodeId>, inc: Option<u32>, detail| EventView {
        seq,
        unix_ms: unix_ms(),
        observer: observer.name().to_owned(),
        kind: kind.to_owned(),
        member: member.map(|m| m.name().to_owned()),
        incarnation: inc,
        detail,
    };
    Some(match e {
        Event::Joined {
            member,
            incarnation,
        } => v("joined", Some(member), Some(*incarnation), None),
        Event::Suspected {
            member,
            incarnation,
            accuser,
        } => v(
            "suspected",
            Some(member),
            Some(*incarnation),
            Some(serde_json::json!({ "accuser": accuser.name() })),
        ),
        Event::Dead {
            member,
            incarnation,
            evidence,
        } => v(
            "dead",
            Some(member),
            Some(*incarnation),
            serde_json::to_value(evidence_view(evidence)).ok(),
        ),
        Event::Recovered {
            member,
            incarnation,
            was_dead,
        } => v(
            "recovered",
            Some(member),
            Some(*incarnation),
            Some(serde_json::json!({ "was_dead": was_dead })),
        ),
        Event::Left {
            member,
            incarnation,
        } => v("left", Some(member), Some(*incarnation), None),
        Event::MetadataUpdated {
            member,
            incarnation,
        } => v("metadata", Some(member), Some(*incarnation), None),
        Event::Refuted {
            incarnation,
            was_dead,
        } => v(
            "refuted",
            None,
            Some(*incarnation),
            Some(serde_json::json!({ "was_dead": was_dead })),
        ),
        Event::SeedFallback => v("seed-fallback", None, None, None),
        Event::Paused { gap_ms } => v(
            "paused",
            None,
            None,
            Some(serde_json::json!({ "gap_ms": gap_ms })),
        ),
        Event::ProbeVisit { .. } => return None,
    })
}
