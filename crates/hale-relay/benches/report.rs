//! `Reporter::report` cost: criterion means for one thread (accepted and
//! rejected), then per-call percentiles with 8 producer threads.
//!
//! ```sh
//! cargo bench -p hale-relay --bench report
//! ```
//!
//! Per-call times are taken with `Instant::now()` pairs around each call,
//! minus the median cost of an empty pair (the timer itself, ~20–30 ns
//! here), so single figures below the timer's resolution are estimates; the
//! criterion means (batches, no per-call timer) are the cross-check.

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::Criterion;
use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{Event, PipelineConfig, Reporter, UpstreamConfig};

/// A reporter whose upstream's host is "dead": nothing is sent, so the
/// worker only moves events from the channel into memory (its real work
/// while a sink is down).
fn held_reporter(rt: &tokio::runtime::Runtime, queue_bytes: usize) -> (FakeSentry, Reporter) {
    let fake = rt
        .block_on(FakeSentry::start(Mode::HalfDead))
        .expect("fake");
    let mut up = UpstreamConfig::new(fake.dsn());
    up.member = Some("sink".into());
    let mut cfg = PipelineConfig::new(up);
    cfg.queue_bytes = queue_bytes;
    let r = Reporter::start(cfg).expect("reporter");
    r.member_dead("sink");
    (fake, r)
}

fn event() -> Event {
    Event::error("database failover: connection reset")
}

fn fill(r: &Reporter) {
    while r.report(event()).is_ok() {}
}

fn single_thread(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let mut g = c.benchmark_group("report_1_thread");
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));
    {
        let (_f, r) = held_reporter(rt, 64 << 10);
        fill(&r);
        g.bench_function("rejected", |b| {
            b.iter_batched(
                event,
                |e| black_box(r.report(e)),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    {
        // Accepted: a big budget, and the queue emptied between batches.
        let (_f, r) = held_reporter(rt, 1 << 30);
        g.bench_function("accepted", |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(20_000);
                    let events: Vec<Event> = (0..n).map(|_| event()).collect();
                    let t = Instant::now();
                    for e in events {
                        let _ = black_box(r.report(e));
                    }
                    total += t.elapsed();
                    left -= n;
                }
                total
            })
        });
    }
    g.finish();
}

fn timer_overhead() -> u64 {
    let mut v: Vec<u64> = (0..100_000)
        .map(|_| {
            let t = Instant::now();
            black_box(());
            t.elapsed().as_nanos() as u64
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

/// Per-call nanoseconds (timer overhead removed) from `threads` producers,
/// each making `per` calls.
fn per_call(r: &Reporter, threads: usize, per: usize, overhead: u64) -> Vec<u64> {
    let barrier = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let (r, barrier) = (r.clone(), barrier.clone());
            std::thread::spawn(move || {
                let events: Vec<Event> = (0..per).map(|_| event()).collect();
                let mut out = Vec::with_capacity(per);
                barrier.wait();
                for e in events {
                    let t = Instant::now();
                    let _ = black_box(r.report(e));
                    out.push((t.elapsed().as_nanos() as u64).saturating_sub(overhead));
                }
                out
            })
        })
        .collect();
    let mut all: Vec<u64> = hs
        .into_iter()
        .flat_map(|h| h.join().expect("producer"))
        .collect();
    all.sort_unstable();
    all
}

fn pct(v: &[u64], p: f64) -> u64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn eight_threads(rt: &tokio::runtime::Runtime) {
    let overhead = timer_overhead();
    println!("\nreport() per call, 8 producer threads (timer overhead {overhead} ns removed)");
    println!(
        "{:<10} {:>4} {:>7} {:>7} {:>7} {:>8}",
        "path", "run", "p50", "p90", "p99", "p99.9"
    );
    let mut p99 = [Vec::new(), Vec::new()];
    for run in 0..5 {
        let (_f, r) = held_reporter(rt, 1 << 30);
        let v = per_call(&r, 8, 5_000, overhead);
        println!(
            "{:<10} {:>4} {:>7} {:>7} {:>7} {:>8}",
            "accepted",
            run,
            pct(&v, 0.5),
            pct(&v, 0.9),
            pct(&v, 0.99),
            pct(&v, 0.999)
        );
        p99[0].push(pct(&v, 0.99));
        let (_f, r) = held_reporter(rt, 64 << 10);
        fill(&r);
        let v = per_call(&r, 8, 50_000, overhead);
        println!(
            "{:<10} {:>4} {:>7} {:>7} {:>7} {:>8}",
            "rejected",
            run,
            pct(&v, 0.5),
            pct(&v, 0.9),
            pct(&v, 0.99),
            pct(&v, 0.999)
        );
        p99[1].push(pct(&v, 0.99));
    }
    for (name, v) in ["accepted", "rejected"].iter().zip(p99.iter_mut()) {
        v.sort_unstable();
        println!("median of 5 runs: {name} p99 = {} ns", v[v.len() / 2]);
    }
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut c = Criterion::default().configure_from_args();
    single_thread(&mut c, &rt);
    c.final_summary();
    eight_threads(&rt);
}
