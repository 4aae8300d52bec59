//! Operator actions as nemesis faults: what an operator does with `hale`
//! (pause, resume, hand over, switch over, reload, rotate keys, change the
//! control plane, restart or upgrade the holder's agent), drawn from the
//! seed like any fault. Each action is a [`Script`] of steps carried out
//! one after another without blocking the run: `hale` commands run inside
//! a host's namespace against that host's agent (the host's release's
//! CLI), and every command is recorded with what it printed and its exit
//! status (a refusal is an outcome, not a harness failure). Steps after a
//! [`Step::Heal`] wait for the fault's heal time.

use std::collections::{BTreeSet, VecDeque};
use std::io::Read;
use std::process::Child;
use std::time::{Duration, Instant};

use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::clock::now_ns;
use crate::cluster::{Cluster, ClusterError, CONTROL_PORT, SERVERS};
use crate::history::CommandRecord;
use crate::nemesis::Oracle;

/// How the holder's agent is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// The documented way: pause, wait until paused, SIGTERM, wait for the
    /// exit, start, wait until it holds the role again, resume.
    Documented,
    /// Resume as soon as the agent exited, before it is started again (at
    /// the heal).
    ResumeEarly,
    /// Pause, restart, and never resume (the heal phase does).
    NeverResume,
    /// SIGTERM and start again without pausing (it hands the role over).
    Unpaused,
    /// Pause and SIGTERM at once, without waiting for the holder to learn
    /// of the pause; start again, wait until it holds, resume.
    Hasty,
}

/// An operator's action. Hosts are indices; `from`: the member the
/// command is run on (any member will do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// `hale roles pause db`; heal: `hale roles resume db`.
    Pause {
        /// Where.
        from: usize,
    },
    /// `hale roles resume db`.
    Resume {
        /// Where.
        from: usize,
    },
    /// `hale roles resume db --force`, the documented way: when the
    /// holder's agent does not answer, its service (the register) is
    /// stopped first; heal: the register started again.
    ResumeForce {
        /// Where.
        from: usize,
    },
    /// `hale roles handover db [--to hN]` on the holder's host.
    Handover {
        /// The candidate named, if any.
        to: Option<usize>,
    },
    /// `hale roles switchover db --to hN [--at Ns]`; with `cancel`, the
    /// heal runs `hale roles switchover db --cancel`.
    Switchover {
        /// Where.
        from: usize,
        /// The candidate.
        to: usize,
        /// `--at` this many seconds from now (0: none).
        at_s: u32,
        /// Cancelled at the heal.
        cancel: bool,
    },
    /// `hale reload` on `host` after its `hale.toml` changed: a valid
    /// change (the role's priority), or an invalid file (an unknown key),
    /// which must be refused; the file is put back after.
    Reload {
        /// Where.
        host: usize,
        /// A valid change, or an invalid file.
        valid: bool,
        /// The new priority (valid changes).
        priority: u32,
    },
    /// A live key rotation (README): `hale keys install NEW`, `use NEW`,
    /// `remove OLD`, each repeated until every agent applied it (or given
    /// up, and the rest not done), every host's `hale.toml` written after
    /// each; skipped unless every agent runs.
    RotateKeys {
        /// Where.
        from: usize,
    },
    /// `hale control remove-server ID`; heal: `add-server ID ADDR`.
    RemoveServer {
        /// Where.
        from: usize,
        /// The server's id (1..=3).
        id: u8,
    },
    /// The holder's agent restarted.
    RestartHolder(Restart),
    /// The holder's agent downgraded to the previous release the
    /// documented way (pause, SIGTERM, start the old binary, wait until it
    /// holds, resume); heal: upgraded back (pause, the old release's way
    /// of stopping: SIGKILL its watchdog then the agent, start the current
    /// binary, wait until it holds, resume). Skipped, with a note, without
    /// the previous release's binary.
    Upgrade,
}

