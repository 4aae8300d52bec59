//! A former primary rejoins as a streaming replica of the new one.

use std::collections::BTreeSet;
use std::path::Path;

use hale_postgres::{promote, rejoin, RejoinError, RejoinStep, Rejoined, Standing};

use crate::fixture::{eventually, Lab, Node, Opts};

/// A primary `a` with a standby `b` and rows 1..=100; `b` is promoted, `a`
/// takes rows it alone will have (1001..=1100, a split brain) and is killed
/// (`pg_ctl stop -m immediate`) unless `kill_a` is false (then it goes on
/// running as a primary), then `b` takes rows 201..=300.
async fn failover(lab: &Lab, a_opts: Opts, kill_a: bool) -> (Node, Node) {
    let split = "INSERT INTO t SELECT generate_series(1001, 1100); CHECKPOINT";
    failover_with(lab, a_opts, kill_a, split).await
}

/// [`failover`], with `a` running `split` after `b`'s promotion.
async fn failover_with(lab: &Lab, a_opts: Opts, kill_a: bool, split: &str) -> (Node, Node) {
    let a = lab.primary("a", a_opts).await;
    let b = lab.standby("b", &a, Opts::default()).await;
    a.sql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100)")
        .await;
    b.has_rows(100).await;
    promote(&b.cfg).await.expect("promote b");
    a.sql(split).await;
    if kill_a {
        a.stop(lab, "immediate").await;
    }
    b.sql("INSERT INTO t SELECT generate_series(201, 300)")
        .await;
    (a, b)
}

/// The steps of a rejoin by `pg_rewind`.
const REWOUND: [RejoinStep; 3] = [
    RejoinStep::Rejoining,
    RejoinStep::Rewound,
    RejoinStep::Streaming,
];

/// The steps of a rejoin by a fresh clone.
const RECLONED: [RejoinStep; 3] = [
    RejoinStep::Rejoining,
    RejoinStep::Recloned,
    RejoinStep::Streaming,
];

/// After a rejoin of `a` onto `b`: `a` streams from `b`, has `b`'s rows after
/// the failover and not its own split-brain rows, refuses writes, and is no
/// longer fenced.
async fn check_rejoined(a: &Node, b: &Node) {
    assert!(
        a.standing().await.streams_from("127.0.0.1", b.port),
        "{:?}",
        a.standing().await
    );
    b.sql("INSERT INTO t SELECT generate_series(301, 310)")
        .await;
    eventually("a has b's rows", || async {
        (a.number("SELECT count(*) FROM t WHERE id BETWEEN 201 AND 310")
            .await
            == 110)
            .then_some(())
    })
    .await;
    assert_eq!(
        a.number("SELECT count(*) FROM t WHERE id > 1000").await,
        0,
        "split-brain rows"
    );
    assert_eq!(a.number("SELECT count(*) FROM t").await, 210);
    assert!(!a.fenced(), "the fence marker is removed once streaming");
    a.refuses_writes().await;
    let Standing::Primary { standbys, .. } = b.standing().await else {
        panic!("b is not primary")
    };
    assert!(
        standbys
            .iter()
            .any(|s| s.name == "a" && s.state == hale_postgres::SenderState::Streaming),
        "{standbys:?}"
    );
}

#[tokio::test]
async fn a_former_primary_killed_after_its_standby_was_promoted_rejoins_by_rewind() {
    let lab = Lab::new();
    let (a, b) = failover(&lab, Opts::default(), true).await;

    rejoined_by(&a, &b, Rejoined::Rewound, &REWOUND).await;
    check_rejoined(&a, &b).await;

    let mut again = Vec::new();
    let how = rejoin(&a.cfg, &b.upstream(), "a", "a", |step| again.push(step)).await;
    assert_eq!(how.expect("rejoin again"), Rejoined::AlreadyStreaming);
    assert_eq!(again, [RejoinStep::Streaming]);
}

#[tokio::test]
async fn a_former_primary_killed_with_much_wal_past_the_fork_is_rewound_not_left_behind_it() {
    // a's WAL after b's promotion is long and not checkpointed: recovered
    // as a standby and stopped as soon as it was consistent, its control
    // file could end its WAL before the fork, pg_rewind would see nothing
    // to rewind, and the server would never follow b's timeline.
    let lab = Lab::new();
    let split = "CREATE TABLE pad (v text); \
                 INSERT INTO pad SELECT md5(i::text) FROM generate_series(1, 200000) i; \
                 INSERT INTO t SELECT generate_series(1001, 1100)";
    let (a, b) = failover_with(&lab, Opts::default(), true, split).await;

    rejoined_by(&a, &b, Rejoined::Rewound, &REWOUND).await;
    check_rejoined(&a, &b).await;
}

#[tokio::test]
async fn a_former_primary_still_running_as_a_primary_is_fenced_and_rewound() {
    let lab = Lab::new();
    let (a, b) = failover(&lab, Opts::default(), false).await;
    assert!(
        matches!(a.standing().await, Standing::Primary { .. }),
        "a still takes writes"
    );

    rejoined_by(&a, &b, Rejoined::Rewound, &REWOUND).await;
    check_rejoined(&a, &b).await;
}

