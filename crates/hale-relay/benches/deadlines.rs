//! How late `flush(deadline)` and `close(deadline)` return against a sink
//! that never lets them finish: half-dead (accepts TCP, never answers) and
//! slow (answers after 5 s, longer than every deadline here). The target is
//! "by the deadline + 10 ms", whatever the sink does.
//!
//! For each sink and deadline (10 ms, 100 ms, 1 s), many repetitions:
//!
//! * `flush`: one reporter per sink and deadline, 50 more events reported
//!   before each flush (4 requests hang in flight, the rest wait), then
//!   `flush(d)`; overshoot = elapsed − d.
//! * `close`: a fresh reporter per repetition, 100 events reported and the
//!   requests in flight to the sink (polled), then `close(d)`. It returns
//!   `Ok` as soon as the worker has stopped, which it does a little before
//!   the deadline (it keeps a margin to count what it abandons), so the
//!   signed `elapsed − d` is shown (negative: early). Also how long after `close` returned the worker thread had
//!   stopped (polled every 1 ms, so ±1 ms), and how long `drop` of a
//!   reporter in the same state takes (it closes with a zero deadline).
//!
//! Prints p50/p99/max overshoot per case. Timing lives here, not in tests.
//!
//! ```sh
//! cargo bench -p hale-relay --bench deadlines
//! ```

use std::time::{Duration, Instant};

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{Event, PipelineConfig, Reporter, UpstreamConfig};

fn reporter(sink: &FakeSentry) -> Reporter {
    Reporter::start(PipelineConfig::new(UpstreamConfig::new(sink.dsn()))).expect("reporter")
}

fn load(r: &Reporter, n: usize) {
    for i in 0..n {
        let _ = r.report(Event::error(format!("database failover ({i})")));
    }
}

/// Polls until the reporter has requests in flight (the sink holds them).
fn until_in_flight(r: &Reporter) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.counters().in_flight() == 0 {
        assert!(Instant::now() < deadline, "nothing went in flight");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(what: &str, v: &mut [Duration]) -> String {
    v.sort_unstable();
    let p = |q: f64| ms(v[((v.len() as f64 - 1.0) * q).round() as usize]);
    format!(
        "{what:<28} n {:>4}  p50 {:>7.3}  p99 {:>7.3}  max {:>7.3} ms",
        v.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    )
}

fn reps(deadline: Duration) -> usize {
    match deadline.as_millis() {
        0..=10 => 300,
        11..=100 => 100,
        _ => 12,
    }
}

fn case(rt: &tokio::runtime::Runtime, sink_name: &str, mode: Mode, deadline: Duration) {
    let n = reps(deadline);
    println!("\nsink {sink_name}, deadline {deadline:?}, {n} repetitions (overshoot = elapsed - deadline)");
    let sink = rt.block_on(FakeSentry::start(mode)).expect("fake");

    // flush
    let r = reporter(&sink);
    load(&r, 50);
    until_in_flight(&r);
    let (mut over, mut early) = (Vec::with_capacity(n), 0usize);
    for _ in 0..n {
        load(&r, 50);
        let t = Instant::now();
        let res = r.flush(deadline);
        let took = t.elapsed();
        if res.is_ok() {
            early += 1;
        } else {
            over.push(took.saturating_sub(deadline));
        }
    }
    println!(
        "{}  (returned Ok early: {early})",
        summary("flush overshoot", &mut over)
    );
    drop(r);

    // close, and drop
    let (mut over, mut stopped, mut dropped) = (Vec::new(), Vec::new(), Vec::new());
    let (mut not_stopped, mut ok) = (0usize, 0usize);
    for _ in 0..n {
        let r = reporter(&sink);
        load(&r, 100);
        until_in_flight(&r);
        let t = Instant::now();
        ok += usize::from(r.close(deadline).is_ok());
        let took = t.elapsed();
        over.push(took.as_secs_f64() * 1e3 - ms(deadline));
        let limit = Instant::now() + Duration::from_secs(2);
        while !r.is_stopped() && Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
        if r.is_stopped() {
            stopped.push(t.elapsed().saturating_sub(took));
        } else {
            not_stopped += 1;
        }
        let r2 = reporter(&sink);
        load(&r2, 100);
        until_in_flight(&r2);
        let t = Instant::now();
        drop(r2);
        dropped.push(t.elapsed());
    }
    over.sort_by(f64::total_cmp);
    let q = |p: f64| over[((over.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{:<28} n {:>4}  p50 {:>7.3}  p99 {:>7.3}  max {:>7.3} ms  (Ok, worker stopped in time: {ok})",
        "close: elapsed - deadline",
        over.len(),
        q(0.5),
        q(0.99),
        q(1.0)
    );
    println!(
        "{}  (not stopped within 2 s: {not_stopped})",
        summary("worker stopped after close", &mut stopped)
    );
    println!("{}", summary("drop of the reporter", &mut dropped));
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing
    // and must stay quick.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    for (name, mode) in [
        ("half-dead", Mode::HalfDead),
        (
            "slow (answers after 5 s)",
            Mode::Slow(Duration::from_secs(5)),
        ),
    ] {
        for d in [10, 100, 1000] {
            case(&rt, name, mode, Duration::from_millis(d));
        }
    }
}
