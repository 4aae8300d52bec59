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

use crate::cluster::{Cluster, ClusterError, CONTROL_PORT};
use crate::nemesis::Oracle;
use crate::script::{Script, Step};

pub use crate::action::{Action, Restart};

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
