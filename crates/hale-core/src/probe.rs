//! Probing: the randomized round-robin walk, ring monitors, direct and
//! indirect probes, and Lifeguard's local health.

use std::borrow::Cow;
use std::time::Duration;

use rand::Rng;

use crate::event::{Event, ProbeVisit};
use crate::identity::Identity;
use crate::member::MemberState;
use crate::shared::Shared;
use crate::table::IN_WALK;
use crate::time::{Time, Timer};
use crate::walk::Walk;
use crate::wire::{Channel, Message};

/// A probe in flight.
#[derive(Debug, Clone)]
pub(crate) struct Probe<I> {
    seq: u32,
    started: Time,
    target: I,
    target_inc: u32,
    /// When the ping is sent once more if no ack came (`NEVER` once done):
    /// a lost datagram costs one packet, not a round of indirect probes.
    retry_at: Time,
    direct_deadline: Time,
    final_deadline: Time,
    indirect: bool,
    /// The members asked to relay it: with the target, the only senders
    /// whose ack closes it, and the only ones whose nack counts.
    relays: Vec<I>,
    /// Nacks received from those relays.
    nacks: u32,
}

impl<I: PartialEq> Probe<I> {
    /// Whether an ack for this probe's sequence number from `from` answers
    /// it: from the target, or from a relay asked. A replayed ack the target
    /// sent to another member (sequence numbers are per node, and may meet)
    /// is neither.
    fn answered_by(&self, from: &I) -> bool {
        *from == self.target || (self.indirect && self.relays.contains(from))
    }

    /// Counts `from`'s answer that it could not reach the target (a nack,
    /// or closed-port evidence in its stead) if `from` is a relay this
    /// probe asked: Lifeguard reads the missing ones as our own poor health.
    fn relay_answered(&mut self, from: &I) -> bool {
        let asked = self.indirect && self.relays.contains(from);
        self.nacks += u32::from(asked);
        asked
    }

    /// When this probe is next looked at.
    fn next_deadline(&self) -> Time {
        if self.indirect {
            self.final_deadline
        } else {
            self.direct_deadline.min(self.retry_at)
        }
    }

    /// Lifeguard's change to local health on this probe's failure:
    /// missing nacks mean *we* may be the problem; every relay answering
    /// proves that we can send and receive (a node whose ring neighbours
    /// all failed hears no acks, and must still recover).
    pub(crate) fn health_delta(&self) -> i32 {
        match self.relays.len() as u32 {
            0 => 1,
            n if self.nacks >= n => -1,
            n => (n - self.nacks) as i32,
        }
    }

    /// The member probed.
    pub(crate) fn target(&self) -> &I {
        &self.target
    }

    /// The incarnation probed.
    pub(crate) fn target_inc(&self) -> u32 {
        self.target_inc
    }

    /// When the probe's first ping went out.
    pub(crate) fn started(&self) -> Time {
        self.started
    }
}

/// A ping we send on behalf of another member's indirect probe.
#[derive(Debug, Clone)]
pub(crate) struct Relay<I> {
    seq: u32,
    target: I,
    origin: I,
    origin_seq: u32,
    nack_at: Time,
    expires: Time,
    nacked: bool,
}

impl<I> Relay<I> {
    /// When this relay is next looked at.
    fn next_deadline(&self) -> Time {
        if self.nacked {
            self.expires
        } else {
            self.nack_at
        }
    }
}

/// Probing: the round-robin walk, the probes in flight (ours, and those
/// relayed for others) and Lifeguard's local health.
///
/// Invariants: `walk[walk_pos..]` is the part of the round not visited yet;
/// a member is in `walk` at most once per round, with `IN_WALK` set on its
/// record; sequence numbers are never 0 and start at a random value (a
/// recorded ack of one node seldom meets another's probe); at most 64
/// relays.
#[derive(Debug)]
pub(crate) struct Probing<I> {
    walk: Walk<I>,
    walk_pos: usize,
    walk_round: u64,
    probes: Vec<Probe<I>>,
    relays: Vec<Relay<I>>,
    next_seq: u32,
}

