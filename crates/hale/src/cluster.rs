//! The whole cluster as `hale status` and `hale drill` see it: the local
//! agent's member list, and every agent's API (found through the `http`
//! address members publish in their metadata, or `--peer NAME=ADDR`).

use hale_agent::view::MemberState;
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::bail;
use serde::Serialize;

use hale_agent::view::DrillView;
use hale_agent::view::RolesView;
use hale_agent::view::ServiceView;
use hale_control::RoleState;

use hale_agent::{AgentMeta, Client, EventView, MemberView, RelayView};

use crate::client_cmd::ApiArgs;

/// How long one request to a peer's agent may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// Talks to every agent of the cluster.
#[derive(Debug, Clone)]
pub struct Agents {
    /// The client every agent is asked with (token, timeouts).
    client: Client,
    /// The local agent's name.
    pub local: String,
    /// Every member's agent API address, by name (None: unknown).
    pub addrs: BTreeMap<String, Option<String>>,
}

/// Agents asked at once by [`Agents::survey`].
const SURVEY_CONCURRENCY: usize = 32;

impl Agents {
    /// Finds every member's agent through the local agent; `peers` are
    /// `NAME=HOST:PORT` overrides. Also returns the local member list.
    pub async fn discover(
        api: &ApiArgs,
        peers: &[String],
    ) -> anyhow::Result<(Agents, Vec<MemberView>)> {
        let client = api.client().with_timeout(PEER_TIMEOUT);
        let members = api.client().members().await?;
        let Some(me) = members.iter().find(|m| m.is_self) else {
            bail!("the agent at {} did not list itself", api.http);
        };
        // Dead and departed members have no agent to ask.
        let mut addrs: BTreeMap<String, Option<String>> = members
            .iter()
            .filter(|m| m.state == MemberState::Alive || m.state == MemberState::Suspect)
            .map(|m| {
                let a = if m.is_self {
                    Some(api.http.clone())
                } else {
                    // The `http` address it publishes in its metadata.
                    AgentMeta::parse(&m.meta).and_then(|p| p.http)
                };
                (m.name.clone(), a)
            })
            .collect();
        for p in peers {
            let Some((name, addr)) = p.split_once('=') else {
                bail!("--peer {p:?} is not like NAME=127.0.0.1:7947");
            };
            addrs.insert(name.to_owned(), Some(addr.to_owned()));
        }
        let agents = Agents {
            client,
            local: me.name.clone(),
            addrs,
        };
        Ok((agents, members))
    }

    /// The API address of `node`, if known.
    pub fn addr(&self, node: &str) -> Option<&str> {
        self.addrs.get(node)?.as_deref()
    }

    /// A client of `node`'s agent.
    pub fn client(&self, node: &str) -> anyhow::Result<Client> {
        let Some(addr) = self.addr(node) else {
            bail!("the API address of {node} is unknown (add --peer {node}=HOST:PORT)");
        };
        Ok(self.client.at(addr))
    }

    /// A client of every agent whose API address is known, `skip` excepted,
    /// with its name.
    pub fn clients_except<'a>(
        &'a self,
        skip: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a String, Client)> + 'a {
        self.addrs
            .keys()
            .filter(move |n| Some(n.as_str()) != skip)
            .filter_map(|n| Some((n, self.client(n).ok()?)))
    }

    /// Every member's events with a sequence number above `since`.
    pub async fn events(&self, node: &str, since: u64) -> anyhow::Result<Vec<EventView>> {
        Ok(self.client(node)?.events(since).await?)
    }

    /// Every agent's state, fetched concurrently; unreachable ones marked.
    pub async fn survey(&self) -> Vec<NodeState> {
        use futures_util::stream::{self, StreamExt};
        // Bounded: a large cluster is asked 32 agents at a time, in order.
        stream::iter(self.addrs.keys())
            .map(|n| self.node_state(n))
            .buffered(SURVEY_CONCURRENCY)
            .collect()
            .await
    }

    async fn node_state(&self, name: &str) -> NodeState {
        let c = match self.client(name) {
            Ok(c) => c,
            Err(e) => {
                return NodeState {
                    name: name.to_owned(),
                    error: Some(format!("{e:#}")),
                    ..NodeState::default()
                }
            }
        };
        let (members, services, roles, relay, drill, health) = tokio::join!(
            c.members(),
            c.services(),
            c.roles(),
            c.relay(),
            c.drill(),
            c.health()
        );
        NodeState {
            name: name.to_owned(),
            http: Some(c.addr().to_owned()),
            error: members
                .as_ref()
                .err()
                .map(|e| format!("{name}'s agent: {e}")),
            members: members.ok(),
            services: services.ok(),
            roles: roles.ok(),
            relay: relay.ok().flatten(),
            drill: drill.ok(),
            clock: health.ok().map(|h| h.clock),
        }
    }
}

