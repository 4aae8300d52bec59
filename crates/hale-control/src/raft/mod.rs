//! The replicated control plane: openraft over HTTP, with a durable redb
//! store, ordering [`LeaseRequest`]s. The leader runs the [`Grantor`]: a
//! role changes hands only when the grantor allows it on the leader's own
//! monotonic clock: one full lease after the last grant or renewal of the
//! role appended to its own log (see [`crate::lease`] for why that covers a
//! newly elected leader too).
//! No consensus code of our own: openraft does elections and replication.

pub mod api;
mod batch;
mod client;
pub mod format;
mod network;
pub mod prevote;
mod routes;
mod runtime;
mod store;
mod types;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Raft, RaftMetrics};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use hale_seal::{CallError, Target};

use crate::auth::ControlAuth;
use crate::lease::{
    resume_check, AppendClock, GrantDelay, Grantor, LeaseRequest, LeaseResponse, LeaseTable,
    LeaseTiming, ResumeRefused,
};
use crate::protocol::{self, Spoken, Unadmitted, OLDEST_PROTOCOL, PROTOCOL};
use hale_core::Time;

pub use api::{AddServer, Refusal, ServerChange};
pub use client::ControlClient;
pub use network::{raft_routes, Network};
pub use store::{open_db, DiskStall, LogStore, StateData, StateMachine};
pub use types::TypeConfig;

/// An error from below (the store, openraft), kept as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a control-plane operation failed. The lease table is unchanged
/// unless the variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The store is held open by another server of this process (one
    /// stopping: try again in a moment).
    #[error("the control-plane store in {0} is in use")]
    StoreInUse(PathBuf),
    /// The store could not be opened.
    #[error("cannot open the control-plane store: {0}")]
    Store(#[source] BoxError),
    /// Raft refused to start.
    #[error("cannot start raft: {0}")]
    Start(#[source] BoxError),
    /// No leader is known (election in progress, or no quorum).
    #[error("no control-plane leader right now")]
    NoLeader,
    /// This server cannot serve the request now, though another may: its
    /// Raft has stopped (a failed storage write), or the leader it
    /// forwards to did not answer. Nothing was written.
    #[error("this control-plane server cannot serve it now: {0}")]
    Unavailable(String),
    /// The leader could not be reached or failed the request.
    #[error("control-plane request failed: {0}")]
    Request(String),
    /// The grantor will not hand the role over yet.
    #[error("not yet: {0}")]
    NotYet(GrantDelay),
    /// The request needs a newer control-plane protocol than a server on
    /// its way speaks (the leader: than every server speaks; see
    /// [`crate::protocol`]). Nothing was written.
    #[error(
        "the request needs control-plane protocol {needs}, but a server on its way speaks only \
         up to {speaks}"
    )]
    TooNew {
        /// The protocol the request needs.
        needs: u16,
        /// The newest protocol the server (the leader: every server) speaks.
        speaks: u16,
    },
    /// The leader refuses to resume a role ([`crate::lease::resume_check`]).
    #[error("{0}")]
    Resume(ResumeRefused),
}

impl ControlError {
    /// Whether a client should ask another server instead (answered with
    /// HTTP 503, which [`hale_seal::call`] reports as a refusal, not an
    /// answer). A leader's decision, such as [`ControlError::NotYet`], is
    /// an answer: every server would forward to the same leader.
    pub fn ask_another(&self) -> bool {
        matches!(self, ControlError::NoLeader | ControlError::Unavailable(_))
    }
}

use crate::election::{ELECTION_TIMEOUT_MAX, ELECTION_TIMEOUT_MIN, HEARTBEAT};

/// One control-plane server.
#[derive(Clone)]
pub struct ControlPlane {
    /// This server's id.
    pub id: u64,
    raft: Raft<TypeConfig>,
    sm: StateMachine,
    grantor: Arc<Mutex<Option<Grantor>>>,
    appends: Arc<Mutex<AppendClock>>,
    timing: LeaseTiming,
    origin: Instant,
    client: reqwest::Client,
    auth: ControlAuth,
    /// The protocol this server speaks ([`PROTOCOL`] unless pinned lower).
    speaks: u16,
    /// What the other servers were last heard to speak.
    spoken: Spoken,
    /// When this server last heard from a leader (see [`prevote`]).
    contact: prevote::Contact,
    /// A reader of this server's log (its last log id, for pre-votes).
    log: LogStore,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("id", &self.id)
            .finish()
    }
}