/// Rejoins `node` to `upstream` (its slot and application name are its
/// name): it must rejoin `how`, reporting exactly `steps`.
pub(crate) async fn rejoined_by(node: &Node, upstream: &Node, how: Rejoined, steps: &[RejoinStep]) {
    let mut seen = Vec::new();
    let got = rejoin(
        &node.cfg,
        &upstream.upstream(),
        &node.name,
        &node.name,
        |step| seen.push(step),
    )
    .await;
    assert_eq!(got.expect("rejoin"), how);
    assert_eq!(seen, steps);
}

fn entries(dir: &Path) -> BTreeSet<String> {
    let ignored = [
        "hale.fenced",
        "standby.signal",
        "postmaster.opts",
        "postmaster.pid",
    ];
    std::fs::read_dir(dir)
        .expect("read data directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| !ignored.contains(&name.as_str()))
        .collect()
}

#[tokio::test]
async fn a_former_primary_that_cannot_be_rewound_is_recloned_unless_recloning_is_off() {
    let lab = Lab::new();
    // Without WAL hints (and without checksums) pg_rewind refuses the target.
    let (a, b) = failover(
        &lab,
        Opts {
            wal_log_hints: false,
        },
        true,
    )
    .await;
    let before = entries(&a.cfg.data_dir);

    let mut keep = a.cfg.clone();
    keep.reclone_on_rewind_failure = false;
    let mut steps = Vec::new();
    let refused = rejoin(&keep, &b.upstream(), "a", "a", |step| steps.push(step)).await;
    assert!(
        matches!(refused, Err(RejoinError::Rewind(_))),
        "{refused:?}"
    );
    assert_eq!(steps, [RejoinStep::Rejoining]);
    assert_eq!(
        entries(&a.cfg.data_dir),
        before,
        "the data directory is left as it was"
    );
    assert!(a.fenced());
    assert_eq!(a.standing().await, Standing::Down);

    rejoined_by(&a, &b, Rejoined::Recloned, &RECLONED).await;
    check_rejoined(&a, &b).await;
}

#[tokio::test]
async fn a_former_primary_whose_control_file_is_lost_is_recloned() {
    let lab = Lab::new();
    let (a, b) = failover(&lab, Opts::default(), true).await;
    std::fs::remove_file(a.cfg.data_dir.join("global/pg_control")).expect("remove pg_control");

    rejoined_by(&a, &b, Rejoined::Recloned, &RECLONED).await;
    check_rejoined(&a, &b).await;
}

#[tokio::test]
async fn a_replica_of_the_former_primary_is_repointed_to_the_new_one_without_rewind() {
    let lab = Lab::new();
    let a = lab.primary("a", Opts::default()).await;
    let b = lab.standby("b", &a, Opts::default()).await;
    let c = lab.standby("c", &a, Opts::default()).await;
    a.sql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100)")
        .await;
    // A clean stop: both standbys receive a's shutdown checkpoint, so c is
    // not ahead of b's new timeline.
    a.stop(&lab, "fast").await;
    promote(&b.cfg).await.expect("promote b");
    b.sql("INSERT INTO t SELECT generate_series(201, 300)")
        .await;
    let postmaster = c.postmaster_pid();

    rejoined_by(
        &c,
        &b,
        Rejoined::Repointed,
        &[RejoinStep::Rejoining, RejoinStep::Streaming],
    )
    .await;
    assert_eq!(
        c.postmaster_pid(),
        postmaster,
        "repointed without a restart"
    );
    assert!(c.standing().await.streams_from("127.0.0.1", b.port));
    assert!(!c.fenced());
    eventually("c has b's rows", || async {
        (c.number("SELECT count(*) FROM t").await == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_copy_whose_new_upstream_cannot_be_reached_is_left_unfenced_and_promotable() {
    // Issue 40: a rejoin wrote its fence marker before it reached the
    // upstream, so after a few seconds of an unreachable primary every
    // standby could end up fenced, and when the primary died no copy could
    // stand for the role.
    let lab = Lab::new();
    let a = lab.primary("a", Opts::default()).await;
    let b = lab.standby("b", &a, Opts::default()).await;
    let c = lab.standby("c", &a, Opts::default()).await;
    a.sql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 10)")
        .await;
    // The new upstream (b's address, its server stopped) cannot be reached.
    b.stop(&lab, "fast").await;
    let postmaster = c.postmaster_pid();
    let err = hale_postgres::rejoin(&c.cfg, &b.upstream(), "c", "c", |_| {})
        .await
        .expect_err("an unreachable upstream");
    assert!(
        matches!(err, hale_postgres::RejoinError::Upstream { .. }),
        "{err}"
    );
    assert!(
        !c.fenced(),
        "the copy was fenced for an upstream it never reached"
    );
    assert_eq!(c.postmaster_pid(), postmaster, "left running");
    // Stopped (a host restarted, say) and asked again: still not fenced.
    c.stop(&lab, "fast").await;
    let err = hale_postgres::rejoin(&c.cfg, &b.upstream(), "c", "c", |_| {})
        .await
        .expect_err("an unreachable upstream");
    assert!(
        matches!(err, hale_postgres::RejoinError::Upstream { .. }),
        "{err}"
    );
    assert!(!c.fenced(), "the stopped copy was fenced");
    // It can stand for the role: promoted, it takes writes.
    promote(&c.cfg).await.expect("the copy is promotable");
    eventually("c takes writes", || async {
        c.try_client()
            .await
            .ok()?
            .batch_execute("INSERT INTO t VALUES (11)")
            .await
            .ok()
    })
    .await;
}
