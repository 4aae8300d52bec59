//! # hale-agent
//!
//! Runs the `hale-core` membership protocol over a real network: UDP for
//! probes and gossip, TCP for state sync and fallback pings, every packet
//! sealed with ChaCha20-Poly1305 under the cluster keyring. Serves an HTTP
//! API (members with evidence, events as server-sent events, health,
//! Prometheus metrics, OpenAPI) and a live dashboard (at `/`) on
//! 127.0.0.1 by default.
//!
//! Embed it in a Rust service with [`Agent::start`], or run it as a daemon
//! with [`run`] (what `hale agent` does).

#![forbid(unsafe_code)]

// The rooms, by capability: each module's documentation says what it
// holds and what it offers the others. Imports point one way: the HTTP
// surface reads roles and membership; roles use membership; membership,
// configuration, the host helpers and the API's shapes (`view`) use no
// room above them. This file is the composition root that wires them.
pub mod config;
mod host;
mod http;
mod membership;
pub mod roles;
pub mod view;

/// The cluster keyring (the `hale-keyring` crate).
pub use hale_keyring as keyring;

// The public paths as they were before the rooms (the `hale` binary, the
// tests and embedders use them).
pub use config::reload;
pub use host::{cgroup, priority, systemd};
pub use http::{api, client, dashboard, drill, keys_api, metrics, relay_api};
pub use membership::{generation, meta, runtime};
pub use roles::{services, watchdog};

use membership::{clocks, holders, published, seed};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;

use hale_core::{Node, NodeId, Time};

pub use client::{Client, ClientError};
pub use config::{AgentConfig, ConfigError, ConfigSource, FileConfig, LoadedConfig, KEYRING_FILE};
pub use keyring::{Key, Keyring};
pub use meta::{AgentMeta, Candidacy};
pub use reload::{ReloadError, Reloader};
pub use runtime::{Snapshot, WireSnapshot};
pub use view::{AgentEvent, EventView, EvidenceView, MemberView, RelayView, UpstreamView};

use runtime::{Command, Shared};