/// A control-plane server's own view: its role in Raft, the log, and
/// whether its storage still works.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlStatus {
    /// This server's id.
    pub id: u64,
    /// `leader`, `follower`, `candidate`, `learner`, or `stopped` (its Raft
    /// has stopped, e.g. on a storage error).
    pub state: ControlState,
    /// The leader it knows of.
    pub leader: Option<u64>,
    /// The Raft term.
    pub term: u64,
    /// The last log index in its log.
    pub last_log_index: Option<u64>,
    /// The last index applied to its lease table.
    pub applied_index: Option<u64>,
    /// The last index its snapshot covers.
    pub snapshot_index: Option<u64>,
    /// The voters of the membership it knows.
    pub voters: Vec<u64>,
    /// Why its Raft stopped, if it did (a failed storage write: disk full).
    pub storage_error: Option<String>,
    /// The newest control-plane protocol it speaks ([`PROTOCOL`];
    /// 1 for a server of the previous release, which does not say).
    #[serde(default = "protocol_1")]
    pub protocol: u16,
    /// On the leader: the newest protocol every server speaks, as it last
    /// heard each of them answer (a server not heard from counts as 1);
    /// log entries that need a newer one are not written. `None`
    /// elsewhere.
    #[serde(default)]
    pub common_protocol: Option<u16>,
    /// On the leader: whether its churn breaker is open (the control plane
    /// was unstable lately: a run-out role goes back to its living holder;
    /// see [`crate::lease::breaker`]). False elsewhere, and from servers
    /// before 0.3.0.
    #[serde(default)]
    pub churn_breaker: bool,
}

fn protocol_1() -> u16 {
    OLDEST_PROTOCOL
}

pub use crate::lease::AcquireRequest;

hale_core::named_enum! {
    /// A control-plane server's Raft state (`leader`, `follower`, `candidate`,
    /// `learner`, `stopped`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum ControlState {
        /// It leads: it grants leases.
        Leader => "leader",
        /// It follows a leader.
        Follower => "follower",
        /// It is standing for election.
        Candidate => "candidate",
        /// It replicates but does not vote.
        Learner => "learner",
        /// Its Raft has stopped (a storage error, or shut down).
        Stopped => "stopped",
    }
}

impl ControlPlane {
    /// Opens the store in `data_dir` and starts a server with id `id`,
    /// authenticating its traffic per `auth` (see [`crate::auth`]).
    /// Serve [`ControlPlane::routes`] on the address peers know it by.
    /// A store of the previous format is migrated, one of a newer format
    /// refused ([`format`](mod@format)).
    pub async fn start(
        id: u64,
        data_dir: &Path,
        timing: LeaseTiming,
        auth: ControlAuth,
    ) -> Result<ControlPlane, ControlError> {
        Self::start_speaking(id, data_dir, timing, auth, PROTOCOL).await
    }

