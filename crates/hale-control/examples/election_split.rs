//! Host-death trials of a three-server control plane, to count how long the
//! two survivors take to elect a new leader and grant the dead host's role
//! to a standby, and to show *how* each election went (every survivor's
//! campaigns and votes).
//!
//! Each trial starts three fresh servers on loopback, each on a Tokio
//! runtime of its own (one worker thread), so that each has its own timer
//! wheel, as separate processes do; bootstraps them; grants role `db` to a
//! holder on the leader's host, which renews it every 500 ms; kills that
//! host at a random point of the renewal period (its runtime is shut down:
//! every task, connection and listener of the server goes at once, as with
//! SIGKILL); then times, from the kill:
//!
//! * `leader`: until a survivor becomes leader (from openraft's metrics);
//! * `primary`: until a standby on the lower-numbered survivor, asking its
//!   own server every 100 ms, is granted the role (bounded below by the
//!   2 s lease since the dead holder's last renewal).
//!
//! A trial that gets no leader within `--deadline-secs` is a failure. Every
//! trial whose survivors campaigned more than once in all is printed with
//! its timeline (milliseconds from the kill): `c` a campaign (the server
//! voted for itself in a new term), `v` a vote granted to another, `L`
//! leader.
//!
//! ```text
//! cargo run -p hale-control --release --example election_split -- \
//!     [--trials 200] [--deadline-secs 30] [--seed N] [--quiet]
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hale_control::raft::{ControlError, ControlPlane};
use hale_control::{ControlAuth, LeaseRequest, LeaseResponse, LeaseTiming};
use hale_keyring::{Key, Keyring};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use tokio::runtime::Runtime;

/// What one server's metrics said, and when.
#[derive(Debug, Clone)]
struct Event {
    at: Instant,
    id: u64,
    term: u64,
    voted_for: Option<u64>,
    committed: bool,
    leader: bool,
}

type Timeline = Arc<Mutex<Vec<Event>>>;

/// A control-plane server with the runtime it runs on.
struct Host {
    id: u64,
    addr: SocketAddr,
    cp: ControlPlane,
    rt: Option<Runtime>,
}

struct Options {
    trials: usize,
    deadline: Duration,
    seed: u64,
    quiet: bool,
}

/// The outcome of one trial.
struct Trial {
    /// From the kill until a survivor became leader, if one did.
    leader: Option<Duration>,
    /// From the kill until the standby was granted the role, if it was.
    primary: Option<Duration>,
    /// Campaigns by the survivors after the kill, before the new leader.
    campaigns: usize,
}

fn main() {
    let opts = parse_args();
    let key = Key::generate();
    let driver = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(opts.seed);
    println!(
        "# election_split: {} trials, deadline {:?}, seed {}",
        opts.trials, opts.deadline, opts.seed
    );
    let mut results = Vec::new();
    for i in 0..opts.trials {
        match trial(i, &opts, &key, &driver, &mut rng) {
            Ok(t) => results.push(t),
            Err(e) => println!("trial {i}: setup failed ({e}); not counted"),
        }
    }
    summarize(&results, &opts);
}

fn parse_args() -> Options {
    let mut o = Options {
        trials: 200,
        deadline: Duration::from_secs(30),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        quiet: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{a} needs a number"))
        };
        match a.as_str() {
            "--trials" => o.trials = value() as usize,
            "--deadline-secs" => o.deadline = Duration::from_secs(value()),
            "--seed" => o.seed = value(),
            "--quiet" => o.quiet = true,
            other => panic!("unknown argument {other}"),
        }
    }
    o
}

