//! Replay protection: whether a packet is fresh, from the sender's own clock.
//!
//! Every packet's header carries the sender's generation (grows with every
//! start) and the time it was built, in milliseconds of the sender's clock.
//! Clocks are not synchronised, so a receiver never compares the two clocks
//! directly: for each sender it keeps the smallest `arrival - sent` it has
//! seen (the offset of the fastest packet: clock difference plus minimum
//! delay), letting it creep up by 1 ms per second to follow clock drift. A
//! packet is late by `(arrival - sent) - that offset`.
//!
//! * From an older generation than one already heard: a replay of a previous
//!   run's packet. Dropped ([`DropReason::Replayed`]), and the sender is told
//!   (`Message::Superseded`, at most once per [`NOTICE_INTERVAL`] per
//!   sender): the agent's generation is its wall clock at start, so a member
//!   restarted with its clock set back (or corrected after running ahead)
//!   would otherwise be locked out until its clock passed the old value. It
//!   raises its generation above the one named and carries on. Raising a
//!   generation is always safe: a replayed notice can only name a generation
//!   that was really used, and a member above it ignores it.
//! * Late by more than `replay_window` (plus the length of a pause this node
//!   just came out of, whose queued packets are genuinely late): dropped
//!   ([`DropReason::Stale`]), and the sender is told the same way: a member
//!   whose wall clock was stepped back while it ran (an NTP step), or that
//!   restarted with the generation of a run whose clock was ahead (a
//!   generation that `state_dir` could not keep), would otherwise be
//!   dropped until the reference crept up to its clock, 10 s per second
//!   of step; it starts a new generation instead. A replayed old packet
//!   makes the real sender raise its generation, which costs nothing.
//! * Late by more than a probe timeout: its news is used (gossip is
//!   ordered by incarnation, so old news changes nothing) but it is not proof
//!   that the sender is alive now: it neither spares a probe nor counts as
//!   hearing from the cluster.
//!
//! So a replayed packet of a member that died can make it look alive for at
//! most a probe timeout after the last packet it really sent, and is
//! dropped outright once `replay_window` has passed. Packets are sealed by
//! the agent with the cluster key, so the generation and send time cannot be
//! forged, only replayed.
//!
//! The first packet from a member (or from a new generation) sets the
//! reference. A replay that reaches a node before any genuine packet from
//! that member does, or after the member was forgotten, is taken at face
//! value; what it can claim is bounded by incarnations (it cannot revive a
//! member known dead at the same or a newer incarnation).

use std::time::Duration;

use crate::stats::DropReason;
use crate::time::Time;

/// What a node remembers about one sender's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Freshness {
    /// Whether any packet was judged yet.
    pub(crate) known: bool,
    /// The newest generation heard from the sender.
    pub(crate) generation: u64,
    /// Smallest `arrival - sent` seen, in ms, crept forward to `at`.
    pub(crate) offset_ms: i64,
    /// When `offset_ms` was last updated.
    pub(crate) at: Time,
}

/// How fresh a packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Recent: proof that the sender is alive.
    Current,
    /// Late, but within the replay window: use its news, not as proof of life.
    Late,
    /// Dropped for this reason.
    Drop(DropReason),
}

/// How fast the reference offset may creep up: 100 ms per second, so that
/// a sender whose clock runs up to 10% slower than ours (a VM after a
/// migration, a clock being slewed, libfaketime in a test) stays current.
/// A replay gains at most this rate times the gap since the sender's last
/// genuine packet, so a dead member's recorded packet is still dropped once
/// it is late by the replay window over 0.9.
const CREEP_PER_SEC_MS: f64 = 100.0;

/// Least time between two `Superseded` notices to the same sender.
pub const NOTICE_INTERVAL: Duration = Duration::from_millis(250);

/// Senders remembered for the notice limit at most (a replay flood cannot
/// grow it).
const NOTICES_REMEMBERED: usize = 64;

/// This node's own generation, and the notices it sent about others'.
#[derive(Debug, Clone)]
pub(crate) struct Generation {
    /// The generation this node's packets carry.
    mine: u64,
    /// When each recently noticed sender was last told, most recent last.
    noticed: Vec<(u64, Time)>,
    /// When this node last synced with a stranger (a member it did not know
    /// that sent it a packet): at most one such sync per probe interval.
    stranger_synced: Option<Time>,
}

impl Generation {
    /// Starts at `mine` (`Config::generation`).
    pub(crate) fn new(mine: u64) -> Generation {
        Generation {
            mine,
            noticed: Vec::new(),
            stranger_synced: None,
        }
    }

    /// The generation this node's packets carry.
    pub(crate) fn mine(&self) -> u64 {
        self.mine
    }

    /// Starts above `known`, the one a peer heard from this node. The old one.
    pub(crate) fn raise(&mut self, known: u64) -> u64 {
        std::mem::replace(&mut self.mine, known.saturating_add(1))
    }

