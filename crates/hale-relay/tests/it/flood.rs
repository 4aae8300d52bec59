//! Bounded memory under a flood: the bytes held never pass the cap, and
//! every event offered is accounted for exactly once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{DropReason, Event, Relay, RelayConfig, Reporter};

use crate::{event_envelope, quick, serve, until_true};

#[test]
fn reporter_flood_from_eight_threads_stays_under_the_cap_and_counts_exactly() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(FakeSentry::start(Mode::HalfDead)).unwrap();
    let mut cfg = quick(fake.dsn());
    cfg.queue_bytes = 256 << 10;
    let reporter = Reporter::start(cfg).unwrap();
    let cap = 256 << 10;
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (r, stop, peak) = (reporter.clone(), stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(r.queue_bytes(), Ordering::Relaxed);
                std::hint::spin_loop();
            }
        })
    };
    const PER_THREAD: usize = 20_000;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let r = reporter.clone();
            std::thread::spawn(move || {
                let mut ok = 0u64;
                for i in 0..PER_THREAD {
                    let e = Event::error(format!("thread {t} event {i}: {}", "x".repeat(150)));
                    ok += u64::from(r.report(e).is_ok());
                }
                ok
            })
        })
        .collect();
    let accepted_by_callers: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let c = reporter.counters();
    let sent = 8 * PER_THREAD as u64;
    assert!(
        peak.load(Ordering::Relaxed) <= cap,
        "queue bytes passed the cap"
    );
    assert_eq!(c.accepted(), accepted_by_callers);
    assert_eq!(c.accepted() + c.dropped(DropReason::Overflow), sent);
    assert!(c.dropped(DropReason::Overflow) > 0, "the flood overflowed");
    // Close: what is still held is counted as dropped (shutdown), exactly.
    let _ = reporter.close(Duration::from_millis(200));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !reporter.is_stopped() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        c.forwarded() + c.dropped_total() - c.dropped(DropReason::Overflow),
        c.accepted()
    );
    assert_eq!(reporter.queue_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_flood_never_blocks_clients_and_counts_exactly() {
    let fake = FakeSentry::start(Mode::HalfDead).await.unwrap();
    let mut p = quick(fake.dsn());
    p.queue_bytes = 64 << 10;
    let relay = Relay::start(RelayConfig::new(p)).unwrap();
    let addr = serve(&relay).await;
    let http = reqwest::Client::new();
    const SENT: usize = 2000;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..8 {
        let http = http.clone();
        tasks.spawn(async move {
            for i in 0..SENT / 8 {
                let r =
                    crate::post_envelope(&http, addr, event_envelope(&format!("{w}-{i}"))).await;
                assert_eq!(
                    r.status(),
                    200,
                    "the client is answered 200 even when dropped"
                );
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    let c = relay.counters();
    assert!(relay.queue_bytes() <= 64 << 10);
    assert_eq!(c.accepted() + c.dropped(DropReason::Overflow), SENT as u64);
    assert!(c.dropped(DropReason::Overflow) > 0);
    until_true("metrics show the drops", Duration::from_secs(1), || {
        relay
            .render_metrics()
            .contains("hale_relay_dropped_total{reason=\"overflow\",category=\"error\"}")
    })
    .await;
}
