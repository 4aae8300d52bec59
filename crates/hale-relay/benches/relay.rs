//! The relay under a half-dead upstream, with the default policies:
//!
//! 1. ingest latency at a fixed 10,000 events/s for 5 s, while the upstream
//!    accepts TCP and never answers, and the bytes held vs the cap. The load
//!    generator is a **separate process** (this binary re-run with
//!    `--loadgen`: raw HTTP/1.1 over 32 keep-alive connections, a thread
//!    each, request `i` due at `i / rate`, paced smoothly); it reports client-observed latency
//!    (write of the request to the end of the response). The relay process
//!    reports its own handling time (a middleware around the handler: body
//!    read, parse, queue, response built). Each relay run is paired with a
//!    **control**: the same load against a trivial axum handler (reads the
//!    body, answers `200 {}`) on the same kind of server runtime, so the
//!    machine's own floor is measured in the same conditions.
//! 2. time from the primary hanging to the first event delivered by the
//!    standby (steady 200 events/s).
//!
//! ```sh
//! cargo bench -p hale-relay --bench relay
//! ```

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::routing::post;
use axum::Router;
use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{BreakerGauge, PipelineConfig, Relay, RelayConfig, UpstreamConfig};

const RUNS: usize = 5;
const RATE: u64 = 10_000;
const SECS: u64 = 5;
const CONNS: u64 = 32;

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
/// from the fake upstream's.
fn server() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("relay-http")
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// CPU time (clock ticks of 10 ms, user + system) per thread of this
/// process whose name starts with `prefix`, by thread id.
fn thread_ticks(prefix: &str) -> std::collections::HashMap<String, u64> {
    let mut out = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let p = e.path();
        let comm = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
        // Fields after the ")" of the command name: state is 3rd, utime 14th.
        let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
        let f: Vec<&str> = after.split_whitespace().collect();
        let ticks = f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
            + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        out.insert(e.file_name().to_string_lossy().into_owned(), ticks);
    }
    out
}

/// CPU milliseconds used by the threads named `prefix*` between two
/// [`thread_ticks`] snapshots (threads present in both).
fn cpu_ms(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
) -> u64 {
    after
        .iter()
        .filter_map(|(tid, a)| before.get(tid).map(|b| a.saturating_sub(*b)))
        .sum::<u64>()
        * 10
}

/// Handling times recorded by the server's middleware, in nanoseconds.
type Handled = Arc<Mutex<Vec<u64>>>;

/// Serves `app` with a middleware that records each request's handling time.
fn serve(app: Router) -> (std::net::SocketAddr, Handled) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    let addr = l.local_addr().expect("addr");
    let handled: Handled = Arc::new(Mutex::new(Vec::with_capacity(64 << 10)));
    let h = handled.clone();
    let app = app.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let h = h.clone();
            async move {
                let t = Instant::now();
                let r = next.run(req).await;
                let ns = t.elapsed().as_nanos() as u64;
                h.lock().unwrap_or_else(|e| e.into_inner()).push(ns);
                r
            }
        },
    ));
    server().spawn(async move {
        let l = tokio::net::TcpListener::from_std(l).expect("listener");
        let _ = axum::serve(l, app).await;
    });
    (addr, handled)
}

fn pct_ns(v: &[u64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize] as f64 / 1e6
}

