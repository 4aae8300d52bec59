//! A role's tags with real PostgreSQL under three agents: a standby set
//! `synchronous_standby = false` is cloned and streams as any other, but
//! its primary never waits for it, until a reload lets it in.

use std::time::Duration;

use hale_agent::Key;
use hale_control::RoleState;

use super::{agent, db, lab, psql, skip_reason, start_agent, streams_from, write_config_tagged};
use crate::support::{call, during, wait_until};

/// `synchronous_standby_names` on host `i`'s server.
fn quorum(lab: &super::Lab, i: usize) -> Option<String> {
    psql(lab, i, "SHOW synchronous_standby_names").ok()
}

#[test]
fn a_standby_set_never_synchronous_streams_but_is_left_out_of_the_quorum_until_a_reload_lets_it_in()
{
    if let Some(why) = skip_reason() {
        crate::support::skip(&format!("PostgreSQL under hale needs root: {why}"));
        return;
    }
    let mut lab = lab("postgres-nosync");
    let key = Key::generate().to_base64();
    for i in 0..3 {
        let role = if i == 2 {
            "synchronous_standby = false"
        } else {
            ""
        };
        write_config_tagged(&lab, i, &key, role, "");
    }
    for i in 0..3 {
        start_agent(&mut lab, i);
    }
    let minute = Duration::from_secs(60);
    wait_until(minute, "a holding db", || {
        db(&lab, 0).is_some_and(|r| r.state == RoleState::Holder)
    });
    wait_until(Duration::from_secs(90), "b and c streaming from a", || {
        streams_from(&lab, 1, 0) && streams_from(&lab, 2, 0)
    });
    let b_only = r#"ANY 1 ("b")"#;
    wait_until(minute, "a's quorum of b alone", || {
        quorum(&lab, 0).is_some_and(|v| v == b_only)
    });
    // As the load balancers see it: b synchronous, c not (the holder's
    // mark does not name it).
    let sync = |i: usize, synchronous: bool| {
        call(agent(&lab, i).api().synchronous("db", synchronous))
            .unwrap()
            .0
    };
    wait_until(minute, "b answering /sync and c /async", || {
        sync(1, true) == 200 && sync(2, false) == 200
    });
    during(Duration::from_secs(4), Duration::from_millis(250), || {
        assert_eq!(quorum(&lab, 0).as_deref(), Some(b_only));
        assert_eq!(sync(2, true), 503, "c named synchronous");
    });
    assert!(
        !db(&lab, 2).unwrap().tags.synchronous_standby,
        "c's view shows its tag"
    );

    // A reload on c lets it in, its server untouched.
    let config = &lab.hosts[2].config;
    let text = std::fs::read_to_string(config).unwrap();
    std::fs::write(config, text.replace("synchronous_standby = false", "")).unwrap();
    let out = agent(&lab, 2).cli(&["reload"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && said.contains("role[db].synchronous_standby"),
        "{out:?}"
    );
    wait_until(minute, "a's quorum of b and c", || {
        quorum(&lab, 0).is_some_and(|v| v == r#"ANY 1 ("b", "c")"#)
    });
    assert!(streams_from(&lab, 2, 0), "c streams on, never rejoined");
}
