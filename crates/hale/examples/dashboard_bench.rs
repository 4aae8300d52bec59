//! Dashboard benchmark: the embedded dashboard (the agent's own router)
//! served with a simulated cluster of `--members` members (default 1,000),
//! opened in headless Chromium.
//!
//! Measures (a) page load to the first full render (`window.__haleRendered`,
//! ms since navigation start) and (b) how long after an event is emitted on
//! the server the page's DOM reflects it (its `unix_ms` to the end of the
//! frame that applied it), for `--events` events per run, `--runs` runs.
//!
//! ```sh
//! cargo run -p hale --example dashboard_bench -- --members 1000 --events 50 --runs 5
//! ```

#![allow(clippy::unwrap_used)] // A benchmark: a panic is its failure report.

#[path = "../tests/it/browser.rs"]
#[allow(dead_code)]
mod browser;
#[path = "../tests/it/support.rs"]
#[allow(dead_code, unused_imports)] // The browser's polling helpers; no agent process here.
mod support;

use hale_agent::view::MemberState;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::get;
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use hale_agent::view::unix_ms;
use hale_agent::{AgentEvent, EventView, EvidenceView, MemberView};
use serde_json::json;
use tokio::sync::broadcast;

struct Sim {
    members: Mutex<Vec<MemberView>>,
    history: Mutex<Vec<EventView>>,
    events: broadcast::Sender<EventView>,
}

fn member(i: usize) -> MemberView {
    let roles = if i < 5 {
        format!(r#","roles":{{"db":[{},true]}}"#, 100 - i)
    } else {
        String::new()
    };
    MemberView {
        name: format!("sim-{i:04}"),
        addr: format!("10.{}.{}.{}:7946", i / 65536, (i / 256) % 256, i % 256),
        state: MemberState::Alive,
        incarnation: 1,
        health: 0,
        last_heard_ms_ago: Some((i as u64 * 37) % 1000),
        state_for_ms: 600_000,
        meta: format!(
            r#"{{"meta":"rack={} zone={}","http":"10.0.0.1:7947"{roles}}}"#,
            i % 40,
            i % 3
        ),
        is_self: i == 0,
        evidence: None,
    }
}

#[derive(serde::Deserialize)]
struct Since {
    since: Option<u64>,
}

fn app(sim: Arc<Sim>) -> Router {
    let api = Router::new()
        .route(
            "/v1/health",
            get(|| async { Json(json!({"status": "ok", "node": "sim-0000"})) }),
        )
        .route(
            "/v1/members",
            get(|State(s): State<Arc<Sim>>| async move {
                Json(s.members.lock().unwrap().clone())
            }),
        )
        .route(
            "/v1/events",
            get(
                |State(s): State<Arc<Sim>>, Query(q): Query<Since>| async move {
                    let since = q.since.unwrap_or(0);
                    let h = s.history.lock().unwrap();
                    Json(h.iter().filter(|e| e.seq > since).cloned().collect::<Vec<_>>())
                },
            ),
        )
        .route("/v1/events/stream", get(stream_events))
        .route(
            "/v1/cluster/roles",
            get(|| async {
                let cands: Vec<_> = (0..5)
                    .map(|i| json!({"node": format!("sim-{i:04}"), "priority": 100 - i, "eligible": true, "member_state": "alive", "holder": i == 0}))
                    .collect();
                Json(json!({"control_plane": true, "leader": 1, "fetched_unix_ms": unix_ms(), "roles": [
                    {"role": "db", "holder": "sim-0000", "epoch": 7, "holder_state": "holder",
                     "lease_left_ms": 1500, "held_since_unix_ms": unix_ms() - 60_000, "candidates": cands}]}))
            }),
        )
        .route(
            "/v1/cluster/services",
            get(|| async {
                let recent: Vec<_> = (0..10).map(|_| json!({"ok": true, "detail": "exit 0", "took_ms": 3})).collect();
                let nodes: Vec<_> = (0..64).map(|i| json!({"node": format!("sim-{i:04}"), "state": "alive", "error": null,
                    "services": [{"name": "pg", "essential": true, "healthy": true, "ready": true, "failing_for_ms": null,
                        "checks": [{"name": "tcp", "ready": false, "runs": 100, "failures": 0, "recent": recent}]},
                      {"name": "sentry", "essential": false, "healthy": true, "ready": true, "failing_for_ms": null,
                        "checks": [{"name": "http", "ready": false, "runs": 100, "failures": 1, "recent": recent}]}]})).collect();
                Json(json!({"nodes": nodes, "truncated": true}))
            }),
        )
        .route("/v1/relay", get(|| async { Json(serde_json::Value::Null) }))
        .with_state(sim);
    api.merge(hale_agent::dashboard::router())
}

async fn stream_events(
    State(s): State<Arc<Sim>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let rx = s.events.subscribe();
    let st = stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(e) => {
                    let ev = Event::default()
                        .event(e.event.kind())
                        .id(e.seq.to_string())
                        .json_data(&e)
                        .unwrap();
                    return Some((Ok(ev), rx));
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    });
    Sse::new(st).keep_alive(KeepAlive::default())
}