    /// [`ControlPlane::start`] for a server that speaks at most protocol
    /// `speaks` on the wire (clamped to what this build speaks): at 1 it
    /// asks and answers exactly in the previous release's form, says no
    /// version, and refuses nothing as too new. For tests of clusters that
    /// mix releases; what it decodes and applies is still this build's.
    pub async fn start_speaking(
        id: u64,
        data_dir: &Path,
        timing: LeaseTiming,
        auth: ControlAuth,
        speaks: u16,
    ) -> Result<ControlPlane, ControlError> {
        let speaks = speaks.clamp(OLDEST_PROTOCOL, PROTOCOL);
        if matches!(auth, ControlAuth::InsecurePlaintext) {
            tracing::warn!(
                server = id,
                "CONTROL PLANE NOT AUTHENTICATED (insecure_plaintext = true): anyone who can \
                 reach this server's port can take roles, fence holders and change voters"
            );
        }
        let db = open_db(data_dir).map_err(|e| match e {
            format::StoreError::InUse(_) => ControlError::StoreInUse(data_dir.to_path_buf()),
            e => ControlError::Store(e.into()),
        })?;
        let origin = Instant::now();
        let grantor: Arc<Mutex<Option<Grantor>>> = Arc::new(Mutex::new(None));
        let g = grantor.clone();
        let hook: store::ApplyHook = Arc::new(move |req, resp| {
            if let (
                LeaseRequest::Release {
                    role,
                    next: Some(next),
                    ..
                },
                LeaseResponse::Released,
            ) = (req, resp)
            {
                if let Some(gr) = g.lock().expect("grantor lock").as_mut() {
                    gr.prefer(role, next, since(origin));
                }
            }
        });
        // Every server notes when it appended each grant or renewal (and
        // when a snapshot brought entries it never appended); the leader's
        // grantor reads this clock. Lock order: grantor, then appends.
        let appends = Arc::new(Mutex::new(AppendClock::new(since(origin))));
        let a = appends.clone();
        let on_append: store::AppendHook = Arc::new(move |req| {
            let now = since(origin);
            let mut a = a.lock().expect("appends lock");
            match req {
                Some(req) => a.appended(req, now),
                None => a.unknown_before(now),
            }
        });
        let sm = StateMachine::new(db.clone(), Some(hook), Some(on_append.clone()))
            .map_err(|e| ControlError::Store(e.into()))?;
        // Elections cannot split for ever: the pre-vote driver draws a new
        // campaign timeout after every round, and without the
        // `single-term-leader` feature openraft orders votes by term and
        // then by candidate id, so of two candidates in one term the
        // lower-numbered grants the higher (tests/elections.rs). Do not
        // turn that feature on.
        let config = openraft::Config {
            cluster_name: "hale".into(),
            heartbeat_interval: HEARTBEAT.as_millis() as u64,
            election_timeout_min: ELECTION_TIMEOUT_MIN.as_millis() as u64,
            election_timeout_max: ELECTION_TIMEOUT_MAX.as_millis() as u64,
            // Chunks well under the authenticated body cap, JSON included.
            snapshot_max_chunk_size: 512 << 10,
            // The log on disk stays bounded: a snapshot (the lease table,
            // ~60 KB at 1,000 roles) every 1,000 entries, 100 kept behind
            // it for followers that lag. An entry holds one agent's batch
            // (a few KB at 1,000 roles), so the log stays under ~5 MB.
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(1000),
            // openraft sends up to 300 entries in one append: a follower
            // that fell behind (a burst of grants, a loaded host) got
            // catch-up appends of hundreds of batch entries that could not
            // arrive within an append's timeout (one heartbeat then; now
            // `RPC_TIMEOUT_FLOOR`), so it never caught up and commits
            // stalled (1,000 roles, 3 agents: elections, every lease
            // lost). Small appends catch up.
            max_payload_entries: 16,
            max_in_snapshot_log_to_keep: 100,
            purge_batch_size: 256,
            // Elections are hale's: a server campaigns only after a
            // pre-vote a majority granted (`prevote.rs`).
            enable_elect: false,
            ..Default::default()
        };
        let config = config
            .validate()
            .map_err(|e| ControlError::Start(e.into()))?;
        let log = LogStore::new(db, Some(on_append));
        let log_reader = log.clone();
        let spoken = Spoken::persisted(data_dir);
        let network = Network::new(auth.clone(), speaks, spoken.clone());
        let raft = Raft::new(id, Arc::new(config), network.clone(), log, sm.clone())
            .await
            .map_err(|e| ControlError::Start(e.into()))?;
        let contact = prevote::Contact::new();
        prevote::Driver {
            id,
            raft: raft.clone(),
            contact: contact.clone(),
            network,
            log: log_reader.clone(),
        }
        .spawn();
        let cp = ControlPlane {
            id,
            raft,
            sm,
            grantor,
            appends,
            timing,
            origin,
            client: reqwest::Client::new(),
            auth,
            speaks,
            spoken,
            contact,
            log: log_reader,
        };
        cp.watch_leadership();
        Ok(cp)
    }

