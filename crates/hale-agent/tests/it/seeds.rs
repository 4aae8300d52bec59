//! Seeds restarted together: they join each other only, and the members
//! that saw them leave find them again through their seeds.

use std::net::SocketAddr;
use std::time::Duration;

use hale_agent::view::MemberState;
use hale_agent::{Agent, Key};

use crate::support::{loopback_file, state_of, wait_until};

/// An agent of cluster `seeds-test` named `name`, bound to `bind` (an
/// ephemeral port when none), joined through `seeds`.
async fn agent(name: &str, key: &str, bind: Option<SocketAddr>, seeds: &[SocketAddr]) -> Agent {
    let mut f = loopback_file("seeds-test", name, key);
    if let Some(b) = bind {
        f.agent.bind = Some(b.to_string());
    }
    let a = Agent::start(f.validate().unwrap()).await.unwrap();
    if !seeds.is_empty() {
        a.join(seeds.to_vec()).await.unwrap();
    }
    a
}

async fn sees(a: &Agent, names: &[&str], limit: Duration) {
    for n in names {
        wait_until(&format!("{n} is alive"), limit, || async {
            state_of(a, n).await == Some(MemberState::Alive)
        })
        .await;
    }
}

#[tokio::test]
async fn every_seed_restarted_at_once_forms_no_lasting_island() {
    let key = Key::generate().to_base64();
    let s1 = agent("s1", &key, None, &[]).await;
    let s2 = agent("s2", &key, None, &[s1.gossip_addr()]).await;
    let seeds = [s1.gossip_addr(), s2.gossip_addr()];
    let c = agent("c", &key, None, &seeds).await;
    let d = agent("d", &key, None, &seeds).await;
    for a in [&s1, &s2, &c, &d] {
        sees(a, &["s1", "s2", "c", "d"], Duration::from_secs(10)).await;
    }
    // Both seeds stop (they leave) and start again on their addresses,
    // each joining the other: the two know nobody else.
    s1.shutdown().await;
    s2.shutdown().await;
    wait_until(
        "c saw both seeds leave",
        Duration::from_secs(10),
        || async {
            state_of(&c, "s1").await == Some(MemberState::Left)
                && state_of(&c, "s2").await == Some(MemberState::Left)
        },
    )
    .await;
    let s1 = agent("s1", &key, Some(seeds[0]), &seeds).await;
    let s2 = agent("s2", &key, Some(seeds[1]), &seeds).await;
    // The others sync with their missing seeds (every 10 s): one cluster.
    let limit = Duration::from_secs(30);
    for a in [&s1, &s2] {
        sees(a, &["c", "d"], limit).await;
    }
    for a in [&c, &d] {
        sees(a, &["s1", "s2"], limit).await;
    }
    for a in [s1, s2, c, d] {
        a.shutdown().await;
    }
}