impl<I: Identity> Probing<I> {
    /// No walk and nothing in flight, healthy; sequence numbers from `first_seq`.
    pub(crate) fn new(first_seq: u32) -> Probing<I> {
        Probing {
            walk: Walk::default(),
            walk_pos: 0,
            walk_round: 0,
            probes: Vec::new(),
            relays: Vec::new(),
            next_seq: first_seq.max(1),
        }
    }

    /// The members of the walk (live members, in random order).
    pub(crate) fn walk(&self) -> &Walk<I> {
        &self.walk
    }

    /// Room for `n` more members, and a sixteenth more that join later
    /// (see [`crate::table::headroom`]).
    pub(crate) fn reserve(&mut self, n: usize) {
        self.walk.reserve(crate::table::headroom(n));
    }

    /// The sequence number of our probe of `id`, if one is in flight.
    pub(crate) fn probe_of(&self, id: &I) -> Option<u32> {
        self.probes.iter().find(|p| p.target == *id).map(|p| p.seq)
    }

    /// Drops every probe and relay in flight; how many probes there were.
    pub(crate) fn abandon(&mut self) -> usize {
        let n = self.probes.len();
        self.probes.clear();
        self.relays.clear();
        n
    }

    /// The earliest deadline of a probe or relay.
    pub(crate) fn next_deadline(&self) -> Time {
        let p = self.probes.iter().map(Probe::next_deadline);
        let r = self.relays.iter().map(Relay::next_deadline);
        p.chain(r).min().unwrap_or(Time::NEVER)
    }

    /// A hint for [`crate::Node::warm_state`]; the walk's next member.
    pub(crate) fn warm(&self) -> (u64, Option<Cow<'_, I>>) {
        let n = self.probes.len() ^ self.walk.len();
        (n as u64, self.walk.get(self.walk_pos))
    }

    /// One period of the randomized round-robin walk: its next member is
    /// probed unless it was heard from within a probe interval.
    pub(crate) fn tick(&mut self, sh: &mut Shared<I>, now: Time) {
        let next = now + sh.scaled(sh.cfg().walk_interval);
        sh.timers_mut().set(Timer::Probe, next);
        if sh.isolation().phase().has_left() {
            return;
        }
        if let Some(target) = self.next_walk_target(sh) {
            let outcome = if Self::is_fresh(sh, &target, now, sh.cfg().probe_interval) {
                sh.stats_mut().probes_skipped_fresh += 1;
                ProbeVisit::SkippedFresh
            } else {
                self.start_probe(sh, now, &target);
                ProbeVisit::Probed
            };
            if sh.cfg().trace_probes {
                let round = self.walk_round;
                sh.push_event(Event::ProbeVisit {
                    target,
                    outcome,
                    round,
                });
            }
        }
    }

    /// Heard from within `window`, alive, and not itself reporting poor
    /// health (a node that cannot receive still sends): the round-robin walk
    /// skips such a member.
    fn is_fresh(sh: &Shared<I>, id: &I, now: Time, window: std::time::Duration) -> bool {
        sh.cfg().skip_fresh
            && sh.members().get(id).is_some_and(|m| {
                m.state() == MemberState::Alive
                    && m.health() < sh.cfg().health_discount
                    && sh.members().heard(m) > Time::ZERO
                    && now.saturating_since(sh.members().heard(m)) < window
            })
    }