    /// Whether a notice to the sender keyed `key` may go now; records it.
    pub(crate) fn may_notice(&mut self, now: Time, key: u64) -> bool {
        self.noticed
            .retain(|(_, at)| now.saturating_since(*at) < NOTICE_INTERVAL);
        if self.noticed.iter().any(|(k, _)| *k == key) || self.noticed.len() >= NOTICES_REMEMBERED {
            return false;
        }
        self.noticed.push((key, now));
        true
    }

    /// Whether a sync with a stranger may go now (one per `interval`);
    /// records it.
    pub(crate) fn may_sync_stranger(&mut self, now: Time, interval: Duration) -> bool {
        let due = self
            .stranger_synced
            .is_none_or(|t| now.saturating_since(t) >= interval);
        if due {
            self.stranger_synced = Some(now);
        }
        due
    }
}

fn millis(t: Time) -> i64 {
    (t.as_nanos() / 1_000_000) as i64
}

impl Freshness {
    /// Judges a packet sent at `sent_ms` of generation `generation`,
    /// arriving `now`, and updates the reference if it is kept. `allowance`
    /// is the replay window plus any pause this node just came out of.
    pub(crate) fn judge(
        &mut self,
        now: Time,
        generation: u64,
        sent_ms: u64,
        allowance: Duration,
        proof_window: Duration,
    ) -> Verdict {
        let offset = millis(now).saturating_sub(i64::try_from(sent_ms).unwrap_or(i64::MAX));
        if self.known && generation < self.generation {
            return Verdict::Drop(DropReason::Replayed);
        }
        if !self.known || generation > self.generation {
            *self = Freshness {
                known: true,
                generation,
                offset_ms: offset,
                at: now,
            };
            return Verdict::Current;
        }
        let elapsed = now.saturating_since(self.at).as_secs_f64();
        let crept = self
            .offset_ms
            .saturating_add((elapsed * CREEP_PER_SEC_MS) as i64);
        let late = offset.saturating_sub(crept);
        if late > allowance.as_millis() as i64 {
            return Verdict::Drop(DropReason::Stale);
        }
        self.offset_ms = crept.min(offset);
        self.at = now;
        if late > proof_window.as_millis() as i64 {
            Verdict::Late
        } else {
            Verdict::Current
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(2500);
    const PROOF: Duration = Duration::from_millis(500);

    fn judge(f: &mut Freshness, now_ms: u64, generation: u64, sent_ms: u64) -> Verdict {
        f.judge(
            Time::from_millis(now_ms),
            generation,
            sent_ms,
            WINDOW,
            PROOF,
        )
    }

    #[test]
    fn packets_in_order_are_current_whatever_the_clock_difference() {
        let mut f = Freshness::default();
        // The sender's clock is 1,000,000 ms behind ours: only differences count.
        assert_eq!(judge(&mut f, 1_000_010, 7, 10), Verdict::Current);
        assert_eq!(judge(&mut f, 1_000_510, 7, 505), Verdict::Current);
        assert_eq!(judge(&mut f, 1_001_012, 7, 1_000), Verdict::Current);
    }

    #[test]
    fn a_replay_is_late_then_stale() {
        let mut f = Freshness::default();
        assert_eq!(judge(&mut f, 10_000, 7, 100), Verdict::Current);
        // The same packet again 0.4 s later: still proof (within a probe timeout).
        assert_eq!(judge(&mut f, 10_400, 7, 100), Verdict::Current);
        // 1 s later: news only.
        assert_eq!(judge(&mut f, 11_000, 7, 100), Verdict::Late);
        // 3 s later: dropped.
        assert_eq!(
            judge(&mut f, 13_000, 7, 100),
            Verdict::Drop(DropReason::Stale)
        );
    }

    #[test]
    fn an_older_generation_is_always_a_replay_and_a_newer_one_resets() {
        let mut f = Freshness::default();
        assert_eq!(judge(&mut f, 10_000, 7, 5_000), Verdict::Current);
        assert_eq!(
            judge(&mut f, 10_001, 6, 5_001),
            Verdict::Drop(DropReason::Replayed)
        );
        // Restarted: its clock starts again at zero.
        assert_eq!(judge(&mut f, 20_000, 8, 3), Verdict::Current);
        assert_eq!(judge(&mut f, 20_500, 8, 503), Verdict::Current);
        assert_eq!(
            judge(&mut f, 20_600, 7, 5_600),
            Verdict::Drop(DropReason::Replayed)
        );
    }

    #[test]
    fn the_reference_follows_a_receiver_clock_running_fast() {
        let mut f = Freshness::default();
        assert_eq!(judge(&mut f, 0, 1, 0), Verdict::Current);
        // Our clock gains 0.5 ms per second on the sender's, for 10 hours:
        // every packet stays current.
        for s in 1..=36_000u64 {
            let v = judge(&mut f, s * 1000 + s / 2, 1, s * 1000);
            assert_eq!(v, Verdict::Current, "at {s} s");
        }
    }
}
