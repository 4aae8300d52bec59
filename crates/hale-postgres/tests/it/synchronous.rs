//! Synchronous replication while a standby streams, none when none does.

use std::time::Duration;

use hale_postgres::{maintain_synchronous, Standing};

use crate::fixture::{eventually, Lab, Opts};

async fn setting(node: &crate::fixture::Node) -> String {
    let client = node.client().await;
    let row = client
        .query_one("SELECT current_setting('synchronous_standby_names')", &[])
        .await;
    row.expect("current_setting").get(0)
}

#[tokio::test]
async fn maintain_synchronous_asks_for_a_standby_while_one_streams_and_for_none_when_none_does() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let s = lab.standby("s", &p, Opts::default()).await;

    let decided = maintain_synchronous(&p.cfg, &p.standing().await)
        .await
        .expect("maintain");
    assert_eq!(decided, Some(true));
    assert_eq!(setting(&p).await, "*");
    eventually("s synchronous", || async {
        let Standing::Primary { standbys, .. } = p.standing().await else {
            return None;
        };
        standbys
            .iter()
            .any(|st| st.name == "s" && st.sync)
            .then_some(())
    })
    .await;
    // Idempotent, and a replica is left alone.
    assert_eq!(
        maintain_synchronous(&p.cfg, &p.standing().await)
            .await
            .expect("again"),
        Some(true)
    );
    assert_eq!(
        maintain_synchronous(&s.cfg, &s.standing().await)
            .await
            .expect("replica"),
        None
    );

    s.stop(&lab, "immediate").await;
    let standing = eventually("no standby streaming", || async {
        let standing = p.standing().await;
        let Standing::Primary { standbys, .. } = &standing else {
            return None;
        };
        standbys.is_empty().then_some(standing)
    })
    .await;
    let decided = maintain_synchronous(&p.cfg, &standing)
        .await
        .expect("maintain");
    assert_eq!(decided, Some(false));
    assert_eq!(setting(&p).await, "");
    // With no standby, a commit returns (synchronous, it would wait forever).
    let commit = p.sql("CREATE TABLE alone (id int); INSERT INTO alone VALUES (1)");
    tokio::time::timeout(Duration::from_secs(10), commit)
        .await
        .expect("the primary commits with no standby");

    let mut manual = p.cfg.clone();
    manual.synchronous = false;
    assert_eq!(
        maintain_synchronous(&manual, &p.standing().await)
            .await
            .expect("off"),
        None
    );
}
