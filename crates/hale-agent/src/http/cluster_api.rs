//! Cluster-wide views for the dashboard: `GET /v1/cluster/roles` (every
//! role's holder, epoch, lease left and candidates in order) and
//! `GET /v1/cluster/services` (services and checks per node).
//!
//! An agent only knows its own services and leases; the others are asked
//! through the HTTP address each role candidate publishes in its member
//! metadata (`{"http": ...}`). The cost is bounded whatever the cluster
//! size: at most [`MAX_FANOUT`] peers per request, [`FANOUT_CONCURRENCY`]
//! at a time, each with a [`PEER_TIMEOUT`], answers cached for [`PEER_TTL`].

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, StreamExt};
use serde::Deserialize;

use crate::http::peers::MAX_FANOUT;
use crate::http::state::ApiError;
use crate::http::state::AppState;
use crate::membership::meta::AgentMeta;
use crate::view::{
    routes, unix_ms, CandidateView, ClusterRoleView, ClusterRolesView, ClusterServicesView,
    MemberState, MemberView, NodeServicesView, RolesView,
};

/// Peers asked at the same time.
pub const FANOUT_CONCURRENCY: usize = 16;
/// What a member publishes (nothing if it is not an agent's metadata).
fn published(m: &MemberView) -> AgentMeta {
    AgentMeta::parse(&m.meta).unwrap_or_default()
}

#[derive(Deserialize)]
pub(crate) struct ServicesQuery {
    /// Comma-separated node names (default: every live member).
    nodes: Option<String>,
}

pub(crate) async fn services(
    State(st): State<AppState>,
    q: Result<Query<ServicesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError(StatusCode::BAD_REQUEST, e.body_text()))?;
    let members = st.snapshot().await.map(|s| s.members).unwrap_or_default();
    let wanted: Option<BTreeSet<&str>> = q
        .nodes
        .as_deref()
        .map(|s| s.split(',').filter(|n| !n.is_empty()).collect());
    let chosen: Vec<MemberView> = members
        .iter()
        .filter(|m| match &wanted {
            Some(w) => w.contains(m.name.as_str()),
            None => m.state.is_live(),
        })
        .cloned()
        .collect();
    let truncated = chosen.len() > MAX_FANOUT;
    let nodes: Vec<NodeServicesView> = stream::iter(chosen.into_iter().take(MAX_FANOUT))
        .map(|m: MemberView| {
            let st = st.clone();
            async move {
                let got = if m.is_self || m.name == st.me() {
                    Ok(crate::roles::services::views(&st.services))
                } else if let Some(http) = published(&m).http {
                    st.peers.peer_get(&http, routes::SERVICES).await
                } else {
                    Err("publishes no HTTP address".to_owned())
                };
                NodeServicesView {
                    node: m.name,
                    state: m.state,
                    error: got.as_ref().err().cloned(),
                    services: got.ok(),
                }
            }
        })
        .buffered(FANOUT_CONCURRENCY)
        .collect()
        .await;
    Ok(Json(ClusterServicesView { nodes, truncated }).into_response())
}

