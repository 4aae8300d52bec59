//! (g) Never two holders, from the hook logs: the stretches in which two
//! hosts may each have served as primary never overlap, by the shared
//! clock of every hook line (independent of the registers' epoch checks,
//! which would hide an overlap from [`super::fencing`]).
//!
//! A host serves from the start of a promote hook until a demote hook on
//! it (the agent's demote or its watchdog's fence), at that epoch or a
//! later one, fenced it: a promote may take effect at any moment of its
//! run. This harness's demote fences the local register first, logs
//! `fenced`, and then takes its length (`hook.rs`): serving ends at that
//! line (in histories recorded before it was logged: the register's own
//! `fence` record within the demote's run, else the demote's end line). A demote that neither fenced nor ended (it failed or was
//! killed first) ends nothing: a role released after it leaves two
//! holders. Ending at the hook's end line instead would ask more than hale
//! promises: a holder, or its watchdog, *starts* its demote before anyone
//! else can be granted the role (README, "What the epoch guarantees"), and
//! a watchdog that fences at the lease's deadline is still in its hook's
//! length when the next holder's promote starts. Then:
//!
//! * a promote that never logged its end did not take effect (the
//!   harness's promote ends right after its one effect, the register made
//!   primary; it fails, is refused or killed before): it opens nothing;
//! * a promote while the host already serves extends what it serves;
//! * a host whose every process is killed (`kill-host`) stops serving at
//!   the fault's start: nothing is left to serve. A killed agent ends
//!   nothing: its watchdog fences;
//! * while a host's hale cannot act — frozen with everything on it
//!   (`stop-host`: the service frozen too, harmless), hale frozen beside a
//!   serving register (`stop-hale`), or its running hook frozen
//!   (`stop-hook`), its watchdog frozen while its agent is out
//!   ([`super::frozen`]) — an overlap is excused, and after the thaw until the
//!   fence of the first demote (the watchdog's) begun within
//!   [`AFTER_THAW_NS`] of it; with none begun by then, until then. No
//!   process on the host can shorten that (the database's own epoch check
//!   is the answer: README, "What the epoch guarantees"), as in
//!   [`super::fenced_first`];
//! * stretches open when the harness begins stopping the cluster end
//!   there, and promotes begun after it are not the run's.

use std::collections::BTreeMap;

use super::Violation;
use crate::history::History;
use crate::hook::{HookKind, HookLine, Phase};
use crate::register::RegisterRecord;
use crate::schedule::Fault;

/// How long after a freeze heals its host's fence may take to begin.
pub const AFTER_THAW_NS: u64 = 2_000_000_000;

/// One host's stretch of serving: `[from, to]`, promoted at `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stretch {
    from: u64,
    to: u64,
    epoch: u64,
}

/// When the demote run that began with `start` fenced `node`'s register:
/// its `fenced` line; else (histories recorded before the hooks logged
/// it) the register's first fence within the run; else the run's end
/// line; `None` if it neither fenced nor ended.
/// A run ends where the next run of the same demote begins (a retry, or
/// the watchdog's fence after the agent's): a later run's fence is not
/// this one's (a fence that hung and was retried ten seconds later, seed
/// 10005, must not stretch the earlier run to the retry).
fn fence_of(h: &History, start: &HookLine) -> Option<u64> {
    let same = |l: &&HookLine| {
        l.node == start.node && l.kind == HookKind::Demote && l.epoch == start.epoch
    };
    let next = h
        .hooks
        .iter()
        .filter(same)
        .filter(|l| l.phase == Phase::Start && l.t > start.t)
        .map(|l| l.t)
        .min()
        .unwrap_or(u64::MAX);
    let run = |phase: Phase| {
        h.hooks
            .iter()
            .filter(same)
            .filter(move |l| l.phase == phase && l.t >= start.t && l.t < next)
            .map(|l| l.t)
            .min()
    };
    let end = run(Phase::End);
    let logged = || {
        h.registers
            .get(&start.node)
            .into_iter()
            .flatten()
            .filter_map(|r| match r {
                RegisterRecord::Fence { t, .. } if *t >= start.t && end.is_none_or(|e| *t <= e) => {
                    Some(*t)
                }
                _ => None,
            })
            .min()
    };
    run(Phase::Fenced).or_else(logged).or(end)
}

/// Whether `fault` ends the service on the hosts it names when it starts:
/// a host killed, or the register stopped by hand before a forced resume
/// (the operator's step of the documented `resume --force`; its record
/// names the holder only when it did stop it).
fn ends_service(fault: &Fault) -> bool {
    matches!(
        fault,
        Fault::KillHost(_) | Fault::Operator(crate::operator::Action::ResumeForce { .. })
    )
}

