//! The agent's side of its fencing watchdog: one process guarding every
//! holding of every role manager (see `crate::roles::watchdog` for its side).
//!
//! The hub starts the process when a first holding needs it, sends each
//! manager's orders tagged with the holding's id, hands each `disarm`'s
//! answer back to the manager that asked, and, should the process die
//! (killed, say), starts another and tells it of every holding still
//! guarded, with what is left of its lease and its running promote hook,
//! so that no holding goes unguarded. A holding whose `disarm` was pending
//! when the process died is answered "not fenced" (the agent demotes it
//! itself; the claim keeps a fence the dead one may have started from
//! running the demote twice).
//!
//! Every order is in the process's pipe when the call that gave it returns,
//! and a new process's orders are in its pipe before it starts
//! (`outbox`): an agent frozen right after it guarded or renewed a
//! holding, or right after it started a new watchdog, is still fenced on
//! time. Only the instant between a watchdog's death and its successor's
//! start is unguarded: an agent frozen exactly then (two faults at once)
//! is not fenced by anyone until it thaws.
//!
//! When the last manager lets go of the hub (the agent stops, or its role
//! tasks are aborted), the process's standard input closes and it fences
//! whatever it still guards.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

mod outbox;
use outbox::Outbox;

use tokio::sync::mpsc::UnboundedSender;

use super::manager::Input;
use crate::roles::watchdog::{shared_deadline, Answer, Disarmed, Order};

/// The agent's fencing watchdog, shared by its role managers.
#[derive(Clone)]
pub struct Watchdogs {
    /// What runs (this agent's own executable when it is the file named).
    exe: PathBuf,
    /// The path named, shown as the watchdog's `argv[0]`.
    named: PathBuf,
    /// The presence file each watchdog holds locked
    /// (`crate::roles::watchdog::presence`), if the agent has a `state_dir`.
    presence: Option<PathBuf>,
    /// Fences the watchdog runs at once, at most (`[agent] hooks_at_once`).
    fences_at_once: usize,
    hub: Arc<Mutex<Hub>>,
}

/// What the hub knows of one holding: enough to guard it again in a new
/// process.
struct Guarded {
    /// Its `guard` order, sent again (with the lease's end) to a new
    /// process.
    guard: Order,
    /// The lease's end on the shared clock (`crate::roles::watchdog::shared_clock_ns`).
    deadline: u64,
    promote: Option<u32>,
    /// A `disarm` awaits its answer.
    disarming: bool,
    /// Its manager.
    tx: UnboundedSender<Input>,
}

struct Hub {
    /// The running process.
    process: Option<Process>,
    generation: u64,
    /// The last holding id given out (ids start at 1).
    last: u64,
    holdings: BTreeMap<u64, Guarded>,
}

/// One watchdog process.
struct Process {
    generation: u64,
    child: Child,
    /// Its order pipe (a frozen watchdog fills it: what it does not take
    /// waits there, never a role manager, never the agent's runtime).
    out: Outbox,
}

impl Watchdogs {
    /// A hub that starts `exe watchdog` when a holding first needs it.
    ///
    /// When `exe` is the file this agent runs, the watchdog (and `hale
    /// demote-once`) are started from this very executable
    /// ([`crate::roles::watchdog::own_exe`]), not from the path: a package upgrade
    /// that replaced the file under a running agent must not give it a
    /// watchdog of another release, whose order protocol may differ.
    /// Its fences run at most `fences_at_once` at a time
    /// ([`crate::roles::watchdog::slots`]).
    pub fn new(named: PathBuf, presence: Option<PathBuf>, fences_at_once: usize) -> Self {
        let exe = crate::roles::watchdog::same_release(named.clone());
        let hub = Hub {
            process: None,
            generation: 0,
            last: 0,
            holdings: BTreeMap::new(),
        };
        Watchdogs {
            exe,
            named,
            presence,
            fences_at_once,
            hub: Arc::new(Mutex::new(hub)),
        }
    }

