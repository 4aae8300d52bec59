//! Operator actions as nemesis faults: what an operator does with `hale`
//! (pause, resume, hand over, switch over, reload, rotate keys, change the
//! control plane, restart or upgrade the holder's agent), drawn from the
//! seed like any fault. Each action is a [`Script`] of steps carried out
//! one after another without blocking the run: `hale` commands run inside
//! a host's namespace against that host's agent (the host's release's
//! CLI), and every command is recorded with what it printed and its exit
//! status (a refusal is an outcome, not a harness failure). Steps after a
//! [`Step::Heal`] wait for the fault's heal time. This module draws the
//! actions and plans their steps; [`crate::script`] carries steps out.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, ClusterError, CONTROL_PORT, SERVERS};
use crate::nemesis::Oracle;
use crate::script::{Script, Step};

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
                Restart::Unpaused => restart.into_iter().chain([Step::Start(h, false)]).collect(),
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