/// Emits a death of member `i` (as a real agent would: the member list changes, then the event).
fn emit_death(sim: &Sim, seq: u64, i: usize) {
    let name = format!("sim-{i:04}");
    let evidence = EvidenceView {
        declared_by: "sim-0000".into(),
        accusers: vec!["sim-0000".into(), "sim-0001".into()],
        discounted: 0,
        confirmations: 2,
        suspected_ms_before_verdict: Some(2500),
        silent_ms_before_verdict: Some(4200),
        declared_at_unix_ms: unix_ms(),
    };
    if let Some(m) = sim
        .members
        .lock()
        .unwrap()
        .iter_mut()
        .find(|m| m.name == name)
    {
        m.state = MemberState::Dead;
        m.evidence = Some(evidence.clone());
    }
    let e = AgentEvent::Dead(evidence).stamped(seq, "sim-0000", Some(name), Some(1));
    sim.history.lock().unwrap().push(e.clone());
    let _ = sim.events.send(e);
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

fn percentile(xs: &mut [f64], p: f64) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let (n, per_run, runs) = (
        arg("--members", 1000),
        arg("--events", 50),
        arg("--runs", 5),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let sim = Arc::new(Sim {
        members: Mutex::new((0..n).map(member).collect()),
        history: Mutex::new(Vec::new()),
        events: broadcast::channel(4096).0,
    });
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let router = app(sim.clone());
    rt.spawn(async move { axum::serve(listener, router).await });
    let b = browser::Browser::start();
    println!("dashboard bench: {n} members, {per_run} events per run, {runs} runs, http://{addr}/");
    let (mut loads, mut lags) = (Vec::new(), Vec::new());
    let mut seq = 0;
    assert!(n >= 2, "--members must be at least 2");
    for run in 0..runs {
        // A fresh cluster each run: everyone alive, no history.
        *sim.members.lock().unwrap() = (0..n).map(member).collect();
        sim.history.lock().unwrap().clear();
        b.goto(&format!("http://{addr}/?run={run}"));
        let load = b.wait_js(
            Duration::from_secs(30),
            "the first full render",
            "return window.__haleRendered ?? null;",
        );
        let rows =
            b.eval("return document.querySelectorAll('#members-list [data-member]').length;");
        let load = load.as_f64().unwrap();
        b.wait_js(
            Duration::from_secs(10),
            "the event stream connected",
            "return document.getElementById('conn').dataset.conn === 'live';",
        );
        let start = Instant::now();
        for k in 0..per_run {
            seq += 1;
            // A different member each time (53 is prime to 999).
            let victim = 1 + (seq as usize * 53) % (n - 1).max(1);
            emit_death(&sim, seq, victim);
            // Events at an uneven pace (40-160 ms apart), like a burst of verdicts.
            std::thread::sleep(Duration::from_millis(40 + (k as u64 * 37) % 120));
        }
        let got = b.wait_js(
            Duration::from_secs(20),
            "every event applied",
            &format!(
                "const a = window.__haleApplied; return a.length >= {per_run} && a.map(x => x.lag_ms);"
            ),
        );
        let shown = b.eval(
            "return document.querySelector('#state-filter [data-state=\"dead\"]').textContent;",
        );
        assert_eq!(
            shown,
            format!("dead {per_run}"),
            "the page counts every death"
        );
        let mut run_lags: Vec<f64> = got
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let med = percentile(&mut run_lags.clone(), 0.5);
        let max = percentile(&mut run_lags, 1.0);
        println!(
            "run {run}: load {load:.0} ms ({rows} rows in the DOM), update median {med:.0} ms, max {max:.0} ms over {} events in {:.1} s",
            run_lags.len(),
            start.elapsed().as_secs_f64()
        );
        loads.push(load);
        lags.extend(run_lags);
        if run == 0 {
            b.screenshot(&browser::artifacts(), "bench-1000");
        }
    }
    println!(
        "load to first full render: median {:.0} ms, max {:.0} ms ({} runs)",
        percentile(&mut loads.clone(), 0.5),
        percentile(&mut loads, 1.0),
        runs
    );
    println!(
        "event to DOM: median {:.0} ms, p99 {:.0} ms, max {:.0} ms ({} events)",
        percentile(&mut lags.clone(), 0.5),
        percentile(&mut lags.clone(), 0.99),
        percentile(&mut lags.clone(), 1.0),
        lags.len()
    );
}