    /// The `hale` executable (also for `hale demote-once`).
    pub fn exe(&self) -> &std::path::Path {
        &self.exe
    }

    /// Starts guarding a holding whose lease lasts `left` more: its fence
    /// is `fence` (run with `env` under `claim`, within `hook_timeout`).
    /// Answers to its `disarm` go to `tx`. Returns the holding's id.
    pub(super) fn guard(
        &self,
        tx: UnboundedSender<Input>,
        claim: PathBuf,
        fence: Vec<String>,
        env: Vec<(String, String)>,
        hook_timeout: Duration,
        left: Duration,
    ) -> u64 {
        let mut hub = lock(&self.hub);
        hub.last += 1;
        let h = hub.last;
        let guard = Order::Guard {
            h,
            until_ns: 0,
            hook_timeout_ms: hook_timeout.as_millis() as u64,
            claim,
            fence,
            env,
        };
        let g = Guarded {
            guard,
            deadline: shared_deadline(left),
            promote: None,
            disarming: false,
            tx,
        };
        hub.holdings.insert(h, g);
        if hub.process.is_none() {
            // Starting the process guards every holding, this one included.
            self.start(&mut hub);
        } else {
            let order = hub.holdings[&h].guard_now();
            hub.send(&order);
        }
        h
    }

    /// Holding `h`'s lease now lasts `left` more: sent as the instant on
    /// the shared clock, so that no queue or pipe delay moves it.
    pub(super) fn arm(&self, h: u64, left: Duration) {
        let until_ns = shared_deadline(left);
        let mut hub = lock(&self.hub);
        if let Some(g) = hub.holdings.get_mut(&h) {
            g.deadline = until_ns;
            hub.send(&Order::Arm { h, until_ns });
        }
    }

    /// Holding `h`'s promote hook runs in process group `pgid` (or, with
    /// `None`, has exited).
    pub(super) fn promote(&self, h: u64, pgid: Option<u32>) {
        let mut hub = lock(&self.hub);
        if let Some(g) = hub.holdings.get_mut(&h) {
            g.promote = pgid;
            hub.send(&match pgid {
                Some(pgid) => Order::Promote { h, pgid },
                None => Order::PromoteDone { h },
            });
        }
    }

    /// Asks whether holding `h` was fenced; the answer reaches its manager
    /// as `Input::Watchdog`. False if it could not be asked (no process).
    pub(super) fn disarm(&self, h: u64) -> bool {
        let mut hub = lock(&self.hub);
        let sent = hub.send(&Order::Disarm { h });
        if let Some(g) = hub.holdings.get_mut(&h) {
            g.disarming = sent;
        }
        sent
    }

    /// Forgets holding `h` without fencing it: the step-down is done or,
    /// with `keep`, the agent stops and keeps its paused role for its next
    /// run to adopt.
    pub(super) fn forget(&self, h: u64, keep: bool) {
        let mut hub = lock(&self.hub);
        if hub.holdings.remove(&h).is_some() {
            hub.send(&if keep {
                Order::Keep { h }
            } else {
                Order::Stop { h }
            });
        }
    }

