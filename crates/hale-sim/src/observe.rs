//! What the nodes report, compared with the ground truth as it happens.

use std::collections::BTreeMap;
use std::time::Duration;

use rustc_hash::FxHashMap;

use hale_core::{Event, Node, Time};

use crate::engine::{Action, Truth};
use crate::id::SimId;

/// A death verdict reached by a node that was on the other side of a
/// partition from the member, less than this after the partition ended, is
/// the partition's doing (its suspicion started while they were separated),
/// not a false death.
pub const PARTITION_GRACE: Duration = Duration::from_secs(30);

/// A verdict on a member declared less than this after its fault ended,
/// on a suspicion that started during the fault, was reached on the
/// fault's evidence: the member hears the suspicion again (targeted copies
/// go every gossip interval, 200 ms on lan) and refutes only after it.
pub const VERDICT_RACE: Duration = Duration::from_millis(200);

hale_core::named_enum! {
    /// Which fault was injected.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum FaultKind {
        /// Crash of the host (it answers nothing).
        Crash => "crash",
        /// The process killed on a live host (its port answers "closed").
        Kill => "kill",
        /// Freeze (half-dead).
        Freeze => "freeze",
        /// Every path to the node failed.
        CutOff => "cut-off",
        /// The node receives nothing (it can still send).
        IngressBlocked => "ingress-blocked",
    }
}

/// One injected fault that the cluster must detect.
#[derive(Debug, Clone)]
pub struct FaultRecord {
    /// The faulty node.
    pub node: u32,
    /// What happened to it.
    pub kind: FaultKind,
    /// When.
    pub at: Time,
    /// When the fault ended (a freeze resumed, a block lifted), if it did.
    pub ended: Option<Time>,
    /// First time each observer held it dead.
    pub dead_at: FxHashMap<u32, Time>,
}

/// A healthy member declared dead: the one thing that must never happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FalseDeath {
    /// When.
    pub at: Time,
    /// Who declared (or accepted) it.
    pub observer: u32,
    /// The healthy member.
    pub member: u32,
}

/// A new member joining.
#[derive(Debug, Clone)]
pub struct JoinRecord {
    /// The node.
    pub node: u32,
    /// When it started joining.
    pub at: Time,
    /// When each observer learned of it.
    pub seen_at: FxHashMap<u32, Time>,
}

/// Bandwidth over one sampling interval, averaged over the nodes that were up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// End of the interval.
    pub at: Time,
    /// Bytes sent per node per second (datagrams and streams).
    pub bytes_per_node_sec: f64,
    /// Datagram bytes sent per node per second.
    pub datagram_bytes_per_node_sec: f64,
    /// Packets sent per node per second.
    pub msgs_per_node_sec: f64,
}

/// Everything observed during a run.
#[derive(Debug, Default)]
pub struct Observer {
    /// Injected faults and who detected them when.
    pub faults: Vec<FaultRecord>,
    /// Healthy members declared dead.
    pub false_deaths: Vec<FalseDeath>,
    /// Deaths declared across a partition, or on the verdict of a node that
    /// was across one that just ended (see [`PARTITION_GRACE`]): expected,
    /// not false.
    pub partition_deaths: u64,
    /// Deaths in the view of an observer that is itself impaired (cut off,
    /// unable to receive): its own view, which the protocol keeps others
    /// from accepting; not counted as false deaths.
    pub impaired_observer_deaths: u64,
    /// Deaths accepted, less than [`PARTITION_GRACE`] after a member's
    /// freeze or cut-off ended, on a verdict reached during that fault (an
    /// observer catching up on old news, typically one that was frozen
    /// too): expected, not false.
    pub stale_deaths: u64,
    /// Every suspicion reported.
    pub suspicions: u64,
    /// Suspicions of healthy members (refuted, but they cost traffic).
    pub healthy_suspicions: u64,
    /// Joins and who saw them.
    pub joins: Vec<JoinRecord>,
    /// Bandwidth time series.
    pub samples: Vec<Sample>,
    /// Round-robin visits per observer and round (with `trace_probes`).
    pub visits: FxHashMap<u32, BTreeMap<u64, Vec<u32>>>,
    /// Events recorded.
    pub events: u64,
    /// Largest datagram any node sent, as of the last bandwidth sample
    /// (kept here so that nodes that crash later still count).
    pub largest_datagram: u64,
    /// Every event, when logging is on (see [`Observer::keep_log`]).
    pub log: Option<Vec<(Time, u32, Event<SimId>)>>,
    hash: u64,
    /// Partition groups in force (from the actions), and those of the last
    /// partition that ended, with when it ended.
    groups: FxHashMap<u32, u32>,
    healed: Option<(FxHashMap<u32, u32>, Time)>,
    prev: Vec<Option<(u64, u64, u64)>>,
    added: FxHashMap<u32, Time>,
    last_sample: Time,
    open: FxHashMap<u32, usize>,
    /// Stop-the-world pauses of healthy nodes, by node: start, end.
    stalls: FxHashMap<u32, Vec<(Time, Time)>>,
    /// Indices in `faults` of each node's faults, in order.
    faults_of: FxHashMap<u32, Vec<usize>>,
    /// When each member's last partial loss (ingress or egress) ended.
    impairment_ended: FxHashMap<u32, Time>,
    /// Members declared dead on the evidence of a fault that had just
    /// ended, and when (`verdict_from_fault`).
    raced: FxHashMap<u32, Time>,
}

