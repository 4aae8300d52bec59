//! Key operations between agents: an agent that does not apply one says
//! why, typed, over the sealed agents' route, and the report carries it.

use std::time::Duration;

use hale_agent::view::{KeyOp, KeyOpError, KeyRequest, KeysView};
use hale_agent::Key;
use hale_seal::Sealing;

use crate::support::{alive_count, start, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_refuses_a_key_operation_says_why_and_keeps_its_keys() {
    let (key, a, b) = two_agents("keys").await;
    // A new key installed on b alone, as another agent would: sealed for
    // b and the agents' route.
    let new = Key::generate();
    let sealing = Sealing::sealed(hale_agent::Keyring::new(key.clone(), vec![]));
    let installed = peer_op(&sealing, ("b", b.http_addr()), "install", &new).await;
    assert_eq!(installed.unwrap().keys.len(), 2);
    // Using it through b, forced (a plain `use` would install it on a
    // first): b applies it, then seals to a with it, which a cannot open:
    // refused unread, a's keys unchanged.
    let report = b
        .client()
        .key_op_forced(KeyOp::Use, &new.to_base64(), true)
        .await
        .unwrap();
    assert_eq!(report.ok, ["b"]);
    let why = &report.failed["a"];
    assert!(
        matches!(why, KeyOpError::Refused { status: 401, .. }),
        "{why:?}"
    );
    assert!(why.to_string().contains("keys unchanged"), "{why}");
    let kept = a.client().keys().await.unwrap();
    assert_eq!(kept.keys.len(), 1, "{kept:?}");
    assert_eq!(kept.keys[0].fingerprint, key.fingerprint());
    // Removing it from b, as another agent holding both keys would: b
    // refuses to remove its primary and says so, typed (sealed with its
    // primary, the new key: an agent without it could not have read why).
    let both = Sealing::sealed(hale_agent::Keyring::new(key.clone(), vec![new.clone()]));
    let removed = peer_op(&both, ("b", b.http_addr()), "remove", &new).await;
    let why = removed.unwrap_err();
    assert_eq!(
        why,
        KeyOpError::IsPrimary {
            key: new.fingerprint()
        }
    );
    assert_eq!(
        serde_json::to_value(&why).unwrap(),
        serde_json::json!({"reason": "is-primary", "key": new.fingerprint()}),
        "readable on the wire"
    );
    let said = why.to_string();
    assert!(
        said.contains("primary key") && said.contains("keys unchanged"),
        "{said}"
    );
    let kept = b.client().keys().await.unwrap();
    assert_eq!(kept.keys.len(), 2, "{kept:?}");
    assert_eq!(kept.keys[0].fingerprint, new.fingerprint());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_used_only_once_every_live_member_has_it_and_one_that_missed_the_install_gets_it()
{
    let (key, a, b) = two_agents("keys-use").await;
    // The new key installed on b alone: a missed the `install`.
    let new = Key::generate();
    let sealing = Sealing::sealed(hale_agent::Keyring::new(key.clone(), vec![]));
    peer_op(&sealing, ("b", b.http_addr()), "install", &new)
        .await
        .unwrap();
    let report = b
        .client()
        .key_op(KeyOp::Use, &new.to_base64())
        .await
        .unwrap();
    assert_eq!(report.ok, ["a", "b"], "{report:?}");
    let a_keys = a.client().keys().await.unwrap();
    assert_eq!(a_keys.keys.len(), 2, "{a_keys:?}");
    assert_eq!(a_keys.keys[0].fingerprint, new.fingerprint());
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_is_removed_only_once_every_live_member_uses_the_key_in_use() {
    let old = Key::generate();
    let a = start("keys-rm", "a", &old.to_base64(), None).await;
    let b = start("keys-rm", "b", &old.to_base64(), None).await;
    let c = start("keys-rm", "c", &old.to_base64(), None).await;
    b.join(vec![a.gossip_addr()]).await.unwrap();
    c.join(vec![a.gossip_addr()]).await.unwrap();
    for x in [&a, &b, &c] {
        wait_until("all alive", Duration::from_secs(10), || async {
            alive_count(x).await == 3
        })
        .await;
    }
    // The new key installed everywhere, but used on a and b only: c
    // missed the `use` (its answer lost) and still seals with the old key.
    let new = Key::generate();
    let report = a
        .client()
        .key_op(KeyOp::Install, &new.to_base64())
        .await
        .unwrap();
    assert_eq!(report.ok, ["a", "b", "c"]);
    let both = Sealing::sealed(hale_agent::Keyring::new(old.clone(), vec![new.clone()]));
    for (name, x) in [("a", &a), ("b", &b)] {
        peer_op(&both, (name, x.http_addr()), "use", &new)
            .await
            .unwrap();
    }
    let before = c.client().keys().await.unwrap();
    assert_eq!(before.keys[0].fingerprint, old.fingerprint());
    // Removing the old key first makes c use the new one: nobody locked out.
    let report = a
        .client()
        .key_op(KeyOp::Remove, &old.to_base64())
        .await
        .unwrap();
    assert_eq!(report.ok, ["a", "b", "c"], "{report:?}");
    let after = c.client().keys().await.unwrap();
    assert_eq!(after.keys.len(), 1, "{after:?}");
    assert_eq!(after.keys[0].fingerprint, new.fingerprint());
    for x in [a, b, c] {
        x.shutdown().await;
    }
}

/// Agents `a` and `b` of cluster `test`, sharing a new key, each seeing
/// both alive.
async fn two_agents(test: &str) -> (Key, hale_agent::Agent, hale_agent::Agent) {
    let key = Key::generate();
    let a = start(test, "a", &key.to_base64(), None).await;
    let b = start(test, "b", &key.to_base64(), None).await;
    b.join(vec![a.gossip_addr()]).await.unwrap();
    for x in [&a, &b] {
        wait_until("both alive", Duration::from_secs(10), || async {
            alive_count(x).await == 2
        })
        .await;
    }
    (key, a, b)
}

/// `op` with `key`, sent to agent `to` (its name and HTTP address) on the
/// agents' route as another agent would (sealed with `sealing` for `to`
/// and that route).
async fn peer_op(
    sealing: &Sealing,
    to: (&str, std::net::SocketAddr),
    op: &str,
    key: &Key,
) -> Result<KeysView, KeyOpError> {
    hale_seal::call(
        &reqwest::Client::new(),
        sealing,
        hale_core::wire::fnv1a(to.0.as_bytes()),
        &to.1.to_string(),
        &format!("/v1/cluster/keys/{op}"),
        &KeyRequest {
            key: key.to_base64(),
            force: false,
        },
        Duration::from_secs(5),
    )
    .await
    .unwrap()
}
