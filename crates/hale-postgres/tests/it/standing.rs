//! The standing of primaries and replicas, read from real servers.

use hale_postgres::{lag_bytes, Standing};

use crate::fixture::{eventually, Lab, Opts};

#[tokio::test]
async fn a_primary_names_each_standby_with_its_sync_state_and_lsns() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let s1 = lab.standby("s1", &p, Opts::default()).await;
    let _s2 = lab.standby("s2", &p, Opts::default()).await;
    p.sql("ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (s1)'")
        .await;
    p.sql("SELECT pg_reload_conf()").await;
    p.sql("CREATE TABLE t (id int); INSERT INTO t SELECT generate_series(1, 1000)")
        .await;
    let Standing::Primary { lsn, .. } = p.standing().await else {
        panic!("p is not a primary")
    };

    let standbys = eventually("both standbys flushed and replayed p's writes", || async {
        let Standing::Primary {
            standbys, timeline, ..
        } = p.standing().await
        else {
            return None;
        };
        let caught_up = standbys.len() == 2
            && standbys.iter().all(|s| {
                s.state == hale_postgres::SenderState::Streaming
                    && s.flush_lsn.is_some_and(|f| f >= lsn)
                    && s.replay_lsn.is_some_and(|r| r >= lsn)
            })
            && standbys[0].sync;
        (caught_up && timeline == 1).then_some(standbys)
    })
    .await;
    assert_eq!(standbys[0].name, "s1");
    assert!(
        standbys[0].sync,
        "s1 is the synchronous standby: {standbys:?}"
    );
    assert_eq!(standbys[1].name, "s2");
    assert!(!standbys[1].sync, "s2 is asynchronous: {standbys:?}");

    let Standing::Replica {
        streaming,
        upstream,
        upstream_port,
        timeline,
        replay_paused,
        replay_lsn,
        ..
    } = s1.standing().await
    else {
        panic!("s1 is not a replica")
    };
    assert!(streaming && !replay_paused);
    assert_eq!(
        (upstream.as_deref(), upstream_port, timeline),
        (Some("127.0.0.1"), Some(p.port), 1)
    );
    assert!(replay_lsn >= lsn);
}

#[tokio::test]
async fn a_replica_whose_replay_is_paused_shows_its_replay_behind_by_what_the_primary_wrote() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let s = lab.standby("s", &p, Opts::default()).await;
    s.sql("SELECT pg_wal_replay_pause()").await;
    eventually("replay paused", || async {
        let client = s.client().await;
        let row = client
            .query_one("SELECT pg_get_wal_replay_pause_state()", &[])
            .await
            .ok()?;
        (row.get::<_, String>(0) == "paused").then_some(())
    })
    .await;

    // About 2 MB of WAL.
    p.sql("CREATE TABLE big AS SELECT repeat('x', 1000) AS filler FROM generate_series(1, 2000)")
        .await;
    let Standing::Primary { lsn, .. } = p.standing().await else {
        panic!("p is not a primary")
    };
    let replay_lsn = eventually("s received all of p's WAL", || async {
        match s.standing().await {
            Standing::Replica {
                receive_lsn: Some(received),
                replay_lsn,
                replay_paused: true,
                ..
            } if received >= lsn => Some(replay_lsn),
            _ => None,
        }
    })
    .await;
    let lag = lag_bytes(lsn, replay_lsn);
    assert!(lag >= 1 << 20, "replay only {lag} bytes behind");

    s.sql("SELECT pg_wal_replay_resume()").await;
    eventually("replay caught up once resumed", || async {
        match s.standing().await {
            Standing::Replica {
                replay_lsn,
                replay_paused: false,
                ..
            } => (lag_bytes(lsn, replay_lsn) == 0).then_some(()),
            _ => None,
        }
    })
    .await;
}
