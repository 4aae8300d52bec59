//! (d) No false deaths: every death verdict an agent published rests on a
//! fault that made the member unreachable from whoever reached it, with a
//! second accuser, or that stopped the member.
//!
//! A death is published by an observer `O` about a member `M` and was
//! reached by a declarer `D` (the event's `declared_by`: `O` itself, or
//! the member whose verdict `O` accepted; `O` in histories recorded before
//! it was kept). The verdict is judged where it was reached, at `D`: `O`
//! only took `D`'s word, which hale lets it do for a verdict resting on
//! enough accusers. It is legitimate when, at some instant within
//! [`GRACE_NS`] before the harness saw it, the faults then in force
//!
//! * stopped `M`: its agent or host killed or stopped (`kill-agent`,
//!   `stop-agent`, `kill-host`, `stop-host`, `stop-hale`), or its agent
//!   restarted (a `clock-step` or `clock-rate` starting or healing, a
//!   `disk-full` healed by restarting a degraded agent): the old process is
//!   gone, and a verdict on it while the new one is not yet heard is
//!   right. Any observer may convict then; or
//! * cut `M` off from `D` and from at least one more running host
//!   ([`CORROBORATION`] accusers in all, hale-core's default `corroboration`,
//!   which the nemesis does not change): a verdict needs two independent
//!   observers that cannot reach `M`, and a cut that leaves `D` alone
//!   failing to reach `M` is `D`'s own trouble, not `M`'s death.
//!
//! A probe is a round trip, so `x` cannot reach `y` when either does not
//! hear the other. Per network fault:
//!
//! * `partition-halves`: hosts on different sides; so `M` is convicted
//!   legitimately by the other side (every side has two hosts or more).
//! * `partition-bridge`: the two sides, the bridge host on neither (it
//!   hears both): the other side convicts, the bridge never.
//! * `isolate-*`: the host and every other: every observer may convict the
//!   isolated host; the isolated host convicts nobody (it is alone).
//! * `one-way-in` / `one-way-out`: as an isolation. A host that hears
//!   nobody gets no acks and cannot answer the pings it never receives; a
//!   host nobody hears receives pings but its acks are lost: either way no
//!   round trip to or from it completes. Every observer may convict it; it
//!   convicts nobody.
//! * `delay`: `x` and `y` when their round trip, `2 × (delay(x) + delay(y))`
//!   (each host's queue is crossed both ways), is at least the probe
//!   interval (1 s, lan profile): no ack, direct or relayed (a relay adds
//!   legs), can arrive before the probe fails. Less is what the detector
//!   rides out (a late direct ack still counts until the probe's end).
//! * `loss` never cuts: at most 30% of a host's input is dropped, and the
//!   detector is built to ride that out (the ping sent twice, three
//!   indirect probes, a stream fallback, two accusers, and a suspicion time
//!   of at least 2.5 s during which the refutation is resent).
//!
//! Faults that do not stop `M` or cut it off — slow hooks, clock faults
//! other than their restarts, full disks, killing or stopping a watchdog or
//! a hook — excuse no death of `M` by anyone; nor does anything done to `D`
//! alone (a frozen or restarted declarer must not convict on probes its
//! freeze interrupted).
//!
//! A member that leaves gracefully (its agent stopped by SIGTERM) is
//! published as `left`, never `dead`, and the harness records only `dead`
//! events; verdicts seen once the harness is stopping the cluster are its
//! doing and are not judged.
//!
//! The grace, from the agents' membership knobs (hale-core's `lan`
//! profile; the nemesis sets none): a verdict may trail the heal of what
//! caused it by the longest suspicion time, `suspicion_max` = 10 s (a
//! suspicion with no confirmation waits that long from its silence, which
//! began during the fault; a probe stretched by poor local health, at most
//! 8 × 1 s, fails within it too), plus 1 s for the verdict to be gossiped
//! to an observer that accepts it ([`CAUSE_NS`]), before the verdict was
//! published. When it was published is bounded by the harness's polls: after
//! the last answer of that agent that did not have it
//! ([`Death::published_after_ns`]), so a verdict seen late (its agent frozen
//! just after reaching it: seed 40023, a verdict reached during a partition,
//! seen 17 s later) is judged from when it could have been reached. In
//! histories without that bound, the harness's lag is added instead (it
//! asks every agent in turn, each answer awaited up to 0.5 s, then sleeps
//! 1 s: at most 3.5 s; [`GRACE_NS`]). The detector's time to convict after
//! a fault starts needs no grace: a verdict before the fault's start is not
//! its.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::Violation;
use crate::history::{Death, FaultRecord, History};
use crate::schedule::{Fault, Net};