    /// Makes every durable write of this server's Raft log and vote take
    /// `extra` longer, as on a disk stalled by another writer (the agent's
    /// `slow-disk` drill); zero restores it.
    pub fn slow_disk(&self, extra: Duration) {
        self.log.stall().set(extra);
    }

    /// While `held`, no durable write of this server's Raft log and vote
    /// finishes, as on a disk that stopped answering (the agent's
    /// `disk-stall` drill).
    pub fn stall_disk(&self, held: bool) {
        self.log.stall().hold(held);
    }

    fn now(&self) -> Time {
        since(self.origin)
    }

    /// Keeps the grantor in step with leadership: a fresh grantor (which
    /// reads this server's append clock) whenever it becomes leader; none
    /// otherwise.
    fn watch_leadership(&self) {
        let mut rx = self.raft.metrics();
        let (id, grantor, timing) = (self.id, self.grantor.clone(), self.timing);
        let origin = self.origin;
        tokio::spawn(async move {
            let mut was_leader = false;
            loop {
                let is_leader = rx.borrow_and_update().current_leader == Some(id);
                if is_leader != was_leader {
                    *grantor.lock().expect("grantor lock") =
                        is_leader.then(|| Grantor::elected_at(timing, since(origin)));
                    was_leader = is_leader;
                }
                if rx.changed().await.is_err() {
                    return;
                }
            }
        });
    }

    /// Makes this server the first member of a new control plane, with
    /// `members` (id → HTTP address) as the voters. Call on one server only.
    pub async fn bootstrap(&self, members: BTreeMap<u64, SocketAddr>) -> Result<(), ControlError> {
        let nodes: BTreeMap<u64, BasicNode> = members
            .into_iter()
            .map(|(id, a)| (id, BasicNode::new(a)))
            .collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(openraft::error::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(ControlError::Start(e.into())),
        }
    }

    /// Adds a server (as a voter) to the control plane. Leader only.
    pub async fn add_server(&self, id: u64, addr: SocketAddr) -> Result<(), ControlError> {
        self.raft
            .add_learner(id, BasicNode::new(addr), true)
            .await
            .map_err(|e| ControlError::Request(e.to_string()))?;
        let mut voters = self.voters();
        voters.insert(id);
        self.raft
            .change_membership(voters, false)
            .await
            .map_err(|e| ControlError::Request(e.to_string()))?;
        Ok(())
    }