pub(crate) async fn roles(State(st): State<AppState>) -> Json<ClusterRolesView> {
    let members = st.snapshot().await.map(|s| s.members).unwrap_or_default();
    // The lease table and leader as `GET /v1/roles` reads them.
    let RolesView { leases, leader, .. } = crate::http::roles_api::roles(State(st.clone())).await.0;
    let mut leases = leases.unwrap_or_default();
    let local = st.roles.snapshot();
    let mut candidates: BTreeMap<String, Vec<CandidateView>> = BTreeMap::new();
    let mut http: HashMap<&str, String> = HashMap::new();
    for m in &members {
        let p = published(m);
        if let Some(h) = p.http {
            http.insert(m.name.as_str(), h);
        }
        for (role, c) in p.roles {
            candidates.entry(role).or_default().push(CandidateView {
                node: m.name.clone(),
                priority: c.priority,
                eligible: c.eligible,
                member_state: m.state,
                holder: false,
                tags: c.tags,
            });
        }
    }
    let mut names: BTreeSet<String> = leases.keys().cloned().collect();
    names.extend(candidates.keys().cloned());
    names.extend(local.keys().cloned());
    let mut out = Vec::new();
    for role in names {
        // Never granted: no holder, epoch 0.
        let lease = leases.remove(&role).unwrap_or_default();
        // The holder's own view: lease left and since when it holds.
        let held = match lease.holder.as_deref().map(|h| (h, http.get(h))) {
            Some((h, _)) if h == st.me() => local.get(&role).cloned(),
            // Typed on the way through (a peer's strings are data only).
            Some((_, Some(addr))) => st
                .peers
                .peer_get::<RolesView>(addr, routes::ROLES)
                .await
                .ok()
                .and_then(|v| v.local.into_iter().find(|r| r.role == role)),
            _ => None,
        };
        let mut candidates = candidates.remove(&role).unwrap_or_default();
        for c in &mut candidates {
            c.holder = Some(&c.node) == lease.holder.as_ref();
        }
        // Holder first, then who would be promoted next: live, eligible,
        // highest priority first; then the rest.
        candidates.sort_by_key(|c| {
            (
                !c.holder,
                !(c.eligible && c.member_state == MemberState::Alive),
                -c.priority,
                c.node.clone(),
            )
        });
        // Nobody holds it, or its holder is gone (its lease ran out, and
        // the table names it until someone else is granted the role).
        let gone = candidates
            .iter()
            .any(|c| c.holder && c.member_state != MemberState::Alive);
        let unheld = match &lease.holder {
            _ if lease.paused => None,
            Some(_) if !gone => None,
            _ => unheld(&candidates),
        };
        out.push(ClusterRoleView {
            unheld,
            role,
            holder: lease.holder,
            epoch: lease.epoch,
            holder_state: held.as_ref().map(|v| v.state),
            lease_left_ms: held.as_ref().and_then(|v| v.lease_left_ms),
            held_since_unix_ms: held.as_ref().and_then(|v| v.held_since_unix_ms),
            candidates,
            paused: lease.paused,
            switchover: lease.switchover,
        });
    }
    Json(ClusterRolesView {
        control_plane: st.control.is_some(),
        leader,
        fetched_unix_ms: unix_ms(),
        roles: out,
    })
}

/// Why nobody can take a role nobody holds (or whose holder is gone):
/// `None` when a live candidate may (its checks pass and it may be
/// promoted); else each candidate's reason, or that there is none.
pub fn unheld(candidates: &[CandidateView]) -> Option<String> {
    let able = |c: &CandidateView| c.member_state == MemberState::Alive && c.eligible;
    if candidates.iter().any(able) {
        return None;
    }
    if candidates.is_empty() {
        return Some("no member is a candidate for the role".into());
    }
    let each: Vec<String> = candidates
        .iter()
        .map(|c| match c.member_state {
            MemberState::Alive if !c.tags.promotable => {
                format!("{} may not be promoted (promotable = false)", c.node)
            }
            MemberState::Alive => format!("{}'s checks fail", c.node),
            other => format!("{} is {other}", c.node),
        })
        .collect();
    Some(format!(
        "no live candidate may take the role: {}",
        each.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::RoleTags;

    fn candidate(
        node: &str,
        state: MemberState,
        eligible: bool,
        promotable: bool,
    ) -> CandidateView {
        CandidateView {
            node: node.into(),
            priority: 0,
            eligible,
            member_state: state,
            holder: false,
            tags: RoleTags {
                promotable,
                ..RoleTags::default()
            },
        }
    }

    #[test]
    fn a_role_nobody_may_take_says_why_candidate_by_candidate() {
        let survivor = candidate("c", MemberState::Alive, false, false);
        let dead = candidate("a", MemberState::Dead, true, true);
        assert_eq!(
            unheld(&[dead.clone(), survivor.clone()]).as_deref(),
            Some("no live candidate may take the role: a is dead; c may not be promoted (promotable = false)")
        );
        let b = candidate("b", MemberState::Alive, true, true);
        assert_eq!(unheld(&[dead, survivor, b]), None);
        assert_eq!(
            unheld(&[]).as_deref(),
            Some("no member is a candidate for the role")
        );
    }
}