/// How long before a verdict was published its cause may have ended:
/// `suspicion_max` (10 s) + gossip (1 s).
pub const CAUSE_NS: u64 = 11_000_000_000;

/// How long before the harness saw a verdict its cause may have ended,
/// when when it was published is not bounded: [`CAUSE_NS`] + the
/// harness's polling lag (3.5 s).
pub const GRACE_NS: u64 = 14_500_000_000;

/// From when the faults in force may have caused verdict `d`.
fn cause_from(d: &Death) -> u64 {
    match d.published_after_ns {
        Some(after) => after.min(d.seen_ns).saturating_sub(CAUSE_NS),
        None => d.seen_ns.saturating_sub(GRACE_NS),
    }
}

/// The probe interval (lan profile): a round trip this long or longer
/// cannot be acknowledged in time.
pub const PROBE_INTERVAL_MS: u64 = 1_000;

/// Accusers a verdict needs (hale-core's default `corroboration`).
pub const CORROBORATION: usize = 2;

/// What a `disk-full` heal's note says when it restarted a degraded agent
/// (`nemesis.rs`).
const RESTARTED_AT_HEAL: &str = "agent restarted at heal";

/// What the faults in force at one instant do.
#[derive(Debug, Default)]
struct Reach {
    /// Hosts whose agent is stopped, killed or restarting.
    down: BTreeSet<usize>,
    /// Hosts an operator action stops or restarts at some point while it
    /// runs (it records only the whole action's span): a verdict on them
    /// is excused, but they still count as accusers of others.
    touched: BTreeSet<usize>,
    /// Host pairs `(a, b)`, `a < b`, with no round trip between them.
    cut: BTreeSet<(usize, usize)>,
}

