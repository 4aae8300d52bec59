//! The load generator: logs in at a fixed rate (open loop: a slow answer
//! never delays the next attempt) and records every attempt.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tokio::sync::mpsc;

/// `load` options.
#[derive(clap::Args)]
pub struct Args {
    /// The auth service's base URL.
    #[arg(long)]
    url: String,
    /// Logins per second.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Stop once this file exists.
    #[arg(long)]
    stop_file: Option<PathBuf>,
    /// Stop after this many seconds at most.
    #[arg(long, default_value_t = 600)]
    secs: u64,
    /// Every Nth attempt uses a wrong secret (and must be refused: 401).
    #[arg(long, default_value_t = 20)]
    bad_every: u64,
    /// Users u0..u{N-1} exist, each with secret s{i}.
    #[arg(long, default_value_t = 1000)]
    users: u64,
    /// An attempt without an answer this long failed.
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// CSV of attempts: seq,sent_ns,good,status,ok,latency_us,id.
    #[arg(long)]
    out: PathBuf,
}

struct Attempt {
    seq: u64,
    sent_ns: u128,
    good: bool,
    status: u16,
    ok: bool,
    latency_us: u128,
    id: Option<i64>,
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

async fn attempt(http: reqwest::Client, url: String, seq: u64, good: bool, user: u64) -> Attempt {
    let secret = if good {
        format!("s{user}")
    } else {
        "wrong".to_owned()
    };
    let body = serde_json::json!({ "user": format!("u{user}"), "secret": secret });
    let sent_ns = unix_ns();
    let t = Instant::now();
    let (status, id) = match http.post(&url).json(&body).send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let v: serde_json::Value = r.json().await.unwrap_or_default();
            (status, v["id"].as_i64())
        }
        Err(_) => (0, None),
    };
    let ok = if good {
        status == 200 && id.is_some()
    } else {
        status == 401
    };
    Attempt {
        seq,
        sent_ns,
        good,
        status,
        ok,
        latency_us: t.elapsed().as_micros(),
        id,
    }
}

/// Runs the load until the stop file appears (or `--secs`), then writes the CSV.
pub fn main(a: Args) -> anyhow::Result<()> {
    crate::block_on(1, run(a))
}

async fn run(a: Args) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(a.timeout_ms))
        .pool_max_idle_per_host(256)
        .build()?;
    let url = format!("{}/login", a.url.trim_end_matches('/'));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(a.rate.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let deadline = Instant::now() + Duration::from_secs(a.secs);
    let mut seq = 0u64;
    loop {
        tick.tick().await;
        if seq.is_multiple_of(20)
            && (Instant::now() >= deadline || a.stop_file.as_ref().is_some_and(|f| f.exists()))
        {
            break;
        }
        let good = a.bad_every == 0 || seq % a.bad_every != a.bad_every - 1;
        let user = seq % a.users.max(1);
        let (http, url, tx) = (http.clone(), url.clone(), tx.clone());
        tokio::spawn(async move {
            let _ = tx.send(attempt(http, url, seq, good, user).await);
        });
        seq += 1;
    }
    drop(tx);
    let mut all = Vec::with_capacity(seq as usize);
    while let Some(r) = rx.recv().await {
        all.push(r);
    }
    all.sort_by_key(|r| r.seq);
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(&a.out).with_context(|| format!("creating {}", a.out.display()))?,
    );
    writeln!(w, "seq,sent_ns,good,status,ok,latency_us,id")?;
    for r in &all {
        writeln!(
            w,
            "{},{},{},{},{},{},{}",
            r.seq,
            r.sent_ns,
            u8::from(r.good),
            r.status,
            u8::from(r.ok),
            r.latency_us,
            r.id.map(|i| i.to_string()).unwrap_or_default()
        )?;
    }
    w.flush()?;
    eprintln!(
        "load: {} attempts written to {}",
        all.len(),
        a.out.display()
    );
    Ok(())
}
