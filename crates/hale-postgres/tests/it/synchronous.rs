//! Quorum commit over the streaming standbys the lease table names; none
//! when none streams, unless strict.

use std::collections::BTreeSet;
use std::time::Duration;

use hale_postgres::{maintain_synchronous, quorum_setting, set_synchronous, Standing, NO_STANDBY};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::fixture::{eventually, Lab, Node, Opts};

async fn setting(node: &Node) -> String {
    let client = node.client().await;
    let row = client
        .query_one("SELECT current_setting('synchronous_standby_names')", &[])
        .await;
    row.expect("current_setting").get(0)
}

fn names(n: &[&str]) -> BTreeSet<String> {
    n.iter().map(|s| s.to_string()).collect()
}

/// Every process of `node`'s server (the postmaster and its children).
fn processes(node: &Node) -> Vec<Pid> {
    let postmaster = node.postmaster_pid().expect("postmaster.pid");
    let mut pids = vec![Pid::from_raw(postmaster)];
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // pid (comm) state ppid ...: the fields after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(postmaster) {
            pids.push(Pid::from_raw(pid));
        }
    }
    pids
}

/// Stops every process of `node`'s server (a hung server: its connections
/// stay open, nothing answers) until the guard is dropped.
struct Hung(Vec<Pid>);

impl Hung {
    fn hang(node: &Node) -> Hung {
        let pids = processes(node);
        for pid in &pids {
            let _ = kill(*pid, Signal::SIGSTOP);
        }
        Hung(pids)
    }
}

impl Drop for Hung {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = kill(*pid, Signal::SIGCONT);
        }
    }
}

/// `p`'s standing once no standby streams to it.
async fn no_standby_streaming(p: &Node) -> Standing {
    eventually("no standby streaming", || async {
        let standing = p.standing().await;
        let Standing::Primary { standbys, .. } = &standing else {
            return None;
        };
        standbys.is_empty().then_some(standing)
    })
    .await
}

/// Whether a commit on `p` returns within `within`.
async fn commits_within(p: &Node, within: Duration, id: i32) -> bool {
    let client = p.client().await;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&id];
    let insert = client.execute("INSERT INTO t VALUES ($1)", &params);
    tokio::time::timeout(within, insert).await.is_ok()
}

