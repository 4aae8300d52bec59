//! The check that a server does its job: a primary commits a write, a
//! replica answers, and neither is short of disk; a server that accepts
//! connections but cannot write (its WAL disk frozen) fails it where
//! `pg_isready` passes.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hale_postgres::{check, CheckError, Working};

use crate::disk::Disk;
use crate::fixture::{Lab, Node, Opts, BIN};

/// `pg_isready` against `node` with a 1 s timeout: true when it says the
/// server accepts connections.
fn is_ready(node: &Node) -> bool {
    Command::new(Path::new(BIN).join("pg_isready"))
        .args(["-q", "-h", &node.cfg.host, "-p", &node.port.to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-t", "1"])
        .status()
        .is_ok_and(|s| s.success())
}

async fn wal_lsn(node: &Node) -> i64 {
    node.number("SELECT (pg_current_wal_lsn() - '0/0')::bigint")
        .await
}

#[tokio::test]
async fn a_primary_passes_by_committing_a_write_and_a_replica_by_answering() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let s = lab.standby("s", &p, Opts::default()).await;
    let before = wal_lsn(&p).await;
    let working = check(&p.cfg).await.expect("the primary works");
    assert!(matches!(working, Working::Primary { .. }), "{working:?}");
    assert!(
        wal_lsn(&p).await > before,
        "the check wrote no WAL: it committed nothing"
    );
    assert_eq!(
        check(&s.cfg).await.expect("the replica works"),
        Working::Replica
    );
}

#[tokio::test]
async fn a_primary_whose_wal_disk_is_frozen_passes_pg_isready_but_fails_the_check() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let disk = Disk::holding(&lab, &p, 128, "pg_wal").await;
    assert!(check(&p.cfg).await.is_ok());
    disk.freeze();
    assert!(
        is_ready(&p),
        "the control: a server whose disk stalls still accepts connections"
    );
    let frozen = tokio::time::timeout(Duration::from_secs(2), check(&p.cfg)).await;
    assert!(
        frozen.is_err(),
        "the check returned with the WAL disk frozen: {frozen:?}"
    );
    disk.thaw();
    tokio::time::timeout(Duration::from_secs(10), check(&p.cfg))
        .await
        .expect("thawed, the check returns")
        .expect("and passes");
}

#[tokio::test]
async fn a_server_whose_wal_disk_is_nearly_full_fails_the_check_before_it_panics() {
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    let disk = Disk::holding(&lab, &p, 160, "pg_wal").await;
    assert!(check(&p.cfg).await.is_ok());
    disk.fill(32 << 20);
    let err = check(&p.cfg).await.expect_err("fails with 32 MiB free");
    let CheckError::DiskFull { path, free, min } = &err else {
        panic!("{err}");
    };
    assert!(path.ends_with("pg_wal"), "{err}");
    assert!(*free <= 32 << 20 && *min == 64 << 20, "{err}");
    // With the test off, the same server passes (and still commits).
    let mut off = p.cfg.clone();
    off.min_free_bytes = 0;
    assert!(check(&off).await.is_ok());
}
