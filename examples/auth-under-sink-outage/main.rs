//! The first incident, reproduced on loopback, in one process with three
//! runtimes (so the pieces do not share threads):
//!
//! * a fake Sentry (`up`, `refusing`, `half-dead`, `slow`, `rate-limiting`);
//! * a small auth service (axum): `POST /login` does a little CPU work and,
//!   during a "database failover" window, fails a share of requests, each
//!   failure reported to Sentry. Like a real service it serves at most 64
//!   requests at once (a worker pool);
//! * a load generator at a fixed rate, with a 2 s client timeout, measuring
//!   latency and success.
//!
//! Reporting is `naive` (a synchronous HTTP report on the request path, no
//! timeout — what the incident's auth service did), `hale` (the in-process
//! reporter), or `sentry`: the unmodified Sentry SDK (the `sentry` crate,
//! its own reqwest transport) with the DSN given by `--dsn` — pointed at a
//! `hale agent`'s relay (whose upstream is this fake Sentry, started on
//! `--sink-addr`), or straight at the fake Sentry. `run.sh` starts the agent.
//!
//! ```sh
//! cargo run --release -p hale-relay --example auth-under-sink-outage -- \
//!     --report hale --sink half-dead --secs 10 --rate 200
//! cargo run --release -p hale-relay --example auth-under-sink-outage -- \
//!     --report sentry --dsn http://public@127.0.0.1:7947/1 \
//!     --sink-addr 127.0.0.1:9000 --sink half-dead
//! ```
//!
//! Prints one line of JSON: served, error rate, latency p50/p99, RSS.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{Event, PipelineConfig, Reporter, UpstreamConfig};
use tokio::sync::Semaphore;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Report {
    Naive,
    Hale,
    Sentry,
}

struct Args {
    report: Report,
    sink: Mode,
    sink_name: String,
    secs: u64,
    rate: u64,
    dsn: Option<String>,
    sink_addr: std::net::SocketAddr,
}

fn args() -> Result<Args> {
    let mut a = Args {
        report: Report::Hale,
        sink: Mode::HalfDead,
        sink_name: "half-dead".into(),
        secs: 10,
        rate: 200,
        dsn: None,
        sink_addr: "127.0.0.1:0".parse()?,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().with_context(|| format!("{k} needs a value"))?;
        match k.as_str() {
            "--report" => {
                a.report = match v.as_str() {
                    "naive" => Report::Naive,
                    "hale" => Report::Hale,
                    "sentry" => Report::Sentry,
                    _ => bail!("--report naive|hale|sentry"),
                }
            }
            "--sink" => {
                a.sink = match v.as_str() {
                    "up" => Mode::Up,
                    "refusing" => Mode::Refusing,
                    "half-dead" => Mode::HalfDead,
                    "slow" => Mode::Slow(Duration::from_secs(5)),
                    "rate-limiting" => Mode::RateLimiting(60),
                    _ => bail!("--sink up|refusing|half-dead|slow|rate-limiting"),
                };
                a.sink_name = v;
            }
            "--secs" => a.secs = v.parse()?,
            "--rate" => a.rate = v.parse()?,
            "--dsn" => a.dsn = Some(v),
            "--sink-addr" => a.sink_addr = v.parse()?,
            _ => bail!("unknown argument {k}"),
        }
    }
    if a.report == Report::Sentry && a.dsn.is_none() {
        bail!("--report sentry needs --dsn");
    }
    Ok(a)
}

struct Auth {
    report: Report,
    reporter: Reporter,
    http: reqwest::Client,
    sink_url: String,
    pool: Semaphore,
    started: Instant,
    failover: (Duration, Duration),
    n: AtomicU64,
}

