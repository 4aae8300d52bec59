//! The agent above the processes it starts: its own threads (membership,
//! control plane, holders' renewals, the fencing watchdog and its fences)
//! run `[agent] priority_boost` nice levels above the hooks, checks and
//! PostgreSQL tools it starts, so that a host busy with hooks (a burst
//! after a failover, hundreds of roles with scripted hooks) cannot starve
//! the heartbeats and renewals that decide who holds a role (issue 41).
//!
//! Linux keeps a nice value per thread, and a child inherits the one of
//! the thread that forked it. So [`install`], called first thing in
//! `hale agent` before any other thread exists, starts one *spawner*
//! thread at the priority the agent was started with, then raises the
//! calling thread; every thread created after it (the runtime's workers,
//! the watchdogs' threads) inherits the raised value, and every child
//! process goes through [`spawn`], which forks on the spawner thread: it
//! runs at the priority the agent was started with, with no window in
//! which it, or a process it starts, runs raised.
//!
//! Raising needs `CAP_SYS_NICE` (root has it) or an `RLIMIT_NICE` that
//! allows it; without it the agent says so once and runs unboosted.

use std::io;
use std::sync::mpsc;
use std::sync::OnceLock;

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// How many nice levels above its children the agent runs by default.
pub const DEFAULT_BOOST: u8 = 10;

/// A child to start, in the runtime whose driver will reap it.
type Job = (
    tokio::runtime::Handle,
    Command,
    oneshot::Sender<io::Result<Child>>,
);

/// The spawner thread's inbox, once [`install`] ran.
static SPAWNER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();

/// What [`install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boost {
    /// The agent's threads run `by` nice levels above its children
    /// (nice `agent`, children `children`).
    Raised {
        /// The nice value of the agent's threads.
        agent: i32,
        /// The nice value its children start with.
        children: i32,
    },
    /// Not asked for (`priority_boost = 0`).
    Off,
    /// Asked for but refused (no `CAP_SYS_NICE`): everything runs at
    /// `nice`.
    Refused {
        /// The nice value everything runs at.
        nice: i32,
    },
}

/// Starts the spawner thread at the current priority and raises the
/// calling thread `by` nice levels (see the module). Call once, before any
/// other thread is started (the async runtime included).
pub fn install(by: u8) -> Boost {
    let base = rustix::process::getpriority_process(None).unwrap_or(0);
    let (tx, rx) = mpsc::channel::<Job>();
    let started = std::thread::Builder::new()
        .name("hale-spawner".into())
        .spawn(move || {
            for (runtime, mut cmd, reply) in rx {
                let _entered = runtime.enter();
                let _ = reply.send(cmd.spawn());
            }
        });
    if started.is_err() || SPAWNER.set(tx).is_err() {
        return Boost::Off;
    }
    hale_postgres::spawn_tools_with(|cmd| Box::pin(spawn(cmd)));
    if by == 0 {
        return Boost::Off;
    }
    let raised = (base - i32::from(by)).max(-20);
    match rustix::process::setpriority_process(None, raised) {
        Ok(()) => Boost::Raised {
            agent: raised,
            children: base,
        },
        Err(_) => Boost::Refused { nice: base },
    }
}

/// Spawns `cmd` from the spawner thread (at the priority the agent was
/// started with), or here when [`install`] never ran (tests, libraries).
pub async fn spawn(mut cmd: Command) -> io::Result<Child> {
    let Some(tx) = SPAWNER.get() else {
        return cmd.spawn();
    };
    let (reply, answer) = oneshot::channel();
    let runtime = tokio::runtime::Handle::current();
    if let Err(mpsc::SendError((_, mut cmd, _))) = tx.send((runtime, cmd, reply)) {
        return cmd.spawn();
    }
    answer
        .await
        .unwrap_or_else(|_| Err(io::Error::other("the spawner thread stopped")))
}
