//! Knowing when this node is the one cut off.
//!
//! A member that hears from nobody at all cannot tell "everyone else died"
//! from "my own paths failed" by its probes: both look like every probe
//! failing. In a cluster of more members than a verdict needs accusers, the
//! second is overwhelmingly the likely one (a flaky top-of-rack switch, a
//! firewall reload on this host, an unplugged cable), and concluding the
//! first evicts healthy siblings: the second incident's class of bug. So a
//! node that has heard from no member for `suspicion_max` (and at least two
//! probe periods), while more than `corroboration` others were live in its
//! view when it last heard from one, concludes that **it** is cut off (and
//! until then convicts nobody on its own word alone), and then:
//!
//! * it withdraws every accusation it made (its own failed probes since the
//!   last time it heard from anyone prove nothing about the others), here and
//!   in its queue of news, so that they never meet other returning members'
//!   accusations after the paths come back;
//! * it accuses nobody and convicts nobody while cut off (its probes still
//!   run, and still raise its Lifeguard local health score), nor on the
//!   probes it started while cut off that fail after its return;
//! * it contacts its seeds every `seed_retry_interval`
//!   ([`crate::Event::SeedFallback`] once), so it rejoins by itself.
//!
//! The first packet from any member ends it. In a cluster too small for
//! that inference (every other member may really have failed at once, as
//! when both peers of a three-member cluster crash) the node still
//! concludes on its own failed probes, and nobody else accepts such a
//! verdict, which rests on one accuser.

use std::time::Duration;

use crate::time::Time;

/// Where a node is in its life: one phase at a time.
///
/// Replaces the booleans `left`, `cut_off` and `in_fallback`, which
/// described these phases. Invariants: `Left` is final. Whether
/// [`Event::SeedFallback`] was reported ([`Lifecycle::in_fallback`]) is
/// known only while alone or cut off, and forgotten on leaving (nothing
/// reads it then). A node cut off when it left stays cut off
/// (`Left { cut_off: true }`) until traffic from a member arrives, as the
/// rules that read it still do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// In the cluster and hearing from it, or alone without having fallen back.
    Active,
    /// No live member: contacting the seeds, [`Event::SeedFallback`] reported.
    Fallback,
    /// Concluded that it is cut off; `fallback`: [`Event::SeedFallback`] reported.
    CutOff {
        /// [`Event::SeedFallback`] was reported.
        fallback: bool,
    },
    /// Left the cluster (final).
    Left {
        /// It was cut off when it left, and has heard from nobody since.
        cut_off: bool,
    },
}

impl Lifecycle {
    /// Whether [`crate::Node::leave`] was called.
    pub(crate) fn has_left(self) -> bool {
        matches!(self, Lifecycle::Left { .. })
    }

    /// Whether the node has concluded that it is cut off.
    pub(crate) fn is_cut_off(self) -> bool {
        matches!(
            self,
            Lifecycle::CutOff { .. } | Lifecycle::Left { cut_off: true }
        )
    }

    /// Whether [`Event::SeedFallback`] was reported for the current spell.
    pub(crate) fn in_fallback(self) -> bool {
        matches!(
            self,
            Lifecycle::Fallback | Lifecycle::CutOff { fallback: true }
        )
    }

    /// Leaves the cluster.
    pub(crate) fn leave(&mut self) {
        *self = Lifecycle::Left {
            cut_off: self.is_cut_off(),
        };
    }

    /// Falls back to the seeds (reports it once).
    pub(crate) fn fall_back(&mut self) {
        match self {
            Lifecycle::Active => *self = Lifecycle::Fallback,
            Lifecycle::CutOff { fallback } => *fallback = true,
            Lifecycle::Fallback | Lifecycle::Left { .. } => {}
        }
    }

    /// A member became live: a later fallback is reported again.
    pub(crate) fn member_back(&mut self) {
        match self {
            Lifecycle::Fallback => *self = Lifecycle::Active,
            Lifecycle::CutOff { fallback } => *fallback = false,
            Lifecycle::Active | Lifecycle::Left { .. } => {}
        }
    }

