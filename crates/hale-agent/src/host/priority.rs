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
//!
//! # Real time
//!
//! A nice value only weighs a thread against the others: ten levels are a
//! ninefold weight per thread, and a burst of dozens of processes at the
//! agent's own level (another agent's watchdog fencing every role it held
//! after a freeze, on a machine that runs several agents) still starved a
//! control-plane leader for 2.5 s and moved every role (issue 41). So with
//! `[agent] realtime` (the default) the raised thread also takes the
//! round-robin real-time policy at its lowest priority (`SCHED_RR` 1),
//! which every thread created after it inherits: no process of the normal
//! policy, however many and at whatever nice, delays the agent's
//! heartbeats and renewals. corosync, the cluster engine of Pacemaker,
//! runs the same way for the same reason. The kernel still keeps 5 % of
//! every second for the normal policy (`sched_rt_runtime_us`), and the
//! agent's work is heartbeats, renewals and hook bookkeeping, small next
//! to the hooks it starts. The spawner keeps the normal policy, so no hook,
//! check or tool runs real-time; the fencing watchdog (started from a
//! raised thread) leaves real time first thing ([`leave_realtime`]) and
//! keeps the raised nice value: it and its fences weigh as before against
//! the host's load, and never delay an agent; it runs at most
//! `hooks_at_once` fences at a time (`crate::roles::watchdog::slots`). Refused (a container without
//! `CAP_SYS_NICE`, a cgroup with no real-time budget) the agent says so
//! and runs at the raised nice value alone.

use std::io;
use std::sync::mpsc;
use std::sync::OnceLock;

use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// How many nice levels above its children the agent runs by default.
pub const DEFAULT_BOOST: u8 = 10;

/// Whether the agent's raised threads also run real-time by default (see
/// the module).
pub const DEFAULT_REALTIME: bool = true;

/// A child to start, in the runtime whose driver will reap it.
type Job = (
    tokio::runtime::Handle,
    Command,
    oneshot::Sender<io::Result<Child>>,
);

/// The spawner thread's inbox, once [`install`] ran.
static SPAWNER: OnceLock<mpsc::Sender<Job>> = OnceLock::new();

/// What [`install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boost {
    /// The agent's threads run `by` nice levels above its children
    /// (nice `agent`, children `children`).
    Raised {
        /// The nice value of the agent's threads.
        agent: i32,
        /// The nice value its children start with.
        children: i32,
        /// Whether they run real-time too.
        realtime: RealTime,
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

/// Whether the agent's raised threads run real-time ([`Boost::Raised`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RealTime {
    /// `SCHED_RR` at priority 1.
    On,
    /// Not asked for (`[agent] realtime = false`).
    Off,
    /// Asked for but refused: why.
    Refused(String),
}

/// Starts the spawner thread at the current priority and raises the
/// calling thread `by` nice levels, and to real time when `realtime` (see
/// the module). Call once, before any other thread is started (the async
/// runtime included).
pub fn install(by: u8, realtime: bool) -> Boost {
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
            realtime: if realtime {
                enter_realtime()
            } else {
                RealTime::Off
            },
        },
        Err(_) => Boost::Refused { nice: base },
    }
}

/// Puts the calling thread under `SCHED_RR` at the policy's lowest
/// priority.
fn enter_realtime() -> RealTime {
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy,
        ThreadPriority, ThreadSchedulePolicy,
    };
    let policy = ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::RoundRobin);
    match set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, policy) {
        Ok(()) => RealTime::On,
        Err(e) => RealTime::Refused(format!("{e:?}")),
    }
}

/// Puts the calling thread back under the normal policy, at the nice value
/// it has, if it runs real-time (the fencing watchdog, started from a
/// raised agent thread; see the module). Call before any other thread is
/// started. True when the thread runs the normal policy after it.
pub fn leave_realtime() -> bool {
    use thread_priority::{
        set_thread_priority_and_policy, thread_native_id, thread_schedule_policy,
        NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
    };
    match thread_schedule_policy() {
        Ok(ThreadSchedulePolicy::Realtime(_)) => {}
        Ok(ThreadSchedulePolicy::Normal(_)) => return true,
        Err(_) => return false,
    }
    let nice = rustix::process::getpriority_process(None).unwrap_or(0);
    let normal = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other);
    // The crate sets a nice value with the normal policy: the old one
    // goes back right after (lowering is always allowed, and a thread
    // that ran real-time may raise).
    let left = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, normal);
    let _ = rustix::process::setpriority_process(None, nice);
    left.is_ok()
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