/// Why the agent could not start. Nothing is left running.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A socket could not be bound.
    #[error("cannot bind {what} on {addr}: {source}")]
    Bind {
        /// Which socket.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The membership core rejected the configuration.
    #[error("invalid membership configuration: {0}")]
    Config(#[from] hale_core::ConfigError),
    /// The control plane could not start.
    #[error("control plane: {0}")]
    Control(#[from] hale_control::raft::ControlError),
    /// The relay could not start (spool directory, HTTP client).
    #[error("cannot start the relay: {0}")]
    Relay(#[from] hale_relay::StartError),
    /// The generation file in `[agent] state_dir` is of a newer format.
    #[error(transparent)]
    Generation(#[from] generation::GenerationError),
    /// The keyring file in `[agent] state_dir` could not be read (a newer
    /// format: see `hale_keyring::file`).
    #[error(transparent)]
    Keyring(#[from] keyring::file::LoadError),
    /// The reload signal's handler (SIGHUP) could not be installed.
    #[error("cannot install the SIGHUP handler: {0}")]
    Signal(std::io::Error),
    /// The HTTP API would listen on a non-loopback address without a token.
    #[error(
        "the HTTP API (`agent.http` = {0}) is not on a loopback address: \
         set `agent.api_token` (HALE_API_TOKEN) or bind it to 127.0.0.1"
    )]
    UnprotectedApi(SocketAddr),
}

/// The agent has stopped; the request was not carried out.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the agent has stopped")]
pub struct AgentStopped;

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    cmds: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    gossip_addr: SocketAddr,
    http_addr: SocketAddr,
    tasks: JoinSet<()>,
    roles: Arc<roles::RoleSet>,
    checks: Arc<services::Checks>,
    reloader: Arc<Reloader>,
    control: Option<hale_control::raft::ControlPlane>,
    relay: Option<hale_relay::Relay>,
}

impl Agent {
    /// Binds the gossip (UDP + TCP) and HTTP sockets and starts the agent.
    /// It was given no configuration file: [`Agent::reload`] refuses.
    pub async fn start(cfg: AgentConfig) -> Result<Agent, StartError> {
        Agent::start_inner(cfg, None).await
    }

    /// [`Agent::start`] with the configuration `loaded` from `source`,
    /// which [`Agent::reload`] (`POST /v1/reload`, SIGHUP under [`run`])
    /// reads again.
    pub async fn start_with_source(
        loaded: LoadedConfig,
        source: ConfigSource,
    ) -> Result<Agent, StartError> {
        Agent::start_inner(loaded.agent.clone(), Some((source, loaded))).await
    }

    async fn start_inner(
        cfg: AgentConfig,
        file: Option<(ConfigSource, LoadedConfig)>,
    ) -> Result<Agent, StartError> {
        if !cfg.http.ip().is_loopback() && cfg.api_token.is_none() {
            return Err(StartError::UnprotectedApi(cfg.http));
        }
        let (udp, gossip_addr, tcp) = bind_gossip(cfg.bind).await?;
        let (http, http_addr) = bind_tcp("HTTP API", cfg.http).await?;
        // An ephemeral port (0) is only known now: advertise the real one.
        let id = if cfg.id.addr().port() == 0 {
            let addr = SocketAddr::new(cfg.id.addr().ip(), gossip_addr.port());
            NodeId::new(cfg.id.name(), addr).expect("a valid name stays valid")
        } else {
            cfg.id.clone()
        };
        let mut core = cfg.core.clone();
        if core.rng_seed == 0 {
            // Every node needs its own random stream (probe order, gossip
            // targets, timer phases); seed 0 is the profile's placeholder.
            core.rng_seed = seed::fresh_seed();
        }
        let (generation, migrated) = generation::next(cfg.state_dir.as_deref())?;
        let after_older_release = migrated.is_some();
        if let Some(m) = migrated {
            tracing::info!(file = %m.file.display(), from = m.from, to = m.to, "{m}");
        }
        core.generation = generation;
        let node = Node::new(id.clone(), core, Time::ZERO)?;
        if cfg.relay.as_ref().is_some_and(|r| r.keys.is_empty()) {
            tracing::warn!(
                http = %cfg.http,
                "the relay accepts events with ANY sentry_key and forwards them with the \
                 upstream's credentials: set [relay] keys to the DSN keys your services use"
            );
        }
        let relay = cfg
            .relay
            .clone()
            .map(hale_relay::Relay::start)
            .transpose()?;
        // One keyring for gossip, the control plane and the keys API: a
        // live rotation (`hale keys`) applies to all of them at once.
        if cfg.keys_from_state {
            let file = cfg
                .state_dir
                .as_deref()
                .unwrap_or(std::path::Path::new("."))
                .join(KEYRING_FILE);
            tracing::info!(
                file = %file.display(),
                "using the keys saved by a live rotation; [cluster] keys are ignored while this file exists"
            );
            migrate_keyring(&file)?;
        }
        let keys = cfg.keyring.clone().map(|ring| match &cfg.state_dir {
            Some(dir) => keyring::SharedKeyring::saved_to(ring, dir.join(KEYRING_FILE)),
            None => keyring::SharedKeyring::new(ring),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let (cmd_tx, shared) =
            runtime::spawn(node, udp, tcp, keys.clone(), &mut tasks, stop_rx.clone());
        let roles = start_roles(
            &cfg,
            keys.as_ref(),
            &shared,
            &cmd_tx,
            RunFacts {
                http_addr,
                after_older_release,
            },
            &mut tasks,
            stop_rx.clone(),
        )
        .await?;
        let relay = relay.zip(cfg.relay.clone().map(Arc::new));
        let (source, running) = file.unzip();
        let reloader = Arc::new(Reloader::new(
            source,
            running,
            reload::Parts {
                checks: roles.checks.clone(),
                roles: roles.set.clone(),
                views: roles.set.views(),
                published: roles.published.clone(),
                relay: relay.as_ref().map(|(r, _)| r.clone()),
                cmds: cmd_tx.clone(),
                keys: keys.clone(),
                shared: shared.clone(),
            },
        ));
        let state = http::state::AppState {
            cmds: cmd_tx.clone(),
            shared: shared.clone(),
            cluster: cfg.core.cluster.clone(),
            relay: relay.clone(),
            roles: roles.set.views(),
            services: roles.checks.services().clone(),
            role_set: roles.set.clone(),
            reloader: reloader.clone(),
            control_server: roles.server.clone(),
            control: roles.client.clone(),
            keys,
            peers: Default::default(),
        };
        let app = http::router(state, cfg.api_token.clone(), http_addr);
        if let Some((r, c)) = &relay {
            tasks.spawn(relay_api::watch_breakers(
                r.clone(),
                c.clone(),
                shared.clone(),
                stop_rx.clone(),
            ));
            // Membership verdicts on the members hosting the upstreams open
            // (dead) or probe (joined, recovered) their breakers at once.
            tasks.spawn(relay_api::follow_members(
                r.clone(),
                shared.subscribe(),
                stop_rx.clone(),
            ));
        }
        tasks.spawn(serve(http, app, stop_rx));
        let agent = Agent {
            cmds: cmd_tx,
            shared,
            stop: stop_tx,
            gossip_addr,
            http_addr,
            tasks,
            roles: roles.set,
            checks: roles.checks,
            reloader,
            control: roles.server,
            relay: relay.map(|(r, _)| r),
        };
        if !cfg.seeds.is_empty() {
            agent.join(cfg.seeds.clone()).await.ok();
        }
        Ok(agent)
    }

    /// This node's identity.
    pub fn id(&self) -> &NodeId {
        self.shared.id()
    }

    /// The bound gossip address.
    pub fn gossip_addr(&self) -> SocketAddr {
        self.gossip_addr
    }

    /// The bound HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// A typed client of this agent's HTTP API.
    pub fn client(&self) -> Client {
        Client::new(self.http_addr.to_string())
    }

    /// A snapshot of members and counters.
    pub async fn snapshot(&self) -> Result<Snapshot, AgentStopped> {
        let s = runtime::ask(&self.cmds, Command::Snapshot).await;
        s.ok_or(AgentStopped)
    }

    /// Every member, this node first.
    pub async fn members(&self) -> Result<Vec<MemberView>, AgentStopped> {
        Ok(self.snapshot().await?.members)
    }

    /// Reads the configuration file again and applies it, all of it or
    /// nothing (see [`reload`]): what changed, or why nothing did.
    pub async fn reload(&self) -> Result<view::ReloadView, ReloadError> {
        self.reloader.reload().await
    }

    /// The relay, if configured.
    pub fn relay(&self) -> Option<&hale_relay::Relay> {
        self.relay.as_ref()
    }

    /// Live membership events.
    pub fn subscribe(&self) -> broadcast::Receiver<EventView> {
        self.shared.subscribe()
    }

    /// Application traffic from member `peer` (by name) was seen: proof of
    /// life that spares a probe. Never blocks; dropped if the agent is busy.
    pub fn note_traffic(&self, peer: &str) {
        let _ = self.cmds.try_send(Command::NoteTraffic(peer.to_owned()));
    }

    /// Joins through `addrs`.
    pub async fn join(&self, addrs: Vec<SocketAddr>) -> Result<(), AgentStopped> {
        let joined = runtime::ask(&self.cmds, |tx| Command::Join(addrs, tx)).await;
        joined.ok_or(AgentStopped)
    }

    /// Leaves gracefully (peers record this node as left, not dead) and
    /// stops, within [`runtime::LEAVE_DRAIN`] plus a moment.
    pub async fn shutdown(mut self) {
        // Hand roles over first (demote hooks, releases), while the control
        // plane and membership are still up.
        self.roles.stop_all().await;
        self.checks.stop();
        let _ = self.stop.send(true);
        if let Some(cp) = self.control.take() {
            cp.shutdown().await;
        }
        let deadline = runtime::LEAVE_DRAIN + Duration::from_secs(1);
        let _ = tokio::time::timeout(deadline, async {
            // The driver and the HTTP server end on the stop signal; the
            // acceptor never does, so stop once the driver is gone.
            while let Some(_r) = self.tasks.join_next().await {
                if self.cmds.is_closed() {
                    break;
                }
            }
        })
        .await;
        self.tasks.abort_all();
        if let Some(r) = self.relay.take() {
            // Spools (or counts) what is pending; bounded, never a join.
            let _ = tokio::task::spawn_blocking(move || r.close(Duration::from_secs(1))).await;
        }
    }
}

/// Serves `app` on `listener` until `stop` changes (or its sender is gone).
async fn serve(listener: TcpListener, app: axum::Router, mut stop: watch::Receiver<bool>) {
    let stopped = async move {
        let _ = stop.changed().await;
    };
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(stopped)
        .await;
}

/// Binds the TCP listener of `what` on `addr`; with the address it bound.
async fn bind_tcp(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let err = |source| StartError::Bind { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let bound = listener.local_addr().map_err(err)?;
    Ok((listener, bound))
}

/// Binds the gossip UDP socket and the TCP listener on the same port. With
/// port 0 the kernel picks the UDP port, which TCP may already use (a
/// client's ephemeral port): then it tries other ports.
async fn bind_gossip(bind: SocketAddr) -> Result<(UdpSocket, SocketAddr, TcpListener), StartError> {
    let udp_err = |source| StartError::Bind {
        what: "gossip UDP",
        addr: bind,
        source,
    };
    let mut attempts = if bind.port() == 0 { 32 } else { 1 };
    loop {
        let udp = UdpSocket::bind(bind).await.map_err(udp_err)?;
        let addr = udp.local_addr().map_err(udp_err)?;
        match TcpListener::bind(addr).await {
            Ok(tcp) => return Ok((udp, addr, tcp)),
            Err(e) if attempts > 1 && e.kind() == std::io::ErrorKind::AddrInUse => attempts -= 1,
            Err(source) => {
                return Err(StartError::Bind {
                    what: "gossip TCP",
                    addr,
                    source,
                })
            }
        }
    }
}

/// Rewrites the keyring file in the current format if it is of an older
/// one, and says so; a newer one is refused (the configuration already
/// refused it, unless it changed since). A file that cannot be rewritten
/// is left as it is: this build reads it.
fn migrate_keyring(file: &std::path::Path) -> Result<(), StartError> {
    match keyring::file::migrate(file) {
        Ok(Some(m)) => {
            tracing::info!(file = %m.file.display(), from = m.from, to = m.to, "{m}");
        }
        Ok(None) => {}
        Err(keyring::file::MigrateError::Load(e)) => return Err(e.into()),
        Err(e) => tracing::warn!("{e}: left as it is (this build reads it)"),
    }
    Ok(())
}

/// Runs an agent on the configuration `loaded` from `source` until
/// `shutdown` completes, then leaves gracefully. SIGHUP reloads the
/// configuration (as `hale reload` does).
pub async fn run(
    loaded: LoadedConfig,
    source: ConfigSource,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    use tokio::signal::unix::{signal, SignalKind};
    // Before the agent says it is ready: a reload right after readiness
    // must not find SIGHUP's default action (terminate) in place.
    let mut hangups = signal(SignalKind::hangup()).map_err(StartError::Signal)?;
    if std::env::var(cgroup::ENV).is_ok_and(|v| v == "delegated") {
        cgroup::settle().await;
    }
    let agent = Agent::start_with_source(loaded, source).await?;
    tracing::info!(
        node = %agent.id(),
        gossip = %agent.gossip_addr(),
        http = %agent.http_addr(),
        "hale agent running"
    );
    systemd::notify(&format!(
        "READY=1\nSTATUS=member {} on {}, API on {}",
        agent.id().name(),
        agent.gossip_addr(),
        agent.http_addr()
    ));
    let reloads = async {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the configuration");
            let status = match agent.reload().await {
                Ok(v) => format!("configuration reloaded ({} changes)", v.changes.len()),
                Err(e) => format!("configuration reload refused: {e}"),
            };
            systemd::notify(&format!("STATUS={status}"));
        }
    };
    tokio::select! {
        () = shutdown => {}
        () = reloads => {}
    }
    tracing::info!("leaving the cluster");
    systemd::notify("STOPPING=1\nSTATUS=leaving the cluster");
    agent.shutdown().await;
    Ok(())
}

/// What [`start_roles`] started.
struct RolesRunning {
    checks: Arc<services::Checks>,
    set: Arc<roles::RoleSet>,
    published: Arc<published::Published>,
    client: Option<hale_control::raft::ControlClient>,
    server: Option<hale_control::raft::ControlPlane>,
}

/// Starts service checks, the control-plane server (if this agent is one)
/// and a manager per role this node is a candidate for.
/// What the roles learn of this run as it starts.
struct RunFacts {
    /// The HTTP API's address (the port is known only once bound).
    http_addr: SocketAddr,
    /// The state files were written by an older release (migrated).
    after_older_release: bool,
}

async fn start_roles(
    cfg: &AgentConfig,
    keys: Option<&keyring::SharedKeyring>,
    shared: &Arc<Shared>,
    cmds: &mpsc::Sender<Command>,
    facts: RunFacts,
    tasks: &mut JoinSet<()>,
    stop: watch::Receiver<bool>,
) -> Result<RolesRunning, StartError> {
    let RunFacts {
        http_addr,
        after_older_release,
    } = facts;
    let checks = Arc::new(services::Checks::start(cfg.services.clone()));
    // Candidacies are published in this member's metadata (priority and
    // readiness per role), for operators and dashboards; which candidate
    // wins is decided by the control-plane leader from their requests.
    let user_meta = String::from_utf8_lossy(&cfg.core.meta).into_owned();
    let published = Arc::new(published::Published::new(
        shared.clone(),
        user_meta,
        http_addr.to_string(),
        cfg.core.wire_versions,
    ));
    let mut out = RolesRunning {
        set: Arc::new(roles::RoleSet::new(None, published.clone())),
        checks,
        published,
        client: None,
        server: None,
    };
    let Some(plan) = &cfg.control else {
        return Ok(out);
    };
    let mut servers = plan.servers.clone();
    tasks.spawn(clocks::watch_clocks(shared.clone(), stop.clone()));
    // The control plane speaks only to holders of the cluster keyring (the
    // gossip keys); `insecure_plaintext` leaves it open, loudly.
    let control_auth = match keys {
        Some(k) => hale_control::ControlAuth::Sealed(k.clone()),
        None => hale_control::ControlAuth::InsecurePlaintext,
    };
    if let Some((id, bind)) = plan.server {
        let (listener, addr) = bind_tcp("control plane", bind).await?;
        servers.entry(id).or_insert(addr);
        let cp = hale_control::raft::ControlPlane::start(
            id,
            &plan.data_dir,
            plan.timing,
            control_auth.clone(),
        )
        .await?;
        tasks.spawn(serve(listener, cp.routes(), stop.clone()));
        if plan.bootstrap {
            cp.bootstrap(servers.clone()).await?;
        }
        tasks.spawn(holders::watch_holders(cp.clone(), shared.clone(), stop));
        tasks.spawn(holders::watch_storage(cp.clone(), shared.clone()));
        out.server = Some(cp);
    }
    let mut client = hale_control::raft::ControlClient::new(&servers, control_auth);
    if let Some((id, _)) = plan.server {
        client = client.preferring(id);
    }
    let on_change: roles::OnRoleChange = {
        let (shared, published) = (shared.clone(), out.published.clone());
        Arc::new(move |change| match change {
            roles::RoleChange::Eligible { role, eligible } => {
                published.checks(&role, eligible);
            }
            roles::RoleChange::Event(e) => {
                tracing::info!(event = ?e, "role event");
                shared.emit(e, None);
            }
        })
    };
    let gated = client.clone().gated(shared.drill().frozen_flag());
    // A previous run's watchdog may still fence what that run held: no
    // role starts here before it is done (`watchdog::presence`).
    let presence = cfg
        .state_dir
        .as_deref()
        .map(watchdog::presence::presence_path);
    if let Some(p) = &presence {
        watchdog::presence::await_predecessors(p).await;
    }
    sweep_claims();
    let kept = roles::kept::KeptTables::start(gated.clone());
    let ctx = roles::RoleContext {
        node: cfg.id.name().to_owned(),
        identity: roles::identity::node_identity(cfg.id.name(), cfg.state_dir.as_deref()),
        after_older_release,
        requests: roles::LeaseRequests::start(gated.clone()),
        control: gated,
        origin: tokio::time::Instant::now(),
        services: out.checks.services().clone(),
        timing: plan.timing,
        watchdogs: roles::Watchdogs::new(cfg.watchdog_exe.clone(), presence, cfg.hooks_at_once),
        hook_slots: roles::slots::HookSlots::new(cfg.hooks_at_once),
        kept,
        on_change,
        cmds: cmds.clone(),
    };
    out.set = Arc::new(roles::RoleSet::new(Some(ctx), out.published.clone()));
    for spec in &cfg.roles {
        out.set.start(spec.clone());
    }
    out.client = Some(client);
    Ok(out)
}

/// Removes, on a thread of its own, the demote claims that agents killed
/// together with their watchdogs left on this host
/// ([`watchdog::sweep_stale_claims`]): nothing at start waits for it.
fn sweep_claims() {
    std::thread::spawn(|| {
        let dir = watchdog::claim_dir();
        let removed = watchdog::sweep_stale_claims(&dir, std::process::id());
        if removed > 0 {
            tracing::info!(removed, dir = %dir.display(), "removed demote claims of agents that are gone");
        }
    });
}