/// `POST /login`: a little CPU work; during the failover window, every
/// third request fails and is reported.
async fn login(State(a): State<Arc<Auth>>) -> StatusCode {
    let Ok(_permit) = a.pool.try_acquire() else {
        return StatusCode::SERVICE_UNAVAILABLE;
    };
    let mut h = 0u64;
    for i in 0..20_000u64 {
        h = h.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
    }
    std::hint::black_box(h);
    let t = a.started.elapsed();
    let n = a.n.fetch_add(1, Ordering::Relaxed);
    let in_failover = t >= a.failover.0 && t < a.failover.1;
    if in_failover && n % 3 == 0 {
        let msg = format!("database failover: connection reset (request {n})");
        match a.report {
            Report::Hale => {
                let _ = a.reporter.report(Event::error(msg));
            }
            Report::Sentry => {
                // The SDK as an application uses it: serialises here, then
                // hands the envelope to its transport thread.
                sentry::Hub::main().capture_message(&msg, sentry::Level::Error);
            }
            Report::Naive => {
                // The incident: a synchronous report, no timeout.
                let body = format!(
                    "{{}}\n{{\"type\":\"event\"}}\n{{\"message\":\"{msg}\",\"level\":\"error\"}}\n"
                );
                let _ = a
                    .http
                    .post(&a.sink_url)
                    .header("x-sentry-auth", "Sentry sentry_key=public")
                    .body(body)
                    .send()
                    .await;
            }
        }
        // The login itself still succeeds on the standby database.
    }
    StatusCode::OK
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn main() -> Result<()> {
    let a = args()?;
    let sink_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let auth_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let load_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let sink = sink_rt.block_on(FakeSentry::start_on(a.sink_addr, a.sink))?;
    // Unmodified SDK: its own reqwest transport, default options.
    let _sentry = match (&a.report, &a.dsn) {
        (Report::Sentry, Some(dsn)) => Some(sentry::init(sentry::ClientOptions {
            dsn: Some(dsn.parse().context("--dsn")?),
            transport: Some(Arc::new(sentry::transports::DefaultTransportFactory)),
            ..Default::default()
        })),
        _ => None,
    };
    let reporter = Reporter::start(PipelineConfig::new(UpstreamConfig::new(sink.dsn())))?;
    let secs = Duration::from_secs(a.secs);
    let auth = Arc::new(Auth {
        report: a.report,
        reporter: reporter.clone(),
        http: reqwest::Client::new(),
        sink_url: sink.dsn().envelope_url(),
        pool: Semaphore::new(64),
        started: Instant::now(),
        failover: (secs / 5, secs * 4 / 5),
        n: AtomicU64::new(0),
    });
    let listener = auth_rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/login", post(login))
        .with_state(auth.clone());
    auth_rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    // The load: a fixed rate, open loop, 2 s client timeout.
    let (lat, ok, sent) = load_rt.block_on(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .expect("a client");
        let url = format!("http://{addr}/login");
        let mut tasks = tokio::task::JoinSet::new();
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / a.rate as f64));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let end = Instant::now() + secs;
        let mut sent = 0u64;
        while Instant::now() < end {
            tick.tick().await;
            sent += 1;
            let (c, u) = (client.clone(), url.clone());
            tasks.spawn(async move {
                let t = Instant::now();
                let r = c.post(u).send().await;
                (t.elapsed(), matches!(r, Ok(r) if r.status().is_success()))
            });
        }
        let mut lat = Vec::new();
        let mut ok = 0u64;
        while let Some(r) = tasks.join_next().await {
            if let Ok((d, good)) = r {
                if good {
                    ok += 1;
                    lat.push(d);
                }
            }
        }
        (lat, ok, sent)
    });
    let rss = rss_kib();
    let mut lat = lat;
    lat.sort();
    let c = reporter.counters();
    println!(
        "{}",
        serde_json::json!({
            "report": format!("{:?}", a.report).to_lowercase(),
            "sink": a.sink_name,
            "rate": a.rate,
            "secs": a.secs,
            "sent": sent,
            "served": ok,
            "error_rate": 1.0 - ok as f64 / sent.max(1) as f64,
            "p50_ms": pct(&lat, 0.50),
            "p99_ms": pct(&lat, 0.99),
            "rss_mib": rss as f64 / 1024.0,
            "reporter_accepted": c.accepted(),
            "reporter_dropped": c.dropped_total(),
            "sink_events": sink.events(),
        })
    );
    // Bounded exit: never wait for the sink. (The SDK's guard would close
    // its client on drop, waiting on a hung transport: exit without it.)
    if a.report == Report::Sentry {
        std::process::exit(0);
    }
    let _ = reporter.close(Duration::from_millis(200));
    auth_rt.shutdown_timeout(Duration::from_millis(100));
    load_rt.shutdown_timeout(Duration::from_millis(100));
    sink_rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}