/// Every host's stretches of serving, in time order.
fn stretches(h: &History) -> BTreeMap<&str, Vec<Stretch>> {
    let stopping = h.stopping();
    let mut by_node: BTreeMap<&str, Vec<&HookLine>> = BTreeMap::new();
    for l in &h.hooks {
        by_node.entry(&l.node).or_default().push(l);
    }
    let mut out = BTreeMap::new();
    for (node, mut lines) in by_node {
        lines.sort_by_key(|l| l.t);
        let ended = |epoch: u64| {
            lines
                .iter()
                .any(|l| l.kind == HookKind::Promote && l.phase == Phase::End && l.epoch == epoch)
        };
        let mut kills: Vec<u64> = h
            .faults
            .iter()
            .filter(|f| ends_service(&f.fault) && f.hosts.iter().any(|x| x == node))
            .map(|f| f.start_ns)
            .collect();
        kills.sort_unstable();
        let mut list: Vec<Stretch> = Vec::new();
        let mut open: Option<Stretch> = None;
        let mut close = |open: &mut Option<Stretch>, to: u64| {
            if let Some(mut s) = open.take() {
                s.to = to;
                list.push(s);
            }
        };
        for l in &lines {
            // A host killed before this line stopped serving then.
            if let Some(&k) = kills
                .iter()
                .find(|&&k| open.is_some_and(|s| s.from <= k) && k <= l.t)
            {
                close(&mut open, k);
            }
            match (l.kind, l.phase) {
                (HookKind::Promote, Phase::Start) if l.t < stopping && ended(l.epoch) => {
                    match open.as_mut() {
                        Some(s) => s.epoch = s.epoch.max(l.epoch),
                        None => {
                            open = Some(Stretch {
                                from: l.t,
                                to: u64::MAX,
                                epoch: l.epoch,
                            });
                        }
                    }
                }
                (HookKind::Demote, Phase::Start) if open.is_some_and(|s| l.epoch >= s.epoch) => {
                    if let Some(t) = fence_of(h, l) {
                        close(&mut open, t);
                    }
                }
                _ => {}
            }
        }
        if let Some(s) = open {
            let killed = kills.iter().copied().find(|&k| k >= s.from);
            close(
                &mut open,
                killed.unwrap_or(stopping).min(stopping).max(s.from),
            );
        }
        out.insert(node, list);
    }
    out
}

/// When `node`'s fence after a thaw at `thaw` took effect: that of its
/// first demote begun within [`AFTER_THAW_NS`] after the thaw (or frozen
/// across it: begun before, fenced or ended after), else the thaw plus that.
fn fenced_after(h: &History, node: &str, thaw: u64) -> u64 {
    let limit = thaw + AFTER_THAW_NS;
    h.hooks
        .iter()
        .filter(|l| {
            l.node == node && l.kind == HookKind::Demote && l.phase == Phase::Start && l.t <= limit
        })
        .filter_map(|l| fence_of(h, l))
        .find(|&t| t >= thaw)
        .unwrap_or(limit)
}

/// The stretches in which an overlap involving `node` is excused.
fn excused(h: &History, node: &str) -> Vec<(u64, u64)> {
    super::frozen::freezes(h, node)
        .into_iter()
        .map(|f| {
            let to = f.thaw.map_or(u64::MAX, |thaw| fenced_after(h, node, thaw));
            (f.from, to)
        })
        .collect()
}

/// The first moment of `[from, to]` (`from < to`) outside every one of
/// `excused`, if any.
fn first_unexcused(from: u64, to: u64, excused: &mut [(u64, u64)]) -> Option<u64> {
    excused.sort_unstable();
    let mut at = from;
    for &(a, b) in excused.iter() {
        if a > at {
            break;
        }
        at = at.max(b);
    }
    (at < to).then_some(at)
}

/// Checks (g).
pub fn check(h: &History) -> Result<(), Violation> {
    let all = stretches(h);
    let mut found: Option<(u64, Violation)> = None;
    for (&a, sa) in &all {
        for (&b, sb) in
            all.range::<str, _>((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))
        {
            let mut ex = excused(h, a);
            ex.extend(excused(h, b));
            for x in sa {
                for y in sb {
                    let (from, to) = (x.from.max(y.from), x.to.min(y.to));
                    if from >= to {
                        continue;
                    }
                    let Some(at) = first_unexcused(from, to, &mut ex) else {
                        continue;
                    };
                    if found.as_ref().is_some_and(|(t, _)| *t <= at) {
                        continue;
                    }
                    let v = Violation::new(
                        "two-holders",
                        format!(
                            "{a} (promoted at epoch {}, serving {:.3}–{:.3} s) and {b} (epoch {}, {:.3}–{:.3} s) both served from {:.3} s for {:.3} s by their hooks",
                            x.epoch,
                            secs(h, x.from),
                            secs(h, x.to),
                            y.epoch,
                            secs(h, y.from),
                            secs(h, y.to),
                            secs(h, at),
                            (to - at) as f64 / 1e9,
                        ),
                        from.saturating_sub(3_000_000_000),
                        to.saturating_add(1_000_000_000),
                    );
                    found = Some((at, v));
                }
            }
        }
    }
    match found {
        Some((_, v)) => Err(v),
        None => Ok(()),
    }
}

