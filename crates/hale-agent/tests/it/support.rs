//! Helpers shared by the agent tests: loopback configs and polling with a
//! deadline.

use hale_agent::view::MemberState;
use std::time::Duration;

use hale_agent::{Agent, AgentConfig, FileConfig, Key};

/// An agent on loopback with ephemeral gossip and HTTP ports, in cluster
/// `cluster` with one key, as a file config the test may still change.
pub fn loopback_file(cluster: &str, name: &str, key: &str) -> FileConfig {
    let mut f = FileConfig::default();
    f.agent.name = Some(name.to_owned());
    f.agent.bind = Some("127.0.0.1:0".to_owned());
    f.agent.http = Some("127.0.0.1:0".to_owned());
    f.cluster.name = Some(cluster.to_owned());
    f.cluster.keys = vec![key.to_owned()];
    f
}

/// [`loopback_file`], with an API token if given, validated.
pub fn loopback_config(cluster: &str, name: &str, key: &str, token: Option<&str>) -> AgentConfig {
    let mut f = loopback_file(cluster, name, key);
    f.agent.api_token = token.map(str::to_owned);
    f.validate().unwrap()
}

/// Polls `f` every 10 ms until it holds; panics naming `what` once `limit`
/// has passed.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Agents `names` of cluster `cluster` (one key, no token), each joined
/// through the first; waits (10 s at most) until each sees all alive.
pub async fn start_cluster<const N: usize>(cluster: &str, names: [&str; N]) -> [Agent; N] {
    let key = Key::generate().to_base64();
    let mut agents = Vec::new();
    for name in names {
        agents.push(start(cluster, name, &key, None).await);
    }
    for a in &agents[1..] {
        a.join(vec![agents[0].gossip_addr()]).await.unwrap();
    }
    for a in &agents {
        let all_alive = || async { alive_count(a).await == N };
        wait_until("all alive everywhere", Duration::from_secs(10), all_alive).await;
    }
    agents.try_into().map_err(drop).unwrap()
}

/// How many members `a` sees alive (itself included).
pub async fn alive_count(a: &Agent) -> usize {
    let members = a.members().await.unwrap();
    members
        .iter()
        .filter(|m| m.state == MemberState::Alive)
        .count()
}

/// The state `a` gives member `name`, if it knows it.
pub async fn state_of(a: &Agent, name: &str) -> Option<MemberState> {
    let members = a.members().await.ok()?;
    members
        .into_iter()
        .find(|m| m.name == name)
        .map(|m| m.state)
}

/// An agent started on [`loopback_config`].
pub async fn start(cluster: &str, name: &str, key: &str, token: Option<&str>) -> Agent {
    Agent::start(loopback_config(cluster, name, key, token))
        .await
        .unwrap()
}
