//! The fenced register: a tiny stand-in for the database a role protects.
//! One runs in every host's namespace (`hale-nemesis register`).
//!
//! * `POST /promote {"epoch": E}` (the promote hook): primary at epoch `E`.
//! * `POST /fence {"epoch": E}` (the demote hook, and so the watchdog's
//!   fence): no longer primary.
//! * `POST /write {"value": v, "client": c}`: accepted only while primary
//!   at an epoch `P` at least the highest epoch this register has seen;
//!   then replicated synchronously, in parallel, to every other register,
//!   each of which accepts it only if `P` is at least the highest epoch
//!   *it* has seen; once a majority of all registers holds it (this one
//!   and `quorum - 1` others) it is recorded as accepted and acknowledged.
//!   A refusal naming a higher epoch raises this register's and refuses
//!   the write.
//! * `POST /replicate {...}`: a primary's write, epoch-checked as above.
//!
//! Why a majority: it makes the register a sound fenced store on its own
//! (the fencing-token check Kleppmann describes), whatever hale does. A
//! write at epoch `e` whose checks all pass after a write at `e' > e` was
//! accepted would need a majority that all passed `e` after one majority
//! had seen `e'`; two majorities share a register, whose check refuses.
//! So a resumed old primary that hale could not fence (its agent and
//! watchdog frozen while the database runs) is refused here, and a
//! register that skips the check (the planted bug) is caught by (a).
//! With a single replica, the old primary's replica may never have seen
//! the new epoch.
//!
//! Every change is appended to a JSON-lines log and `fsync`ed before it is
//! answered, timestamped on the shared clock ([`crate::clock`]). The
//! highest epoch seen is recovered from the log at start. With
//! `skip_epoch_check` (planted bug) both epoch checks are skipped.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::clock::now_ns;
use crate::history::read_log;

/// What can stop a register from serving.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// Its log could not be opened or read.
    #[error("register log {path}: {source}")]
    Log {
        /// The log's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It could not listen or serve.
    #[error("register on {addr}: {source}")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// One line of a register's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RegisterRecord {
    /// The promote hook made it primary.
    Promote {
        /// Shared-clock time, ns.
        t: u64,
        /// Epoch.
        epoch: u64,
    },
    /// The demote hook fenced it.
    Fence {
        /// Shared-clock time, ns.
        t: u64,
        /// The epoch the hook named.
        epoch: u64,
    },
    /// A write this register accepted as primary (and a majority holds).
    Accepted {
        /// Shared-clock time of this register's epoch check, ns (the
        /// record is written later, once the replicas answered).
        t: u64,
        /// Its primary epoch.
        epoch: u64,
        /// The value written.
        value: u64,
        /// The client that wrote it.
        client: u32,
        /// The registers that hold its copies.
        replicas: Vec<String>,
    },
    /// A copy of another register's write.
    Replica {
        /// Shared-clock time, ns.
        t: u64,
        /// The primary's epoch.
        epoch: u64,
        /// The value.
        value: u64,
        /// The primary.
        from: String,
    },
}

impl RegisterRecord {
    /// The epoch the record carries.
    pub fn epoch(&self) -> u64 {
        match self {
            RegisterRecord::Promote { epoch, .. }
            | RegisterRecord::Fence { epoch, .. }
            | RegisterRecord::Accepted { epoch, .. }
            | RegisterRecord::Replica { epoch, .. } => *epoch,
        }
    }
}

/// How a register runs (the arguments of `hale-nemesis register`).
#[derive(Debug, Clone, clap::Args)]
pub struct RegisterConfig {
    /// This host's node name.
    #[arg(long)]
    pub node: String,
    /// Where to listen.
    #[arg(long)]
    pub listen: SocketAddr,
    /// The durable log.
    #[arg(long)]
    pub log: PathBuf,
    /// Every other register, `name=addr` (a write needs a majority of
    /// them and this one).
    #[arg(long = "peer", value_name = "PEER", value_parser = peer)]
    pub peers: Vec<(String, SocketAddr)>,
    /// Planted bug: accept any epoch.
    #[arg(long)]
    pub skip_epoch_check: bool,
}

impl RegisterConfig {
    /// How many copies make a write accepted, this register's included: a
    /// majority of all registers.
    pub fn quorum(&self) -> usize {
        let registers = self.peers.len() + 1;
        registers / 2 + 1
    }
}

