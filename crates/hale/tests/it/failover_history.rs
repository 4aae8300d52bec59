//! The failover history through real agents: three agents, each a
//! control-plane server and a candidate for `db` (see `failover.rs`); after
//! a handover and a crash, every living node's API shows both with their
//! causes, a pause and a resume name the nodes asked, and `hale history`
//! prints it all.

use std::time::Duration;

use hale_agent::view::{Cause, Change, ReleaseReason};

use crate::failover::{first_holder, standby_takes_over};
use crate::support::{call, wait_for, AgentProc, Cluster};

/// `a`'s `/v1/roles/db/history` once it shows epoch `epoch`.
fn history_through(a: &AgentProc, epoch: u64) -> Vec<Change> {
    wait_for(
        Duration::from_secs(10),
        "the history shows the failover",
        || {
            let v = call(a.api().history("db", None)).ok()?;
            v.changes
                .iter()
                .any(|c| c.epoch == epoch)
                .then_some(v.changes)
        },
    )
}

#[test]
fn after_a_handover_and_a_crash_every_node_shows_both_with_their_causes_and_the_cli_prints_them() {
    let mut c = Cluster::roles("fo-history", "");
    let (holder, e1) = first_holder(&c);
    let i = c.index(&holder);
    c.agents[i].cli_ok(&["roles", "handover", "db", "--to", "n2"]);
    let (_, e2) = wait_for(Duration::from_secs(20), "n2 takes db", || {
        c.holder().filter(|(h, _)| h == "n2")
    });
    let j = c.index("n2");
    c.agents[j].kill();
    let (next, e3) = standby_takes_over(&c, "n2", 30);
    let expected = [
        (
            e1,
            None,
            Cause::Released {
                previous: holder.clone(),
                reason: Some(ReleaseReason::Handover),
                next: Some("n2".into()),
            },
        ),
        (
            e2,
            Some("n2".to_owned()),
            Cause::AfterRelease {
                previous: Some(holder.clone()),
                named: Some("n2".into()),
            },
        ),
        (
            e3,
            Some(next.clone()),
            Cause::LeaseExpired {
                previous: "n2".into(),
            },
        ),
    ];
    for a in c.agents.iter().filter(|a| a.name != "n2") {
        let h = history_through(a, e3);
        assert_eq!(h[0].cause, Cause::FirstGrant, "{}: {h:?}", a.name);
        assert!(h.iter().all(|c| c.at_unix_ms.is_some()), "{h:?}");
        let last: Vec<_> = h[h.len() - 3..]
            .iter()
            .map(|c| (c.epoch, c.holder.clone(), c.cause.clone()))
            .collect();
        assert_eq!(last, expected, "as {} reads it", a.name);
    }
    // An operator pauses db on one node and resumes it on another: each
    // change names the node asked.
    let other = c
        .agents
        .iter()
        .find(|a| a.name != "n2" && a.name != holder)
        .unwrap();
    other.cli_ok(&["roles", "pause", "db"]);
    c.agents[i].cli_ok(&["roles", "resume", "db"]);
    let h = wait_for(Duration::from_secs(10), "the resume is recorded", || {
        let v = call(other.api().history("db", Some(2))).ok()?;
        matches!(v.changes.last()?.cause, Cause::Resumed { .. }).then_some(v.changes)
    });
    let asked: Vec<_> = h.iter().map(|c| (c.epoch, c.cause.clone())).collect();
    assert_eq!(
        asked,
        [
            (
                e3,
                Cause::Paused {
                    by: Some(other.name.clone())
                }
            ),
            (
                e3,
                Cause::Resumed {
                    by: Some(holder.clone()),
                    forced: false
                }
            ),
        ]
    );
    let out = c.agents[i].cli_ok(&["history", "db"]);
    for words in [
        "first grant: nobody held it before",
        &format!("released by {holder}: an operator's handover, naming n2 its successor"),
        &format!("granted to n2, the successor {holder} named when it released"),
        "granted after n2's lease expired (n2 went silent",
        &format!("paused by an operator (asked on {})", other.name),
        &format!("resumed by an operator (asked on {holder})"),
    ] {
        assert!(out.contains(words), "{words:?} not in:\n{out}");
    }
}