    /// Heard from a member: no longer cut off. Whether it was.
    fn reconnected(&mut self) -> bool {
        match self {
            Lifecycle::CutOff { .. } => *self = Lifecycle::Active,
            Lifecycle::Left { cut_off } if *cut_off => *cut_off = false,
            _ => return false,
        }
        true
    }
}

/// Where this node stands towards its cluster: its [`Lifecycle`] phase, and
/// what tells it that a fault may be its own: when it last heard from any
/// member, when it stopped being cut off, the latest time it was given, and
/// the pause it just came out of (`Node::check_pause`).
///
/// Invariants: `last_now` never goes backwards; `heard_any` only forwards;
/// the phase changes only through [`Lifecycle`]'s transitions (and `Left`
/// is final).
#[derive(Debug, Clone)]
pub(crate) struct Isolation {
    /// Active, fallen back to seeds, cut off, or left.
    phase: Lifecycle,
    /// When a packet (or traffic) from another member last arrived.
    heard_any: Time,
    /// Live members in the view when a member was last heard from: the
    /// cluster this node knew before its silence, which verdicts reached
    /// during the silence do not shrink (see
    /// [`crate::shared::Shared::large_enough_to_infer_cut_off`]).
    live_when_heard: usize,
    /// When it last stopped being cut off: probes started before then
    /// accuse nobody.
    back_at: Time,
    /// The latest time any call was made with.
    last_now: Time,
    /// Until when packets may be late by how much more than the replay
    /// window allows: this node was paused and they queued up meanwhile.
    pause_credit: (Time, Duration),
}

impl Isolation {
    /// Started at `now`, as if just heard from the cluster.
    pub(crate) fn new(now: Time) -> Isolation {
        Isolation {
            phase: Lifecycle::Active,
            heard_any: now,
            live_when_heard: 0,
            back_at: Time::ZERO,
            last_now: now,
            pause_credit: (Time::ZERO, Duration::ZERO),
        }
    }

    /// The lifecycle phase.
    pub(crate) fn phase(&self) -> Lifecycle {
        self.phase
    }

    /// The lifecycle phase, to move it on by one of its transitions.
    pub(crate) fn phase_mut(&mut self) -> &mut Lifecycle {
        &mut self.phase
    }

    /// The latest time given.
    pub(crate) fn last_now(&self) -> Time {
        self.last_now
    }

    /// A call was made at `now`.
    pub(crate) fn advance(&mut self, now: Time) {
        self.last_now = self.last_now.max(now);
    }

    /// Counts as having heard from the cluster at `now`, whose view then
    /// held `live` live members.
    pub(crate) fn heard(&mut self, now: Time, live: usize) {
        self.heard_any = self.heard_any.max(now);
        self.live_when_heard = live;
    }

    /// Live members in the view when a member was last heard from.
    pub(crate) fn live_when_heard(&self) -> usize {
        self.live_when_heard
    }

    /// When this node last stopped being cut off.
    pub(crate) fn back_at(&self) -> Time {
        self.back_at
    }

    /// Extra lateness allowed at `now` after a pause.
    pub(crate) fn pause_credit(&self, now: Time) -> Duration {
        if now < self.pause_credit.0 {
            self.pause_credit.1
        } else {
            Duration::ZERO
        }
    }

    /// Packets late by up to `length` are accepted until `until`.
    pub(crate) fn credit_pause(&mut self, until: Time, length: Duration) {
        self.pause_credit = (until, length);
    }

    /// A hint for [`crate::Node::warm_state`].
    pub(crate) fn warm(&self) -> u64 {
        self.last_now.as_nanos() ^ self.pause_credit.0.as_nanos() ^ self.heard_any.as_nanos()
    }

    /// Any packet from another member of the cluster, or traffic from one,
    /// arrived: this node is not cut off. Its view holds `live` live
    /// members.
    pub(crate) fn heard_from_someone(&mut self, now: Time, live: usize) {
        self.heard(now, live);
        if self.phase_mut().reconnected() {
            self.back_at = now;
        }
    }

    /// When this node last heard from anyone.
    pub(crate) fn heard_any(&self) -> Time {
        self.heard_any
    }
}
