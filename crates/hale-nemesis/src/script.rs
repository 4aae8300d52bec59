//! The steps of operator actions ([`crate::operator`]) and their
//! carrying out: each [`Script`] moves on at every [`Script::tick`] of the
//! run's loop without blocking it (commands are child processes polled for
//! their end, waits are deadlines polled every 250 ms), so actions overlap
//! faults and each other. Every step has a deadline: a script always ends.

use std::collections::{BTreeSet, VecDeque};
use std::io::Read;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::clock::now_ns;
use crate::cluster::{Cluster, ClusterError};
use crate::history::CommandRecord;
use crate::nemesis::Oracle;

/// One step of a script.
#[derive(Debug, Clone)]
pub enum Step {
    /// `hale ARGS` on host `host`; `retry`: repeated every second until it
    /// succeeds, for up to that long; `abort`: if it still fails, the rest
    /// of the script is dropped.
    Hale {
        /// The host.
        host: usize,
        /// The arguments.
        args: Vec<String>,
        /// How long to repeat it.
        retry: Duration,
        /// Drop the rest on failure.
        abort: bool,
    },
    /// Run `step` only if the role is paused now.
    IfPaused(Box<Step>),
    /// Until the holder's agent says (`GET /v1/roles`, its own view of
    /// the role) that the role is paused, up to 15 s.
    WaitPaused(usize),
    /// Until the host's agent answers primary, up to 30 s.
    WaitHolding(usize),
    /// SIGTERM the host's agent.
    Sigterm(usize),
    /// Until the host's agent exited, up to 30 s (then SIGKILL).
    WaitExit(usize),
    /// Stop an agent of the previous release, which hands a paused role
    /// over on SIGTERM: SIGKILL its watchdog then the agent (the README's
    /// way); SIGTERM if the role is not paused, or if the agent running is
    /// of this release (an overlapping action started it).
    StopPrevious(usize),
    /// Start the host's agent, of the previous release or not.
    Start(usize, bool),
    /// Stop the host's service (SIGKILL its register).
    StopService(usize),
    /// Start the host's register again if it is down.
    StartService(usize),
    /// Set the host's priority and rewrite its configuration.
    Priority(usize, u32),
    /// Rewrite the host's configuration (invalid or not).
    Config(usize, bool),
    /// Set the cluster's keys and rewrite every host's configuration.
    Keys(Vec<String>),
    /// Remove the host's hook fault files.
    RestoreHooks(usize),
    /// The rest waits for the heal.
    Heal,
}

/// A step in progress.
#[derive(Debug)]
enum Running {
    /// A command runs.
    Child {
        child: Child,
        start_ns: u64,
        started: Instant,
        first: Instant,
    },
    /// A failed command is repeated at `at`.
    RetryAt { at: Instant, first: Instant },
    /// A wait, until its deadline, polled at `poll`.
    Until { deadline: Instant, poll: Instant },
}

/// How long one command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// An action's steps and where it stands.
#[derive(Debug)]
pub struct Script {
    steps: VecDeque<Step>,
    running: Option<Running>,
    /// The heal time has come: steps after [`Step::Heal`] may run.
    pub heal_due: bool,
    /// What was done (for the fault's note).
    pub notes: Vec<String>,
}

/// What a script step changes beside the cluster: the record it belongs
/// to, every command run, the servers removed.
pub struct Ledger<'a> {
    /// The fault record (None: the heal phase).
    pub record: Option<usize>,
    /// Every command run.
    pub commands: &'a mut Vec<CommandRecord>,
    /// Control-plane servers removed and not yet added back.
    pub removed: &'a mut BTreeSet<u8>,
}

impl Script {
    /// A script of `steps`.
    pub fn new(steps: Vec<Step>) -> Script {
        Script {
            steps: steps.into(),
            running: None,
            heal_due: false,
            notes: Vec::new(),
        }
    }

    /// Whether every step was carried out.
    pub fn done(&self) -> bool {
        self.steps.is_empty() && self.running.is_none()
    }

    /// Carries out what can be now; true once done.
    pub fn tick(
        &mut self,
        c: &mut Cluster,
        o: &mut dyn Oracle,
        led: &mut Ledger<'_>,
    ) -> Result<bool, ClusterError> {
        while let Some(step) = self.steps.front().cloned() {
            let finished = self.step(&step, c, o, led)?;
            if !finished {
                return Ok(false);
            }
            self.running = None;
            self.steps.pop_front();
        }
        Ok(true)
    }

