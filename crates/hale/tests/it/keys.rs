//! Live key rotation (`hale keys`) on a running cluster holding a role.

use std::process::Command;
use std::time::Duration;

use hale_agent::Key;

use crate::failover::{first_holder, Cluster};
use crate::support::{during, http_get, wait_for};

fn hale(c: &Cluster, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["--http", &c.nodes[0].http.to_string()])
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn json(c: &Cluster, i: usize, path: &str) -> Option<serde_json::Value> {
    serde_json::from_str(&http_get(c.nodes[i].http, path)?).ok()
}

/// The highest event sequence number each agent has published.
fn last_seqs(c: &Cluster) -> Vec<u64> {
    (0..c.nodes.len())
        .map(|i| {
            json(c, i, "/v1/events")
                .and_then(|v| v.as_array()?.iter().filter_map(|e| e["seq"].as_u64()).max())
                .unwrap_or(0)
        })
        .collect()
}

#[test]
fn rotating_the_key_of_a_running_five_agent_cluster_suspects_no_one_and_keeps_the_holder() {
    let c = Cluster::start_n(5);
    wait_for(
        Duration::from_secs(30),
        "five members alive everywhere",
        || {
            (0..5)
                .all(|i| {
                    json(&c, i, "/v1/members").is_some_and(|m| {
                        m.as_array().is_some_and(|m| {
                            m.iter().filter(|x| x["state"] == "alive").count() == 5
                        })
                    })
                })
                .then_some(())
        },
    );
    let (holder, epoch) = first_holder(&c);
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
        during(Duration::from_secs(2), Duration::from_millis(250), || {
            if let Some(l) = c.holder() {
                assert_eq!(l, (holder.clone(), epoch), "the role moved during {op}");
            }
        });
    }
    // Every agent now has exactly the new key, as primary.
    for i in 0..5 {
        let v = json(&c, i, "/v1/keys").unwrap();
        assert_eq!(
            v["keys"],
            serde_json::json!([{ "fingerprint": fp(&new), "primary": true }]),
            "n{i}: {v}"
        );
    }
    // Gossip and the control plane still work under the new key alone.
    during(Duration::from_secs(4), Duration::from_millis(250), || {
        if let Some(l) = c.holder() {
            assert_eq!(
                l,
                (holder.clone(), epoch),
                "the role moved after the rotation"
            );
        }
    });
    let renewals = |c: &Cluster| -> u64 {
        let i = c.index(&holder);
        json(c, i, "/v1/roles").unwrap()["local"][0]["renewals"]
            .as_u64()
            .unwrap()
    };
    let r0 = renewals(&c);
    wait_for(Duration::from_secs(5), "renewals under the new key", || {
        (renewals(&c) > r0 + 2).then_some(())
    });
    // Nobody suspected anybody while the keys changed.
    for (i, since) in before.iter().enumerate() {
        let events = json(&c, i, "/v1/events").unwrap();
        let bad: Vec<&serde_json::Value> = events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["seq"].as_u64().unwrap() > *since)
            .filter(|e| e["kind"] == "suspected" || e["kind"] == "dead")
            .collect();
        assert!(bad.is_empty(), "n{i}: {bad:?}");
    }
    // Removing an absent key is harmless.
    let (ok, _) = hale(&c, &["keys", "remove", &old]);
    assert!(ok);
    // A stranger cannot install a key through the agents' route.
    let mallory = Key::generate().to_base64();
    for i in 0..5 {
        assert!(!crate::drill::http_post(
            c.nodes[i].http,
            "/v1/cluster/keys/install",
            &format!(r#"{{"key": "{mallory}"}}"#)
        ));
        let v = json(&c, i, "/v1/keys").unwrap();
        assert_eq!(v["keys"].as_array().unwrap().len(), 1, "n{i}: {v}");
    }
}