    /// The next live member of the walk; the walk is rebuilt and reshuffled
    /// when it wraps, so each live member is visited once per round.
    fn next_walk_target(&mut self, sh: &mut Shared<I>) -> Option<I> {
        for _ in 0..=self.walk.len() + 1 {
            if self.walk_pos >= self.walk.len() {
                self.rebuild_walk(sh);
                if self.walk.is_empty() {
                    return None;
                }
            }
            #[cfg(feature = "fault-injection")]
            let idx = match sh.cfg().fault {
                Some(crate::config::Fault::RepeatFirstTarget) => 0,
                Some(crate::config::Fault::ConvictAlone) | None => self.walk_pos,
            };
            #[cfg(not(feature = "fault-injection"))]
            let idx = self.walk_pos;
            self.walk_pos += 1;
            let c = self.walk.get(idx)?;
            if sh.members().get(&c).is_some_and(|m| m.state().is_live()) {
                return Some(c.into_owned());
            }
        }
        None
    }

    /// Starts a new round: every live member, sorted then shuffled.
    fn rebuild_walk(&mut self, sh: &mut Shared<I>) {
        self.walk.clear();
        for (id, m) in sh.members().iter() {
            if m.state().is_live() {
                self.walk.push(&id, false);
            }
        }
        sh.members_mut()
            .for_each_rec_mut(|m| m.set(IN_WALK, m.state().is_live()));
        // The map's order is deterministic but not meaningful: sort, then shuffle.
        self.walk.sort_and_shuffle(&mut sh.rng());
        self.walk_pos = 0;
        self.walk_round += 1;
    }

    /// Puts a member that became live into the not-yet-visited part of the walk.
    pub(crate) fn walk_insert(&mut self, sh: &mut Shared<I>, id: &I) {
        let added = sh.members_mut().update(id, |m| {
            let added = !m.has(IN_WALK);
            m.set(IN_WALK, true);
            added
        });
        if added != Some(true) {
            return;
        }
        let pos = sh.rng().random_range(self.walk_pos..=self.walk.len());
        self.walk.push(id, true);
        let last = self.walk.len() - 1;
        self.walk.swap(pos, last);
    }

    /// Starts a probe of `target` (a member): its ping goes out now,
    /// once more at half the timeout, indirect probes at the timeout.
    pub(crate) fn start_probe(&mut self, sh: &mut Shared<I>, now: Time, target: &I) {
        let Some(m) = sh.members().get(target) else {
            return;
        };
        let target_inc = m.incarnation;
        let suspected = sh.suspected_inc(target);
        let seq = self.next_seq();
        sh.stats_mut().probes += 1;
        let timeout = sh.scaled(sh.cfg().probe_timeout);
        self.probes.push(Probe {
            seq,
            started: now,
            target: target.clone(),
            target_inc,
            retry_at: now + timeout / 2,
            direct_deadline: now + timeout,
            final_deadline: now + sh.scaled(sh.cfg().probe_interval),
            indirect: false,
            relays: Vec::new(),
            nacks: 0,
        });
        sh.send_ping(target.clone(), Channel::Datagram, seq, suspected);
    }

    /// A fresh sequence number for a probe or ping (never 0).
    pub(crate) fn next_seq(&mut self) -> u32 {
        let s = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        s
    }

    /// The direct phase of probe `i` timed out: asks unsuspected relays
    /// (and pings over the stream channel, if configured).
    fn start_indirect(&mut self, sh: &mut Shared<I>, i: usize) {
        let target = self.probes[i].target.clone();
        let seq = self.probes[i].seq;
        let suspected = sh.suspected_inc(&target);
        // Relays are unsuspected members only: a suspect relay (another
        // failed node, when two fail together) would not nack, and Lifeguard
        // would wrongly read the missing nack as our own poor health, which
        // discounts our accusations and stalls the verdict.
        let relays = sh.random_unsuspected(self.walk(), sh.cfg().indirect_probes, Some(&target));
        self.probes[i].indirect = true;
        self.probes[i].relays.clone_from(&relays);
        for r in relays {
            let req = Message::PingReq {
                seq,
                target: target.clone(),
                suspected,
            };
            sh.send(r, Channel::Datagram, vec![req]);
        }
        if sh.cfg().stream_fallback_probe {
            sh.send_ping(target, Channel::Stream, seq, suspected);
        }
    }