impl Action {
    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Pause { .. } => "op-pause",
            Action::Resume { .. } => "op-resume",
            Action::ResumeForce { .. } => "op-resume-force",
            Action::Handover { to: None } => "op-handover",
            Action::Handover { to: Some(_) } => "op-handover-to",
            Action::Switchover { at_s: 0, .. } => "op-switchover",
            Action::Switchover { cancel: false, .. } => "op-switchover-at",
            Action::Switchover { .. } => "op-switchover-cancelled",
            Action::Reload { valid: true, .. } => "op-reload",
            Action::Reload { .. } => "op-reload-invalid",
            Action::RotateKeys { .. } => "op-rotate-keys",
            Action::RemoveServer { .. } => "op-remove-server",
            Action::RestartHolder(Restart::Documented) => "op-restart-holder",
            Action::RestartHolder(Restart::ResumeEarly) => "op-restart-holder-resume-early",
            Action::RestartHolder(Restart::NeverResume) => "op-restart-holder-never-resume",
            Action::RestartHolder(Restart::Unpaused) => "op-restart-holder-unpaused",
            Action::RestartHolder(Restart::Hasty) => "op-restart-holder-hasty",
            Action::Upgrade => "op-downgrade-upgrade",
        }
    }

    /// Draws one, uniformly over the kinds.
    pub fn draw(rng: &mut Xoshiro256PlusPlus, hosts: usize) -> Action {
        let from = rng.random_range(0..hosts);
        let other = rng.random_range(0..hosts);
        match rng.random_range(0..18) {
            0 => Action::Pause { from },
            1 => Action::Resume { from },
            2 => Action::ResumeForce { from },
            3 => Action::Handover { to: None },
            4 => Action::Handover { to: Some(other) },
            kind @ 5..=7 => Action::Switchover {
                from,
                to: other,
                at_s: if kind == 5 { 0 } else { 5 },
                cancel: kind == 7,
            },
            8 => Action::Reload {
                host: from,
                valid: true,
                priority: rng.random_range(5..=20),
            },
            9 => Action::Reload {
                host: from,
                valid: false,
                priority: 0,
            },
            10 => Action::RotateKeys { from },
            11 => Action::RemoveServer {
                from,
                id: rng.random_range(1..=SERVERS as u8),
            },
            12 => Action::RestartHolder(Restart::Documented),
            13 => Action::RestartHolder(Restart::ResumeEarly),
            14 => Action::RestartHolder(Restart::NeverResume),
            15 => Action::RestartHolder(Restart::Unpaused),
            16 => Action::RestartHolder(Restart::Hasty),
            _ => Action::Upgrade,
        }
    }
}

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
    /// way); SIGTERM if the role is not paused.
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

