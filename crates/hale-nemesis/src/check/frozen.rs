//! When nothing on a host can fence its service, shared by
//! [`super::fenced_first`] and [`super::two_holders`]: what hale does not
//! claim to survive (README, "What the epoch guarantees": the database's
//! own epoch check is the answer there).
//!
//! * Its hale processes frozen with it (`stop-host`), beside a serving
//!   service (`stop-hale`), or its running hook frozen (`stop-hook`).
//! * Its watchdog frozen (`stop-watchdog`) while its agent is out: killed,
//!   frozen, or restarted (a clock fault's restarts, a `disk-full` healed by
//!   a restart, an operator's restart). Either one alone fences: the agent
//!   demotes its own expired lease, the watchdog fences for a dead agent;
//!   both out is a double fault in the fence path. A restarted agent does
//!   not fence its predecessor's holding: it waits for that run's watchdog,
//!   which fences once it thaws (seed 70001: the watchdog of the holder,
//!   also the leader, frozen, then the agent restarted by a clock step; the
//!   next holder promoted 2.2 s later, the old one fenced at the thaw).
//! * Its demote hook failing (`hook-fails` on demotes: exit 1, hang) while
//!   its agent is out. An agent that cannot demote keeps renewing and keeps
//!   the role; with the agent gone too, nothing renews, and the lease runs
//!   out as for a dead host (README, "The rules ...": a node that cannot
//!   demote keeps the role unless it dies or is cut off). The watchdog
//!   tries its fence again every second once the fault heals, a hung one
//!   once its `hook_timeout` (10 s) killed it (seed 70084: the agent
//!   restarted by a clock fault while its fence hung; the next holder
//!   promoted 3.7 s before the retried fence).
//! * Its fence killed (`kill-hook`) while its agent is out: the same
//!   double fault, one attempt long. The watchdog tries again 0.1 s later
//!   (a second later before seed 90056: the agent frozen, the watchdog's
//!   fence at the lease's end killed, the next holder promoted 0.65 s
//!   later and the retry 0.36 s after that). Excused from the kill until
//!   the retry (with the usual slack after a thaw).

use crate::history::{FaultRecord, History};
use crate::schedule::{Fault, HookFailure, HookSel};

/// The agents' `hook_timeout` in the nemesis's cluster (`cluster.rs`).
const HOOK_TIMEOUT_NS: u64 = 10_000_000_000;

/// The longest a watchdog waits before trying a failed fence again
/// (hale-agent's `FENCE_RETRY`).
const FENCE_RETRY_NS: u64 = 1_000_000_000;

/// How soon a watchdog tries a fence again after its first failure
/// (hale-agent's `FENCE_RETRY_FIRST`).
const FENCE_RETRY_FIRST_NS: u64 = 100_000_000;

/// A stretch in which nothing on a host could fence: from `from` until
/// `thaw` (none: to the end of the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Freeze {
    /// When it began.
    pub from: u64,
    /// When what could fence ran again.
    pub thaw: Option<u64>,
}

/// What a restart note of a `disk-full` heal says (`nemesis.rs`).
const RESTARTED_AT_HEAL: &str = "agent restarted at heal";

fn on(f: &FaultRecord, node: &str) -> bool {
    f.hosts.iter().any(|x| x == node)
}

/// When a `kill-hook` fault killed its hook (its note: `SIGKILL [pids] at
/// <ns> ns: ...`), if it met one.
fn killed_at(f: &FaultRecord) -> Option<u64> {
    let rest = f.note.strip_prefix("SIGKILL ")?;
    let (_, after) = rest.split_once(" at ")?;
    after.split_once(" ns")?.0.parse().ok()
}

/// When `f` put the agent of the hosts it names out of action: a span, or
/// the instants of its restarts.
fn agent_out(f: &FaultRecord) -> Vec<(u64, u64)> {
    let span = (f.start_ns, f.heal_ns.unwrap_or(u64::MAX));
    match &f.fault {
        Fault::KillAgent(_) | Fault::StopAgent(_) | Fault::Operator(_) => vec![span],
        Fault::ClockStep { .. } | Fault::ClockRate { .. } => [Some(f.start_ns), f.heal_ns]
            .into_iter()
            .flatten()
            .map(|t| (t, t))
            .collect(),
        Fault::DiskFull(_) if f.note.contains(RESTARTED_AT_HEAL) => {
            f.heal_ns.into_iter().map(|t| (t, t)).collect()
        }
        _ => Vec::new(),
    }
}

/// The stretches in which `f` (what would fence `node` broken, until
/// `thaw`) met `node`'s agent out of action.
fn with_agent_out(h: &History, node: &str, f: &FaultRecord, thaw: Option<u64>) -> Vec<Freeze> {
    let until = f.heal_ns.unwrap_or(u64::MAX);
    h.faults
        .iter()
        .filter(|g| on(g, node))
        .flat_map(agent_out)
        .filter(|&(a, b)| a <= until && b >= f.start_ns)
        .map(|(a, _)| Freeze {
            from: a.max(f.start_ns),
            thaw,
        })
        .collect()
}