impl Observer {
    /// An observer for `n` initial nodes.
    pub fn new(n: usize) -> Observer {
        Observer {
            hash: 0xcbf2_9ce4_8422_2325,
            prev: vec![None; n],
            ..Observer::default()
        }
    }

    /// Keeps every event from now on (for debugging a seed).
    pub fn keep_log(&mut self) {
        self.log.get_or_insert_with(Vec::new);
    }

    /// A digest of every event in order: equal for equal runs.
    pub fn digest(&self) -> u64 {
        self.hash
    }

    fn mix(&mut self, v: u64) {
        self.hash ^= v;
        self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
    }

    /// Whether node `i` existed at `t`.
    pub fn added_before(&self, i: u32, t: Time) -> bool {
        self.added.get(&i).is_some_and(|a| *a <= t)
    }

    /// Whether node `i` was paused (a stall: a healthy process stopped for
    /// a moment) at any time between `from` and `to`. A paused process
    /// hears nothing, so latency figures leave it out as they leave out
    /// faulty ones; checks do not (it must still learn, later).
    pub fn stalled_during(&self, i: u32, from: Time, to: Time) -> bool {
        self.stalls
            .get(&i)
            .is_some_and(|s| s.iter().any(|&(a, b)| a <= to && b > from))
    }

    /// Whether node `i` was itself the subject of an injected fault at some
    /// point in `[from, to]` (such an observer learns of others' faults
    /// late through no fault of the protocol).
    pub fn faulty_during(&self, i: u32, from: Time, to: Time) -> bool {
        self.faults_of.get(&i).is_some_and(|f| {
            f.iter().any(|&k| {
                let g = &self.faults[k];
                g.at <= to && g.ended.is_none_or(|e| e > from)
            })
        })
    }

    pub(crate) fn node_added(&mut self, i: u32, at: Time) {
        self.added.entry(i).or_insert(at);
        if self.prev.len() <= i as usize {
            self.prev.resize(i as usize + 1, None);
        }
        if at > Time::ZERO {
            self.joins.push(JoinRecord {
                node: i,
                at,
                seen_at: FxHashMap::default(),
            });
        }
    }