fn secs(h: &History, t: u64) -> f64 {
    (t as i128 - h.faults_start_ns as i128) as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::FaultRecord;
    use crate::schedule::Target;

    const S: u64 = 1_000_000_000;

    fn line(t: u64, node: &str, kind: HookKind, phase: Phase, epoch: u64) -> HookLine {
        HookLine {
            t: t * S,
            node: node.into(),
            kind,
            phase,
            epoch,
            reason: None,
        }
    }

    /// `node` promoted at `epoch` over `[p, p + 1]` s and demoted over `[d, d + 1]` s.
    fn served(node: &str, epoch: u64, p: u64, d: Option<u64>) -> Vec<HookLine> {
        let mut v = vec![
            line(p, node, HookKind::Promote, Phase::Start, epoch),
            line(p + 1, node, HookKind::Promote, Phase::End, epoch),
        ];
        if let Some(d) = d {
            v.push(line(d, node, HookKind::Demote, Phase::Start, epoch));
            v.push(line(d + 1, node, HookKind::Demote, Phase::End, epoch));
        }
        v
    }

    fn history(hooks: Vec<Vec<HookLine>>, faults: Vec<FaultRecord>) -> History {
        let mut hooks: Vec<HookLine> = hooks.into_iter().flatten().collect();
        hooks.sort_by_key(|l| l.t);
        History {
            hooks,
            faults,
            stopping_ns: Some(100 * S),
            end_ns: 110 * S,
            ..History::default()
        }
    }

    fn on_h0(fault: Fault, start: u64, heal: u64) -> FaultRecord {
        FaultRecord {
            fault,
            hosts: vec!["h0".into()],
            start_ns: start * S,
            heal_ns: Some(heal * S),
            note: String::new(),
        }
    }

    #[test]
    fn a_handover_after_the_old_holders_demote_ended_passes() {
        let h = history(
            vec![served("h0", 1, 0, Some(10)), served("h1", 2, 12, None)],
            vec![],
        );
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_promote_begun_before_the_old_holders_demote_ended_is_caught() {
        let h = history(
            vec![served("h0", 1, 0, Some(10)), served("h1", 2, 10, None)],
            vec![],
        );
        let v = check(&h).expect_err("caught");
        assert!(v.what.contains("h0 (promoted at epoch 1"), "{v}");
        assert!(v.what.contains("h1 (epoch 2"), "{v}");
    }

    #[test]
    fn serving_ends_when_the_register_was_fenced_not_when_the_demote_hook_ended() {
        // h0's demote runs 10–11 s and fenced its register at 10.2 s; h1's
        // promote starts at 10.5 s (ms here).
        let ms = |t: u64| t * 1_000_000;
        let mut h = history(vec![served("h0", 1, 0, Some(10))], vec![]);
        let mut h1 = served("h1", 2, 0, None);
        for l in &mut h1 {
            l.t += ms(10_500);
        }
        h.hooks.extend(h1);
        h.hooks.sort_by_key(|l| l.t);
        assert!(
            check(&h).is_err(),
            "without the fence in the log: the hook's end"
        );
        let fence = RegisterRecord::Fence {
            t: ms(10_200),
            epoch: 1,
        };
        h.registers.insert("h0".into(), vec![fence]);
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn serving_ends_at_the_demotes_fenced_line() {
        let mut h = history(
            vec![served("h0", 1, 0, Some(10)), served("h1", 2, 10, None)],
            vec![],
        );
        assert!(check(&h).is_err());
        h.hooks
            .push(line(10, "h0", HookKind::Demote, Phase::Fenced, 1));
        h.hooks.sort_by_key(|l| l.t);
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_demote_that_failed_before_fencing_ends_nothing() {
        let mut h0 = served("h0", 1, 0, None);
        h0.push(line(10, "h0", HookKind::Demote, Phase::Start, 1));
        let h = history(vec![h0, served("h1", 2, 12, None)], vec![]);
        assert!(check(&h).is_err());
    }

    #[test]
    fn a_holder_that_never_demoted_overlaps_the_next_one() {
        let h = history(
            vec![served("h0", 1, 0, None), served("h1", 2, 20, None)],
            vec![],
        );
        assert!(check(&h).is_err());
    }

    #[test]
    fn a_demote_of_an_older_epoch_does_not_end_a_newer_promotion() {
        let mut h0 = served("h0", 3, 0, None);
        h0.push(line(5, "h0", HookKind::Demote, Phase::Start, 2));
        h0.push(line(6, "h0", HookKind::Demote, Phase::End, 2));
        let h = history(vec![h0, served("h1", 4, 20, None)], vec![]);
        assert!(check(&h).is_err());
    }

    #[test]
    fn a_promote_that_never_ended_opens_nothing() {
        let failed = vec![line(5, "h0", HookKind::Promote, Phase::Start, 1)];
        let h = history(vec![failed, served("h1", 2, 6, None)], vec![]);
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_killed_host_stops_serving_when_it_is_killed_and_a_killed_agent_does_not() {
        let hooks = || vec![served("h0", 1, 0, None), served("h1", 2, 20, None)];
        let kill = on_h0(Fault::KillHost(Target::Host(0)), 15, 25);
        assert_eq!(check(&history(hooks(), vec![kill])), Ok(()));
        let agent = on_h0(Fault::KillAgent(Target::Host(0)), 15, 25);
        assert!(check(&history(hooks(), vec![agent])).is_err());
    }

    #[test]
    fn a_frozen_host_is_excused_until_its_fence_after_the_thaw_ends() {
        // Frozen 5–20 s; h1 promoted at 12 s; h0's fence runs 21–22 s.
        let hooks = || vec![served("h0", 1, 0, Some(21)), served("h1", 2, 12, None)];
        for f in [
            Fault::StopHost(Target::Host(0)),
            Fault::StopHale(Target::Host(0)),
            Fault::StopHook(Target::Host(0)),
        ] {
            let name = f.name();
            assert_eq!(
                check(&history(hooks(), vec![on_h0(f, 5, 20)])),
                Ok(()),
                "{name}"
            );
        }
        // A fence begun 5 s after the thaw: the overlap from 22 s is not excused.
        let late = vec![served("h0", 1, 0, Some(25)), served("h1", 2, 12, None)];
        let v = check(&history(
            late,
            vec![on_h0(Fault::StopHost(Target::Host(0)), 5, 20)],
        ))
        .expect_err("caught");
        assert!(v.what.contains("from 22.000 s"), "{v}");
    }

    #[test]
    fn a_slow_hook_excuses_no_overlap() {
        let hooks = vec![served("h0", 1, 0, Some(15)), served("h1", 2, 12, None)];
        let slow = on_h0(
            Fault::SlowHooks {
                target: Target::Host(0),
                ms: 15_000,
            },
            5,
            20,
        );
        assert!(check(&history(hooks, vec![slow])).is_err());
    }

    #[test]
    fn promotes_once_the_harness_is_stopping_are_not_the_runs() {
        let h = history(
            vec![served("h0", 1, 0, None), served("h1", 2, 101, None)],
            vec![],
        );
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_hung_fence_retried_later_ends_nothing_and_a_later_epochs_demote_on_that_host_ends_its_serving(
    ) {
        // Seed 10005: h0's watchdog fence of epoch 2 hung at 20 s (retried
        // and fenced at 40 s); h0's next run held epoch 3 and handed over
        // at 30 s (fenced then), and h1 promoted at 32 s.
        let h0 = vec![
            line(0, "h0", HookKind::Promote, Phase::Start, 2),
            line(1, "h0", HookKind::Promote, Phase::End, 2),
            line(20, "h0", HookKind::Demote, Phase::Start, 2),
            line(20, "h0", HookKind::Demote, Phase::Failed, 2),
            line(25, "h0", HookKind::Promote, Phase::Start, 3),
            line(26, "h0", HookKind::Promote, Phase::End, 3),
            line(30, "h0", HookKind::Demote, Phase::Start, 3),
            line(30, "h0", HookKind::Demote, Phase::Fenced, 3),
            line(31, "h0", HookKind::Demote, Phase::End, 3),
            line(40, "h0", HookKind::Demote, Phase::Start, 2),
            line(40, "h0", HookKind::Demote, Phase::Fenced, 2),
            line(41, "h0", HookKind::Demote, Phase::End, 2),
        ];
        let ok = history(vec![h0.clone(), served("h1", 4, 32, None)], vec![]);
        assert_eq!(check(&ok), Ok(()));
        // Without the epoch-3 holding, nothing fenced h0 before 40 s: caught.
        let hung: Vec<HookLine> = h0.into_iter().filter(|l| l.epoch == 2).collect();
        let bad = history(vec![hung, served("h1", 4, 32, None)], vec![]);
        assert!(check(&bad).is_err());
    }
}
