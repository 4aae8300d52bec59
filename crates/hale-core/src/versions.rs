//! Which wire version a node writes, to whom, and what it does with a
//! packet of a version it does not speak.
//!
//! A node decodes every version of its range (`Config::wire_versions`, at
//! most [`crate::wire::SPOKEN`]) and writes the one its runtime negotiated
//! ([`crate::Node::set_wire_version`]; [`crate::wire::negotiate`] over the ranges
//! the members advertise), which starts at the lowest of its range: until
//! it has heard its cluster, it must be understood by the oldest member it
//! may meet.
//!
//! Two exceptions, both about a member that just started a new run (its
//! first packets, or a newer generation than any heard from it):
//!
//! * If that run writes another version than this node does, it may be a
//!   downgraded build that cannot read ours, or one that speaks only newer
//!   versions, and the cluster has not yet learned its range (its
//!   metadata travels by gossip). For [`DOWNGRADE_GRACE`], or until it
//!   writes another version, this node writes to it in its version (which
//!   it reads: it wrote it): its probes, joins and syncs are answered in a
//!   form it reads, and this node's probes of it do not fail for a version.
//! * Members that only write an older version because their cluster has
//!   not moved up yet are not new runs: they are written to in the
//!   negotiated version, which they read, so that a cluster moves up as soon
//!   as its members have learned that they all can.
//!
//! A packet of a version outside this node's range is dropped
//! (`DropReason::Version`) and reported: [`Event::UnsupportedVersion`](crate::Event::UnsupportedVersion),
//! naming its sender and the versions it speaks when the packet's prefix
//! says so ([`peek`](crate::wire::peek)), at most once per [`REPORT_INTERVAL`] per sender.
//!
//! Invariants: `speak` and every clamp's version are in `range`; a run
//! (member and generation) is clamped at most once;
//! at most `CLAMPS_KEPT` clamps and
//! `REPORTS_KEPT` report times are kept (a flood of new runs or strangers
//! cannot grow them).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::time::Time;
use crate::wire::Versions;

/// How long a member's new run is written to in its version.
pub const DOWNGRADE_GRACE: Duration = Duration::from_secs(15);
/// Least time between two reports of the same sender's unsupported version.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(60);
/// Members written to in an older version at most at once.
const CLAMPS_KEPT: usize = 64;
/// Senders whose reports are remembered at most.
const REPORTS_KEPT: usize = 64;

/// One member's new run, written to in its version. Kept after it
/// ends (while there is room), so that one run is clamped once: two
/// members that each took the other for a new run (with replay protection
/// off, no run is known) would otherwise hold each other below the
/// negotiated version for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Clamp {
    /// The member's ring key.
    key: u64,
    /// The run's generation.
    generation: u64,
    /// The version it writes.
    version: u8,
    /// Until when (or when it was lifted).
    until: Time,
}

/// The wire versions of a node: its range, what it writes, and the
/// per-version counters.
#[derive(Debug, Clone)]
pub(crate) struct Wire {
    range: Versions,
    speak: u8,
    clamps: Vec<Clamp>,
    reported: Vec<(u64, Time)>,
    /// Packets received (dropped ones included) and sent, by version.
    counts: Counts,
}

/// Versions whose packet counts are kept in the node itself: the first
/// of a range and the next ones (a range is a few versions wide).
const INLINE: usize = 4;

/// Packets received and sent by version: those of the first [`INLINE`]
/// versions from `base` (the range's oldest) in place, any other in a map
/// (a packet of a version outside the range, received; never in a
/// cluster of one build). Counted on every packet: a map alone cost a
/// cache miss on its node each time, in a simulator of thousands of nodes
/// (a tenth of a 10,000-node run).
#[derive(Debug, Clone)]
struct Counts {
    base: u8,
    received: [u64; INLINE],
    sent: [u64; INLINE],
    other_received: BTreeMap<u8, u64>,
    other_sent: BTreeMap<u8, u64>,
}

impl Counts {
    /// No packet counted; inline slots from version `base`.
    fn new(base: u8) -> Counts {
        Counts {
            base,
            received: [0; INLINE],
            sent: [0; INLINE],
            other_received: BTreeMap::new(),
            other_sent: BTreeMap::new(),
        }
    }

    /// Where `version`'s count is kept in place, if it is.
    fn slot(&self, version: u8) -> Option<usize> {
        let i = usize::from(version.checked_sub(self.base)?);
        (i < INLINE).then_some(i)
    }