/// One agent's state, as far as it answered.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeState {
    /// Node name.
    pub name: String,
    /// Its agent's API address, if known.
    pub http: Option<String>,
    /// Why it could not be reached, if it could not.
    pub error: Option<String>,
    /// Its member list.
    pub members: Option<Vec<MemberView>>,
    /// Its services.
    pub services: Option<Vec<ServiceView>>,
    /// `/v1/roles`.
    pub roles: Option<RolesView>,
    /// Its relay, if it runs one.
    pub relay: Option<RelayView>,
    /// Its drill faults.
    pub drill: Option<DrillView>,
    /// Clocks that disagree with its own beyond the control plane's window
    /// (from `/v1/health`).
    pub clock: Option<hale_agent::view::ClockReport>,
}

impl NodeState {
    /// Essential services whose liveness checks fail now.
    pub fn failing_essential(&self) -> Vec<String> {
        self.services
            .iter()
            .flatten()
            .filter(|s| s.essential && !s.healthy)
            .map(|s| s.name.clone())
            .collect()
    }

    /// The role this agent's local view says it holds (holder or promoting).
    pub fn holding(&self) -> Vec<String> {
        self.roles
            .iter()
            .flat_map(|r| &r.local)
            .filter(|l| matches!(l.state, RoleState::Holder | RoleState::Promoting))
            .map(|l| l.role.clone())
            .collect()
    }
}

/// Role -> (holder, epoch), the lease table.
pub type Leases = BTreeMap<String, (Option<String>, u64)>;

/// The lease table in one agent's `/v1/roles`, if its control plane answered.
pub fn lease_table(roles: &RolesView) -> Option<Leases> {
    let l = roles.leases.as_ref()?;
    Some(
        l.iter()
            .map(|(role, v)| (role.clone(), (v.holder.clone(), v.epoch)))
            .collect(),
    )
}

/// The lease table from the first agent whose control plane answered.
pub fn leases(nodes: &[NodeState]) -> Option<Leases> {
    nodes.iter().find_map(|n| lease_table(n.roles.as_ref()?))
}

/// Role -> candidates (node, priority, eligible), best first, from members' metadata.
pub fn candidates(members: &[MemberView]) -> BTreeMap<String, Vec<(String, i64, bool)>> {
    let mut out: BTreeMap<String, Vec<(String, i64, bool)>> = BTreeMap::new();
    for m in members.iter().filter(|m| m.state == MemberState::Alive) {
        for (role, c) in AgentMeta::parse(&m.meta).unwrap_or_default().roles {
            let (prio, eligible) = (c.priority, c.eligible);
            out.entry(role)
                .or_default()
                .push((m.name.clone(), prio, eligible));
        }
    }
    for c in out.values_mut() {
        c.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }
    out
}

/// The live candidates for `role` whose settings set them apart (node, what
/// they say: never promoted, no load-balanced reads, never synchronous),
/// from members' metadata.
pub fn set_apart(members: &[MemberView], role: &str) -> Vec<(String, String)> {
    members
        .iter()
        .filter(|m| m.state == MemberState::Alive)
        .filter_map(|m| {
            let meta = AgentMeta::parse(&m.meta)?;
            let what = meta.roles.get(role)?.tags.describe()?;
            Some((m.name.clone(), what))
        })
        .collect()
}