/// A `--peer`: `name=addr`.
fn peer(text: &str) -> Result<(String, SocketAddr), Box<dyn std::error::Error + Send + Sync>> {
    let (name, addr) = text.split_once('=').ok_or("--peer name=addr")?;
    Ok((name.to_owned(), addr.parse()?))
}

/// A body of `POST /promote` and `/fence`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EpochBody {
    /// The epoch.
    pub epoch: u64,
}

/// A body of `POST /write`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriteBody {
    /// The value (unique per run).
    pub value: u64,
    /// The client.
    pub client: u32,
}

/// A body of `POST /replicate`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicateBody {
    /// The primary's node.
    pub from: String,
    /// Its epoch.
    pub epoch: u64,
    /// The value.
    pub value: u64,
}

/// The answer to a write or replication.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WriteAnswer {
    /// Accepted.
    pub ok: bool,
    /// The epoch it was accepted at (or this register's highest, refused).
    pub epoch: u64,
    /// Why it was refused, if it was.
    pub error: Option<String>,
}

struct Inner {
    highest: u64,
    primary: Option<u64>,
    log: std::fs::File,
    /// The log's length after the last whole record.
    len: u64,
}

struct Reg {
    cfg: RegisterConfig,
    inner: Mutex<Inner>,
    http: reqwest::Client,
    /// Set by a fence the moment it arrives, cleared by a promote: a fence
    /// never waits behind writes in flight (they wait for replicas while
    /// holding `inner`), and a write in flight when it arrived is refused,
    /// as a killed database fails its open transactions.
    fenced: AtomicBool,
}

impl Inner {
    /// Takes a promote or a copy at `epoch`: refused if a higher epoch was
    /// seen (unless the epoch check is skipped), else `record(now)` logged and
    /// `epoch` learnt.
    fn take(
        &mut self,
        cfg: &RegisterConfig,
        epoch: u64,
        record: impl FnOnce(u64) -> RegisterRecord,
    ) -> Result<(), Answer> {
        if !cfg.skip_epoch_check && epoch < self.highest {
            return Err(refuse(StatusCode::CONFLICT, self.highest, "stale epoch"));
        }
        if let Err(e) = self.append(&record(now_ns())) {
            let why = e.to_string();
            return Err(refuse(StatusCode::INSUFFICIENT_STORAGE, self.highest, &why));
        }
        self.highest = self.highest.max(epoch);
        Ok(())
    }

    fn append(&mut self, rec: &RegisterRecord) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let done = self
            .log
            .write_all(&line)
            .and_then(|()| self.log.sync_data());
        match done {
            Ok(()) => {
                self.len += line.len() as u64;
                Ok(())
            }
            Err(e) => {
                // A full disk may have taken part of the line: cut it off,
                // or the next record would be glued to it and lost.
                let _ = self.log.set_len(self.len);
                Err(e)
            }
        }
    }
}

type Answer = (StatusCode, Json<WriteAnswer>);

fn refuse(status: StatusCode, epoch: u64, why: &str) -> Answer {
    let body = WriteAnswer {
        ok: false,
        epoch,
        error: Some(why.to_owned()),
    };
    (status, Json(body))
}

fn accept(epoch: u64) -> Answer {
    let body = WriteAnswer {
        ok: true,
        epoch,
        error: None,
    };
    (StatusCode::OK, Json(body))
}

async fn promote(State(r): State<Arc<Reg>>, Json(b): Json<EpochBody>) -> Answer {
    let mut s = r.inner.lock().await;
    let rec = |t| RegisterRecord::Promote { t, epoch: b.epoch };
    if let Err(refused) = s.take(&r.cfg, b.epoch, rec) {
        return refused;
    }
    s.primary = Some(b.epoch);
    r.fenced.store(false, Ordering::SeqCst);
    accept(b.epoch)
}

async fn fence(State(r): State<Arc<Reg>>, Json(b): Json<EpochBody>) -> Answer {
    // In force at once; recorded once the writes in flight are done.
    r.fenced.store(true, Ordering::SeqCst);
    let t = now_ns();
    let reg = r.clone();
    tokio::spawn(async move {
        let mut s = reg.inner.lock().await;
        // Fenced in memory first: a full disk must not keep it primary.
        if reg.fenced.load(Ordering::SeqCst) {
            s.primary = None;
        }
        let _ = s.append(&RegisterRecord::Fence { t, epoch: b.epoch });
    });
    accept(b.epoch)
}

