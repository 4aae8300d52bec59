//! The relay under a half-dead upstream, with the default policies:
//!
//! 1. ingest latency at a fixed 10,000 events/s for 5 s (open loop, 8
//!    keep-alive client connections), and the bytes held vs the cap;
//! 2. time from the primary hanging to the first event delivered by the
//!    standby (steady 200 events/s).
//!
//! ```sh
//! cargo bench -p hale-relay --bench relay
//! ```

use std::time::{Duration, Instant};

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{BreakerGauge, PipelineConfig, Relay, RelayConfig, UpstreamConfig};

fn envelope(i: u64) -> Vec<u8> {
    let payload = format!(
        "{{\"message\":\"database failover: connection reset ({i})\",\"level\":\"error\"}}"
    );
    format!(
        "{{\"event_id\":\"{i:032x}\"}}\n{{\"type\":\"event\",\"length\":{}}}\n{payload}\n",
        payload.len()
    )
    .into_bytes()
}

/// The relay's HTTP server runs on its own runtime (as in the agent), apart
/// from the load generator's.
fn server() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime")
    })
}

async fn serve(relay: &Relay) -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    let addr = l.local_addr().expect("addr");
    let app = relay.router();
    server().spawn(async move {
        let l = tokio::net::TcpListener::from_std(l).expect("listener");
        let _ = axum::serve(l, app).await;
    });
    addr
}

fn pct(v: &[Duration], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

async fn ingest(rate: u64, secs: u64) {
    let fake = FakeSentry::start(Mode::HalfDead).await.expect("fake");
    let relay = Relay::start(RelayConfig::new(PipelineConfig::new(UpstreamConfig::new(
        fake.dsn(),
    ))))
    .expect("relay");
    let addr = serve(&relay).await;
    let url = format!("http://{addr}/api/1/envelope/");
    let clients: Vec<reqwest::Client> = (0..8)
        .map(|_| {
            reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("client")
        })
        .collect();
    let bodies: Vec<bytes::Bytes> = (0..1000).map(|i| envelope(i).into()).collect();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let (r, peak) = (relay.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                peak.fetch_max(r.queue_bytes(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut sent = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        let c = clients[(sent % 8) as usize].clone();
        let (u, b) = (url.clone(), bodies[(sent % 1000) as usize].clone());
        sent += 1;
        tasks.spawn(async move {
            let t = Instant::now();
            let r = c
                .post(u)
                .header("x-sentry-auth", "Sentry sentry_key=public")
                .body(b)
                .send()
                .await;
            (t.elapsed(), matches!(r, Ok(r) if r.status() == 200))
        });
    }
    let mut lat = Vec::with_capacity(sent as usize);
    let mut ok = 0u64;
    while let Some(r) = tasks.join_next().await {
        let (d, good) = r.expect("task");
        ok += u64::from(good);
        lat.push(d);
    }
    sampler.abort();
    lat.sort_unstable();
    let c = relay.counters();
    println!(
        "ingest {rate}/s x {secs}s, upstream half-dead: sent {sent}, 200s {ok}, \
         latency p50 {:.3} ms p99 {:.3} ms p99.9 {:.3} ms max {:.3} ms; \
         accepted {}, dropped {} (overflow {}); peak queue bytes {} of cap {}",
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        pct(&lat, 0.999),
        pct(&lat, 1.0),
        c.accepted(),
        c.dropped_total(),
        c.dropped(hale_relay::DropReason::Overflow),
        peak.load(std::sync::atomic::Ordering::Relaxed),
        relay.queue_cap()
    );
}

async fn switchover() {
    let primary = FakeSentry::start(Mode::Up).await.expect("fake");
    let standby = FakeSentry::start(Mode::Up).await.expect("fake");
    let mut p = PipelineConfig::new(UpstreamConfig::new(primary.dsn()));
    p.standby = Some(UpstreamConfig::new(standby.dsn()));
    let relay = Relay::start(RelayConfig::new(p)).expect("relay");
    let addr = serve(&relay).await;
    let url = format!("http://{addr}/api/1/envelope/");
    let client = reqwest::Client::new();
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    let mut i = 0u64;
    // Warm up on the primary.
    for _ in 0..100 {
        tick.tick().await;
        let _ = client.post(&url).body(envelope(i)).send().await;
        i += 1;
    }
    primary.set_mode(Mode::HalfDead);
    let hung = Instant::now();
    let mut opened = None;
    let limit = hung + Duration::from_secs(15);
    while standby.events() == 0 && Instant::now() < limit {
        tick.tick().await;
        let _ = client.post(&url).body(envelope(i)).send().await;
        i += 1;
        if opened.is_none() && relay.counters().breaker(0) != BreakerGauge::Closed {
            opened = Some(hung.elapsed());
        }
    }
    println!(
        "switchover: primary hung -> breaker open after {:?}, first event delivered by the standby after {:?}",
        opened,
        hung.elapsed()
    );
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
    for _ in 0..3 {
        rt.block_on(ingest(10_000, 5));
    }
    for _ in 0..3 {
        rt.block_on(switchover());
    }
}