    /// Works on `step`: true once it is over.
    fn step(
        &mut self,
        step: &Step,
        c: &mut Cluster,
        o: &mut dyn Oracle,
        led: &mut Ledger<'_>,
    ) -> Result<bool, ClusterError> {
        let now = Instant::now();
        let wait = |s: &mut Script, limit: Duration, met: &mut dyn FnMut() -> bool| {
            let (deadline, poll) = match s.running {
                Some(Running::Until { deadline, poll }) => (deadline, poll),
                _ => (now + limit, now),
            };
            if now < poll {
                return None;
            }
            if met() {
                return Some(true);
            }
            if now >= deadline {
                return Some(false);
            }
            s.running = Some(Running::Until {
                deadline,
                poll: now + Duration::from_millis(250),
            });
            None
        };
        match step {
            Step::Heal => return Ok(self.heal_due),
            Step::Hale {
                host,
                args,
                retry,
                abort,
            } => {
                return self.command(*host, args, *retry, *abort, c, led);
            }
            Step::IfPaused(inner) => {
                let mut seen = None;
                let r = wait(self, Duration::from_secs(15), &mut || {
                    seen = o.paused();
                    seen.is_some()
                });
                match (r, seen) {
                    (None, _) => return Ok(false),
                    (_, Some(true)) => {
                        self.running = None;
                        self.steps[0] = (**inner).clone();
                        return self.step(inner, c, o, led);
                    }
                    (_, Some(false)) => self.notes.push("not paused".into()),
                    (_, None) => self.notes.push("no agent said whether paused".into()),
                }
            }
            Step::WaitPaused(h) => {
                match wait(self, Duration::from_secs(15), &mut || o.knows_paused(*h)) {
                    None => return Ok(false),
                    Some(false) => self
                        .notes
                        .push(format!("{} not seen paused in 15 s", c.names[*h])),
                    Some(true) => {}
                }
            }
            Step::WaitHolding(h) => {
                match wait(self, Duration::from_secs(30), &mut || o.says_primary(*h)) {
                    None => return Ok(false),
                    Some(false) => self
                        .notes
                        .push(format!("{} not primary again in 30 s", c.names[*h])),
                    Some(true) => self.notes.push(format!("{} primary again", c.names[*h])),
                }
            }
            Step::WaitExit(h) => {
                let h = *h;
                let mut exited = || c.agent_pid(h).is_none();
                let r = wait(self, Duration::from_secs(30), &mut exited);
                match r {
                    None => return Ok(false),
                    Some(false) => {
                        c.kill_agent(h);
                        self.notes
                            .push(format!("{} still running after 30 s: SIGKILL", c.names[h]));
                    }
                    Some(true) => self.notes.push(format!("{} exited", c.names[h])),
                }
            }
            Step::Sigterm(h) => {
                if !c.sigterm_agent(*h) {
                    self.notes.push(format!("{} was not running", c.names[*h]));
                }
            }
            Step::StopPrevious(h) => {
                // Only an agent of the previous release is stopped the
                // README's way: one of this release (another operator
                // action restarted it meanwhile) keeps a paused role on
                // SIGTERM, and killing its watchdog with it would leave a
                // holding it adopted unguarded (seed 110038: an overlapping
                // restart had started this release, which adopted; both
                // were SIGKILLed, and its holding was never fenced).
                if !c.previous[*h] {
                    c.sigterm_agent(*h);
                    self.notes
                        .push("the agent is not of the previous release: SIGTERM".into());
                } else if o.paused() == Some(true) {
                    let pids = c.host_pids(*h, "watchdog");
                    crate::lab::signal(&pids, nix::sys::signal::Signal::SIGKILL);
                    c.kill_agent(*h);
                    self.notes
                        .push(format!("watchdogs {pids:?} and the agent SIGKILLed"));
                } else {
                    c.sigterm_agent(*h);
                    self.notes.push("not paused: SIGTERM".into());
                }
            }
            Step::Start(h, previous) => {
                c.previous[*h] = *previous;
                c.start_agent(*h, c.clocks[*h])?;
                o.restarted(*h);
                let rel = if *previous {
                    "previous release"
                } else {
                    "current release"
                };
                self.notes.push(format!("{} started ({rel})", c.names[*h]));
            }
            Step::StopService(h) => {
                c.kill_register(*h);
                self.notes
                    .push(format!("register of {} stopped", c.names[*h]));
            }
            Step::StartService(h) => {
                if !c.register_runs(*h) {
                    c.start_register(*h)?;
                    self.notes
                        .push(format!("register of {} started", c.names[*h]));
                }
            }
            Step::Priority(h, p) => {
                c.priority[*h] = *p;
                c.write_config(*h, false)?;
            }
            Step::Config(h, invalid) => c.write_config(*h, *invalid)?,
            Step::Keys(keys) => {
                c.keys = keys.clone();
                for h in 0..c.names.len() {
                    c.write_config(h, false)?;
                }
            }
            Step::RestoreHooks(h) => crate::nemesis::restore_hooks(c, *h),
        }
        Ok(true)
    }

