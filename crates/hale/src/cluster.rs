//! The whole cluster as `hale status` and `hale drill` see it: the local
//! agent's member list, and every agent's API (found through the `http`
//! address members publish in their metadata, or `--peer NAME=ADDR`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

use hale_agent::drill::DrillView;
use hale_agent::services::ServiceView;
use hale_agent::{AgentMeta, EventView, MemberView, RelayView};

use crate::client_cmd::ApiArgs;

/// How long one request to a peer's agent may take.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// Talks to every agent of the cluster.
#[derive(Debug, Clone)]
pub struct Agents {
    http: reqwest::Client,
    token: Option<String>,
    /// The local agent's name.
    pub local: String,
    /// Every member's agent API address, by name (None: unknown).
    pub addrs: BTreeMap<String, Option<String>>,
}

/// Agents asked at once by [`Agents::survey`].
const SURVEY_CONCURRENCY: usize = 32;

/// The `http` address a member publishes in its metadata, if any.
pub fn published_http(meta: &str) -> Option<String> {
    AgentMeta::parse(meta)?.http
}

impl Agents {
    /// Finds every member's agent through the local agent; `peers` are
    /// `NAME=HOST:PORT` overrides. Also returns the local member list.
    pub async fn discover(
        api: &ApiArgs,
        peers: &[String],
    ) -> anyhow::Result<(Agents, Vec<MemberView>)> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(1))
            .build()
            .context("building the HTTP client")?;
        let members: Vec<MemberView> = crate::client_cmd::get_json(api, "/v1/members").await?;
        let Some(me) = members.iter().find(|m| m.is_self) else {
            bail!("the agent at {} did not list itself", api.http);
        };
        // Dead and departed members have no agent to ask.
        let mut addrs: BTreeMap<String, Option<String>> = members
            .iter()
            .filter(|m| m.state == "alive" || m.state == "suspect")
            .map(|m| {
                let a = if m.is_self {
                    Some(api.http.clone())
                } else {
                    published_http(&m.meta)
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
            http,
            token: api.token.clone(),
            local: me.name.clone(),
            addrs,
        };
        Ok((agents, members))
    }

    /// The API address of `node`, if known.
    pub fn addr(&self, node: &str) -> Option<&str> {
        self.addrs.get(node)?.as_deref()
    }

    /// GETs `path` from `node`'s agent as JSON.
    pub async fn get<T: serde::de::DeserializeOwned>(
        &self,
        node: &str,
        path: &str,
    ) -> anyhow::Result<T> {
        let Some(addr) = self.addr(node) else {
            bail!("the API address of {node} is unknown (add --peer {node}=HOST:PORT)");
        };
        let r = self
            .http
            .get(format!("http://{addr}{path}"))
            .timeout(PEER_TIMEOUT)
            .send()
            .await
            .with_context(|| format!("{node}'s agent at {addr} does not answer"))?;
        if !r.status().is_success() {
            bail!("{node}'s agent answered {} to {path}", r.status());
        }
        Ok(r.json().await?)
    }

    /// POSTs `body` to `node`'s agent (with the token); 4xx/5xx are errors.
    pub async fn post(
        &self,
        node: &str,
        path: &str,
        body: serde_json::Value,
    ) -> anyhow::Result<serde_json::Value> {
        let Some(addr) = self.addr(node) else {
            bail!("the API address of {node} is unknown (add --peer {node}=HOST:PORT)");
        };
        let mut req = self
            .http
            .post(format!("http://{addr}{path}"))
            .json(&body)
            .timeout(PEER_TIMEOUT * 3);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let r = req
            .send()
            .await
            .with_context(|| format!("{node}'s agent at {addr} does not answer"))?;
        let status = r.status();
        let v: serde_json::Value = r.json().await.unwrap_or_default();
        if !status.is_success() {
            bail!(
                "{node}'s agent answered {status} to {path}: {}",
                v["error"].as_str().unwrap_or("no detail")
            );
        }
        Ok(v)
    }

    /// POSTs to a relay's store endpoint on `node`; the latency and status.
    pub async fn post_store(
        &self,
        node: &str,
        path: &str,
        key: Option<&str>,
    ) -> anyhow::Result<(Duration, u16)> {
        let Some(addr) = self.addr(node) else {
            bail!("the API address of {node} is unknown");
        };
        let mut req = self
            .http
            .post(format!("http://{addr}{path}"))
            .timeout(PEER_TIMEOUT)
            .json(&serde_json::json!({ "message": "hale drill probe", "level": "info" }));
        if let Some(k) = key {
            req = req.header(
                "x-sentry-auth",
                format!("Sentry sentry_key={k}, sentry_version=7"),
            );
        }
        let start = std::time::Instant::now();
        let r = req.send().await?;
        Ok((start.elapsed(), r.status().as_u16()))
    }

    /// Every member's events with a sequence number above `since`.
    pub async fn events(&self, node: &str, since: u64) -> anyhow::Result<Vec<EventView>> {
        self.get(node, &format!("/v1/events?since={since}")).await
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
        let (members, services, roles, relay, drill) = tokio::join!(
            self.get::<Vec<MemberView>>(name, "/v1/members"),
            self.get::<Vec<ServiceView>>(name, "/v1/services"),
            self.get::<serde_json::Value>(name, "/v1/roles"),
            self.get::<Option<RelayView>>(name, "/v1/relay"),
            self.get::<DrillView>(name, "/v1/drill"),
        );
        NodeState {
            name: name.to_owned(),
            http: self.addr(name).map(str::to_owned),
            error: members.as_ref().err().map(|e| format!("{e:#}")),
            members: members.ok(),
            services: services.ok(),
            roles: roles.ok(),
            relay: relay.ok().flatten(),
            drill: drill.ok(),
        }
    }
}

/// One agent's state, as far as it answered.
#[derive(Debug, Clone, Serialize)]
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
    pub roles: Option<serde_json::Value>,
    /// Its relay, if it runs one.
    pub relay: Option<RelayView>,
    /// Its drill faults.
    pub drill: Option<DrillView>,
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
            .as_ref()
            .and_then(|r| r["local"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter(|l| l["state"] == "holder" || l["state"] == "promoting")
            .filter_map(|l| l["role"].as_str().map(str::to_owned))
            .collect()
    }
}

/// Role -> (holder, epoch) from the first agent whose control plane answered.
pub fn leases(nodes: &[NodeState]) -> Option<BTreeMap<String, (Option<String>, u64)>> {
    nodes.iter().find_map(|n| {
        let l = n.roles.as_ref()?.get("leases")?.as_object()?;
        Some(
            l.iter()
                .map(|(role, v)| {
                    (
                        role.clone(),
                        (
                            v["holder"].as_str().map(str::to_owned),
                            v["epoch"].as_u64().unwrap_or(0),
                        ),
                    )
                })
                .collect(),
        )
    })
}

/// Role -> candidates (node, priority, eligible), best first, from members' metadata.
pub fn candidates(members: &[MemberView]) -> BTreeMap<String, Vec<(String, i64, bool)>> {
    let mut out: BTreeMap<String, Vec<(String, i64, bool)>> = BTreeMap::new();
    for m in members.iter().filter(|m| m.state == "alive") {
        for (role, (prio, eligible)) in AgentMeta::parse(&m.meta).unwrap_or_default().roles {
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