    /// The voters of the membership this server knows now.
    fn voters(&self) -> BTreeSet<u64> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }

    /// Removes a server from the control plane. Leader only.
    pub async fn remove_server(&self, id: u64) -> Result<(), ControlError> {
        let mut voters = self.voters();
        voters.remove(&id);
        self.raft
            .change_membership(voters, false)
            .await
            .map_err(|e| ControlError::Request(e.to_string()))?;
        Ok(())
    }

    /// Adds or removes a server through the leader (forwarding if needed).
    pub async fn change_servers(&self, change: ServerChange) -> Result<(), ControlError> {
        if self.leader() != Some(self.id) {
            let (leader, addr) = self.leader_addr().ok_or(ControlError::NoLeader)?;
            let path = change.path();
            let body = (&change.body(), OLDEST_PROTOCOL);
            let res: api::Answer<()> = self.call((leader, &addr), &path, body, 10).await?;
            return res.map_err(|r| ControlError::Request(r.to_string()));
        }
        match change {
            ServerChange::Add(a) => self.add_server(a.id, a.addr).await,
            ServerChange::Remove(id) => self.remove_server(id).await,
        }
    }

    /// The voters of the control plane.
    pub fn servers(&self) -> BTreeMap<u64, String> {
        let m = self.raft.metrics().borrow().clone();
        let mem = m.membership_config.membership();
        mem.voter_ids()
            .filter_map(|id| mem.get_node(&id).map(|n| (id, n.addr.clone())))
            .collect()
    }

    /// What this server knows of itself and the control plane now.
    pub fn status(&self) -> ControlStatus {
        let m = self.raft.metrics().borrow().clone();
        let storage_error = match &m.running_state {
            Err(openraft::error::Fatal::Stopped) | Ok(()) => None,
            Err(e) => Some(e.to_string()),
        };
        use openraft::ServerState;
        let state = match m.state {
            _ if m.running_state.is_err() => ControlState::Stopped,
            ServerState::Leader => ControlState::Leader,
            ServerState::Follower => ControlState::Follower,
            ServerState::Candidate => ControlState::Candidate,
            ServerState::Learner => ControlState::Learner,
            ServerState::Shutdown => ControlState::Stopped,
        };
        ControlStatus {
            id: self.id,
            state,
            // A stopped server's last view of the leader is stale.
            leader: m.current_leader.filter(|_| m.running_state.is_ok()),
            term: m.current_term,
            last_log_index: m.last_log_index,
            applied_index: m.last_applied.map(|l| l.index),
            snapshot_index: m.snapshot.map(|l| l.index),
            voters: m.membership_config.membership().voter_ids().collect(),
            storage_error,
            protocol: self.speaks,
            common_protocol: (m.current_leader == Some(self.id) && m.running_state.is_ok())
                .then(|| self.common_protocol()),
            churn_breaker: self.churn_breaker_open(),
        }
    }

    /// Whether this server leads and its churn breaker is open now
    /// ([`ControlStatus::churn_breaker`], without the rest of the status).
    pub fn churn_breaker_open(&self) -> bool {
        self.grantor
            .lock()
            .expect("grantor lock")
            .as_ref()
            .is_some_and(|g| g.breaker_open(self.now()))
    }

    /// The newest control-plane protocol every server of the membership
    /// (voters and learners) speaks, as this server last heard each of
    /// them answer (a server not heard from yet counts as 1). Meaningful
    /// on the leader, which hears every server with each append.
    pub fn common_protocol(&self) -> u16 {
        let m = self.raft.metrics().borrow().clone();
        let servers = m.membership_config.membership().nodes().map(|(id, _)| *id);
        protocol::common(servers, self.id, self.speaks, &self.spoken.all())
    }

    /// Whether this server, leading, may write a log entry that needs
    /// protocol `needs`: only when every server speaks it
    /// ([`crate::protocol`]'s gate): [`ControlError::TooNew`] when a server
    /// was heard to speak an older one, [`ControlError::Unavailable`]
    /// (retryable) while one has not been heard at all.
    pub fn admits(&self, needs: u16) -> Result<(), ControlError> {
        // Every server speaks the oldest: no need to ask (the hot path).
        if needs <= OLDEST_PROTOCOL {
            return Ok(());
        }
        let m = self.raft.metrics().borrow().clone();
        let servers: Vec<u64> = m
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        protocol::admit_servers(needs, &servers, self.id, self.speaks, &self.spoken.all()).map_err(
            |u| match u {
                Unadmitted::TooNew(t) => ControlError::TooNew {
                    needs: t.needs,
                    speaks: t.common,
                },
                Unadmitted::Unheard { needs, servers } => ControlError::Unavailable(format!(
                    "the entry needs control-plane protocol {needs}, and servers {servers:?} \
                     have not answered this leader yet: retry"
                )),
            },
        )
    }

    /// What each other server was last heard to speak (from its answers).
    pub fn spoken(&self) -> BTreeMap<u64, u16> {
        self.spoken.all()
    }

    /// Resolves with the error when this server's Raft stops on a fatal
    /// error (a storage write failed: disk full, I/O error), or with `None`
    /// when it was shut down. A stopped server sends no heartbeats, so the
    /// others elect a new leader.
    pub async fn stopped(&self) -> Option<String> {
        let mut rx = self.raft.metrics();
        let m = rx.wait_for(|m| m.running_state.is_err()).await.ok()?;
        match &m.running_state {
            Err(openraft::error::Fatal::Stopped) | Ok(()) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// openraft's metrics of this server as they change (term, vote, state,
    /// leader): for diagnostics and benchmarks of elections.
    pub fn raft_metrics(&self) -> tokio::sync::watch::Receiver<RaftMetrics<u64, BasicNode>> {
        self.raft.metrics()
    }

    /// The current leader, if known (never, once this server's Raft has
    /// stopped: its last view is stale).
    pub fn leader(&self) -> Option<u64> {
        let m = self.raft.metrics();
        let m = m.borrow();
        m.current_leader.filter(|_| m.running_state.is_ok())
    }

    /// Whether this server's Raft still runs: if it has stopped (shut down
    /// included), why, as [`ControlError::Unavailable`].
    fn running(&self) -> Result<(), ControlError> {
        let m = self.raft.metrics();
        let stopped = m.borrow().running_state.clone();
        stopped.map_err(|e| ControlError::Unavailable(e.to_string()))
    }

    /// This server's copy of the lease table (may lag the leader).
    pub fn table(&self) -> LeaseTable {
        self.sm.lock().table.clone()
    }

    /// The leader's id and address, if known.
    fn leader_addr(&self) -> Option<(u64, String)> {
        let m = self.raft.metrics().borrow().clone();
        let leader = m.current_leader?;
        m.membership_config
            .membership()
            .get_node(&leader)
            .map(|n| (leader, n.addr.clone()))
    }

    /// One authenticated call to server `target` at `addr`, for a request
    /// that needs protocol `needs`.
    async fn call<Req: Serialize, Resp: serde::de::DeserializeOwned>(
        &self,
        (target, addr): (u64, &str),
        path: &str,
        (body, needs): (&Req, u16),
        secs: u64,
    ) -> Result<Resp, ControlError> {
        let to = Target { target, addr, path };
        let limit = Duration::from_secs(secs);
        match protocol::call(&self.client, &self.auth, to, body, limit, self.speaks).await {
            Ok(h) => {
                self.spoken.note(target, h.protocol);
                Ok(h.answer)
            }
            // The leader could not decode it: older than the request.
            Err(e) if protocol::undecodable(&e) => Err(ControlError::TooNew {
                needs: needs.max(self.speaks),
                speaks: self.spoken.of(target).unwrap_or(OLDEST_PROTOCOL),
            }),
            // The leader is gone or cannot serve it: another server may
            // already know the next one.
            Err(
                e @ (CallError::Unreachable(_)
                | CallError::TimedOut(_)
                | CallError::Refused { status: 503, .. }),
            ) => Err(ControlError::Unavailable(format!(
                "the leader {target}: {e}"
            ))),
            Err(e) => Err(ControlError::Request(e.to_string())),
        }
    }

    /// Proposes `req` through the leader and returns what applying it did.
    /// The leader writes it only if every server speaks the protocol its
    /// kind needs ([`ControlPlane::admits`]).
    pub async fn write(&self, req: LeaseRequest) -> Result<LeaseResponse, ControlError> {
        self.running()?;
        let needs = protocol::needs(&req);
        // Only the leader knows what every server speaks: a follower
        // forwards anything newer than the oldest protocol for it to judge.
        if needs > OLDEST_PROTOCOL && self.leader() != Some(self.id) {
            return self.forward(api::WRITE, &req, needs).await;
        }
        self.admits(needs)?;
        // A resume is checked by the leader (a follower forwards it).
        if let LeaseRequest::Pause {
            role,
            paused: false,
            force,
            ..
        } = &req
        {
            if self.leader() == Some(self.id) {
                let table = self.table();
                let appends = self.appends.lock().expect("appends lock").clone();
                // Keeps are recorded once every server speaks protocol 3.
                let recorded = self.common_protocol() >= 3;
                resume_check(
                    &table,
                    &appends,
                    role,
                    self.now(),
                    self.timing,
                    *force,
                    recorded,
                )
                .map_err(ControlError::Resume)?;
            }
        }
        // The leader's wall clock, for the history (a forwarded request is
        // stamped again by the leader it reaches).
        let mut req = req;
        req.stamp(hale_seal::unix_ms());
        match self.raft.client_write(req.clone()).await {
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                self.forward(api::WRITE, &req, needs).await
            }
            r => written(r),
        }
    }

    /// Asks the leader to grant `role` to `holder` (with `priority`): granted
    /// only when the leader's grantor allows it (see [`Grantor::contend`]).
    pub async fn acquire(
        &self,
        role: &str,
        holder: &str,
        priority: i64,
        attempt: u64,
    ) -> Result<LeaseResponse, ControlError> {
        self.running()?;
        let ask = AcquireRequest {
            role: role.to_owned(),
            holder: holder.to_owned(),
            priority,
            attempt,
            standing: None,
        };
        if self.leader() != Some(self.id) {
            return self.forward(api::ACQUIRE, &ask, OLDEST_PROTOCOL).await;
        }
        let table = self.table();
        let grant = {
            let mut g = self.grantor.lock().expect("grantor lock");
            let Some(g) = g.as_mut() else {
                return Err(ControlError::NoLeader);
            };
            let appends = self.appends.lock().expect("appends lock");
            g.contend(&table, &appends, &ask, self.now())
                .map_err(ControlError::NotYet)?
        };
        self.write_here(grant).await
    }

    /// Proposes `req` to this server's Raft, which must still be the
    /// leader: never forwarded. A grant is decided by this leader's grantor
    /// from the renewals *its* log holds; forwarded to a newer leader, it
    /// could land after renewals this one never saw, and take the role from
    /// a holder that is still counting on them.
    async fn write_here(&self, mut req: LeaseRequest) -> Result<LeaseResponse, ControlError> {
        self.admits(protocol::needs(&req))?;
        req.stamp(hale_seal::unix_ms());
        match self.raft.client_write(req).await {
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => Err(
                ControlError::Unavailable("this server is no longer the leader".into()),
            ),
            r => written(r),
        }
    }

    /// Sends `body` (a request that needs protocol `needs`) to the leader.
    async fn forward<T: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        body: &T,
        needs: u16,
    ) -> Result<R, ControlError> {
        let (leader, addr) = self.leader_addr().ok_or(ControlError::NoLeader)?;
        // One second: a leader that does not commit in that time is likely
        // frozen or gone, and the caller does better asking another server
        // (which may already know the next leader) than waiting on it.
        let res: api::Answer<R> = self.call((leader, &addr), what, (body, needs), 1).await?;
        res.map_err(|r| match r {
            Refusal::NoLeader => ControlError::NoLeader,
            Refusal::Unavailable(m) => ControlError::Unavailable(m),
            Refusal::TooNew { needs, speaks } => ControlError::TooNew { needs, speaks },
            Refusal::HolderSilent { holder, silent_ms } => {
                ControlError::Resume(ResumeRefused::HolderSilent {
                    holder,
                    silent: Duration::from_millis(silent_ms),
                })
            }
            Refusal::HolderKept {
                holder,
                silent_ms,
                force_in_ms,
            } => ControlError::Resume(ResumeRefused::Kept {
                holder,
                silent: Duration::from_millis(silent_ms),
                force_in: Duration::from_millis(force_in_ms),
            }),
            r => ControlError::Request(r.to_string()),
        })
    }

    /// Stops this server.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}

/// What a proposal to this server's Raft came to (a stopped Raft: ask
/// another server; any other failure: the request failed).
/// The control plane's clock: the time since `origin`.
fn since(origin: Instant) -> Time {
    Time::from_nanos(origin.elapsed().as_nanos() as u64)
}

fn written(
    r: Result<
        openraft::raft::ClientWriteResponse<TypeConfig>,
        RaftError<u64, ClientWriteError<u64, BasicNode>>,
    >,
) -> Result<LeaseResponse, ControlError> {
    match r {
        Ok(r) => Ok(r.data),
        Err(RaftError::Fatal(e)) => Err(ControlError::Unavailable(e.to_string())),
        Err(e) => Err(ControlError::Request(e.to_string())),
    }
}
