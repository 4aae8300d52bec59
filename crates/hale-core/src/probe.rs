//! Probing: the randomized round-robin walk, ring monitors, direct and
//! indirect probes, and Lifeguard's local health.

use std::borrow::Cow;
use std::time::Duration;

use rand::Rng;

use crate::event::{Event, ProbeVisit};
use crate::identity::Identity;
use crate::member::MemberState;
use crate::node::Node;
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

    fn next_deadline(&self) -> Time {
        if self.indirect {
            self.final_deadline
        } else {
            self.direct_deadline.min(self.retry_at)
        }
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
/// recorded ack of one node seldom meets another's probe); `health <
/// awareness_max`; at most
/// 64 relays.
#[derive(Debug)]
pub(crate) struct Probing<I> {
    walk: Walk<I>,
    walk_pos: usize,
    walk_round: u64,
    probes: Vec<Probe<I>>,
    relays: Vec<Relay<I>>,
    next_seq: u32,
    health: u8,
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
            health: 0,
        }
    }

    /// The Lifeguard local health score.
    pub(crate) fn health(&self) -> u8 {
        self.health
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

    /// A hint for [`Node::warm_state`]; the walk's next member.
    pub(crate) fn warm(&self) -> (u64, Option<Cow<'_, I>>) {
        let n = self.probes.len() ^ self.walk.len();
        (n as u64, self.walk.get(self.walk_pos))
    }
}