    /// Works on a command step: true once it is over.
    fn command(
        &mut self,
        host: usize,
        words: &[String],
        retry: Duration,
        abort: bool,
        c: &mut Cluster,
        led: &mut Ledger<'_>,
    ) -> Result<bool, ClusterError> {
        let now = Instant::now();
        match self.running.take() {
            None => self.spawn(host, words, now, c)?,
            Some(Running::RetryAt { at, first }) if now >= at => {
                self.spawn(host, words, first, c)?
            }
            Some(Running::Child {
                mut child,
                start_ns,
                started,
                first,
            }) => {
                let exited = match child.try_wait() {
                    Ok(Some(st)) => Some(st.code()),
                    Ok(None) if now.duration_since(started) > COMMAND_TIMEOUT => {
                        let _ = child.kill();
                        let _ = child.wait();
                        Some(None)
                    }
                    Ok(None) => None,
                    Err(_) => Some(None),
                };
                let Some(status) = exited else {
                    self.running = Some(Running::Child {
                        child,
                        start_ns,
                        started,
                        first,
                    });
                    return Ok(false);
                };
                let mut output = String::new();
                for pipe in [
                    child.stdout.take().map(|p| Box::new(p) as Box<dyn Read>),
                    child.stderr.take().map(|p| Box::new(p) as Box<dyn Read>),
                ]
                .into_iter()
                .flatten()
                {
                    let mut text = String::new();
                    let _ = pipe.take(16_384).read_to_string(&mut text);
                    output.push_str(&text);
                }
                if status.is_none() {
                    output.push_str("(no exit status: killed, or timed out after 20 s)");
                }
                led.commands.push(CommandRecord {
                    record: led.record,
                    host: c.names[host].clone(),
                    args: words.to_vec(),
                    start_ns,
                    end_ns: now_ns(),
                    status,
                    output: output.trim().to_owned(),
                });
                let ok = status == Some(0);
                let verb = words.iter().take(2).cloned().collect::<Vec<_>>().join(" ");
                if ok && words.first().map(String::as_str) == Some("control") {
                    let id = words.get(2).and_then(|w| w.parse::<u8>().ok());
                    if let Some(id) = id {
                        if words[1] == "remove-server" {
                            led.removed.insert(id);
                        } else {
                            led.removed.remove(&id);
                        }
                    }
                }
                if !ok && now.duration_since(first) + Duration::from_secs(1) < retry {
                    self.running = Some(Running::RetryAt {
                        at: now + Duration::from_secs(1),
                        first,
                    });
                    return Ok(false);
                }
                self.notes.push(format!(
                    "{verb}: exit {}",
                    status.map_or("-".into(), |s| s.to_string())
                ));
                if !ok && abort {
                    self.notes.push("the rest not done".into());
                    self.steps.truncate(1);
                }
                return Ok(true);
            }
            Some(r) => self.running = Some(r),
        }
        Ok(false)
    }

    fn spawn(
        &mut self,
        host: usize,
        words: &[String],
        first: Instant,
        c: &Cluster,
    ) -> Result<(), ClusterError> {
        let child = c.hale_command(host, words).spawn()?;
        self.running = Some(Running::Child {
            child,
            start_ns: now_ns(),
            started: Instant::now(),
            first,
        });
        Ok(())
    }
}
