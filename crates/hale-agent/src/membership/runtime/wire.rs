//! The wire version the agent writes: the highest that every live member
//! speaks, from the ranges they publish in their metadata
//! ([`AgentMeta::wire`]; none published: a release before 0.2.0, which
//! speaks [`hale_core::wire::OLDEST`] only). Renegotiated after every
//! change of membership or metadata, so a cluster moves up on its own when
//! its last old member leaves, and down when an old one joins (the core
//! answers a new run of an older version in its version meanwhile; see
//! `hale_core`'s `versions.rs`).
//!
//! A member whose range shares no version with this agent's cannot hear
//! it nor be heard: it is left out of the negotiation and reported once
//! per range it publishes (a warning and an `unsupported-wire-version`
//! event naming it).

use std::collections::{HashMap, HashSet};

use hale_core::wire::negotiate;
use hale_core::{Event, Node, NodeId, Versions};

use crate::membership::meta::AgentMeta;
use crate::view::{AgentEvent, EventView};

/// The negotiation's memory: each member's published range (parsed once
/// per incarnation, which every metadata change raises) and the
/// incompatible ranges already reported.
#[derive(Debug, Default)]
pub(super) struct Negotiation {
    ranges: HashMap<String, (u32, Option<Versions>)>,
    reported: HashSet<(String, Versions)>,
    /// Membership or metadata changed since the last negotiation.
    dirty: bool,
}

impl Negotiation {
    /// Whether `e` may change what the cluster speaks.
    pub(super) fn note(&mut self, e: &Event<NodeId>) {
        self.dirty |= matches!(
            e,
            Event::Joined { .. }
                | Event::Dead { .. }
                | Event::Left { .. }
                | Event::Recovered { .. }
                | Event::MetadataUpdated { .. }
        );
    }

    /// Renegotiates if anything changed: sets the node's version, and
    /// returns a report for each newly seen member it cannot speak with.
    pub(super) fn renegotiate(
        &mut self,
        node: &mut Node<NodeId>,
        mut stamp: impl FnMut(AgentEvent, String) -> EventView,
    ) -> Vec<EventView> {
        if !std::mem::take(&mut self.dirty) {
            return Vec::new();
        }
        let mut live = Vec::new();
        let mut seen = HashSet::new();
        for m in node.members().filter(|m| m.state().is_live()) {
            let name = m.id().name().to_owned();
            let range = match self.ranges.get(&name) {
                Some((inc, r)) if *inc == m.incarnation() => *r,
                _ => {
                    let r = std::str::from_utf8(m.meta())
                        .ok()
                        .and_then(AgentMeta::parse)
                        .and_then(|p| p.wire);
                    self.ranges.insert(name.clone(), (m.incarnation(), r));
                    r
                }
            };
            seen.insert(name.clone());
            live.push((name, range));
        }
        self.ranges.retain(|name, _| seen.contains(name));
        let ours = node.wire_versions();
        let (speak, strangers) = negotiate(ours, live);
        let before = node.wire_version();
        let now = node.set_wire_version(speak);
        if now != before {
            tracing::info!(from = before, to = now, "wire version negotiated");
        }
        let mut reports = Vec::new();
        for (name, theirs) in strangers {
            if self.reported.insert((name.clone(), theirs)) {
                tracing::warn!(
                    member = %name,
                    speaks = %theirs,
                    ours = %ours,
                    "a member speaks no wire version this agent does: they cannot hear each other; upgrade the older one"
                );
                let event = AgentEvent::UnsupportedWireVersion {
                    version: theirs.max,
                    speaks: Some(theirs.to_string()),
                    ours: ours.to_string(),
                };
                reports.push(stamp(event, name));
            }
        }
        reports
    }
}