    /// Starts a process and guards every holding in it: their orders are
    /// in its pipe before it starts (none is left unguarded if it cannot
    /// start: each `disarm` then answers "not asked" and the agent demotes
    /// itself).
    fn start(&self, hub: &mut Hub) {
        let orders: Vec<String> = hub
            .holdings
            .values()
            .flat_map(Guarded::orders)
            .map(|o| o.line())
            .collect();
        let bytes = orders.iter().map(|l| l.len() + 1).sum();
        let (mut out, stdin, flusher) = match Outbox::new(bytes) {
            Ok(o) => o,
            Err(e) => {
                tracing::error!("cannot start the fencing watchdog: no pipe: {e}");
                return;
            }
        };
        for line in &orders {
            out.send(line);
        }
        let mut cmd = Command::new(&self.exe);
        cmd.env(
            crate::roles::watchdog::slots::ENV,
            self.fences_at_once.to_string(),
        );
        if let Some(p) = &self.presence {
            cmd.env(crate::roles::watchdog::presence::ENV, p);
        }
        // In its own leaf of a delegated cgroup, which it enters before it
        // reads an order (so its fences start there): see `crate::host::cgroup`.
        if let Some(layout) = crate::host::cgroup::placed() {
            cmd.env(
                crate::host::cgroup::LEAF_ENV,
                layout.leaf(crate::host::cgroup::Leaf::Watchdog),
            );
        }
        // In the agent's process group. Not in one of its own (tried: a
        // terminal's ctrl-c or hang-up to the agent's group also kills the
        // watchdog): once its agent died, that group was orphaned, and a
        // stopped watchdog in an orphaned group gets SIGHUP from the kernel
        // and dies unfenced (nemesis seeds 170047, 170078, 170089: a host
        // stopped, its agent restarted, two holders). It must ignore SIGHUP
        // before it can leave the agent's group.
        let child = cmd
            .arg0(&self.named)
            .arg("watchdog")
            .stdin(stdin)
            .stdout(Stdio::piped())
            .spawn()
            .inspect_err(|e| tracing::error!("cannot start the fencing watchdog: {e}"));
        let Ok(mut child) = child else {
            return;
        };
        let Some(answers) = child.stdout.take() else {
            let _ = child.kill();
            return;
        };
        hub.generation += 1;
        let generation = hub.generation;
        hub.process = Some(Process {
            generation,
            child,
            out,
        });
        let weak = Arc::downgrade(&self.hub);
        std::thread::spawn(move || {
            flusher.run(|| {
                let Some(hub) = weak.upgrade() else {
                    return true;
                };
                let mut hub = lock(&hub);
                match hub.process.as_mut() {
                    Some(p) if p.generation == generation => p.out.flush(),
                    _ => true,
                }
            });
        });
        let weak = Arc::downgrade(&self.hub);
        let exe = (
            self.exe.clone(),
            self.named.clone(),
            self.presence.clone(),
            self.fences_at_once,
        );
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(answers).lines() {
                let Ok(line) = line else { break };
                let Ok(a) = serde_json::from_str::<Answer>(line.trim()) else {
                    continue;
                };
                let Some(hub) = weak.upgrade() else { return };
                let mut hub = lock(&hub);
                if let Some(g) = hub.holdings.get_mut(&a.h) {
                    let fenced = a.disarmed == Disarmed::Fenced;
                    if std::mem::take(&mut g.disarming) {
                        let _ = g.tx.send(Input::Watchdog(a.h, Some(fenced)));
                    } else if fenced {
                        // Unasked: it fenced on its own (see `watchdog.rs`).
                        let _ = g.tx.send(Input::Fenced(a.h));
                    }
                }
            }
            exited(&weak, exe, generation);
        });
    }
}

/// Process `generation` exited: unless it was replaced already, answers
/// pending `disarm`s "not fenced" and guards the rest in a new process.
/// The hub, even if a thread panicked holding it (its state stays usable).
fn lock(hub: &Mutex<Hub>) -> MutexGuard<'_, Hub> {
    hub.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn exited(
    weak: &Weak<Mutex<Hub>>,
    (exe, named, presence, fences_at_once): (PathBuf, PathBuf, Option<PathBuf>, usize),
    generation: u64,
) {
    let Some(arc) = weak.upgrade() else { return };
    let mut hub = lock(&arc);
    if hub.process.as_ref().map(|p| p.generation) != Some(generation) {
        return;
    }
    if let Some(process) = hub.process.take() {
        reap(process);
    }
    hub.holdings.retain(|h, g| {
        if g.disarming {
            let _ = g.tx.send(Input::Watchdog(*h, None));
        }
        !g.disarming
    });
    if hub.holdings.is_empty() {
        return;
    }
    tracing::warn!(
        holdings = hub.holdings.len(),
        "the fencing watchdog exited while guarding holdings: starting another"
    );
    let w = Watchdogs {
        exe,
        named,
        presence,
        fences_at_once,
        hub: arc.clone(),
    };
    w.start(&mut hub);
}