    pub(crate) fn action(&mut self, now: Time, a: &Action) {
        let fault = match *a {
            Action::Crash(i) => Some((i, FaultKind::Crash)),
            Action::Kill(i) => Some((i, FaultKind::Kill)),
            Action::Freeze(i, _) => Some((i, FaultKind::Freeze)),
            Action::CutOff(i, true) => Some((i, FaultKind::CutOff)),
            Action::BlockIngress(i, true) => Some((i, FaultKind::IngressBlocked)),
            Action::Stall(i, d) => {
                self.stalls.entry(i).or_default().push((now, now + d));
                None
            }
            Action::IngressLoss(i, p) | Action::EgressLoss(i, p) if p == 0.0 => {
                self.impairment_ended.insert(i, now);
                None
            }
            Action::CutOff(i, false) | Action::BlockIngress(i, false) | Action::Restart(i) => {
                self.end_fault(i, now);
                None
            }
            Action::Partition(ref groups) => {
                self.end_partition(now);
                for (g, members) in groups.iter().enumerate() {
                    for &m in members {
                        self.groups.insert(m, g as u32 + 1);
                    }
                }
                None
            }
            Action::Heal => {
                self.end_partition(now);
                let open: Vec<u32> = self.open.keys().copied().collect();
                for i in open {
                    if !matches!(
                        self.faults[self.open[&i]].kind,
                        FaultKind::Crash | FaultKind::Kill
                    ) {
                        self.end_fault(i, now);
                    }
                }
                None
            }
            _ => None,
        };
        if let Some((node, kind)) = fault {
            self.open.insert(node, self.faults.len());
            self.faults_of
                .entry(node)
                .or_default()
                .push(self.faults.len());
            self.faults.push(FaultRecord {
                node,
                kind,
                at: now,
                ended: None,
                dead_at: FxHashMap::default(),
            });
        }
    }

    fn end_partition(&mut self, now: Time) {
        if !self.groups.is_empty() {
            self.healed = Some((std::mem::take(&mut self.groups), now));
        }
    }

    /// Whether `a` and `b` were on different sides of a partition that
    /// ended less than [`PARTITION_GRACE`] before `now`.
    fn recently_separated(&self, a: u32, b: u32, now: Time) -> bool {
        self.healed.as_ref().is_some_and(|(g, ended)| {
            now.saturating_since(*ended) < PARTITION_GRACE
                && g.get(&a).copied().unwrap_or(0) != g.get(&b).copied().unwrap_or(0)
        })
    }

    /// Node `m`'s last injected fault, if any.
    fn last_fault(&self, m: u32) -> Option<&FaultRecord> {
        self.faults_of.get(&m)?.last().map(|&k| &self.faults[k])
    }

    /// Whether `m`'s last fault ended less than [`PARTITION_GRACE`] before
    /// `now` after someone had declared it dead.
    fn recently_detected_fault(&self, m: u32, now: Time) -> bool {
        self.last_fault(m).is_some_and(|f| {
            !f.dead_at.is_empty()
                && f.ended
                    .is_some_and(|e| now.saturating_since(e) < PARTITION_GRACE)
        })
    }

    /// Whether this death rests on a verdict reached on the evidence of a
    /// fault or impairment of `m` that had just ended: the declarer's own
    /// verdict less than [`VERDICT_RACE`] after it ended, on a suspicion
    /// that started during it (`m` could not yet have heard the suspicion
    /// to refute it), or an observer accepting such a verdict within
    /// [`PARTITION_GRACE`].
    fn verdict_from_fault(
        &mut self,
        m: u32,
        observer: u32,
        evidence: &hale_core::DeathEvidence<SimId>,
        now: Time,
    ) -> bool {
        if self
            .raced
            .get(&m)
            .is_some_and(|at| now.saturating_since(*at) < PARTITION_GRACE)
        {
            return true;
        }
        let fault_end = self.last_fault(m).and_then(|f| f.ended);
        let ended = fault_end.max(self.impairment_ended.get(&m).copied());
        let raced = evidence.declared_by.0 == observer
            && ended.is_some_and(|e| {
                now.saturating_since(e) < VERDICT_RACE
                    && evidence.suspected_at.is_some_and(|s| s < e)
            });
        if raced {
            self.raced.insert(m, now);
        }
        raced
    }

    fn end_fault(&mut self, i: u32, now: Time) {
        if let Some(idx) = self.open.remove(&i) {
            self.faults[idx].ended = Some(now);
        }
    }

    pub(crate) fn resumed(&mut self, i: u32, now: Time) {
        if self
            .open
            .get(&i)
            .is_some_and(|&f| self.faults[f].kind == FaultKind::Freeze)
        {
            self.end_fault(i, now);
        }
    }