impl<I: Identity> Node<I> {
    /// One period of the randomized round-robin walk: its next member is
    /// probed unless it was heard from within a probe interval.
    pub(crate) fn probe_tick(&mut self, now: Time) {
        let next = now + self.scaled(self.cfg.walk_interval);
        self.timers.set(Timer::Probe, next);
        if self.isolation.phase().has_left() {
            return;
        }
        if let Some(target) = self.next_walk_target() {
            let outcome = if self.is_fresh(&target, now, self.cfg.probe_interval) {
                self.stats.probes_skipped_fresh += 1;
                ProbeVisit::SkippedFresh
            } else {
                self.start_probe(now, &target);
                ProbeVisit::Probed
            };
            if self.cfg.trace_probes {
                let round = self.probing.walk_round;
                self.push_event(Event::ProbeVisit {
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
    fn is_fresh(&self, id: &I, now: Time, window: std::time::Duration) -> bool {
        self.cfg.skip_fresh
            && self.members.get(id).is_some_and(|m| {
                m.state() == MemberState::Alive
                    && m.health() < self.cfg.health_discount
                    && self.members.heard(m) > Time::ZERO
                    && now.saturating_since(self.members.heard(m)) < window
            })
    }

    /// The next live member of the walk; the walk is rebuilt and reshuffled
    /// when it wraps, so each live member is visited once per round.
    fn next_walk_target(&mut self) -> Option<I> {
        for _ in 0..=self.probing.walk.len() + 1 {
            if self.probing.walk_pos >= self.probing.walk.len() {
                self.rebuild_walk();
                if self.probing.walk.is_empty() {
                    return None;
                }
            }
            #[cfg(feature = "fault-injection")]
            let idx = match self.cfg.fault {
                Some(crate::config::Fault::RepeatFirstTarget) => 0,
                Some(crate::config::Fault::ConvictAlone) | None => self.probing.walk_pos,
            };
            #[cfg(not(feature = "fault-injection"))]
            let idx = self.probing.walk_pos;
            self.probing.walk_pos += 1;
            let c = self.probing.walk.get(idx)?;
            if self.members.get(&c).is_some_and(|m| m.state().is_live()) {
                return Some(c.into_owned());
            }
        }
        None
    }

    fn rebuild_walk(&mut self) {
        self.probing.walk.clear();
        for (id, m) in self.members.iter() {
            if m.state().is_live() {
                self.probing.walk.push(&id, false);
            }
        }
        self.members
            .for_each_rec_mut(|m| m.set(IN_WALK, m.state().is_live()));
        // The map's order is deterministic but not meaningful: sort, then shuffle.
        self.probing.walk.sort_and_shuffle(&mut self.rng);
        self.probing.walk_pos = 0;
        self.probing.walk_round += 1;
    }

    /// Puts a member that became live into the not-yet-visited part of the walk.
    pub(crate) fn walk_insert(&mut self, id: &I) {
        let added = self.members.update(id, |m| {
            let added = !m.has(IN_WALK);
            m.set(IN_WALK, true);
            added
        });
        if added != Some(true) {
            return;
        }
        let pos = self
            .rng
            .random_range(self.probing.walk_pos..=self.probing.walk.len());
        self.probing.walk.push(id, true);
        let last = self.probing.walk.len() - 1;
        self.probing.walk.swap(pos, last);
    }

    pub(crate) fn bump_health(&mut self, delta: i32) {
        let max = i32::from(self.cfg.awareness_max) - 1;
        let h = &mut self.probing.health;
        *h = (i32::from(*h) + delta).clamp(0, max) as u8;
    }

    /// `d` scaled by the local health multiplier.
    pub(crate) fn scaled(&self, d: Duration) -> Duration {
        d * (u32::from(self.probing.health) + 1)
    }

    pub(crate) fn start_probe(&mut self, now: Time, target: &I) {
        let Some(m) = self.members.get(target) else {
            return;
        };
        let target_inc = m.incarnation;
        let suspected = self.suspected_inc(target);
        let seq = self.next_seq();
        self.stats.probes += 1;
        let timeout = self.scaled(self.cfg.probe_timeout);
        self.probing.probes.push(Probe {
            seq,
            started: now,
            target: target.clone(),
            target_inc,
            retry_at: now + timeout / 2,
            direct_deadline: now + timeout,
            final_deadline: now + self.scaled(self.cfg.probe_interval),
            indirect: false,
            relays: Vec::new(),
            nacks: 0,
        });
        self.send_ping(target.clone(), Channel::Datagram, seq, suspected);
    }

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
    fn suspected_inc(&self, target: &I) -> Option<u32> {
        self.members
            .get(target)
            .and_then(|m| (m.state() == MemberState::Suspect).then_some(m.incarnation))
    }

    /// A fresh sequence number for a probe or ping (never 0).
    pub(crate) fn next_seq(&mut self) -> u32 {
        let s = self.probing.next_seq;
        self.probing.next_seq = self.probing.next_seq.wrapping_add(1).max(1);
        s
    }

    /// Moves probes and relays whose deadlines passed.
    pub(crate) fn probe_deadlines(&mut self, now: Time) {
        let mut i = 0;
        while i < self.probing.probes.len() {
            let p = &mut self.probing.probes[i];
            if !p.indirect && now >= p.retry_at && now < p.direct_deadline {
                p.retry_at = Time::NEVER;
                let (seq, target) = (p.seq, p.target.clone());
                let suspected = self.suspected_inc(&target);
                self.send_ping(target, Channel::Datagram, seq, suspected);
            }
            let p = &self.probing.probes[i];
            if !p.indirect && now >= p.direct_deadline {
                self.start_indirect(i);
            }
            if now >= self.probing.probes[i].final_deadline {
                let p = self.probing.probes.swap_remove(i);
                self.probe_failed(now, p);
                continue;
            }
            i += 1;
        }
        let mut i = 0;
        while i < self.probing.relays.len() {
            let r = &mut self.probing.relays[i];
            if !r.nacked && now >= r.nack_at {
                r.nacked = true;
                let (origin, seq) = (r.origin.clone(), r.origin_seq);
                self.send(origin, Channel::Datagram, vec![Message::Nack { seq }]);
            }
            if now >= self.probing.relays[i].expires {
                self.probing.relays.swap_remove(i);
                continue;
            }
            i += 1;
        }
    }

    fn start_indirect(&mut self, i: usize) {
        let target = self.probing.probes[i].target.clone();
        let seq = self.probing.probes[i].seq;
        let suspected = self.suspected_inc(&target);
        // Relays are unsuspected members only: a suspect relay (another
        // failed node, when two fail together) would not nack, and Lifeguard
        // would wrongly read the missing nack as our own poor health, which
        // discounts our accusations and stalls the verdict.
        let relays = self.random_unsuspected(self.cfg.indirect_probes, Some(&target));
        self.probing.probes[i].indirect = true;
        self.probing.probes[i].relays.clone_from(&relays);
        for r in relays {
            let req = Message::PingReq {
                seq,
                target: target.clone(),
                suspected,
            };
            self.send(r, Channel::Datagram, vec![req]);
        }
        if self.cfg.stream_fallback_probe {
            self.send_ping(target, Channel::Stream, seq, suspected);
        }
    }

    fn probe_failed(&mut self, now: Time, p: Probe<I>) {
        self.stats.probe_failures += 1;
        // Lifeguard: missing nacks mean *we* may be the problem; every relay
        // answering proves that we can send and receive (a node whose ring
        // neighbours all failed hears no acks, and must still recover).
        let delta = match p.relays.len() as u32 {
            0 => 1,
            n if p.nacks >= n => -1,
            n => (n - p.nacks) as i32,
        };
        self.bump_health(delta);
        if self.isolation.phase().is_cut_off() || p.started < self.isolation.back_at() {
            // We hear from nobody, or did when this probe started: the
            // failure is ours, not the target's.
            self.stats.probe_failures_cut_off += 1;
            return;
        }
        let Some(m) = self.members.get(&p.target) else {
            return;
        };
        if m.state().is_live() && m.incarnation == p.target_inc {
            let (target, inc, health) = (p.target.clone(), m.incarnation, self.probing.health);
            let me = self.local.id().clone();
            self.apply_suspect(now, &target, inc, &me, health);
            // The member has been silent since the ping went out: the
            // suspicion time runs from there, not from the probe's end.
            if self
                .suspicions
                .date_accusation(&target, &me, now, p.started)
            {
                self.rearm(&target, now);
            }
        }
    }

    /// An ack for `seq` from `from`. It closes our probe only if it comes
    /// from the probe's target or a relay we asked, and answers a relay only
    /// if it comes from the member the relay pinged. A late packet's ack
    /// counts (a member whose clock stepped back sends only late packets for
    /// a while): its number is this probe's, which no older packet to us
    /// carries; a replay of one sent to another member is the wrong sender
    /// or, numbers starting at random, the wrong number.
    pub(crate) fn handle_ack(&mut self, now: Time, from: &I, seq: u32, channel: Channel) {
        if let Some(i) = self
            .probing
            .probes
            .iter()
            .position(|p| p.seq == seq && p.answered_by(from))
        {
            let p = self.probing.probes.swap_remove(i);
            self.stats.acks += 1;
            if channel == Channel::Stream {
                self.stats.fallback_acks += 1;
            }
            self.bump_health(-1);
            if let Some(m) = self.members.get(&p.target) {
                let heard = self.members.heard(m).max(now);
                self.members.set_heard(&p.target, heard);
            }
            self.withdraw_accusation(&p.target, now);
        } else if let Some(i) = self
            .probing
            .relays
            .iter()
            .position(|r| r.seq == seq && r.target == *from)
        {
            let r = self.probing.relays.swap_remove(i);
            self.send(
                r.origin,
                Channel::Datagram,
                vec![Message::Ack { seq: r.origin_seq }],
            );
        } else if self.probing.probes.iter().any(|p| p.seq == seq)
            || self.probing.relays.iter().any(|r| r.seq == seq)
        {
            // The right number from the wrong member.
            self.stats.acks_ignored += 1;
        }
    }

    /// The runtime learned that `peer`'s port is closed: an ICMP port
    /// unreachable, or a connection refused, for a packet it sent there.
    /// Only a probe in flight to `peer` (ours, or one we relay), or a
    /// heartbeat just sent to it (which starts our probe), gives it weight: our own probe accuses with closed-port evidence and asks
    /// indirect probers at once, so that they can find the same; a relayed
    /// probe answers its origin with that evidence instead of a nack.
    ///
    /// Why a stalled or frozen process never produces it: a host answers
    /// "closed" only for a port no socket is bound to. A stopped process
    /// keeps its sockets; datagrams to it queue in (or silently overflow)
    /// its socket buffer, and its listening socket still completes TCP
    /// handshakes. A dead host answers nothing at all. So silence keeps
    /// its stall tolerance, and this evidence is for crashed processes on
    /// live hosts.
    ///
    /// What spoofing it would take: hale's packets are sealed, ICMP is
    /// not. A forged "port unreachable" must quote the probe it answers
    /// (the agent pings from a fresh ephemeral port each time, which Linux
    /// checks against the connected socket), so the forger must be on the
    /// path or guess the port within the probe's second. One forged report
    /// convicts nobody: a verdict needs `corroboration` observers, each
    /// finding the port closed with its own probe, and an ack from the
    /// member withdraws an observer's finding.
    pub fn handle_unreachable(&mut self, now: Time, peer: &I) {
        self.isolation.advance(now);
        if self.isolation.phase().has_left()
            || !self.cfg.closed_port_evidence
            || *peer == *self.local.id()
        {
            return;
        }
        let me = self.local.id().clone();
        if self.probing.probe_of(peer).is_none()
            && self.heartbeat_within(peer, now, self.cfg.probe_timeout)
        {
            // Our heartbeat found the port closed: probe, as a ping would have.
            self.start_probe(now, peer);
        }
        if let Some(i) = self.probing.probes.iter().position(|p| p.target == *peer) {
            let inc = self.probing.probes[i].target_inc;
            if !self.probing.probes[i].indirect {
                self.start_indirect(i);
            }
            self.stats.closed_ports += 1;
            self.apply_closed(now, peer, inc, &me);
        }
        let mut i = 0;
        while i < self.probing.relays.len() {
            if self.probing.relays[i].target != *peer {
                i += 1;
                continue;
            }
            let r = self.probing.relays.swap_remove(i);
            self.stats.closed_ports += 1;
            let inc = self.members.get(peer).map_or(0, |m| m.incarnation);
            let msg = Message::Closed {
                member: peer.clone(),
                incarnation: inc,
                accuser: me.clone(),
            };
            self.send(r.origin, Channel::Datagram, vec![msg]);
            self.apply_closed(now, peer, inc, &me);
        }
    }

    /// An indirect prober answered our probe of `member` with closed-port
    /// evidence: it stands for its nack (it reached the target's host).
    pub(crate) fn closed_from_relay(&mut self, from: &I, member: &I, accuser: &I) {
        if from != accuser {
            return;
        }
        if let Some(p) = self.probing.probes.iter_mut().find(|p| p.target == *member) {
            p.relay_answered(from);
        }
    }

    /// A relay's nack for `seq`: counted only from a relay asked.
    pub(crate) fn handle_nack(&mut self, from: &I, seq: u32) {
        if let Some(p) = self.probing.probes.iter_mut().find(|p| p.seq == seq) {
            if p.relay_answered(from) {
                self.stats.nacks += 1;
            }
        }
    }

    pub(crate) fn handle_ping_req(
        &mut self,
        now: Time,
        from: &I,
        origin_seq: u32,
        target: I,
        suspected: Option<u32>,
    ) {
        if target == *self.local.id() {
            self.send(
                from.clone(),
                Channel::Datagram,
                vec![Message::Ack { seq: origin_seq }],
            );
            return;
        }
        if self.probing.relays.len() >= 64 {
            return; // Bounded: an overloaded relay stays silent; the prober counts a missing nack.
        }
        self.stats.relays += 1;
        let seq = self.next_seq();
        let timeout = self.cfg.probe_timeout;
        self.probing.relays.push(Relay {
            seq,
            target: target.clone(),
            origin: from.clone(),
            origin_seq,
            nack_at: now + timeout.mul_f64(0.8),
            expires: now + self.cfg.probe_interval + Duration::from_millis(1),
            nacked: false,
        });
        self.send_ping(target, Channel::Datagram, seq, suspected);
    }
}
