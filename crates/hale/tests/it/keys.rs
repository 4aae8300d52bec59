//! Live key rotation (`hale keys`) on a running cluster holding a role.

use std::time::Duration;

use hale_agent::{AgentEvent, Key};

use crate::failover::first_holder;
use crate::support::{call, wait_for, Cluster};

fn hale(c: &Cluster, args: &[&str]) -> (bool, String) {
    let out = c.agents[0].cli(args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The highest event sequence number each agent has published.
fn last_seqs(c: &Cluster) -> Vec<u64> {
    c.agents
        .iter()
        .map(|a| {
            a.events()
                .and_then(|v| v.iter().map(|e| e.seq).max())
                .unwrap_or(0)
        })
        .collect()
}

#[test]
fn rotating_the_key_of_a_running_five_agent_cluster_suspects_no_one_and_keeps_the_holder() {
    let c = Cluster::roles_with("keys", 5, |_, _| None, |_| String::new(), |_| {});
    c.wait_formed(Duration::from_secs(30));
    let held = first_holder(&c);
    let holder = held.0.clone();
    let cfg = std::fs::read_to_string(c.path("n0.toml")).unwrap();
    let old = cfg
        .lines()
        .find_map(|l| l.strip_prefix("keys = [\""))
        .and_then(|l| l.strip_suffix("\"]"))
        .unwrap()
        .to_owned();
    let new = Key::generate().to_base64();
    let fp = |k: &str| Key::from_base64(k).unwrap().fingerprint();
    let before = last_seqs(&c);
    let (ok, out) = hale(&c, &["keys", "list"]);
    assert!(
        ok && out.contains(&fp(&old)) && out.contains("primary"),
        "{out}"
    );

    // Bad requests change nothing: use a key not installed, remove the primary.
    let (ok, out) = hale(&c, &["keys", "use", &new]);
    assert!(!ok && out.contains("not installed"), "{out}");
    let (ok, out) = hale(&c, &["keys", "remove", &old]);
    assert!(!ok && out.contains("primary"), "{out}");

    for (op, key) in [("install", &new), ("use", &new), ("remove", &old)] {
        let (ok, out) = hale(&c, &["keys", op, key]);
        assert!(ok, "{op}: {out}");
        assert!(out.contains("applied by 5 of 5 agents"), "{op}: {out}");
        // Let packets sealed before the change drain before the next one.
        c.assert_holder_stays(Duration::from_secs(2), &held, &format!("during {op}"));
    }
    // Every agent now has exactly the new key, as primary.
    for a in &c.agents {
        let v = call(a.api().keys()).unwrap();
        let keys: Vec<(&str, bool)> = v
            .keys
            .iter()
            .map(|k| (k.fingerprint.as_str(), k.primary))
            .collect();
        assert_eq!(keys, [(fp(&new).as_str(), true)], "{}: {v:?}", a.name);
    }
    // Gossip and the control plane still work under the new key alone.
    c.assert_holder_stays(Duration::from_secs(4), &held, "after the rotation");
    let renewals = |c: &Cluster| -> u64 {
        let i = c.index(&holder);
        c.agents[i].roles().unwrap().local[0].renewals
    };
    let r0 = renewals(&c);
    wait_for(Duration::from_secs(5), "renewals under the new key", || {
        (renewals(&c) > r0 + 2).then_some(())
    });
    // Nobody suspected anybody while the keys changed.
    for (a, since) in c.agents.iter().zip(&before) {
        let bad: Vec<_> = a
            .events()
            .unwrap()
            .into_iter()
            .filter(|e| e.seq > *since)
            .filter(|e| matches!(e.event, AgentEvent::Suspected { .. } | AgentEvent::Dead(_)))
            .collect();
        assert!(bad.is_empty(), "{}: {bad:?}", a.name);
    }
    // Removing an absent key is harmless.
    let (ok, _) = hale(&c, &["keys", "remove", &old]);
    assert!(ok);
    // A stranger cannot install a key through the agents' route.
    let mallory = Key::generate().to_base64();
    for a in &c.agents {
        let body = serde_json::json!({ "key": mallory });
        let sent = call(
            a.api()
                .post::<_, serde_json::Value>("/v1/cluster/keys/install", &body),
        );
        assert_eq!(sent.unwrap_err().status(), Some(401), "{}", a.name);
        let v = call(a.api().keys()).unwrap();
        assert_eq!(v.keys.len(), 1, "{}: {v:?}", a.name);
    }
}

/// Using the new key or removing the old one while a member that has not
/// left is dead would lock it out when it comes back (it may never have
/// installed the new key, and could not open what the others seal):
/// refused, naming it, unless forced (nemesis seeds 10030, 90064); back, it
/// is given the key by the next `use`, and the rotation completes.
#[test]
fn using_or_removing_a_key_while_a_member_is_dead_is_refused_and_it_rejoins_when_back() {
    let mut c = Cluster::roles_with("keys-dead", 4, |_, _| None, |_| String::new(), |_| {});
    let _ = first_holder(&c);
    let old = c.key.clone();
    let new = Key::generate().to_base64();
    let n3_is = |c: &Cluster, state| {
        c.agents[0]
            .members()?
            .iter()
            .any(|m| m.name == "n3" && m.state == state)
            .then_some(())
    };
    // n0 must know n3 to see it die (the cluster is formed by now:
    // `Cluster::roles_on`; said again here, where it matters).
    wait_for(Duration::from_secs(30), "n0 sees n3 alive", || {
        n3_is(&c, hale_agent::view::MemberState::Alive)
    });
    c.agents[3].kill();
    wait_for(Duration::from_secs(30), "n0 sees n3 dead", || {
        n3_is(&c, hale_agent::view::MemberState::Dead)
    });
    let (ok, out) = hale(&c, &["keys", "install", &new]);
    assert!(ok, "install: {out}");
    for op in [["keys", "use", &new], ["keys", "remove", &old]] {
        let (ok, out) = hale(&c, &op);
        assert!(!ok, "{op:?} went through: {out}");
        assert!(out.contains("n3 dead and not left"), "{out}");
    }
    // Nothing changed but the install: n3 comes back with the old key alone.
    let keys = call(c.agents[0].api().keys()).expect("n0 answers");
    assert_eq!(
        keys.keys[0].fingerprint,
        Key::from_base64(&old).unwrap().fingerprint()
    );
    crate::restart::restart(&mut c, 3);
    wait_for(Duration::from_secs(30), "n0 sees n3 alive again", || {
        n3_is(&c, hale_agent::view::MemberState::Alive)
    });
    // The rotation completes: `use` gives n3 the key first.
    for op in [["keys", "use", &new], ["keys", "remove", &old]] {
        let (ok, out) = hale(&c, &op);
        assert!(ok, "{op:?}: {out}");
    }
    let keys = call(c.agents[3].api().keys()).expect("n3 answers");
    assert_eq!(keys.keys.len(), 1, "{keys:?}");
    assert_eq!(
        keys.keys[0].fingerprint,
        Key::from_base64(&new).unwrap().fingerprint()
    );
}