    /// An ack for `seq` from `from`. It closes our probe only if it comes
    /// from the probe's target or a relay we asked, and answers a relay only
    /// if it comes from the member the relay pinged. A late packet's ack
    /// counts (a member whose clock stepped back sends only late packets for
    /// a while): its number is this probe's, which no older packet to us
    /// carries; a replay of one sent to another member is the wrong sender
    /// or, numbers starting at random, the wrong number.
    pub(crate) fn handle_ack(
        &mut self,
        sh: &mut Shared<I>,
        now: Time,
        from: &I,
        seq: u32,
        channel: Channel,
    ) -> Option<I> {
        if let Some(i) = self
            .probes
            .iter()
            .position(|p| p.seq == seq && p.answered_by(from))
        {
            let p = self.probes.swap_remove(i);
            sh.stats_mut().acks += 1;
            if channel == Channel::Stream {
                sh.stats_mut().fallback_acks += 1;
            }
            sh.bump_health(-1);
            if let Some(m) = sh.members().get(&p.target) {
                let heard = sh.members().heard(m).max(now);
                sh.members_mut().set_heard(&p.target, heard);
            }
            return Some(p.target);
        } else if let Some(i) = self
            .relays
            .iter()
            .position(|r| r.seq == seq && r.target == *from)
        {
            let r = self.relays.swap_remove(i);
            sh.send(
                r.origin,
                Channel::Datagram,
                vec![Message::Ack { seq: r.origin_seq }],
            );
        } else if self.probes.iter().any(|p| p.seq == seq)
            || self.relays.iter().any(|r| r.seq == seq)
        {
            // The right number from the wrong member.
            sh.stats_mut().acks_ignored += 1;
        }
        None
    }

    /// An indirect prober answered our probe of `member` with closed-port
    /// evidence: it stands for its nack (it reached the target's host).
    pub(crate) fn closed_from_relay(&mut self, from: &I, member: &I, accuser: &I) {
        if from != accuser {
            return;
        }
        if let Some(p) = self.probes.iter_mut().find(|p| p.target == *member) {
            p.relay_answered(from);
        }
    }

    /// A relay's nack for `seq`: counted only from a relay asked.
    pub(crate) fn handle_nack(&mut self, sh: &mut Shared<I>, from: &I, seq: u32) {
        if let Some(p) = self.probes.iter_mut().find(|p| p.seq == seq) {
            if p.relay_answered(from) {
                sh.stats_mut().nacks += 1;
            }
        }
    }

    /// Another member asks this node to ping `target` for its probe
    /// `origin_seq`: it does (at most 64 at once), and nacks if no ack
    /// comes in time; a request about this node itself is acked.
    pub(crate) fn handle_ping_req(
        &mut self,
        sh: &mut Shared<I>,
        now: Time,
        from: &I,
        origin_seq: u32,
        target: I,
        suspected: Option<u32>,
    ) {
        if target == *sh.local().id() {
            sh.send(
                from.clone(),
                Channel::Datagram,
                vec![Message::Ack { seq: origin_seq }],
            );
            return;
        }
        if self.relays.len() >= 64 {
            return; // Bounded: an overloaded relay stays silent; the prober counts a missing nack.
        }
        sh.stats_mut().relays += 1;
        let seq = self.next_seq();
        let timeout = sh.cfg().probe_timeout;
        self.relays.push(Relay {
            seq,
            target: target.clone(),
            origin: from.clone(),
            origin_seq,
            nack_at: now + timeout.mul_f64(0.8),
            expires: now + sh.cfg().probe_interval + Duration::from_millis(1),
            nacked: false,
        });
        sh.send_ping(target, Channel::Datagram, seq, suspected);
    }

