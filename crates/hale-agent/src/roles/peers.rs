//! The other candidates of a role, as the members publish them in their
//! metadata ([`crate::membership::meta`]): what a holder needs of them to
//! honour their tags. Its primary never waits for a standby that may not be
//! waited for ([`never_waited`]); a holder that may not be promoted hands
//! the role to the best node that may take it ([`successors`]).
//!
//! Read from this node's membership view, so it lags a member's reload by
//! a gossip round, and knows nothing of a member it has not heard of: such
//! a member counts as having every tag at its default (as an agent before
//! 0.2.0 does, which publishes none): it may be waited for.

use std::collections::BTreeSet;

use tokio::sync::mpsc;

use crate::membership::meta::{AgentMeta, Candidacy};
use crate::membership::runtime::{ask, Command};
use crate::view::{MemberState, MemberView};

/// One other member's candidacy for a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Peer {
    /// The member's name.
    pub name: String,
    /// Whether this node sees it alive.
    pub alive: bool,
    /// What it publishes.
    pub candidacy: Candidacy,
}

/// Every other member's candidacy for `role`, as this node's membership
/// view has them now (`None`: the membership driver has stopped).
pub(crate) async fn of_role(cmds: &mpsc::Sender<Command>, role: &str) -> Option<Vec<Peer>> {
    let snap = ask(cmds, Command::Snapshot).await?;
    Some(candidates(&snap.members, role))
}

/// The candidacies for `role` among `members`, this node left out.
pub(crate) fn candidates(members: &[MemberView], role: &str) -> Vec<Peer> {
    members
        .iter()
        .filter(|m| !m.is_self)
        .filter_map(|m| {
            let meta = AgentMeta::parse(&m.meta)?;
            let candidacy = *meta.roles.get(role)?;
            Some(Peer {
                name: m.name.clone(),
                alive: m.state == MemberState::Alive,
                candidacy,
            })
        })
        .collect()
}

/// The standbys a primary may not wait for: those set
/// `synchronous_standby = false` or `promotable = false`
/// ([`crate::view::RoleTags::may_be_waited_for`]).
pub(crate) fn never_waited(peers: &[Peer]) -> BTreeSet<String> {
    peers
        .iter()
        .filter(|p| !p.candidacy.tags.may_be_waited_for())
        .map(|p| p.name.clone())
        .collect()
}

/// The nodes that may take the role from a holder that may not keep it,
/// best first: alive, eligible (their checks pass and they may be
/// promoted), by priority (higher first), then name.
pub(crate) fn successors(peers: &[Peer]) -> Vec<String> {
    let mut able: Vec<&Peer> = peers
        .iter()
        .filter(|p| p.alive && p.candidacy.eligible && p.candidacy.tags.promotable)
        .collect();
    able.sort_by(|a, b| {
        (b.candidacy.priority)
            .cmp(&a.candidacy.priority)
            .then_with(|| a.name.cmp(&b.name))
    });
    able.into_iter().map(|p| p.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;
    use crate::view::RoleTags;

    fn member(name: &str, state: MemberState, meta: &AgentMeta) -> MemberView {
        let raw = String::from_utf8(meta.encode()).unwrap();
        MemberView {
            name: name.into(),
            addr: "127.0.0.1:1".into(),
            state,
            incarnation: 0,
            health: 0,
            last_heard_ms_ago: None,
            state_for_ms: 0,
            meta: raw,
            is_self: false,
            evidence: None,
        }
    }

    fn meta(priority: i64, eligible: bool, tags: RoleTags) -> AgentMeta {
        let c = Candidacy {
            priority,
            eligible,
            tags,
        };
        AgentMeta {
            roles: [("db".to_owned(), c)].into(),
            ..AgentMeta::default()
        }
    }

    #[test]
    fn a_holder_waits_for_no_standby_set_apart_and_hands_over_only_to_a_live_eligible_promotable_one(
    ) {
        let all = RoleTags::default();
        let nosync = RoleTags {
            synchronous_standby: false,
            ..all
        };
        let never = RoleTags {
            promotable: false,
            ..all
        };
        let mut me = member("a", MemberState::Alive, &meta(100, true, never));
        me.is_self = true;
        let members = [
            me,
            member("b", MemberState::Alive, &meta(10, true, nosync)),
            member("c", MemberState::Alive, &meta(5, false, never)),
            member("d", MemberState::Dead, &meta(50, true, all)),
            member("e", MemberState::Alive, &meta(20, true, all)),
            member("f", MemberState::Alive, &meta(90, false, all)),
            // An agent that publishes no candidacy for the role.
            member("g", MemberState::Alive, &AgentMeta::default()),
        ];
        let peers = candidates(&members, "db");
        assert_eq!(peers.len(), 5, "{peers:?}");
        let never_waited = never_waited(&peers);
        assert_eq!(
            never_waited,
            BTreeSet::from(["b".to_owned(), "c".to_owned()])
        );
        assert_eq!(successors(&peers), ["e", "b"]);
    }
}