/// Owned words.
fn args(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

fn hale(host: usize, words: &[&str], retry_s: u64, abort: bool) -> Step {
    Step::Hale {
        host,
        args: args(words),
        retry: Duration::from_secs(retry_s),
        abort,
    }
}

/// A control-plane server's address.
fn server_addr(c: &Cluster, id: u8) -> String {
    format!("{}:{CONTROL_PORT}", c.lab.ips[usize::from(id) - 1])
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

    /// The steps of `action` on the cluster now, the hosts whose processes
    /// it touches, and a note.
    pub fn plan(
        action: &Action,
        c: &mut Cluster,
        o: &mut dyn Oracle,
    ) -> Result<(Script, Vec<usize>, String), ClusterError> {
        let n = c.names.len();
        let holder = o.holder().unwrap_or_else(|| o.any(n));
        let names = c.names.clone();
        let name = |h: usize| names[h.min(n - 1)].clone();
        let pause = |h, abort| hale(h, &["roles", "pause", "db"], 0, abort);
        let resume = |h, retry| hale(h, &["roles", "resume", "db"], retry, false);
        let (steps, touched, note) = match action {
            Action::Pause { from } => (
                vec![pause(*from, false), Step::Heal, resume(*from, 0)],
                vec![],
                String::new(),
            ),
            Action::Resume { from } => (vec![resume(*from, 0)], vec![], String::new()),
            Action::ResumeForce { from } => {
                let silent = !o.answers(holder);
                let force = hale(*from, &["roles", "resume", "db", "--force"], 0, false);
                if silent {
                    let steps = vec![
                        Step::StopService(holder),
                        force,
                        Step::Heal,
                        Step::StartService(holder),
                    ];
                    (
                        steps,
                        vec![holder],
                        format!("{} silent: its service stopped first", name(holder)),
                    )
                } else {
                    (vec![force], vec![], format!("{} answers", name(holder)))
                }
            }
            Action::Handover { to } => {
                let mut w = vec!["roles".to_owned(), "handover".into(), "db".into()];
                if let Some(t) = to {
                    w.extend(["--to".to_owned(), name(*t)]);
                }
                let step = Step::Hale {
                    host: holder,
                    args: w,
                    retry: Duration::ZERO,
                    abort: false,
                };
                (vec![step], vec![], format!("on {}", name(holder)))
            }
            Action::Switchover {
                from,
                to,
                at_s,
                cancel,
            } => {
                let mut w = args(&["roles", "switchover", "db", "--to"]);
                w.push(name(*to));
                if *at_s > 0 {
                    w.extend(["--at".to_owned(), format!("{at_s}s")]);
                }
                let mut steps = vec![Step::Hale {
                    host: *from,
                    args: w,
                    retry: Duration::ZERO,
                    abort: false,
                }];
                if *cancel {
                    steps.push(Step::Heal);
                    steps.push(hale(
                        *from,
                        &["roles", "switchover", "db", "--cancel"],
                        0,
                        false,
                    ));
                }
                (steps, vec![], String::new())
            }
            Action::Reload {
                host,
                valid: true,
                priority,
            } => (
                vec![
                    Step::Priority(*host, *priority),
                    hale(*host, &["reload"], 0, false),
                ],
                vec![],
                format!("priority {} -> {priority}", c.priority[*host]),
            ),
            Action::Reload { host, .. } => (
                vec![
                    Step::Config(*host, true),
                    hale(*host, &["reload"], 0, false),
                    Step::Config(*host, false),
                ],
                vec![],
                "an unknown key in [agent]".into(),
            ),
            Action::RotateKeys { from } => {
                if let Some(down) = (0..n).find(|&h| c.agent_pid(h).is_none()) {
                    let why = format!("skipped: the agent of {} is down", name(down));
                    return Ok((Script::new(Vec::new()), vec![], why));
                }
                let new = crate::cluster::keygen(&c.cfg.hale_bin)?;
                let old = c.keys.clone();
                let mut both = old.clone();
                both.push(new.clone());
                let mut steps = vec![
                    hale(*from, &["keys", "install", &new], 10, true),
                    Step::Keys(both.clone()),
                    hale(*from, &["keys", "use", &new], 10, true),
                ];
                both.rotate_right(1);
                steps.push(Step::Keys(both));
                for k in &old {
                    steps.push(hale(*from, &["keys", "remove", k], 10, true));
                }
                steps.push(Step::Keys(vec![new]));
                (steps, vec![], String::new())
            }
            Action::RemoveServer { from, id } => {
                let addr = server_addr(c, *id);
                let idw = id.to_string();
                let steps = vec![
                    hale(*from, &["control", "remove-server", &idw], 0, false),
                    Step::Heal,
                    hale(*from, &["control", "add-server", &idw, &addr], 20, false),
                ];
                (steps, vec![usize::from(*id) - 1], String::new())
            }
            Action::RestartHolder(way) => {
                let h = holder;
                // A member other than the holder, for a resume while the
                // holder's agent is down.
                let other = (h + 1) % n;
                let restart = [Step::Sigterm(h), Step::WaitExit(h)];
                let paused = [pause(h, true), Step::WaitPaused(h)];
                let steps: Vec<Step> = match way {
                    Restart::Documented => paused
                        .into_iter()
                        .chain(restart)
                        .chain([Step::Start(h, false), Step::WaitHolding(h), resume(h, 20)])
                        .collect(),
                    Restart::ResumeEarly => paused
                        .into_iter()
                        .chain(restart)
                        .chain([resume(other, 0), Step::Heal, Step::Start(h, false)])
                        .collect(),
                    Restart::NeverResume => paused
                        .into_iter()
                        .chain(restart)
                        .chain([Step::Start(h, false), Step::WaitHolding(h)])
                        .collect(),
                    Restart::Hasty => [pause(h, true)]
                        .into_iter()
                        .chain(restart)
                        .chain([Step::Start(h, false), Step::WaitHolding(h), resume(h, 20)])
                        .collect(),
                    Restart::Unpaused => {
                        restart.into_iter().chain([Step::Start(h, false)]).collect()
                    }
                };
                (steps, vec![h], format!("holder {}", name(h)))
            }
            Action::Upgrade => {
                if c.cfg.previous_bin.is_none() {
                    let why = "skipped: no previous release binary (--previous-hale-bin)";
                    return Ok((Script::new(Vec::new()), vec![], why.into()));
                }
                let h = holder;
                let steps = vec![
                    pause(h, true),
                    Step::WaitPaused(h),
                    Step::Sigterm(h),
                    Step::WaitExit(h),
                    Step::Start(h, true),
                    Step::WaitHolding(h),
                    resume(h, 20),
                    Step::Heal,
                    pause(h, false),
                    Step::WaitPaused(h),
                    Step::StopPrevious(h),
                    Step::WaitExit(h),
                    Step::Start(h, false),
                    Step::WaitHolding(h),
                    resume(h, 20),
                ];
                (steps, vec![h], format!("holder {}", name(h)))
            }
        };
        Ok((Script::new(steps), touched, note))
    }

    /// The heal phase's script: every agent and register down started
    /// again (agents on the current release), hook faults removed, removed
    /// control-plane servers added back, and the role resumed if paused.
    pub fn heal_phase(c: &mut Cluster, removed: &BTreeSet<u8>) -> Script {
        let n = c.names.len();
        let mut steps = Vec::new();
        for h in 0..n {
            steps.push(Step::RestoreHooks(h));
            if !c.register_runs(h) {
                steps.push(Step::StartService(h));
            }
            if c.agent_pid(h).is_none() {
                steps.push(Step::Start(h, false));
            }
        }
        for id in removed {
            let (idw, addr) = (id.to_string(), server_addr(c, *id));
            steps.push(hale(0, &["control", "add-server", &idw, &addr], 20, false));
        }
        steps.push(Step::IfPaused(Box::new(hale(
            0,
            &["roles", "resume", "db"],
            30,
            false,
        ))));
        Script::new(steps)
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
                if o.paused() == Some(true) {
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