impl Guarded {
    /// Its `guard` order with the lease's end.
    fn guard_now(&self) -> Order {
        let mut o = self.guard.clone();
        if let Order::Guard { until_ns, .. } = &mut o {
            *until_ns = self.deadline;
        }
        o
    }

    /// What a new process must be told of it.
    fn orders(&self) -> Vec<Order> {
        let mut v = vec![self.guard_now()];
        if let (Some(pgid), Order::Guard { h, .. }) = (self.promote, &self.guard) {
            v.push(Order::Promote { h: *h, pgid });
        }
        v
    }
}

impl Hub {
    /// Writes one order into the process's pipe (or, if full, queues it);
    /// false if there is no process or its pipe has closed.
    fn send(&mut self, order: &Order) -> bool {
        self.process
            .as_mut()
            .is_some_and(|p| p.out.send(&order.line()))
    }
}

/// Closes a process's pipe once what waits is written (it fences what it
/// still guards, and exits) and reaps it off this thread.
fn reap(Process { mut child, out, .. }: Process) {
    out.close();
    std::thread::spawn(move || {
        let _ = child.wait();
    });
}

impl Drop for Hub {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            reap(process);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A hub whose "watchdog" never reads its orders, so they stay in its
    /// pipe for the test to count; and that process's pid.
    fn idle_watchdog(dir: &std::path::Path) -> Watchdogs {
        let exe = dir.join("idle-watchdog");
        std::fs::write(&exe, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        Watchdogs::new(exe, None, 4)
    }

    /// The bytes waiting unread in `w`'s process's order pipe.
    fn unread(w: &Watchdogs) -> usize {
        let pid = lock(&w.hub).process.as_ref().unwrap().child.id();
        let pipe = std::fs::File::open(format!("/proc/{pid}/fd/0")).unwrap();
        rustix::io::ioctl_fionread(&pipe).unwrap() as usize
    }

    fn stop(w: &Watchdogs) {
        if let Some(mut p) = lock(&w.hub).process.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }

    #[test]
    fn a_holding_and_each_renewal_are_in_the_watchdogs_pipe_when_the_call_returns() {
        let dir = tempfile::tempdir().unwrap();
        let w = idle_watchdog(dir.path());
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let fence = vec!["true".to_string()];
        let left = Duration::from_secs(5);
        let h = w.guard(tx, dir.path().join("claim"), fence, vec![], left, left);
        // No yield, no wait: a freeze right now still leaves it guarded.
        let guarded = unread(&w);
        let first = lock(&w.hub).holdings[&h].guard_now().line().len() + 1;
        assert_eq!(
            guarded, first,
            "the guard order was written before guard() returned"
        );
        w.arm(h, left);
        let arm = Order::Arm { h, until_ns: 0 }.line().len() + 1;
        assert!(
            unread(&w) >= guarded + arm - 2,
            "the renewal was written before arm() returned"
        );
        stop(&w);
    }

    #[test]
    fn a_watchdog_started_again_finds_every_holding_in_its_pipe_from_its_first_instant() {
        let dir = tempfile::tempdir().unwrap();
        let w = idle_watchdog(dir.path());
        let left = Duration::from_secs(5);
        for n in 0..3 {
            let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
            let claim = dir.path().join(format!("claim-{n}"));
            w.guard(tx, claim, vec!["true".into()], vec![], left, left);
        }
        let told = unread(&w);
        // As when the first one is killed: a new process, told again.
        let mut hub = lock(&w.hub);
        let old = hub.process.take().unwrap();
        w.start(&mut hub);
        drop(hub);
        assert_eq!(
            unread(&w),
            told,
            "every guard order was in the new pipe at its start"
        );
        let (mut child, out) = (old.child, old.out);
        out.close();
        let _ = child.kill();
        let _ = child.wait();
        stop(&w);
    }
}