fn start_host(id: u64, dir: &Path, key: &Key, timeline: &Timeline) -> Result<Host, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(format!("cp{id}"))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let auth = ControlAuth::sealed(Keyring::new(key.clone(), vec![]));
    let store = dir.join(format!("s{id}"));
    let (cp, addr) = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let cp = ControlPlane::start(id, &store, LeaseTiming::default(), auth)
            .await
            .map_err(|e| e.to_string())?;
        let app = cp.routes();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let mut rx = cp.raft_metrics();
        let tl = timeline.clone();
        tokio::spawn(async move {
            loop {
                let ev = {
                    let m = rx.borrow_and_update();
                    Event {
                        at: Instant::now(),
                        id,
                        term: m.vote.leader_id().term,
                        voted_for: m.vote.leader_id().voted_for(),
                        committed: m.vote.is_committed(),
                        leader: m.state == openraft::ServerState::Leader,
                    }
                };
                {
                    let mut tl = tl.lock().expect("timeline lock");
                    let same = tl.iter().rev().find(|e| e.id == id).is_some_and(|e| {
                        (e.term, e.voted_for, e.committed, e.leader)
                            == (ev.term, ev.voted_for, ev.committed, ev.leader)
                    });
                    if !same {
                        tl.push(ev);
                    }
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
        Ok::<_, String>((cp, addr))
    })?;
    Ok(Host {
        id,
        addr,
        cp,
        rt: Some(rt),
    })
}

/// Polls `f` every `every` until it gives a value or `limit` passes.
async fn poll<T>(limit: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// Asks `cp` for `role` on behalf of `holder` every 100 ms until granted.
async fn acquire(cp: &ControlPlane, role: &str, holder: &str, limit: Duration) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match cp.acquire(role, holder, 0, 0).await {
            Ok(LeaseResponse::Granted { epoch }) => return Some(epoch),
            Ok(_)
            | Err(
                ControlError::NotYet(_)
                | ControlError::NoLeader
                | ControlError::Unavailable(_)
                | ControlError::Request(_),
            ) => {}
            Err(_) => return None,
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn trial(
    i: usize,
    opts: &Options,
    key: &Key,
    driver: &Runtime,
    rng: &mut Xoshiro256PlusPlus,
) -> Result<Trial, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let timeline: Timeline = Arc::default();
    let mut hosts = Vec::new();
    for id in 1..=3 {
        hosts.push(start_host(id, dir.path(), key, &timeline)?);
    }
    let members: BTreeMap<u64, SocketAddr> = hosts.iter().map(|h| (h.id, h.addr)).collect();
    let phase = Duration::from_millis(rng.random_range(0..500));
    let result = driver.block_on(async {
        hosts[0]
            .cp
            .bootstrap(members)
            .await
            .map_err(|e| e.to_string())?;
        let leader = poll(Duration::from_secs(10), Duration::from_millis(10), || {
            let l = hosts[0].cp.leader()?;
            hosts.iter().all(|h| h.cp.leader() == Some(l)).then_some(l)
        })
        .await
        .ok_or("no first leader")?;
        let lh = &hosts[(leader - 1) as usize];
        let holder = format!("h{leader}");
        let epoch = acquire(&lh.cp, "db", &holder, Duration::from_secs(10))
            .await
            .ok_or("the first grant")?;
        // Two renewals 500 ms apart, then the fault at a random point of
        // the next renewal period.
        let renew = LeaseRequest::Renew {
            role: "db".into(),
            holder: holder.clone(),
            epoch,
            mark: None,
        };
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            lh.cp
                .write(renew.clone())
                .await
                .map_err(|e| e.to_string())?;
        }
        tokio::time::sleep(phase).await;
        Ok::<u64, String>(leader)
    });
    let dead = match result {
        Ok(l) => l,
        Err(e) => {
            shut_down(hosts);
            return Err(e);
        }
    };
    // The kill.
    let dead_rt = hosts[(dead - 1) as usize].rt.take().expect("its runtime");
    let killed = Instant::now();
    dead_rt.shutdown_background();
    let survivors: Vec<&Host> = hosts.iter().filter(|h| h.id != dead).collect();
    let standby = survivors[0];
    let holder = format!("h{}", standby.id);
    let tl = timeline.clone();
    let (leader, primary) = driver.block_on(async {
        let leader = async {
            poll(opts.deadline, Duration::from_millis(5), || {
                tl.lock()
                    .expect("timeline lock")
                    .iter()
                    .find(|e| e.at > killed && e.id != dead && e.leader)
                    .map(|e| e.at - killed)
            })
            .await
        };
        let primary = async {
            acquire(&standby.cp, "db", &holder, opts.deadline)
                .await
                .map(|_| killed.elapsed())
        };
        tokio::join!(leader, primary)
    });
    let events: Vec<Event> = timeline
        .lock()
        .expect("timeline lock")
        .iter()
        .filter(|e| e.at > killed && e.id != dead)
        .cloned()
        .collect();
    let campaigns = events
        .iter()
        .filter(|e| {
            e.voted_for == Some(e.id) && !e.committed && leader.is_none_or(|l| e.at - killed <= l)
        })
        .count();
    let ms = |d: Option<Duration>| d.map_or("none".to_owned(), |d| d.as_millis().to_string());
    println!(
        "trial {i}: dead {dead} leader_ms {} primary_ms {} campaigns {campaigns}",
        ms(leader),
        ms(primary)
    );
    if !opts.quiet && (campaigns > 1 || leader.is_none()) {
        for h in &survivors {
            let line: Vec<String> = events
                .iter()
                .filter(|e| e.id == h.id)
                .map(|e| {
                    let t = (e.at - killed).as_millis();
                    let what = if e.leader {
                        "L".to_owned()
                    } else if e.voted_for == Some(e.id) && !e.committed {
                        "c".to_owned()
                    } else if e.committed {
                        format!("f{}", e.voted_for.unwrap_or(0))
                    } else {
                        format!("v{}", e.voted_for.unwrap_or(0))
                    };
                    format!("{t}:{what}@{}", e.term)
                })
                .take(40)
                .collect();
            println!("    s{}: {}", h.id, line.join(" "));
        }
    }
    shut_down(hosts);
    Ok(Trial {
        leader,
        primary,
        campaigns,
    })
}

fn shut_down(hosts: Vec<Host>) {
    for mut h in hosts {
        if let Some(rt) = h.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn summarize(results: &[Trial], opts: &Options) {
    let n = results.len();
    let show = |name: &str, mut v: Vec<Duration>| {
        v.sort();
        let missing = n - v.len();
        if v.is_empty() {
            println!("{name}: none of {n}");
            return;
        }
        let over = v.iter().filter(|d| **d > Duration::from_secs(5)).count();
        println!(
            "{name}: n {n}  p50 {} ms  p90 {} ms  p99 {} ms  max {} ms  over 5 s {over}  none within {:?} {missing}",
            percentile(&v, 0.5).as_millis(),
            percentile(&v, 0.9).as_millis(),
            percentile(&v, 0.99).as_millis(),
            v[v.len() - 1].as_millis(),
            opts.deadline,
        );
    };
    show("leader", results.iter().filter_map(|t| t.leader).collect());
    show(
        "primary",
        results.iter().filter_map(|t| t.primary).collect(),
    );
    let split = results.iter().filter(|t| t.campaigns > 1).count();
    let mut hist = BTreeMap::new();
    for t in results {
        *hist.entry(t.campaigns).or_insert(0) += 1;
    }
    println!("trials with more than one campaign (a split or a lost vote): {split} of {n}; campaigns before the new leader -> trials: {hist:?}");
}