    pub(crate) fn record(&mut self, now: Time, observer: u32, e: &Event<SimId>, truth: &Truth<'_>) {
        self.events += 1;
        self.mix(now.as_nanos());
        self.mix(u64::from(observer));
        let (code, member) = match e {
            Event::Joined { member, .. } => (1, member.0),
            Event::Suspected { member, .. } => (2, member.0),
            Event::Dead { member, .. } => (3, member.0),
            Event::Recovered { member, .. } => (4, member.0),
            Event::Left { member, .. } => (5, member.0),
            Event::MetadataUpdated { member, .. } => (6, member.0),
            Event::Refuted { incarnation, .. } => (7, *incarnation),
            Event::SeedFallback => (8, 0),
            Event::Paused { .. } => (9, 0),
            Event::ProbeVisit { target, .. } => (10, target.0),
            Event::GenerationRaised { by, .. } => (11, by.0),
            Event::UnsupportedVersion { sender, .. } => (12, sender.as_ref().map_or(0, |s| s.0)),
        };
        self.mix(code);
        self.mix(u64::from(member));
        if let Some(log) = self.log.as_mut() {
            log.push((now, observer, e.clone()));
        }
        match e {
            Event::Dead {
                member, evidence, ..
            } => {
                let m = member.0;
                if let Some(&f) = self.open.get(&m) {
                    self.faults[f].dead_at.entry(observer).or_insert(now);
                } else if !truth.same_side(observer, m)
                    || self.recently_separated(evidence.declared_by.0, m, now)
                {
                    self.partition_deaths += 1;
                } else if !truth.healthy(observer) {
                    self.impaired_observer_deaths += 1;
                } else if self.recently_detected_fault(m, now)
                    || self.verdict_from_fault(m, observer, evidence, now)
                {
                    self.stale_deaths += 1;
                } else if truth.healthy(m) {
                    self.false_deaths.push(FalseDeath {
                        at: now,
                        observer,
                        member: m,
                    });
                }
            }
            Event::Suspected { member, .. } => {
                self.suspicions += 1;
                if truth.healthy(member.0) && truth.same_side(observer, member.0) {
                    self.healthy_suspicions += 1;
                }
            }
            Event::Joined { member, .. } | Event::Recovered { member, .. } => {
                if let Some(j) = self.joins.iter_mut().rev().find(|j| j.node == member.0) {
                    j.seen_at.entry(observer).or_insert(now);
                }
            }
            Event::ProbeVisit { target, round, .. } => {
                self.visits
                    .entry(observer)
                    .or_default()
                    .entry(*round)
                    .or_default()
                    .push(target.0);
            }
            _ => {}
        }
    }

    pub(crate) fn sample(&mut self, now: Time, nodes: &[Option<&Node<SimId>>]) {
        if self.prev.len() < nodes.len() {
            self.prev.resize(nodes.len(), None);
        }
        let secs = now.saturating_since(self.last_sample).as_secs_f64();
        let (mut bytes, mut dgram, mut msgs, mut count) = (0u64, 0u64, 0u64, 0u64);
        for (i, n) in nodes.iter().enumerate() {
            let cur = n.map(|n| {
                let s = n.stats();
                self.largest_datagram = self.largest_datagram.max(s.largest_datagram);
                (
                    s.datagram_bytes_out + s.stream_bytes_out,
                    s.datagram_bytes_out,
                    s.datagrams_out + s.streams_out,
                )
            });
            if let (Some(c), Some(p)) = (cur, self.prev[i]) {
                bytes += c.0.saturating_sub(p.0);
                dgram += c.1.saturating_sub(p.1);
                msgs += c.2.saturating_sub(p.2);
                count += 1;
            }
            self.prev[i] = cur;
        }
        if count > 0 && secs > 0.0 {
            let per = |v: u64| v as f64 / count as f64 / secs;
            self.samples.push(Sample {
                at: now,
                bytes_per_node_sec: per(bytes),
                datagram_bytes_per_node_sec: per(dgram),
                msgs_per_node_sec: per(msgs),
            });
        }
        self.last_sample = now;
    }
}
