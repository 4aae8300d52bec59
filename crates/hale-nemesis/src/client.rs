//! The harness's view of the cluster, from inside the bridge namespace:
//! an observer polling every agent's `GET /v1/roles/db/primary` (as a load
//! balancer would), a poller of every agent's `GET /v1/events` (death
//! verdicts), and client workers that write through whichever register the
//! observer last saw named primary, each keeping its target until a write
//! fails or a second passes (as real clients cache), and sticky writers
//! that keep theirs until a write fails (a connection pool that never
//! looks again: what keeps writing to an old primary nobody fenced),
//! recording every request and answer on the shared clock.

use std::collections::{BTreeMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::clock::now_ns;
use crate::cluster::{api_addr, register_addr};
use crate::history::{Death, Op, Outcome, PrimarySample};
use crate::register::{WriteAnswer, WriteBody};

/// What the tasks share with the harness.
#[derive(Debug, Default)]
pub struct Shared {
    /// Each agent's start count (the harness bumps it on a restart; the
    /// event poller starts over from sequence 0).
    pub generations: Vec<u64>,
    /// Who each agent last said about itself: (primary?, epoch).
    pub last: Vec<Option<(bool, Option<u64>)>>,
    /// Recorded primary answer changes.
    pub primaries: Vec<PrimarySample>,
    /// Recorded deaths.
    pub deaths: Vec<Death>,
    /// Recorded writes.
    pub ops: Vec<Op>,
}

impl Shared {
    /// The agent that last said it is primary with the highest epoch.
    pub fn primary(&self) -> Option<(usize, u64)> {
        self.last
            .iter()
            .enumerate()
            .filter_map(|(i, l)| match l {
                Some((true, e)) => Some((i, e.unwrap_or(0))),
                _ => None,
            })
            .max_by_key(|&(_, e)| e)
    }
}

/// The handle the harness keeps on the tasks.
#[derive(Clone)]
pub struct Client {
    /// The shared state.
    pub shared: Arc<Mutex<Shared>>,
    stop: Arc<AtomicBool>,
    http: reqwest::Client,
    ips: Arc<Vec<Ipv4Addr>>,
    names: Arc<Vec<String>>,
}

/// Locks the shared state (a panicked holder's writes are kept).
pub(crate) fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Client {
    /// A client of the agents at `ips` named `names`.
    pub fn new(ips: Vec<Ipv4Addr>, names: Vec<String>) -> Client {
        let n = ips.len();
        let shared = Shared {
            generations: vec![1; n],
            last: vec![None; n],
            ..Shared::default()
        };
        Client {
            shared: Arc::new(Mutex::new(shared)),
            stop: Arc::new(AtomicBool::new(false)),
            http: reqwest::Client::builder()
                .timeout(Duration::from_millis(1000))
                .pool_max_idle_per_host(0)
                .build()
                .unwrap_or_default(),
            ips: Arc::new(ips),
            names: Arc::new(names),
        }
    }

    /// Asks agent `i` for `path` (JSON), with a short timeout.
    pub async fn get(&self, i: usize, path: &str) -> Option<(u16, Value)> {
        let url = format!("http://{}{path}", api_addr(self.ips[i]));
        let r = self
            .http
            .get(url)
            .timeout(Duration::from_millis(500))
            .send()
            .await
            .ok()?;
        let status = r.status().as_u16();
        Some((status, r.json().await.ok()?))
    }

    /// Agent `i`'s view of every member (name → state), if it answers.
    pub async fn members(&self, i: usize) -> Option<BTreeMap<String, String>> {
        let (_, v) = self.get(i, "/v1/members").await?;
        // Members without a name or a state are left out.
        let text = |m: &Value, key: &str| Some(m.get(key)?.as_str()?.to_owned());
        let member = |m: &Value| Some((text(m, "name")?, text(m, "state")?));
        Some(v.as_array()?.iter().filter_map(member).collect())
    }

    /// The control-plane leader's id, as agent `i` knows it.
    pub async fn leader(&self, i: usize) -> Option<u64> {
        let (_, v) = self.get(i, "/v1/roles").await?;
        v.get("leader")?.as_u64()
    }

    /// Starts the observer, the event poller, `workers` writers and
    /// `sticky` sticky writers (numbered after the others).
    pub fn start(&self, workers: u32, sticky: u32) {
        tokio::spawn(self.clone().observe());
        tokio::spawn(self.clone().poll_events());
        let next = Arc::new(AtomicU64::new(1));
        for w in 0..workers + sticky {
            tokio::spawn(self.clone().write_loop(w, w >= workers, next.clone()));
        }
    }

    /// Stops every task.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    async fn observe(self) {
        while !self.stop.load(Ordering::Relaxed) {
            // Asked all at once; the answers are taken in the agents' order.
            let asks: Vec<_> = (0..self.ips.len())
                .map(|i| {
                    let me = self.clone();
                    tokio::spawn(async move { me.get(i, "/v1/roles/db/primary").await })
                })
                .collect();
            let mut answers = Vec::new();
            for ask in asks {
                answers.push(ask.await.ok().flatten());
            }
            let t = now_ns();
            {
                let mut s = lock(&self.shared);
                for (i, a) in answers.into_iter().enumerate() {
                    // An agent that does not answer keeps its last word (a
                    // frozen agent's register may still act on it).
                    let Some((status, v)) = a else { continue };
                    let now = (status == 200, v.get("epoch").and_then(Value::as_u64));
                    if s.last[i] != Some(now) {
                        s.last[i] = Some(now);
                        s.primaries.push(PrimarySample {
                            t,
                            node: self.names[i].clone(),
                            primary: now.0,
                            epoch: now.1,
                        });
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn poll_events(self) {
        let n = self.ips.len();
        let mut since = vec![0u64; n];
        let mut gens = vec![0u64; n];
        let mut seen: HashSet<(usize, u64, u64)> = HashSet::new();
        // When each agent was last asked and answered: what a later answer
        // adds was published after that.
        let mut answered = vec![now_ns(); n];
        while !self.stop.load(Ordering::Relaxed) {
            for i in 0..n {
                let g = lock(&self.shared).generations[i];
                if g != gens[i] {
                    gens[i] = g;
                    since[i] = 0;
                }
                let asked = now_ns();
                let Some((200, v)) = self.get(i, &format!("/v1/events?since={}", since[i])).await
                else {
                    continue;
                };
                let after = std::mem::replace(&mut answered[i], asked);
                let t = now_ns();
                for e in v.as_array().into_iter().flatten() {
                    let seq = e.get("seq").and_then(Value::as_u64).unwrap_or(0);
                    since[i] = since[i].max(seq);
                    if e.get("kind").and_then(Value::as_str) != Some("dead")
                        || !seen.insert((i, g, seq))
                    {
                        continue;
                    }
                    if let Some(m) = e.get("member").and_then(Value::as_str) {
                        let declared_by = e
                            .pointer("/detail/declared_by")
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                        lock(&self.shared).deaths.push(Death {
                            observer: self.names[i].clone(),
                            member: m.to_owned(),
                            seen_ns: t,
                            declared_by,
                            published_after_ns: Some(after),
                        });
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }
    }

    async fn write_loop(self, worker: u32, sticky: bool, next: Arc<AtomicU64>) {
        let mut target: Option<(usize, Instant)> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let stale = |since: Instant| !sticky && since.elapsed() > Duration::from_secs(1);
            if target.is_none_or(|(_, since)| stale(since)) {
                target = lock(&self.shared)
                    .primary()
                    .map(|(i, _)| (i, Instant::now()));
            }
            let Some((i, _)) = target else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let value = next.fetch_add(1, Ordering::Relaxed);
            let addr: SocketAddr = register_addr(self.ips[i]);
            let invoke_ns = now_ns();
            let sent = self
                .http
                .post(format!("http://{addr}/write"))
                .json(&WriteBody {
                    value,
                    client: worker,
                })
                .send()
                .await;
            let outcome = match sent {
                Err(e) => Outcome::Unknown(e.to_string()),
                Ok(r) => match r.json::<WriteAnswer>().await {
                    Ok(a) if a.ok => Outcome::Ack { epoch: a.epoch },
                    Ok(a) => Outcome::Refused(a.error.unwrap_or_default()),
                    Err(e) => Outcome::Unknown(e.to_string()),
                },
            };
            let failed = !matches!(outcome, Outcome::Ack { .. });
            lock(&self.shared).ops.push(Op {
                client: worker,
                value,
                node: self.names[i].clone(),
                invoke_ns,
                complete_ns: now_ns(),
                outcome,
            });
            if failed {
                target = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
            } else {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