    /// Counts a packet received in `version`.
    fn count_received(&mut self, version: u8) {
        match self.slot(version) {
            Some(i) => self.received[i] += 1,
            None => *self.other_received.entry(version).or_default() += 1,
        }
    }

    /// Counts a packet sent in `version`.
    fn count_sent(&mut self, version: u8) {
        match self.slot(version) {
            Some(i) => self.sent[i] += 1,
            None => *self.other_sent.entry(version).or_default() += 1,
        }
    }

    /// Every version counted at least once, with its count.
    fn map(&self, inline: &[u64; INLINE], other: &BTreeMap<u8, u64>) -> BTreeMap<u8, u64> {
        let mut out = other.clone();
        for (i, &n) in inline.iter().enumerate() {
            if n > 0 {
                out.insert(self.base + i as u8, n);
            }
        }
        out
    }
}

impl Wire {
    /// Speaking `range`, writing its lowest version.
    pub(crate) fn new(range: Versions) -> Wire {
        Wire {
            range,
            speak: range.min,
            clamps: Vec::new(),
            reported: Vec::new(),
            counts: Counts::new(range.min),
        }
    }

    /// The version to write to the member keyed `key()` (the key is
    /// computed only when some member is written to in its own version: a
    /// ring position is a hash, and this runs for every packet sent).
    pub(crate) fn version_for(&self, now: Time, key: impl FnOnce() -> u64) -> u8 {
        if self.clamps.is_empty() {
            return self.speak;
        }
        let key = key();
        self.clamps
            .iter()
            .find(|c| c.key == key && c.until > now)
            .map_or(self.speak, |c| c.version)
    }

    /// A packet of `version` was sent.
    pub(crate) fn count_sent(&mut self, version: u8) {
        self.counts.count_sent(version);
    }

    /// A packet of `version` and `generation` arrived from the member
    /// keyed `key()`; `new_run` if it is that member's first packet or from
    /// a newer generation than any heard from it. The key is computed only
    /// when a clamp is looked up or added.
    pub(crate) fn heard(
        &mut self,
        now: Time,
        key: impl FnOnce() -> u64,
        generation: u64,
        version: u8,
        new_run: bool,
    ) {
        self.counts.count_received(version);
        if self.clamps.is_empty() && (version == self.speak || !new_run) {
            return;
        }
        let key = key();
        let mut known_run = false;
        for c in self.clamps.iter_mut().filter(|c| c.key == key) {
            if c.version != version {
                // It writes another version now: ours, or it restarted.
                c.until = c.until.min(now);
            }
            known_run |= c.generation >= generation;
        }
        if version == self.speak || !new_run || known_run {
            return;
        }
        self.clamps.retain(|c| c.key != key);
        if self.clamps.len() >= CLAMPS_KEPT {
            self.clamps.retain(|c| c.until > now);
        }
        if self.clamps.len() < CLAMPS_KEPT {
            self.clamps.push(Clamp {
                key,
                generation,
                version,
                until: now + DOWNGRADE_GRACE,
            });
        }
    }

    /// Whether a report about the sender keyed `key` may go now; records it.
    pub(crate) fn may_report(&mut self, now: Time, key: u64) -> bool {
        self.reported
            .retain(|(_, at)| now.saturating_since(*at) < REPORT_INTERVAL);
        if self.reported.iter().any(|(k, _)| *k == key) || self.reported.len() >= REPORTS_KEPT {
            return false;
        }
        self.reported.push((key, now));
        true
    }

    /// The versions this node decodes.
    pub(crate) fn range(&self) -> Versions {
        self.range
    }

    /// The version written to members not in a new run of an older one.
    pub(crate) fn speak(&self) -> u8 {
        self.speak
    }

    /// Writes `version` from now on, brought into the range; the version
    /// written now.
    pub(crate) fn set_speak(&mut self, version: u8) -> u8 {
        self.speak = version.clamp(self.range.min, self.range.max);
        self.speak
    }

    /// Counts a packet received in `version` (dropped ones included).
    pub(crate) fn count_received(&mut self, version: u8) {
        self.counts.count_received(version);
    }

    /// Packets received and sent, by version: copies, every version in the
    /// range counted at least once.
    pub(crate) fn packets(&self) -> (BTreeMap<u8, u64>, BTreeMap<u8, u64>) {
        let c = &self.counts;
        (
            c.map(&c.received, &c.other_received),
            c.map(&c.sent, &c.other_sent),
        )
    }
}