async fn replicate(State(r): State<Arc<Reg>>, Json(b): Json<ReplicateBody>) -> Answer {
    let mut s = r.inner.lock().await;
    let rec = |t| RegisterRecord::Replica {
        t,
        epoch: b.epoch,
        value: b.value,
        from: b.from,
    };
    if let Err(refused) = s.take(&r.cfg, b.epoch, rec) {
        return refused;
    }
    accept(b.epoch)
}

async fn write(State(r): State<Arc<Reg>>, Json(b): Json<WriteBody>) -> Answer {
    // Held throughout: a fence or a higher epoch waits for a write in flight.
    let mut s = r.inner.lock().await;
    let Some(epoch) = s.primary.filter(|_| !r.fenced.load(Ordering::SeqCst)) else {
        return refuse(StatusCode::SERVICE_UNAVAILABLE, s.highest, "not primary");
    };
    if !r.cfg.skip_epoch_check && epoch < s.highest {
        return refuse(StatusCode::CONFLICT, s.highest, "fenced by a higher epoch");
    }
    let checked = now_ns();
    let body = ReplicateBody {
        from: r.cfg.node.clone(),
        epoch,
        value: b.value,
    };
    let mut asks = tokio::task::JoinSet::new();
    for (name, addr) in r.cfg.peers.clone() {
        let (http, body) = (r.http.clone(), body.clone());
        asks.spawn(async move {
            let sent = http
                .post(format!("http://{addr}/replicate"))
                .json(&body)
                .send()
                .await
                .ok()?;
            Some((name, sent.json::<WriteAnswer>().await.ok()?))
        });
    }
    let need = r.cfg.quorum().saturating_sub(1);
    let mut replicas = Vec::new();
    while replicas.len() < need {
        let Some(joined) = asks.join_next().await else {
            break;
        };
        let Ok(Some((name, ans))) = joined else {
            continue;
        };
        if ans.ok {
            replicas.push(name);
        } else if ans.epoch > s.highest && !r.cfg.skip_epoch_check {
            s.highest = ans.epoch;
            return refuse(
                StatusCode::CONFLICT,
                s.highest,
                "a replica has seen a higher epoch",
            );
        }
    }
    // The slower copies still land (or not); the write does not wait.
    asks.detach_all();
    if replicas.len() < need {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            s.highest,
            "no majority of replicas answered",
        );
    }
    if r.fenced.load(Ordering::SeqCst) {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            s.highest,
            "fenced during the write",
        );
    }
    let rec = RegisterRecord::Accepted {
        t: checked,
        epoch,
        value: b.value,
        client: b.client,
        replicas,
    };
    if let Err(e) = s.append(&rec) {
        return refuse(StatusCode::INSUFFICIENT_STORAGE, s.highest, &e.to_string());
    }
    accept(epoch)
}

/// The register's state for the harness: `(highest epoch seen, primary epoch)`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegisterState {
    /// Highest epoch seen.
    pub highest: u64,
    /// Primary at this epoch, if primary.
    pub primary: Option<u64>,
}

async fn state(State(r): State<Arc<Reg>>) -> Json<RegisterState> {
    let s = r.inner.lock().await;
    Json(RegisterState {
        highest: s.highest,
        primary: s.primary,
    })
}

/// Serves a register until the process is killed. Not primary at start
/// (a restarted database waits for its promote hook).
pub async fn serve(cfg: RegisterConfig) -> Result<(), RegisterError> {
    let log_err = |source| RegisterError::Log {
        path: cfg.log.clone(),
        source,
    };
    let highest = read_log::<RegisterRecord>(&cfg.log)
        .iter()
        .map(RegisterRecord::epoch)
        .max()
        .unwrap_or(0);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&cfg.log)
        .map_err(log_err)?;
    // Whole records only: a torn last line (killed mid-write) is cut off.
    let text = std::fs::read(&cfg.log).map_err(log_err)?;
    let len = text
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i as u64 + 1);
    log.set_len(len).map_err(log_err)?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(400))
        .build()
        .map_err(|e| log_err(std::io::Error::other(e)))?;
    let addr = cfg.listen;
    let reg = Arc::new(Reg {
        fenced: AtomicBool::new(false),
        cfg,
        inner: Mutex::new(Inner {
            highest,
            primary: None,
            log,
            len,
        }),
        http,
    });
    let app = Router::new()
        .route("/promote", post(promote))
        .route("/fence", post(fence))
        .route("/write", post(write))
        .route("/replicate", post(replicate))
        .route("/state", get(state))
        .with_state(reg);
    let serve_err = |source| RegisterError::Serve { addr, source };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(serve_err)?;
    axum::serve(listener, app).await.map_err(serve_err)
}