/// The load generator (child process): `--loadgen ADDR PATH RATE SECS CONNS`.
/// One OS thread per keep-alive connection, blocking I/O; connection `c`
/// sends requests `c, c + CONNS, ...`, request `i` due at `i / RATE` and
/// paced with `thread::sleep` (high-resolution timers: due times are met
/// within tens of µs, so the load is smooth, not bunched into 1 ms timer
/// ticks as a tokio timer would). Latency is from writing the request to
/// the end of the response; how late each write was vs its due time is
/// reported apart. Prints one JSON line.
fn loadgen(args: &[String]) {
    let addr: std::net::SocketAddr = args[0].parse().expect("addr");
    let path = args[1].clone();
    let rate: u64 = args[2].parse().expect("rate");
    let secs: u64 = args[3].parse().expect("secs");
    let conns: u64 = args[4].parse().expect("conns");
    let reqs: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..1000)
            .map(|i| {
                let body = envelope(i);
                let mut r = format!(
                    "POST {path} HTTP/1.1\r\nhost: {addr}\r\nx-sentry-auth: Sentry sentry_key=public\r\n\
                     content-type: application/x-sentry-envelope\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                r.extend_from_slice(&body);
                r
            })
            .collect(),
    );
    let total = rate * secs;
    let start = Instant::now() + Duration::from_millis(50);
    let connect = move || {
        let s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        s
    };
    let hs: Vec<_> = (0..conns)
        .map(|c| {
            let reqs = reqs.clone();
            let mut s = connect();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 8192];
                let (mut lat, mut late, mut ok) = (Vec::new(), Vec::new(), 0u64);
                let mut i = c;
                while i < total {
                    let due = start + Duration::from_nanos(i * 1_000_000_000 / rate);
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    let t = Instant::now();
                    let good = exchange(&mut s, &reqs[(i % 1000) as usize], &mut buf);
                    lat.push((
                        t.saturating_duration_since(start).as_secs() as usize,
                        t.elapsed().as_nanos() as u64,
                    ));
                    late.push(t.saturating_duration_since(due).as_nanos() as u64);
                    ok += u64::from(good);
                    if !good {
                        s = connect();
                    }
                    i += conns;
                }
                (lat, late, ok)
            })
        })
        .collect();
    let (mut lat, mut late, mut ok) = (Vec::new(), Vec::new(), 0u64);
    for h in hs {
        let (l, lt, o) = h.join().expect("connection thread");
        lat.extend(l);
        late.extend(lt);
        ok += o;
    }
    // p99 per second of the run: where in the run the tail is.
    let mut per_sec = vec![Vec::new(); secs as usize + 1];
    for &(sec, ns) in &lat {
        per_sec[sec.min(secs as usize)].push(ns);
    }
    let per_sec: Vec<f64> = per_sec
        .iter_mut()
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.sort_unstable();
            (pct_ns(v, 0.99) * 1e3).round() / 1e3
        })
        .collect();
    let mut lat: Vec<u64> = lat.into_iter().map(|(_, ns)| ns).collect();
    lat.sort_unstable();
    late.sort_unstable();
    println!(
        "{}",
        serde_json::json!({
            "sent": lat.len(), "ok": ok,
            "p50": pct_ns(&lat, 0.5), "p90": pct_ns(&lat, 0.9), "p99": pct_ns(&lat, 0.99),
            "p999": pct_ns(&lat, 0.999), "max": pct_ns(&lat, 1.0),
            "late_p50": pct_ns(&late, 0.5), "late_p99": pct_ns(&late, 0.99),
            "p99_per_second": per_sec,
        })
    );
}