#[tokio::test]
async fn quorum_commit_goes_on_with_one_standby_hung_where_waiting_for_that_one_holds_every_write()
{
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let b = lab.standby("b", &p, Opts::default()).await;
    let _c = lab.standby("c", &p, Opts::default()).await;
    p.sql("CREATE TABLE t (id int)").await;

    let decided = maintain_synchronous(
        &p.cfg,
        &p.standing().await,
        &names(&["b", "c"]),
        &BTreeSet::new(),
    )
    .await
    .expect("maintain");
    assert_eq!(decided.as_deref(), Some(r#"ANY 1 ("b", "c")"#));
    assert_eq!(setting(&p).await, r#"ANY 1 ("b", "c")"#);
    eventually("b and c in the quorum", || async {
        let Standing::Primary { standbys, .. } = p.standing().await else {
            return None;
        };
        (standbys.iter().filter(|s| s.sync).count() == 2).then_some(())
    })
    .await;
    assert!(commits_within(&p, Duration::from_secs(10), 1).await);

    // The control: waiting for b alone, a hung b holds every commit.
    set_synchronous(&p.cfg, &quorum_setting(&names(&["b"])))
        .await
        .expect("b alone");
    {
        let _hung = Hung::hang(&b);
        assert!(
            !commits_within(&p, Duration::from_secs(2), 2).await,
            "a commit returned while its only synchronous standby was hung"
        );
    }
    // Thawed, b confirms it.
    eventually("the held commit", || async {
        (p.number("SELECT count(*) FROM t").await == 2).then_some(())
    })
    .await;

    // A quorum of b and c: c's flush is enough while b hangs.
    set_synchronous(&p.cfg, &quorum_setting(&names(&["b", "c"])))
        .await
        .expect("quorum");
    let _hung = Hung::hang(&b);
    for id in 3..8 {
        assert!(
            commits_within(&p, Duration::from_secs(2), id).await,
            "commit {id} waited for the hung standby"
        );
    }
}

#[tokio::test]
async fn a_standby_the_table_does_not_name_is_never_waited_for_and_with_none_streaming_the_primary_commits_alone(
) {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let s = lab.standby("s", &p, Opts::default()).await;

    // s streams, but the table names nobody yet: commits alone.
    let decided = maintain_synchronous(
        &p.cfg,
        &p.standing().await,
        &BTreeSet::new(),
        &BTreeSet::new(),
    )
    .await
    .expect("maintain");
    assert_eq!(decided.as_deref(), Some(""));
    assert_eq!(
        maintain_synchronous(
            &p.cfg,
            &p.standing().await,
            &names(&["s"]),
            &BTreeSet::new()
        )
        .await
        .expect("admitted")
        .as_deref(),
        Some(r#"ANY 1 ("s")"#)
    );
    // A replica is left alone.
    assert_eq!(
        maintain_synchronous(
            &s.cfg,
            &s.standing().await,
            &names(&["s"]),
            &BTreeSet::new()
        )
        .await
        .expect("replica"),
        None
    );

    s.stop(&lab, "immediate").await;
    let standing = no_standby_streaming(&p).await;
    let decided = maintain_synchronous(&p.cfg, &standing, &names(&["s"]), &BTreeSet::new())
        .await
        .expect("maintain");
    assert_eq!(decided.as_deref(), Some(""));
    assert_eq!(setting(&p).await, "");
    // With no standby, a commit returns (synchronous, it would wait forever).
    let commit = p.sql("CREATE TABLE alone (id int); INSERT INTO alone VALUES (1)");
    tokio::time::timeout(Duration::from_secs(10), commit)
        .await
        .expect("the primary commits with no standby");

    let mut manual = p.cfg.clone();
    manual.synchronous = false;
    assert_eq!(
        maintain_synchronous(
            &manual,
            &p.standing().await,
            &names(&["s"]),
            &BTreeSet::new()
        )
        .await
        .expect("off"),
        None
    );
}

#[tokio::test]
async fn a_strict_primary_never_commits_alone_and_resumes_once_an_admitted_standby_streams() {
    let lab = Lab::new();
    let mut p = lab.primary("p", Opts::default()).await;
    p.cfg.strict = true;
    p.sql("CREATE TABLE t (id int)").await;

    // No standby ever: it waits for one that does not exist.
    let decided = maintain_synchronous(
        &p.cfg,
        &p.standing().await,
        &BTreeSet::new(),
        &BTreeSet::new(),
    )
    .await
    .expect("maintain");
    assert_eq!(decided, Some(format!("ANY 1 (\"{NO_STANDBY}\")")));
    assert!(
        !commits_within(&p, Duration::from_secs(1), 1).await,
        "a strict primary committed with no standby"
    );

    // A standby streams; once the table names it, the held commit returns.
    let s = lab.standby("s", &p, Opts::default()).await;
    let decided = maintain_synchronous(
        &p.cfg,
        &p.standing().await,
        &names(&["s"]),
        &BTreeSet::new(),
    )
    .await
    .expect("admitted");
    assert_eq!(decided.as_deref(), Some(r#"ANY 1 ("s")"#));
    eventually("the held commit", || async {
        (p.number("SELECT count(*) FROM t").await == 1).then_some(())
    })
    .await;

    // s goes: the primary keeps waiting for it rather than commit alone.
    s.stop(&lab, "immediate").await;
    let standing = no_standby_streaming(&p).await;
    let decided = maintain_synchronous(&p.cfg, &standing, &names(&["s"]), &BTreeSet::new())
        .await
        .expect("kept");
    assert_eq!(decided.as_deref(), Some(r#"ANY 1 ("s")"#));
    assert!(!commits_within(&p, Duration::from_secs(1), 2).await);
}