/// Every stretch in which nothing on `node` could fence its service.
pub fn freezes(h: &History, node: &str) -> Vec<Freeze> {
    let mut out = Vec::new();
    for f in h.faults.iter().filter(|f| on(f, node)) {
        match f.fault {
            Fault::StopHost(_) | Fault::StopHale(_) | Fault::StopHook(_) => out.push(Freeze {
                from: f.start_ns,
                thaw: f.heal_ns,
            }),
            Fault::StopWatchdog(_) => out.extend(with_agent_out(h, node, f, f.heal_ns)),
            Fault::KillHook(_) => {
                let Some(k) = killed_at(f) else { continue };
                let at_kill = FaultRecord {
                    start_ns: k,
                    heal_ns: Some(k),
                    ..f.clone()
                };
                out.extend(with_agent_out(
                    h,
                    node,
                    &at_kill,
                    Some(k + FENCE_RETRY_FIRST_NS),
                ));
            }
            Fault::HookFails {
                hook: HookSel::Demote | HookSel::Both,
                how,
                ..
            } => {
                let hung = if how == HookFailure::Hang {
                    HOOK_TIMEOUT_NS
                } else {
                    0
                };
                let thaw = f.heal_ns.map(|t| t + hung + FENCE_RETRY_NS);
                out.extend(with_agent_out(h, node, f, thaw));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Target;

    const S: u64 = 1_000_000_000;

    fn fault(fault: Fault, start: u64, heal: u64) -> FaultRecord {
        FaultRecord {
            fault,
            hosts: vec!["h1".into()],
            start_ns: start * S,
            heal_ns: Some(heal * S),
            note: String::new(),
        }
    }

    fn history(faults: Vec<FaultRecord>) -> History {
        History {
            nodes: vec!["h0".into(), "h1".into()],
            faults,
            ..History::default()
        }
    }

    #[test]
    fn a_watchdog_frozen_while_its_agent_restarts_leaves_nothing_to_fence_until_it_thaws() {
        let stop = fault(Fault::StopWatchdog(Target::Host(1)), 33, 48);
        let step = fault(
            Fault::ClockStep {
                target: Target::Host(1),
                secs: -60,
            },
            36,
            41,
        );
        let h = history(vec![stop.clone(), step]);
        assert_eq!(
            freezes(&h, "h1"),
            vec![
                Freeze {
                    from: 36 * S,
                    thaw: Some(48 * S)
                },
                Freeze {
                    from: 41 * S,
                    thaw: Some(48 * S)
                }
            ]
        );
        assert!(freezes(&h, "h0").is_empty());
        // Frozen alone, with its agent running: the agent fences.
        assert!(freezes(&history(vec![stop.clone()]), "h1").is_empty());
        // Its agent killed before the freeze and back since: nothing.
        let earlier = fault(Fault::KillAgent(Target::Host(1)), 10, 20);
        assert!(freezes(&history(vec![stop, earlier]), "h1").is_empty());
    }

    #[test]
    fn a_fence_killed_while_its_agent_is_frozen_is_waited_for_until_the_watchdog_tries_again() {
        let mut kill = fault(Fault::KillHook(Target::Holder), 45, 57);
        kill.note = format!("SIGKILL [11987] at {} ns: [\"hook demote\"]", 52 * S);
        let frozen = fault(Fault::StopAgent(Target::Host(0)), 50, 57);
        assert_eq!(
            freezes(&history(vec![kill.clone(), frozen.clone()]), "h1"),
            vec![Freeze {
                from: 52 * S,
                thaw: Some(52 * S + FENCE_RETRY_FIRST_NS)
            }]
        );
        // The agent running when the hook was killed: it demotes itself.
        let later = fault(Fault::StopAgent(Target::Host(0)), 53, 57);
        assert!(freezes(&history(vec![kill.clone(), later]), "h1").is_empty());
        // No hook met (nothing killed): nothing.
        kill.note = "waiting for a hook to run".into();
        assert!(freezes(&history(vec![kill, frozen]), "h1").is_empty());
    }

    #[test]
    fn a_fence_failing_while_its_agent_is_out_is_waited_for_until_it_can_succeed_again() {
        let fails = |how| {
            fault(
                Fault::HookFails {
                    target: Target::Host(1),
                    hook: HookSel::Demote,
                    how,
                },
                39,
                48,
            )
        };
        let rate = fault(
            Fault::ClockRate {
                target: Target::Host(1),
                permille: 950,
            },
            43,
            55,
        );
        let h = history(vec![fails(HookFailure::Hang), rate.clone()]);
        assert_eq!(
            freezes(&h, "h1"),
            vec![Freeze {
                from: 43 * S,
                thaw: Some(59 * S)
            }]
        );
        let h = history(vec![fails(HookFailure::Exit), rate.clone()]);
        assert_eq!(freezes(&h, "h1")[0].thaw, Some(49 * S));
        // The agent running: it keeps the role while its demote fails.
        assert!(freezes(&history(vec![fails(HookFailure::Hang)]), "h1").is_empty());
        // Promote hooks failing break no fence.
        let promote = fault(
            Fault::HookFails {
                target: Target::Host(1),
                hook: HookSel::Promote,
                how: HookFailure::Hang,
            },
            39,
            48,
        );
        assert!(freezes(&history(vec![promote, rate]), "h1").is_empty());
    }
}