/// One request and its response on a keep-alive connection; true on a 200.
fn exchange(s: &mut std::net::TcpStream, req: &[u8], buf: &mut [u8]) -> bool {
    use std::io::{Read, Write};
    if s.write_all(req).is_err() {
        return false;
    }
    let mut have = 0usize;
    loop {
        match s.read(&mut buf[have..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => have += n,
        }
        let Some(end) = buf[..have].windows(4).position(|w| w == b"\r\n\r\n") else {
            if have == buf.len() {
                return false;
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if have >= end + 4 + len {
            return head.starts_with("http/1.1 200");
        }
    }
}

/// Runs the load generator as a child process against `addr`; its JSON.
fn run_loadgen(addr: std::net::SocketAddr, path: &str) -> serde_json::Value {
    let exe = std::env::current_exe().expect("current exe");
    let out = std::process::Command::new(exe)
        .args(["--loadgen", &addr.to_string(), path])
        .args([RATE.to_string(), SECS.to_string(), CONNS.to_string()])
        .output()
        .expect("load generator");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("load generator output")
}

fn handled_summary(h: &Handled) -> (usize, f64, f64, f64) {
    let mut v = std::mem::take(&mut *h.lock().unwrap_or_else(|e| e.into_inner()));
    v.sort_unstable();
    (v.len(), pct_ns(&v, 0.5), pct_ns(&v, 0.99), pct_ns(&v, 1.0))
}

fn line(what: &str, c: &serde_json::Value, h: (usize, f64, f64, f64)) -> String {
    let f = |k: &str| c[k].as_f64().unwrap_or(f64::NAN);
    format!(
        "{what:<8} client: sent {} 200s {} p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} ms \
         (written late vs due: p50 {:.3} p99 {:.3} ms) | server handling: n {} p50 {:.3} p99 {:.3} max {:.3} ms\n\
         {:<8} client p99 per second: {}",
        c["sent"], c["ok"], f("p50"), f("p90"), f("p99"), f("p999"), f("max"),
        f("late_p50"), f("late_p99"), h.0, h.1, h.2, h.3, "", c["p99_per_second"]
    )
}

/// The same load against a trivial handler: the machine's floor.
fn control(rt: &tokio::runtime::Runtime) -> f64 {
    let app = Router::new().route(
        "/api/{project}/envelope/",
        post(|body: axum::body::Bytes| async move {
            std::hint::black_box(body);
            "{}"
        }),
    );
    let (addr, handled) = serve(app);
    // The same 1 ms sampler the relay run has (on the same runtime).
    let dummy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = rt.spawn(async move {
        loop {
            dummy.fetch_max(1, std::sync::atomic::Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    let http0 = thread_ticks("relay-http");
    let c = run_loadgen(addr, "/api/1/envelope/");
    let http = cpu_ms(&http0, &thread_ticks("relay-http"));
    sampler.abort();
    println!("{}", line("control", &c, handled_summary(&handled)));
    println!("         CPU during the load: HTTP server thread {http} ms");
    c["p99"].as_f64().unwrap_or(f64::NAN)
}

async fn ingest() -> f64 {
    let fake = FakeSentry::start(Mode::HalfDead).await.expect("fake");
    let relay = Relay::start(RelayConfig::new(PipelineConfig::new(UpstreamConfig::new(
        fake.dsn(),
    ))))
    .expect("relay");
    let (addr, handled) = serve(relay.router());
    let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let (r, peak) = (relay.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                peak.fetch_max(r.queue_bytes(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let (http0, worker0) = (thread_ticks("relay-http"), thread_ticks("hale-relay"));
    let c = tokio::task::spawn_blocking(move || run_loadgen(addr, "/api/1/envelope/"))
        .await
        .expect("load generator");
    let http = cpu_ms(&http0, &thread_ticks("relay-http"));
    let worker = cpu_ms(&worker0, &thread_ticks("hale-relay"));
    sampler.abort();
    println!("{}", line("relay", &c, handled_summary(&handled)));
    println!(
        "         CPU during the load: HTTP server thread {http} ms, relay worker thread {worker} ms"
    );
    let k = relay.counters();
    println!(
        "         relay: accepted {}, dropped {} (overflow {}), accepted + dropped = {}; \
         peak queue bytes {} of cap {}",
        k.accepted(),
        k.dropped_total(),
        k.dropped(hale_relay::DropReason::Overflow),
        k.accepted() + k.dropped_total(),
        peak.load(std::sync::atomic::Ordering::Relaxed),
        relay.queue_cap()
    );
    let _ = relay.close(Duration::ZERO);
    c["p99"].as_f64().unwrap_or(f64::NAN)
}

async fn switchover() {
    let primary = FakeSentry::start(Mode::Up).await.expect("fake");
    let standby = FakeSentry::start(Mode::Up).await.expect("fake");
    let mut p = PipelineConfig::new(UpstreamConfig::new(primary.dsn()));
    p.standby = Some(UpstreamConfig::new(standby.dsn()));
    let relay = Relay::start(RelayConfig::new(p)).expect("relay");
    let (addr, _) = serve(relay.router());
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--loadgen") {
        loadgen(&args[i + 1..]);
        return;
    }
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing
    // and must stay quick.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "ingest: {RATE}/s for {SECS} s, {CONNS} connections, load generator in a separate process; \
         upstream half-dead; control = trivial handler, same server runtime"
    );
    // Start the server runtime's thread (it names itself once running) so
    // the first run's CPU snapshot finds it.
    let _ = rt.block_on(server().spawn(async {}));
    let (mut ctl, mut rel) = (Vec::new(), Vec::new());
    for run in 1..=RUNS {
        println!("run {run}");
        ctl.push(control(&rt));
        rel.push(rt.block_on(ingest()));
    }
    let (c, r) = (median(ctl.clone()), median(rel.clone()));
    println!(
        "client p99, median of {RUNS}: relay {r:.3} ms (runs {rel:.3?}), control {c:.3} ms \
         (runs {ctl:.3?}); relay / control = {:.2}",
        r / c
    );
    for _ in 0..3 {
        rt.block_on(switchover());
    }
}
