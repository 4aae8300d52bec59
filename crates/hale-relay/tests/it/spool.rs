//! The disk spool: events accepted while the upstream is down survive a
//! restart and are delivered once it is back; the cap evicts oldest first.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{DropReason, Relay, RelayConfig, SpoolConfig};

use crate::{event_envelope, post_envelope, quick, serve, until_true};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "hale-relay-{name}-{}",
        hale_relay::envelope::new_event_id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config(fake: &FakeSentry, dir: &PathBuf, max_bytes: u64) -> RelayConfig {
    let mut p = quick(fake.dsn());
    let mut s = SpoolConfig::new(dir);
    s.max_bytes = max_bytes;
    s.drain_per_sec = 1000;
    p.spool = Some(s);
    RelayConfig::new(p)
}

/// Closes the relay and waits for its worker to stop. Close returns by its
/// deadline; on a disk made slow by other work its worker may still be
/// spooling then (`TimedOut`), and finishes on its own: what these tests
/// claim is what ends up spooled or counted, not how fast.
async fn close(relay: Relay) {
    let waiting = relay.clone();
    let closed = tokio::task::spawn_blocking(move || relay.close(Duration::from_secs(2)))
        .await
        .unwrap();
    if let Err(e) = closed {
        eprintln!("close: {e}; waiting for the worker to finish");
    }
    until_true("the worker has stopped", Duration::from_secs(30), || {
        waiting.is_stopped()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spooled_events_survive_a_restart_and_none_is_lost() {
    let dir = scratch("restart");
    let fake = FakeSentry::start(Mode::HalfDead).await.unwrap();
    let relay = Relay::start(config(&fake, &dir, 64 << 20)).unwrap();
    let addr = serve(&relay).await;
    let http = reqwest::Client::new();
    let mut ids = HashSet::new();
    for _ in 0..200 {
        let id = hale_relay::envelope::new_event_id();
        let r = post_envelope(&http, addr, event_envelope(&id)).await;
        assert_eq!(r.status(), 200);
        ids.insert(id);
    }
    until_true("some events are spooled", Duration::from_secs(5), || {
        relay.counters().spooled() > 0
    })
    .await;
    let counters_before = relay.clone();
    close(relay).await;
    assert_eq!(counters_before.counters().dropped_total(), 0);
    assert_eq!(counters_before.counters().forwarded(), 0);
    assert_eq!(counters_before.counters().spooled(), 200);
    drop(counters_before);

    // The agent restarts; the upstream is back.
    fake.set_mode(Mode::Up);
    let relay = Relay::start(config(&fake, &dir, 64 << 20)).unwrap();
    until_true(
        "every spooled event is delivered",
        Duration::from_secs(15),
        || fake.event_ids().is_superset(&ids),
    )
    .await;
    until_true("the spool is empty", Duration::from_secs(5), || {
        relay.counters().spool_bytes() == 0
    })
    .await;
    assert_eq!(relay.counters().dropped_total(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_evicts_the_oldest_and_counts_them() {
    let dir = scratch("evict");
    let fake = FakeSentry::start(Mode::Refusing).await.unwrap();
    let one = event_envelope(&hale_relay::envelope::new_event_id()).len() as u64;
    // Room for ten envelopes; the sink's host is dead, so nothing is sent
    // and everything is spooled in the order it came.
    let mut cfg = config(&fake, &dir, one * 10);
    cfg.pipeline.primary.member = Some("sink".into());
    let relay = Relay::start(cfg).unwrap();
    relay.member_dead("sink");
    let addr = serve(&relay).await;
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    for _ in 0..30 {
        let id = hale_relay::envelope::new_event_id();
        post_envelope(&http, addr, event_envelope(&id)).await;
        ids.push(id);
        // Spool one at a time so the order on disk is the order sent.
        let n = ids.len() as u64;
        until_true("spooled", Duration::from_secs(5), || {
            relay.counters().spooled() >= n
        })
        .await;
    }
    assert!(relay.counters().spool_bytes() <= one * 10);
    assert_eq!(relay.counters().dropped(DropReason::SpoolFull), 20);
    fake.set_mode(Mode::Up);
    relay.member_alive("sink");
    let newest: HashSet<String> = ids[20..].iter().cloned().collect();
    until_true(
        "the newest ten are delivered",
        Duration::from_secs(15),
        || fake.event_ids().is_superset(&newest),
    )
    .await;
    let oldest: HashSet<String> = ids[..20].iter().cloned().collect();
    assert!(fake.event_ids().is_disjoint(&oldest));
    let _ = std::fs::remove_dir_all(&dir);
}
