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
//! Last, the same 8 threads timed by batches (one `Instant` pair around
//! K consecutive calls, divided by K): percentiles of per-batch means, which
//! resolve below the timer's granularity (see `batched`).

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

/// Fills the byte budget, so refusals are the steady state of an outage
/// (budget full). Stopping at the first refusal would stop when the
/// channel's slots are full with bytes to spare, a different (burst) path.
fn fill(r: &Reporter) {
    let room = std::mem::size_of::<Event>();
    let deadline = Instant::now() + Duration::from_secs(10);
    while r.queue_bytes() + room <= r.queue_cap() {
        assert!(Instant::now() < deadline, "the budget never filled");
        while r.report(event()).is_ok() {}
        std::thread::sleep(Duration::from_millis(5));
    }
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

/// Batch timing, for figures below the timer's granularity: each sample is
/// one `Instant` pair around `k` consecutive calls on one thread, divided by
/// `k`; `threads` producers each take `samples` samples. The percentiles are
/// over these per-batch means: a preemption or a contended cache line inside
/// a batch raises that batch's mean (a 1 ms preemption in a 1000-call batch
/// adds 1 µs per call), so the tail still shows, but a single slow call
/// among fast ones is averaged with its batch. Returns sorted means in
/// nanoseconds (as f64) and how many calls were refused.
fn batched(r: &Reporter, threads: usize, samples: usize, k: usize) -> (Vec<f64>, u64) {
    batched_with(threads, samples, k, |_| {
        let r = r.clone();
        move |e: Event| r.report(e).is_err()
    })
}

#[repr(align(128))]
struct Own(std::sync::atomic::AtomicU64);

/// The control for the reject path: the same shape of work on data no other
/// thread writes (two loads of shared read-only atomics, a relaxed
/// `fetch_add` on a padded thread-own counter, the event dropped), so the
/// machine's own interference between threads shows apart from ours.
fn batched_control(threads: usize, samples: usize, k: usize) -> Vec<f64> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let shared = Arc::new((AtomicBool::new(false), AtomicUsize::new(1 << 20)));
    batched_with(threads, samples, k, |_| {
        let shared = shared.clone();
        let own = Own(std::sync::atomic::AtomicU64::new(0));
        move |e: Event| {
            let refuse = !shared.0.load(Ordering::Relaxed)
                && shared.1.load(Ordering::Relaxed) + e.accounted_bytes() > 1 << 20;
            drop(black_box(e));
            own.0.fetch_add(1, Ordering::Relaxed);
            refuse
        }
    })
    .0
}

fn batched_with<F, C>(threads: usize, samples: usize, k: usize, make: C) -> (Vec<f64>, u64)
where
    C: Fn(usize) -> F,
    F: FnMut(Event) -> bool + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(threads));
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let (mut call, barrier) = (make(i), barrier.clone());
            std::thread::spawn(move || {
                let mut out = Vec::with_capacity(samples);
                let mut refused = 0u64;
                barrier.wait();
                for _ in 0..samples {
                    let events: Vec<Event> = (0..k).map(|_| event()).collect();
                    let t = Instant::now();
                    for e in events {
                        refused += u64::from(black_box(call(e)));
                    }
                    out.push(t.elapsed().as_nanos() as f64 / k as f64);
                }
                (out, refused)
            })
        })
        .collect();
    let mut all = Vec::new();
    let mut refused = 0;
    for h in hs {
        let (v, n) = h.join().expect("producer");
        all.extend(v);
        refused += n;
    }
    all.sort_by(f64::total_cmp);
    (all, refused)
}

fn pctf(v: &[f64], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn eight_threads_batched(rt: &tokio::runtime::Runtime) {
    println!(
        "\nreport() per call by batch timing, 8 producer threads: each sample = one Instant pair \
         around K consecutive calls / K (accepted K=100, 60 samples/thread; rejected K=1000 x 250 \
         and K=100 x 2500 samples/thread). A preemption inside a batch is charged to all K calls, \
         so the share of samples it spoils grows with K"
    );
    println!(
        "{:<10} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "path", "run", "p50", "p90", "p99", "max", "refused"
    );
    let mut p99 = [Vec::new(), Vec::new(), Vec::new()];
    for run in 0..5 {
        let (_f, r) = held_reporter(rt, 1 << 30);
        let (v, refused) = batched(&r, 8, 60, 100);
        println!(
            "{:<10} {:>4} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8}",
            "accepted",
            run,
            pctf(&v, 0.5),
            pctf(&v, 0.9),
            pctf(&v, 0.99),
            pctf(&v, 1.0),
            refused
        );
        p99[0].push(pctf(&v, 0.99));
        for (k, samples, i) in [(1000, 250, 1), (100, 2500, 2)] {
            let (_f, r) = held_reporter(rt, 64 << 10);
            fill(&r);
            let (v, refused) = batched(&r, 8, samples, k);
            println!(
                "{:<10} {:>4} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8}",
                format!("rej K={k}"),
                run,
                pctf(&v, 0.5),
                pctf(&v, 0.9),
                pctf(&v, 0.99),
                pctf(&v, 1.0),
                refused
            );
            p99[i].push(pctf(&v, 0.99));
        }
    }
    for (name, v) in ["accepted", "rejected K=1000", "rejected K=100"]
        .iter()
        .zip(p99.iter_mut())
    {
        v.sort_by(f64::total_cmp);
        println!(
            "median of 5 runs (batch timing): {name} p99 = {:.1} ns (runs {:.1?})",
            v[v.len() / 2],
            v
        );
    }
    // Is the 8-thread tail ours or the machine's? The reject path with 1, 2
    // and 8 threads, each next to the control (same shape of work, nothing
    // shared written).
    println!(
        "\nrejected vs control, batch timing K=100, 2500 samples/thread, median p99 of 5 runs"
    );
    for threads in [1, 2, 8] {
        let (mut ours, mut ctl) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let (_f, r) = held_reporter(rt, 64 << 10);
            fill(&r);
            ours.push(pctf(&batched(&r, threads, 2500, 100).0, 0.99));
            ctl.push(pctf(&batched_control(threads, 2500, 100), 0.99));
        }
        ours.sort_by(f64::total_cmp);
        ctl.sort_by(f64::total_cmp);
        println!(
            "{threads} thread(s): rejected p99 {:.1} ns (runs {:.1?}); control p99 {:.1} ns (runs {:.1?})",
            ours[2], ours, ctl[2], ctl
        );
    }
}

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut c = Criterion::default().configure_from_args();
    single_thread(&mut c, &rt);
    c.final_summary();
    eight_threads(&rt);
    eight_threads_batched(&rt);
}