impl Reach {
    fn cut(&self, a: usize, b: usize) -> bool {
        self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Whether `declarer` may legitimately convict `member`.
    fn convicts(&self, declarer: usize, member: usize, hosts: usize) -> bool {
        if self.down.contains(&member) || self.touched.contains(&member) {
            return true;
        }
        let accusers = (0..hosts)
            .filter(|&x| x != member && !self.down.contains(&x) && self.cut(x, member))
            .count();
        self.cut(declarer, member) && accusers >= CORROBORATION
    }
}

fn index(h: &History, name: &str) -> Option<usize> {
    h.nodes.iter().position(|n| n == name)
}

/// The host a host fault (or an isolation, a one-way cut) resolved to.
fn target(h: &History, f: &FaultRecord) -> Option<usize> {
    index(h, f.hosts.first()?)
}

/// Whether `f` is in force at `t` (from its start to its heal, both included).
fn in_force(f: &FaultRecord, t: u64) -> bool {
    f.start_ns <= t && f.heal_ns.is_none_or(|heal| t <= heal)
}

/// The instants at which `f` restarts its host's agent.
fn restarts(f: &FaultRecord) -> Vec<u64> {
    match f.fault {
        Fault::ClockStep { .. } | Fault::ClockRate { .. } => {
            f.heal_ns.into_iter().chain([f.start_ns]).collect()
        }
        Fault::DiskFull(_) if f.note.contains(RESTARTED_AT_HEAL) => f.heal_ns.into_iter().collect(),
        _ => Vec::new(),
    }
}

fn reach_at(h: &History, t: u64) -> Reach {
    let n = h.nodes.len();
    let mut r = Reach::default();
    // hears[x][y]: x receives what y sends.
    let mut hears = vec![vec![true; n]; n];
    let mut delay = vec![0u64; n];
    for f in &h.faults {
        if restarts(f).contains(&t) {
            r.down.extend(target(h, f));
        }
        if !in_force(f, t) {
            continue;
        }
        let mut deaf = |x: usize, y: usize| {
            if x < n && y < n && x != y {
                hears[x][y] = false;
            }
        };
        match &f.fault {
            Fault::KillAgent(_)
            | Fault::StopAgent(_)
            | Fault::KillHost(_)
            | Fault::StopHost(_)
            | Fault::StopHale(_) => r.down.extend(target(h, f)),
            // An operator action that stops or restarts a host's agent
            // (restarts of the holder's agent, a downgrade, a server
            // removed) names the hosts whose processes it touched: a
            // verdict on them is excused while it runs (seed 10061: not
            // taken as down, or they would stop counting as accusers).
            // Pause, resume, reload, switchover, handover and key rotation
            // touch none and excuse nothing.
            Fault::Operator(_) => {
                r.touched
                    .extend(f.hosts.iter().filter_map(|name| index(h, name)));
            }
            Fault::Net(Net::Halves { side }) | Fault::Net(Net::Bridge { side, .. }) => {
                let bridge = match &f.fault {
                    Fault::Net(Net::Bridge { bridge, .. }) => Some(*bridge),
                    _ => None,
                };
                let other: Vec<usize> = (0..n)
                    .filter(|x| !side.contains(x) && Some(*x) != bridge)
                    .collect();
                for &a in side {
                    for &b in &other {
                        deaf(a, b);
                        deaf(b, a);
                    }
                }
            }
            Fault::Net(Net::Isolate(_)) | Fault::Net(Net::OneWay { .. }) => {
                // Both ways for the round trips (module doc).
                if let Some(x) = target(h, f) {
                    for y in 0..n {
                        deaf(x, y);
                        deaf(y, x);
                    }
                }
            }
            Fault::Net(Net::Delay { hosts, ms }) => {
                for &x in hosts.iter().filter(|&&x| x < n) {
                    delay[x] = delay[x].max(u64::from(*ms));
                }
            }
            Fault::Net(Net::Loss { .. })
            | Fault::KillWatchdog(_)
            | Fault::StopWatchdog(_)
            | Fault::KillHook(_)
            | Fault::StopHook(_)
            | Fault::ClockStep { .. }
            | Fault::ClockRate { .. }
            | Fault::DiskFull(_)
            | Fault::SlowHooks { .. }
            | Fault::HookFails { .. } => {}
        }
    }
    for a in 0..n {
        for b in a + 1..n {
            let slow = 2 * (delay[a] + delay[b]) >= PROBE_INTERVAL_MS;
            if !hears[a][b] || !hears[b][a] || slow {
                r.cut.insert((a, b));
            }
        }
    }
    r
}

/// The instants at which the faults in force change within `[from, to]`,
/// and both ends: what was in force at any moment of it was in force at one
/// of them.
fn instants(h: &History, from: u64, to: u64) -> Vec<u64> {
    let mut out = vec![from, to];
    for f in &h.faults {
        let marks = [f.start_ns].into_iter().chain(f.heal_ns).chain(restarts(f));
        out.extend(marks.filter(|t| (from..=to).contains(t)));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether `declarer` could legitimately convict `member` at some time
/// from `from` to `seen`.
fn legitimate(h: &History, declarer: &str, member: &str, from: u64, seen: u64) -> bool {
    let (Some(d), Some(m)) = (index(h, declarer), index(h, member)) else {
        return false;
    };
    instants(h, from, seen)
        .into_iter()
        .any(|t| reach_at(h, t).convicts(d, m, h.nodes.len()))
}

/// Who reached the verdict `d` published.
fn declarer(d: &Death) -> &str {
    d.declared_by.as_deref().unwrap_or(&d.observer)
}

/// Checks (d).
pub fn check(h: &History) -> Result<(), Violation> {
    let stopping = h.stopping();
    let Some(d) = h
        .deaths
        .iter()
        .filter(|d| d.seen_ns < stopping)
        .find(|d| !legitimate(h, declarer(d), &d.member, cause_from(d), d.seen_ns))
    else {
        return Ok(());
    };
    let from = cause_from(d);
    let mut faults = String::new();
    for f in h
        .faults
        .iter()
        .filter(|f| f.start_ns <= d.seen_ns && f.heal_ns.is_none_or(|heal| heal >= from))
    {
        let _ = write!(faults, " {} on {:?};", f.fault.name(), f.hosts);
    }
    let verdict = match &d.declared_by {
        Some(x) if *x != d.observer => format!(" (the verdict of {x})"),
        _ => String::new(),
    };
    Err(Violation::new(
        "false-death",
        format!(
            "{} declared {} dead{verdict} at {:.1} s, which nothing in the {:.1} s before had stopped or cut off from {} and a second host; faults in force in that time:{}",
            d.observer,
            d.member,
            (d.seen_ns as i128 - h.faults_start_ns as i128) as f64 / 1e9,
            (d.seen_ns - from) as f64 / 1e9,
            declarer(d),
            if faults.is_empty() { " none".to_owned() } else { faults },
        ),
        from,
        d.seen_ns + 1_000_000_000,
    ))
}

/// How many ordered (declarer, member) pairs a verdict seen at `t` would be
/// excused for, of `n × (n − 1)`: what (d) lets pass at that moment.
pub fn excused_pairs(h: &History, t: u64) -> usize {
    let n = h.nodes.len();
    (0..n)
        .flat_map(|d| (0..n).map(move |m| (d, m)))
        .filter(|&(d, m)| {
            d != m && legitimate(h, &h.nodes[d], &h.nodes[m], t.saturating_sub(GRACE_NS), t)
        })
        .count()
}

/// How many hosts the check before this one exempted at `t`: every host
/// any fault started by then had named, for the rest of the run.
pub fn touched_hosts(h: &History, t: u64) -> usize {
    h.faults
        .iter()
        .filter(|f| f.start_ns <= t)
        .flat_map(|f| f.hosts.iter())
        .collect::<BTreeSet<_>>()
        .len()
}

/// What (d) lets pass over the fault phase, second by second, against
/// the check before it: the share of ordered (declarer, member) pairs a
/// verdict would be excused for, and the share of hosts once exempt.
pub fn exemptions(h: &History) -> String {
    let n = h.nodes.len();
    let pairs = (n * n.saturating_sub(1)).max(1);
    let (mut now, mut before, mut secs) = (0usize, 0usize, 0usize);
    let mut at20 = String::new();
    let mut t = h.faults_start_ns;
    while t <= h.heal_ns {
        let (e, o) = (excused_pairs(h, t), touched_hosts(h, t));
        if secs == 20 {
            at20 = format!("; at 20 s: {e} of {pairs} pairs, before {o} of {n} hosts");
        }
        now += e;
        before += o * (n - 1);
        secs += 1;
        t += 1_000_000_000;
    }
    let share = |x: usize| 100.0 * x as f64 / (pairs * secs.max(1)) as f64;
    format!(
        "false-death exemptions over {secs} s of faults: {:.0}% of (declarer, member) pairs excused, before {:.0}%{at20}",
        share(now),
        share(before)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Target;

    const S: u64 = 1_000_000_000;

    fn fault(fault: Fault, hosts: &[&str], start: u64, heal: u64) -> FaultRecord {
        FaultRecord {
            fault,
            hosts: hosts.iter().map(|&h| h.to_owned()).collect(),
            start_ns: start * S,
            heal_ns: Some(heal * S),
            note: String::new(),
        }
    }

    fn all() -> Vec<&'static str> {
        vec!["h0", "h1", "h2", "h3", "h4"]
    }

    /// Five hosts, `faults`, and `observer` declaring `member` dead at `at` s.
    fn history(faults: Vec<FaultRecord>, observer: &str, member: &str, at: u64) -> History {
        History {
            nodes: all().into_iter().map(str::to_owned).collect(),
            faults,
            deaths: vec![Death {
                observer: observer.into(),
                member: member.into(),
                seen_ns: at * S,
                declared_by: None,
                published_after_ns: None,
            }],
            end_ns: 1000 * S,
            stopping_ns: Some(900 * S),
            ..History::default()
        }
    }

    fn halves() -> FaultRecord {
        fault(Fault::Net(Net::Halves { side: vec![0, 1] }), &all(), 10, 20)
    }

    #[test]
    fn a_killed_host_declared_dead_by_anyone_passes() {
        let kill = fault(Fault::KillHost(Target::Host(2)), &["h2"], 10, 20);
        assert_eq!(check(&history(vec![kill], "h0", "h2", 12)), Ok(()));
    }

    #[test]
    fn a_death_with_no_fault_at_all_is_caught() {
        let v = check(&history(Vec::new(), "h0", "h3", 12)).expect_err("caught");
        assert!(v.what.contains("h0 declared h3 dead"), "{v}");
    }

    #[test]
    fn the_other_side_of_a_partition_convicting_passes() {
        assert_eq!(check(&history(vec![halves()], "h0", "h3", 15)), Ok(()));
        assert_eq!(check(&history(vec![halves()], "h3", "h1", 15)), Ok(()));
    }

    #[test]
    fn an_observer_on_the_same_side_of_a_partition_convicting_is_caught() {
        let v = check(&history(vec![halves()], "h2", "h3", 15)).expect_err("caught");
        assert!(v.what.contains("partition-halves"), "{v}");
        assert!(check(&history(vec![halves()], "h0", "h1", 15)).is_err());
    }

    #[test]
    fn a_verdict_accepted_from_across_a_healed_partition_is_judged_where_it_was_reached() {
        let mut h = history(vec![halves()], "h4", "h3", 22);
        h.deaths[0].declared_by = Some("h0".into());
        assert_eq!(check(&h), Ok(()));
        h.deaths[0].declared_by = Some("h2".into());
        assert!(check(&h).is_err(), "h2 was on h3's side");
    }

    #[test]
    fn a_verdict_may_trail_its_partitions_heal_by_the_grace_and_no_more() {
        assert_eq!(check(&history(vec![halves()], "h0", "h3", 34)), Ok(()));
        assert!(check(&history(vec![halves()], "h0", "h3", 35)).is_err());
    }

    #[test]
    fn a_verdict_seen_late_is_judged_from_the_last_answer_without_it_and_no_earlier() {
        // Reached during the partition, its agent frozen just after: seen
        // 30 s after the heal, published after the harness's poll at 19 s.
        let stop = fault(Fault::StopHale(Target::Host(3)), &["h3"], 21, 48);
        let mut h = history(vec![halves(), stop], "h3", "h1", 50);
        h.deaths[0].declared_by = Some("h3".into());
        h.deaths[0].published_after_ns = Some(19 * S);
        assert_eq!(check(&h), Ok(()));
        // An agent answered at 40 s without it: published after, a
        // verdict 20 s after the heal is false.
        h.deaths[0].published_after_ns = Some(40 * S);
        let v = check(&h).expect_err("caught");
        assert!(v.what.contains("in the 21.0 s before"), "{v}");
        // Without the bound, from when it was seen.
        h.deaths[0].published_after_ns = None;
        assert!(check(&h).is_err());
    }

    #[test]
    fn a_verdict_seen_before_its_fault_started_is_not_the_faults() {
        assert!(check(&history(vec![halves()], "h0", "h3", 9)).is_err());
    }

    #[test]
    fn a_death_during_a_slow_hook_or_another_harmless_fault_is_caught() {
        for f in [
            Fault::SlowHooks {
                target: Target::Host(3),
                ms: 15_000,
            },
            Fault::DiskFull(Target::Host(3)),
            Fault::KillWatchdog(Target::Host(3)),
            Fault::StopHook(Target::Host(3)),
            Fault::Net(Net::Loss {
                hosts: vec![0, 3],
                percent: 30,
            }),
        ] {
            let name = f.name();
            let h = history(vec![fault(f, &["h3"], 10, 20)], "h0", "h3", 15);
            assert!(check(&h).is_err(), "{name} excused a death");
        }
    }

    #[test]
    fn a_clock_faults_restart_excuses_a_verdict_on_the_old_process_for_the_grace() {
        let step = fault(
            Fault::ClockStep {
                target: Target::Host(3),
                secs: -3600,
            },
            &["h3"],
            10,
            40,
        );
        assert_eq!(check(&history(vec![step.clone()], "h0", "h3", 15)), Ok(()));
        assert!(check(&history(vec![step.clone()], "h0", "h3", 30)).is_err());
        assert_eq!(check(&history(vec![step], "h0", "h3", 45)), Ok(()));
    }

    #[test]
    fn an_isolated_host_is_convicted_by_anyone_and_convicts_nobody() {
        let iso = fault(Fault::Net(Net::Isolate(Target::Host(4))), &["h4"], 10, 20);
        assert_eq!(check(&history(vec![iso.clone()], "h1", "h4", 15)), Ok(()));
        assert!(check(&history(vec![iso], "h4", "h1", 15)).is_err());
    }

    #[test]
    fn a_one_way_cut_host_is_convicted_by_anyone_and_convicts_nobody() {
        for inbound in [true, false] {
            let f = Fault::Net(Net::OneWay {
                target: Target::Host(4),
                inbound,
            });
            let one_way = fault(f, &["h4"], 10, 20);
            assert_eq!(
                check(&history(vec![one_way.clone()], "h2", "h4", 15)),
                Ok(())
            );
            assert!(check(&history(vec![one_way], "h4", "h2", 15)).is_err());
        }
    }

    #[test]
    fn a_bridge_host_convicts_nobody_and_the_sides_convict_each_other() {
        let bridge = fault(
            Fault::Net(Net::Bridge {
                bridge: 2,
                side: vec![0, 1],
            }),
            &all(),
            10,
            20,
        );
        assert_eq!(
            check(&history(vec![bridge.clone()], "h0", "h4", 15)),
            Ok(())
        );
        assert!(check(&history(vec![bridge.clone()], "h2", "h4", 15)).is_err());
        assert!(check(&history(vec![bridge], "h0", "h2", 15)).is_err());
    }

    #[test]
    fn a_delay_excuses_only_round_trips_of_a_probe_interval() {
        let delay = |hosts: Vec<usize>, ms: u32| {
            let names: Vec<&str> = hosts.iter().map(|&h| all()[h]).collect();
            fault(Fault::Net(Net::Delay { hosts, ms }), &names, 10, 20)
        };
        // h3 slow for everyone: 1.6 s round trips.
        assert_eq!(
            check(&history(vec![delay(vec![3], 800)], "h0", "h3", 15)),
            Ok(())
        );
        // 0.6 s round trips are ridden out.
        assert!(check(&history(vec![delay(vec![3], 300)], "h0", "h3", 15)).is_err());
        // The slow declarer alone cannot reach anyone: its own trouble.
        assert!(check(&history(vec![delay(vec![0], 800)], "h0", "h3", 15)).is_err());
    }

    #[test]
    fn a_frozen_declarer_excuses_nothing() {
        let stop = fault(Fault::StopAgent(Target::Host(0)), &["h0"], 10, 20);
        assert!(check(&history(vec![stop], "h0", "h3", 21)).is_err());
    }

    #[test]
    fn verdicts_once_the_harness_is_stopping_are_not_judged() {
        let mut h = history(Vec::new(), "h0", "h3", 950);
        assert_eq!(check(&h), Ok(()));
        h.stopping_ns = None;
        assert!(check(&h).is_err());
    }

    #[test]
    fn a_partition_excuses_the_other_sides_pairs_only() {
        let h = history(vec![halves()], "h0", "h3", 1);
        // Sides {h0, h1} and {h2, h3, h4}: 2 × 3 pairs each way.
        assert_eq!(excused_pairs(&h, 15 * S), 12);
        assert_eq!(touched_hosts(&h, 15 * S), 5);
    }

    #[test]
    fn a_host_an_operator_action_restarts_may_be_convicted_and_still_accuses_others() {
        use crate::operator::{Action, Restart};
        let restart = fault(
            Fault::Operator(Action::RestartHolder(Restart::Hasty)),
            &["h0"],
            0,
            30,
        );
        // h0 itself may be convicted while the action runs...
        assert_eq!(
            check(&history(vec![restart.clone()], "h2", "h0", 12)),
            Ok(())
        );
        // ...and with h1 it is still a second accuser of h3 across halves
        // (seed 10061); alone the action excuses nothing else.
        let both = vec![restart.clone(), halves()];
        assert_eq!(check(&history(both, "h1", "h3", 15)), Ok(()));
        assert!(check(&history(vec![restart], "h1", "h3", 15)).is_err());
    }
}
