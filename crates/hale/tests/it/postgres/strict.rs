//! Strict durability (`[role.postgres] strict = true`) under three agents:
//! a standby that cannot prove it holds every acknowledged commit is not
//! promoted while the other synchronous standby is not heard from.

use std::time::{Duration, Instant};

use hale_agent::Key;
use hale_control::RoleState;
use nix::sys::signal::Signal;

use super::{
    db, formed, kill_host, kinds, lab, psql, signal_server, skip_reason, write_config_with,
};
use crate::support::wait_until;

#[test]
fn under_strict_durability_nobody_is_promoted_while_a_synchronous_standby_is_unheard_and_the_furthest_once_it_is(
) {
    if let Some(why) = skip_reason() {
        crate::support::skip(&format!("PostgreSQL under hale needs root: {why}"));
        return;
    }
    let mut lab = lab("postgres-strict");
    let key = Key::generate().to_base64();
    for i in 0..3 {
        write_config_with(&lab, i, &key, "strict = true");
    }
    formed(&mut lab);
    let minute = Duration::from_secs(60);
    psql(&lab, 0, "INSERT INTO logins (pad) VALUES ('acknowledged')").unwrap();

    // a's host dies and c's database hangs (its agent, a control-plane
    // server, lives on): b may lack a commit only c acknowledged. Nobody is
    // promoted.
    signal_server(&lab, 2, Signal::SIGSTOP);
    // (Time for c's agent to find its database unanswering: a copy it
    // reported before a's lease ended would prove nothing anyway.)
    std::thread::sleep(Duration::from_secs(1));
    kill_host(&mut lab, 0);
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        for i in [1, 2] {
            let r = db(&lab, i).unwrap();
            assert!(
                matches!(r.state, RoleState::Standby | RoleState::Ineligible),
                "host {i} promoted under strict durability with c unheard: {r:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!kinds(&lab, 1).contains(&"promoting".to_owned()));

    // c's database recovers: both heard, the furthest copy is promoted.
    signal_server(&lab, 2, Signal::SIGCONT);
    wait_until(minute, "b or c holding db", || {
        [1, 2]
            .iter()
            .any(|&i| db(&lab, i).is_some_and(|r| r.state == RoleState::Holder))
    });
    let h = [1, 2]
        .into_iter()
        .find(|&i| db(&lab, i).is_some_and(|r| r.state == RoleState::Holder))
        .unwrap();
    assert_eq!(
        psql(
            &lab,
            h,
            "SELECT count(*) FROM logins WHERE pad = 'acknowledged'"
        )
        .unwrap(),
        "1",
        "the acknowledged commit survives"
    );
}
