//! # hale-agent
//!
//! Runs the `hale-core` membership protocol over a real network: UDP for
//! probes and gossip, TCP for state sync and fallback pings, every packet
//! sealed with ChaCha20-Poly1305 under the cluster keyring. Serves an HTTP
//! API (members with evidence, events as server-sent events, health,
//! Prometheus metrics, OpenAPI) on 127.0.0.1 by default.
//!
//! Embed it in a Rust service with [`Agent::start`], or run it as a daemon
//! with [`run`] (what `hale agent` does).

#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod keyring;
pub mod metrics;
pub mod runtime;
pub mod view;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use hale_core::{Node, NodeId, Time};

pub use config::{AgentConfig, ConfigError, FileConfig};
pub use keyring::{Key, Keyring};
pub use runtime::Snapshot;
pub use view::{EventView, EvidenceView, MemberView};

use runtime::{Command, Driver, Shared};

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
    /// The relay could not start (spool directory, HTTP client).
    #[error("cannot start the relay: {0}")]
    Relay(#[from] hale_relay::StartError),
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
    relay: Option<hale_relay::Relay>,
}

impl Agent {
    /// Binds the gossip (UDP + TCP) and HTTP sockets and starts the agent.
    pub async fn start(cfg: AgentConfig) -> Result<Agent, StartError> {
        let udp = UdpSocket::bind(cfg.bind)
            .await
            .map_err(|source| StartError::Bind {
                what: "gossip UDP",
                addr: cfg.bind,
                source,
            })?;
        let gossip_addr = udp.local_addr().map_err(|source| StartError::Bind {
            what: "gossip UDP",
            addr: cfg.bind,
            source,
        })?;
        let tcp = TcpListener::bind(gossip_addr)
            .await
            .map_err(|source| StartError::Bind {
                what: "gossip TCP",
                addr: gossip_addr,
                source,
            })?;
        let http = TcpListener::bind(cfg.http)
            .await
            .map_err(|source| StartError::Bind {
                what: "HTTP API",
                addr: cfg.http,
                source,
            })?;
        let http_addr = http.local_addr().map_err(|source| StartError::Bind {
            what: "HTTP API",
            addr: cfg.http,
            source,
        })?;
        // An ephemeral port (0) is only known now: advertise the real one.
        let id = if cfg.id.addr().port() == 0 {
            let addr = SocketAddr::new(cfg.id.addr().ip(), gossip_addr.port());
            NodeId::new(cfg.id.name(), addr).expect("a valid name stays valid")
        } else {
            cfg.id.clone()
        };
        let node = Node::new(id.clone(), cfg.core.clone(), Time::ZERO)?;
        let relay = match &cfg.relay {
            Some(r) => Some(hale_relay::Relay::start(r.clone())?),
            None => None,
        };
        let shared = runtime::new_shared(id);
        let runtime::Channels {
            cmd_tx,
            cmd_rx,
            frame_tx,
            frame_rx,
        } = runtime::channels();
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let driver = Driver {
            node,
            origin: Instant::now(),
            udp: Arc::new(udp),
            keyring: cfg.keyring.clone(),
            shared: shared.clone(),
            out_streams: runtime::out_streams(),
            evidence: Default::default(),
            seq: 0,
        };
        tasks.spawn(driver.run(cmd_rx, frame_rx, stop_rx.clone()));
        tasks.spawn(runtime::accept_streams(
            tcp,
            frame_tx,
            shared.clone(),
            cfg.keyring.is_some(),
        ));
        let mut app = api::router(api::ApiState {
            cmds: cmd_tx.clone(),
            shared: shared.clone(),
            token: cfg.api_token.clone(),
            relay: relay.clone(),
        });
        if let Some(r) = &relay {
            app = app.merge(r.router());
            // Membership verdicts on the members hosting the upstreams open
            // (dead) or probe (joined, recovered) their breakers at once.
            let mut events = shared.events.subscribe();
            let r = r.clone();
            let mut stop = stop_rx.clone();
            tasks.spawn(async move {
                loop {
                    tokio::select! {
                        e = events.recv() => match e {
                            Ok(e) => {
                                let Some(m) = e.member.as_deref() else { continue };
                                match e.kind.as_str() {
                                    "dead" => r.member_dead(m),
                                    "joined" | "recovered" => r.member_alive(m),
                                    _ => {}
                                }
                            }
                            Err(broadcast::error::RecvError::Lagged(_)) => {}
                            Err(broadcast::error::RecvError::Closed) => return,
                        },
                        _ = stop.changed() => return,
                    }
                }
            });
        }
        let mut http_stop = stop_rx;
        tasks.spawn(async move {
            let _ = axum::serve(http, app)
                .with_graceful_shutdown(async move {
                    let _ = http_stop.changed().await;
                })
                .await;
        });
        let agent = Agent {
            cmds: cmd_tx,
            shared,
            stop: stop_tx,
            gossip_addr,
            http_addr,
            tasks,
            relay,
        };
        if !cfg.seeds.is_empty() {
            agent.join(cfg.seeds.clone()).await.ok();
        }
        Ok(agent)
    }

    /// This node's identity.
    pub fn id(&self) -> &NodeId {
        &self.shared.id
    }

    /// The bound gossip address.
    pub fn gossip_addr(&self) -> SocketAddr {
        self.gossip_addr
    }

    /// The bound HTTP address.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// A snapshot of members and counters.
    pub async fn snapshot(&self) -> Result<Snapshot, AgentStopped> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Command::Snapshot(tx))
            .await
            .map_err(|_| AgentStopped)?;
        rx.await.map_err(|_| AgentStopped)
    }

    /// Every member, this node first.
    pub async fn members(&self) -> Result<Vec<MemberView>, AgentStopped> {
        Ok(self.snapshot().await?.members)
    }

    /// The relay, if configured.
    pub fn relay(&self) -> Option<&hale_relay::Relay> {
        self.relay.as_ref()
    }

    /// Live membership events.
    pub fn subscribe(&self) -> broadcast::Receiver<EventView> {
        self.shared.events.subscribe()
    }

    /// Application traffic from member `peer` (by name) was seen: proof of
    /// life that spares a probe. Never blocks; dropped if the agent is busy.
    pub fn note_traffic(&self, peer: &str) {
        let _ = self.cmds.try_send(Command::NoteTraffic(peer.to_owned()));
    }

    /// Joins through `addrs`.
    pub async fn join(&self, addrs: Vec<SocketAddr>) -> Result<(), AgentStopped> {
        let (tx, rx) = oneshot::channel();
        self.cmds
            .send(Command::Join(addrs, tx))
            .await
            .map_err(|_| AgentStopped)?;
        rx.await.map_err(|_| AgentStopped)
    }

    /// Leaves gracefully (peers record this node as left, not dead) and
    /// stops, within [`runtime::LEAVE_DRAIN`] plus a moment.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
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

/// Runs an agent until `shutdown` completes, then leaves gracefully.
pub async fn run(cfg: AgentConfig, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    let agent = Agent::start(cfg).await?;
    tracing::info!(
        node = %agent.id(),
        gossip = %agent.gossip_addr(),
        http = %agent.http_addr(),
        "hale agent running"
    );
    shutdown.await;
    tracing::info!("leaving the cluster");
    agent.shutdown().await;
    Ok(())
}