    /// Moves the probes whose deadlines passed, from index `*i` on (start
    /// at 0): a ping sent again, indirect probes started; the next probe
    /// that failed, taken out (the caller acts on it, then calls again with
    /// the same `i`: what it starts meanwhile is looked at in turn).
    pub(crate) fn next_failed(
        &mut self,
        sh: &mut Shared<I>,
        now: Time,
        i: &mut usize,
    ) -> Option<Probe<I>> {
        while *i < self.probes.len() {
            let p = &mut self.probes[*i];
            if !p.indirect && now >= p.retry_at && now < p.direct_deadline {
                p.retry_at = Time::NEVER;
                let (seq, target) = (p.seq, p.target.clone());
                let suspected = sh.suspected_inc(&target);
                sh.send_ping(target, Channel::Datagram, seq, suspected);
            }
            let p = &self.probes[*i];
            if !p.indirect && now >= p.direct_deadline {
                self.start_indirect(sh, *i);
            }
            if now >= self.probes[*i].final_deadline {
                return Some(self.probes.swap_remove(*i));
            }
            *i += 1;
        }
        None
    }

    /// Moves the relays whose deadlines passed: a nack to the origin, or
    /// forgotten.
    pub(crate) fn relay_deadlines(&mut self, sh: &mut Shared<I>, now: Time) {
        let mut i = 0;
        while i < self.relays.len() {
            let r = &mut self.relays[i];
            if !r.nacked && now >= r.nack_at {
                r.nacked = true;
                let (origin, seq) = (r.origin.clone(), r.origin_seq);
                sh.send(origin, Channel::Datagram, vec![Message::Nack { seq }]);
            }
            if now >= self.relays[i].expires {
                self.relays.swap_remove(i);
                continue;
            }
            i += 1;
        }
    }

    /// A closed port was reported for `peer`: our probe of it, if one is
    /// in flight, asks its relays at once; the incarnation it probes.
    pub(crate) fn closed_port(&mut self, sh: &mut Shared<I>, peer: &I) -> Option<u32> {
        let i = self.probes.iter().position(|p| p.target == *peer)?;
        let inc = self.probes[i].target_inc;
        if !self.probes[i].indirect {
            self.start_indirect(sh, i);
        }
        Some(inc)
    }

    /// The next relay of a ping to `peer`, from index `*i` on (start at 0),
    /// taken out: its origin.
    pub(crate) fn take_relay_to(&mut self, peer: &I, i: &mut usize) -> Option<I> {
        while *i < self.relays.len() {
            if self.relays[*i].target != *peer {
                *i += 1;
                continue;
            }
            return Some(self.relays.swap_remove(*i).origin);
        }
        None
    }

    /// A watcher asked this node to probe `target` too: it does, unless a
    /// probe of it is in flight, it is not a live member here, it is this
    /// node, or the asker is not a live member here (a stranger gets no
    /// probes out of this node).
    pub(crate) fn corroborate(&mut self, sh: &mut Shared<I>, now: Time, from: &I, target: &I) {
        let live = |id: &I| sh.members().get(id).is_some_and(|m| m.state().is_live());
        if sh.isolation().phase().has_left()
            || target == sh.local().id()
            || !live(from)
            || self.probe_of(target).is_some()
            || !live(target)
        {
            return;
        }
        self.start_probe(sh, now, target);
    }
}

impl<I: Identity> Shared<I> {
    /// Pings `target` on `channel` for probe `seq`, carrying the suspicion
    /// of it this node holds, if any, so that it can refute at once.
    pub(crate) fn send_ping(
        &mut self,
        target: I,
        channel: Channel,
        seq: u32,
        suspected: Option<u32>,
    ) {
        let ping = Message::Ping {
            seq,
            target: self.ping_target(&target),
            suspected,
        };
        self.send(target, channel, vec![ping]);
    }

    /// The incarnation at which this node suspects `target`, if it does:
    /// what a ping to it carries so that it can refute at once.
    pub(crate) fn suspected_inc(&self, target: &I) -> Option<u32> {
        self.members()
            .get(target)
            .and_then(|m| (m.state() == MemberState::Suspect).then_some(m.incarnation))
    }
}
