//! The [`Node`]: one member's SWIM + Lifeguard state machine.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::broadcast::Class;
use crate::config::{Config, ConfigError, Tuning};
use crate::direct::{Outgoing, Transmit};
use crate::event::Event;
use crate::freshness::Verdict;
use crate::identity::Identity;
use crate::local::Local;
use crate::member::{Member, MemberState};
use crate::monitor::Monitors;
use crate::probe::Probing;
use crate::shared::Shared;
use crate::state::Suspicions;
use crate::stats::{DropReason, Stats};
use crate::sync::Recovery;
use crate::targeted::Targeted;
use crate::time::{Time, Timer, TimerTable};
use crate::wire::{
    cluster_id, Channel, DecodeError, Header, MemberRecord, Message, Packet, PingTarget, Versions,
    MAX_META,
};

mod digest;
mod probe;
mod rules;
mod sync;
mod verdict;
mod warm;

/// Why a received packet was not processed. The node's state is unchanged
/// and the drop is counted in [`Stats::dropped`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiveError {
    /// The bytes did not decode.
    #[error("dropped undecodable packet: {0}")]
    Decode(#[from] DecodeError),
    /// The packet claims to come from this node.
    #[error("dropped packet claiming to come from this node")]
    FromSelf,
    /// This node has left the cluster.
    #[error("dropped packet: this node has left the cluster")]
    Left,
    /// The packet was a replay (or held up longer than the replay window).
    #[error("dropped packet: {}", .0.as_str())]
    Replay(DropReason),
}

/// Why [`Node::leave`] did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaveError {
    /// The node had already left; nothing was sent again.
    #[error("already left the cluster")]
    AlreadyLeft,
}

/// Why [`Node::set_metadata`] did nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// The metadata was too large; the old metadata stays.
    #[error("metadata is {0} bytes; the limit is {MAX_META}")]
    TooLarge(usize),
    /// The node has left; metadata can no longer change.
    #[error("the node has left the cluster")]
    Left,
}

/// One member's failure detector and membership view, sans IO.
///
/// # Call order
///
/// 1. [`Node::new`] with the current time, then [`Node::join`] with seeds
///    (or none, for the first node).
/// 2. Whenever a datagram arrives: [`Node::handle_datagram`]; a stream
///    frame: [`Node::handle_stream`]; application traffic from a member:
///    [`Node::note_traffic`].
/// 3. When the time returned by [`Node::poll_timeout`] is reached:
///    [`Node::handle_timeout`]. Calling it early, or twice, does nothing.
/// 4. After every call above, drain [`Node::poll_transmit`] (send each
///    packet) and [`Node::poll_event`], then ask [`Node::poll_timeout`] again.
///
/// Time is whatever the caller says it is: it must not go backwards. The
/// node never reads a clock, opens a socket or uses OS randomness; all its
/// randomness comes from [`Config::rng_seed`].
///
/// # State
///
/// Each part of the state is a sub-state that owns its fields and keeps its
/// own invariants (documented on its type); the `impl Node` blocks in the
/// modules named below work through their methods.
#[derive(Debug)]
pub struct Node<I: Identity> {
    /// What every sub-state reads and writes (`shared.rs`).
    sh: Shared<I>,
    /// The walk, probes in flight (`probe.rs`).
    probing: Probing<I>,
    /// Ring neighbours (`monitor.rs`).
    monitors: Monitors<I>,
    /// Suspicions and their deadlines (`state.rs`, `verdict.rs`).
    suspicions: Suspicions<I>,
    /// Suspicions and refutations sent to a few members (`targeted.rs`).
    targeted: Targeted<I>,
    /// Seeds, tombstones, sync budget (`sync.rs`).
    recovery: Recovery<I>,
}

/// The first probe sequence number of a node seeded with `seed`: random,
/// from a generator of its own so that the main one's draws (and every
/// simulation's course) do not depend on it.
fn first_seq(seed: u64) -> u32 {
    Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x05e9_5eed).random()
}

impl<I: Identity> Node<I> {
    /// A node named `me`, alone in its cluster until it joins.
    pub fn new(me: I, cfg: Config, now: Time) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(cfg.rng_seed);
        let local = Local::new(
            me,
            cluster_id(&cfg.cluster),
            cfg.meta.clone(),
            cfg.generation,
        );
        // Random phases so that nodes started together do not probe in lockstep.
        let probe_phase = rng.random_range(0..cfg.walk_interval.as_nanos() as u64);
        let pp_phase = rng.random_range(0..cfg.push_pull_interval.as_nanos() as u64);
        let rc_phase = rng.random_range(0..cfg.reconnect_interval.as_nanos() as u64);
        let mut timers = TimerTable::new();
        timers.set(Timer::Probe, now + Duration::from_nanos(probe_phase));
        timers.set(Timer::PushPull, now + Duration::from_nanos(pp_phase));
        timers.set(Timer::SeedRetry, now + cfg.seed_retry_interval);
        timers.set(Timer::Reconnect, now + Duration::from_nanos(rc_phase));
        timers.set(Timer::Reap, now + Duration::from_secs(10));
        Ok(Node {
            probing: Probing::new(first_seq(cfg.rng_seed)),
            monitors: Monitors::new(),
            suspicions: Suspicions::new(),
            targeted: Targeted::new(),
            recovery: Recovery::new(cfg.sync_replies_per_sec, now),
            sh: Shared::new(cfg, local, rng, timers, now),
        })
    }

    /// This node's identity.
    pub fn id(&self) -> &I {
        self.sh.local().id()
    }

    /// The generation this node's packets carry: `Config::generation`, or
    /// higher once a peer told it that it had heard a newer one from it
    /// (a restart with the wall clock set back; see `freshness.rs`).
    pub fn generation(&self) -> u64 {
        self.sh.local().my_generation()
    }

    /// This node's incarnation.
    pub fn incarnation(&self) -> u32 {
        self.sh.local().incarnation()
    }

    /// This node's Lifeguard local health score: 0 is healthy, up to
    /// `awareness_max - 1`; probe interval and timeout are scaled by score + 1.
    pub fn local_health(&self) -> u8 {
        self.sh.health()
    }

    /// Whether [`Node::leave`] was called.
    pub fn has_left(&self) -> bool {
        self.sh.isolation().phase().has_left()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        self.sh.cfg()
    }

    /// Takes new values of the knobs a running node can change ([`Tuning`]),
    /// validated with the rest of its configuration: nothing changes when
    /// they are refused. Each applies where it is next read (a timer
    /// already set keeps its deadline); no member, suspicion or timer is
    /// touched.
    pub fn retune(&mut self, t: Tuning) -> Result<(), ConfigError> {
        let cfg = self.sh.cfg().clone().with_tuning(t);
        cfg.validate()?;
        self.sh.set_cfg(cfg);
        Ok(())
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        self.sh.stats()
    }

    /// Every member this node knows of, this node excluded, in no
    /// particular order: copies, made as the iterator advances.
    pub fn members(&self) -> impl Iterator<Item = Member<I>> + '_ {
        self.sh.members().views()
    }

    /// One member, if known: a copy.
    pub fn member(&self, id: &I) -> Option<Member<I>> {
        self.sh.members().view(id)
    }

    /// Alive or suspected members, this node excluded.
    pub fn num_live(&self) -> usize {
        self.sh.members().live()
    }

    /// The ring neighbours this node pings when they are quiet for a
    /// monitor interval (its predecessors).
    pub fn monitored(&self) -> &[I] {
        self.monitors.monitored()
    }

    /// The ring neighbours that ping this node (its successors); it pings
    /// them only when they stay quiet longer than expected.
    pub fn watchers(&self) -> &[I] {
        self.monitors.watchers()
    }

    /// News waiting to be gossiped.
    pub fn pending_broadcasts(&self) -> usize {
        self.sh.broadcasts().len()
    }

    /// This node's metadata.
    pub fn metadata(&self) -> &[u8] {
        self.sh.local().meta()
    }

    /// Every member known here, this node first, then the others in
    /// identity order, as sent in a full-state sync. (The order is the
    /// identities', not the member table's, so that how the table is laid
    /// out never changes what goes on the wire, or in what order a receiver
    /// merges it.)
    pub fn state_records(&self) -> Vec<MemberRecord<I>> {
        self.sh.state_records()
    }

    /// The wire versions this node decodes (`Config::wire_versions`).
    pub fn wire_versions(&self) -> Versions {
        self.sh.wire().range()
    }

    /// The wire version this node writes (to members not in a new run of
    /// an older version; see `versions.rs`).
    pub fn wire_version(&self) -> u8 {
        self.sh.wire().speak()
    }

    /// Writes `version` from now on, the one the runtime negotiated
    /// ([`crate::wire::negotiate`]); a version outside this node's range is
    /// brought to its nearest end. The version written now.
    pub fn set_wire_version(&mut self, version: u8) -> u8 {
        self.sh.wire_mut().set_speak(version)
    }

    /// Packets received (dropped ones included) and sent, by wire version:
    /// copies, with every version counted at least once.
    pub fn packets_by_version(&self) -> (BTreeMap<u8, u64>, BTreeMap<u8, u64>) {
        self.sh.wire().packets()
    }

    /// Application traffic was received from `peer`: proof of life that
    /// spares a probe. Unknown peers are ignored.
    pub fn note_traffic(&mut self, now: Time, peer: &I) {
        self.sh.isolation_mut().advance(now);
        if self.sh.members().contains(peer) {
            let live = self.sh.members().live();
            self.sh.isolation_mut().heard_from_someone(now, live);
        }
        if let Some(m) = self.sh.members().get(peer) {
            if m.state().is_live() {
                self.sh.members_mut().set_heard(peer, now);
                self.withdraw_accusation(peer, now);
            }
        }
    }

    /// Publishes new metadata (raising the incarnation so it wins everywhere).
    pub fn set_metadata(&mut self, now: Time, meta: Vec<u8>) -> Result<(), MetadataError> {
        if self.sh.isolation().phase().has_left() {
            return Err(MetadataError::Left);
        }
        if meta.len() > MAX_META {
            return Err(MetadataError::TooLarge(meta.len()));
        }
        self.sh.local_mut().set_meta(meta);
        self.sh.local_mut().raise_incarnation(0);
        self.sh.broadcast_self_alive(now);
        Ok(())
    }

    /// Leaves gracefully: announces it to the cluster so peers record it as
    /// left, not dead. Keep driving the node for a moment so the news spreads.
    pub fn leave(&mut self, now: Time) -> Result<(), LeaveError> {
        if self.sh.isolation().phase().has_left() {
            return Err(LeaveError::AlreadyLeft);
        }
        self.sh.isolation_mut().phase_mut().leave();
        self.sh.local_mut().raise_incarnation(0);
        self.probing.abandon();
        let msg = Message::Left {
            member: self.sh.local().id().clone(),
            incarnation: self.sh.local().incarnation(),
        };
        let me = self.sh.local().id().clone();
        self.sh
            .broadcasts_mut()
            .push(Class::Left, (me, None), msg.clone());
        let targets =
            self.sh
                .random_live(self.probing.walk(), 2 * self.sh.cfg().gossip_fanout, None);
        for t in targets {
            self.sh.send(t, Channel::Datagram, vec![msg.clone()]);
        }
        self.sh.timers_mut().set(Timer::Gossip, now);
        Ok(())
    }

    /// Processes a datagram. Bad input is dropped, counted, and changes nothing.
    pub fn handle_datagram(&mut self, now: Time, bytes: &[u8]) -> Result<(), ReceiveError> {
        self.sh.stats_mut().datagrams_in += 1;
        self.sh.stats_mut().datagram_bytes_in += bytes.len() as u64;
        self.receive(now, bytes, Channel::Datagram)
    }

    /// Processes a stream frame (state sync, fallback ping).
    pub fn handle_stream(&mut self, now: Time, bytes: &[u8]) -> Result<(), ReceiveError> {
        self.sh.stats_mut().streams_in += 1;
        self.sh.stats_mut().stream_bytes_in += bytes.len() as u64;
        self.receive(now, bytes, Channel::Stream)
    }

    /// Decodes and processes bytes received on `channel`.
    pub(crate) fn receive(
        &mut self,
        now: Time,
        bytes: &[u8],
        channel: Channel,
    ) -> Result<(), ReceiveError> {
        match Packet::<I>::decode(bytes, channel, self.sh.local().cluster()) {
            Ok(pkt) => self.receive_decoded(now, pkt, channel),
            Err(e) => {
                self.sh.stats_mut().drop(DropReason::of(&e));
                if matches!(e, DecodeError::Version(_)) {
                    self.sh.unsupported_bytes(now, bytes);
                }
                Err(e.into())
            }
        }
    }

    /// What follows a successful decode.
    pub(crate) fn receive_decoded(
        &mut self,
        now: Time,
        pkt: Packet<I>,
        channel: Channel,
    ) -> Result<(), ReceiveError> {
        if pkt.header.sender == *self.sh.local().id() {
            self.sh.stats_mut().drop(DropReason::FromSelf);
            return Err(ReceiveError::FromSelf);
        }
        if self.sh.isolation().phase().has_left() {
            self.sh.stats_mut().drop(DropReason::AfterLeave);
            return Err(ReceiveError::Left);
        }
        self.check_pause(now);
        if !self.sh.admit_version(now, &pkt.header) {
            return Err(DecodeError::Version(pkt.header.version).into());
        }
        let current = match self.sh.freshness(now, &pkt.header) {
            Verdict::Current => true,
            Verdict::Late => false,
            Verdict::Drop(reason) => {
                self.sh.stats_mut().drop(reason);
                if matches!(reason, DropReason::Replayed | DropReason::Stale) {
                    self.sh.notice_superseded(now, &pkt.header);
                }
                return Err(ReceiveError::Replay(reason));
            }
        };
        if current {
            let live = self.sh.members().live();
            self.sh.isolation_mut().heard_from_someone(now, live);
        }
        let known = self.note_header(now, &pkt.header, current);
        let stranger = !known
            && !pkt
                .messages
                .iter()
                .any(|m| matches!(m, Message::PushPull { .. }));
        let from = pkt.header.sender;
        for msg in pkt.messages {
            self.dispatch(now, &from, channel, msg);
        }
        if stranger {
            self.sh.sync_with_stranger(now, &from);
        }
        Ok(())
    }

    /// Routes one message of a packet from `from` to the sub-state or
    /// rule that handles it.
    fn dispatch(&mut self, now: Time, from: &I, channel: Channel, msg: Message<I>) {
        if let Message::Suspect {
            member,
            incarnation,
            accuser,
            ..
        }
        | Message::Closed {
            member,
            incarnation,
            accuser,
        } = &msg
        {
            if *member == *self.sh.local().id() {
                self.sh.answer_old_accusation(from, accuser, *incarnation);
            }
        }
        match msg {
            Message::Ping {
                seq,
                target,
                suspected,
            } => {
                let mine = match target {
                    PingTarget::Id(id) => id == *self.sh.local().id(),
                    PingTarget::Tag(tag) => tag == self.sh.local().tag(),
                };
                if !mine {
                    return;
                }
                if let Some(inc) = suspected {
                    if inc >= self.sh.local().incarnation() {
                        self.refute(now, inc, Some(from.clone()), false);
                    }
                }
                self.sh
                    .send(from.clone(), channel, vec![Message::Ack { seq }]);
            }
            Message::Ack { seq } => {
                let acked = self
                    .probing
                    .handle_ack(&mut self.sh, now, from, seq, channel);
                if let Some(target) = acked {
                    self.withdraw_accusation(&target, now);
                }
            }
            Message::Nack { seq } => self.probing.handle_nack(&mut self.sh, from, seq),
            Message::Superseded { known } => self.sh.handle_superseded(from, known),
            Message::Summary { hash } => {
                self.recovery.handle_summary(&mut self.sh, now, from, hash)
            }
            // Its header was the proof of life (`note_header`).
            Message::Heartbeat => {}
            Message::Corroborate { target } => {
                self.probing.corroborate(&mut self.sh, now, from, &target)
            }
            Message::PingReq {
                seq,
                target,
                suspected,
            } => self
                .probing
                .handle_ping_req(&mut self.sh, now, from, seq, target, suspected),
            Message::Alive {
                member,
                incarnation,
                meta,
            } => self.apply_alive(now, &member, incarnation, Some(meta), true),
            Message::Suspect {
                member,
                incarnation,
                accuser,
                accuser_health,
            } => self.apply_suspect(now, &member, incarnation, &accuser, accuser_health),
            Message::Dead {
                member,
                incarnation,
                declarer,
                accusers,
            } => self.apply_dead(now, &member, incarnation, &declarer, accusers, true),
            Message::Left {
                member,
                incarnation,
            } => self.apply_left(now, &member, incarnation, true),
            Message::Closed {
                member,
                incarnation,
                accuser,
            } => {
                self.probing.closed_from_relay(from, &member, &accuser);
                self.apply_closed(now, &member, incarnation, &accuser);
            }
            Message::PushPull {
                reply,
                digest,
                members,
                ..
            } => self.handle_push_pull(now, from, reply, digest, members),
            Message::Buckets { sums } => {
                self.recovery.handle_buckets(&mut self.sh, now, from, &sums)
            }
            Message::DigestPart {
                buckets,
                reply,
                members,
            } => self.answer_digest(now, from, reply, Some(buckets), members.into_vec()),
        }
    }

    /// What a packet's header tells about its sender: it is alive at that
    /// incarnation, with that local health. False: the sender is not a
    /// member this node knows.
    fn note_header(&mut self, now: Time, h: &Header<I>, current: bool) -> bool {
        let Some((state, inc)) = self.sh.members_mut().update(&h.sender, |m| {
            if current {
                m.set_health(h.health);
            }
            (m.state(), m.incarnation)
        }) else {
            return false;
        };
        if current {
            self.sh.members_mut().set_heard(&h.sender, now);
        }
        match state {
            _ if h.incarnation > inc => {
                // The sender's own word that it is alive at this incarnation.
                // Not re-gossiped when it was live here (a refutation goes to
                // those who heard the suspicion; metadata comes with its own
                // Alive message); gossiped, with the metadata known, when it
                // was held dead or gone: everyone needs that news, and its
                // Alive message in this packet will find it already known.
                let back = !state.is_live();
                self.apply_alive(now, &h.sender.clone(), h.incarnation, None, back);
            }
            MemberState::Dead => {
                // It does not know it was declared dead: tell it, at most once a period.
                let period = self.sh.cfg().probe_interval;
                if self.recovery.may_notify_dead(&h.sender, now, period) {
                    let notice = Message::Dead {
                        member: h.sender.clone(),
                        incarnation: inc,
                        declarer: self.sh.local().id().clone(),
                        accusers: self.sh.cfg().corroboration as u8,
                    };
                    self.sh
                        .send(h.sender.clone(), Channel::Datagram, vec![notice]);
                }
            }
            _ => {}
        }
        true
    }

    /// Processes every timer that is due. Spurious calls do nothing.
    pub fn handle_timeout(&mut self, now: Time) {
        self.check_pause(now);
        self.check_cut_off(now);
        if self.sh.timers().due(Timer::Probe, now) {
            self.probing.tick(&mut self.sh, now);
        }
        let mut i = 0;
        while let Some(p) = self.probing.next_failed(&mut self.sh, now, &mut i) {
            self.probe_failed(now, p);
        }
        self.probing.relay_deadlines(&mut self.sh, now);
        // After the probes' deadlines: a neighbour whose probe just failed
        // is pinged again now, not on a later call.
        self.monitors.tick(&mut self.sh, &mut self.probing, now);
        self.suspicion_deadlines(now);
        self.targeted.tick(&mut self.sh, now);
        if self.sh.timers().due(Timer::Gossip, now) {
            self.sh
                .gossip_tick(now, self.probing.walk(), &self.recovery);
        }
        if self.sh.timers().due(Timer::PushPull, now) {
            self.push_pull_tick(now);
        }
        if self.sh.timers().due(Timer::SeedRetry, now) {
            self.recovery.seed_tick(&mut self.sh, now);
        }
        if self.sh.timers().due(Timer::Reconnect, now) {
            self.recovery
                .reconnect_tick(&mut self.sh, &mut self.probing, now);
        }
        if self.sh.timers().due(Timer::Reap, now) {
            {
                self.recovery.reap(&mut self.sh, now);
                let window = self.sh.cfg().accusation_window;
                self.suspicions.forget_accusers(now, window);
            }
        }
    }

    /// The next time [`Node::handle_timeout`] has work, if any.
    pub fn poll_timeout(&self) -> Option<Time> {
        let t = self.next_deadline();
        (t != Time::NEVER).then_some(t)
    }

    /// The earliest of the armed timers in the table (gossip while news is
    /// queued, seed retries while alone or cut off with seeds), and of the
    /// deadlines the sub-states derive from their own state.
    fn next_deadline(&self) -> Time {
        let seeds = (self.sh.members().live() == 0 || self.sh.isolation().phase().is_cut_off())
            && !self.recovery.seeds().is_empty();
        let gossip = !self.sh.broadcasts().is_empty();
        self.sh
            .timers()
            .next(|t| match t {
                Timer::Gossip => gossip,
                Timer::SeedRetry => seeds,
                _ => true,
            })
            .min(self.monitors.next_due(&self.sh, &self.probing))
            .min(self.targeted.next_due())
            .min(self.probing.next_deadline())
            .min(self.suspicions.next_deadline())
    }

    /// Detects that this node itself was paused (stop-the-world, SIGSTOP):
    /// the caller is far later than the next timer. What was in flight cannot
    /// be judged, and suspicions get time for refutations to arrive.
    fn check_pause(&mut self, now: Time) {
        // The next deadline is never before the last input, so an input soon
        // after the previous one cannot reveal a pause: skip the work.
        if now <= self.sh.isolation().last_now() + self.sh.cfg().pause_threshold {
            self.sh.isolation_mut().advance(now);
            return;
        }
        let expected = self.next_deadline().max(self.sh.isolation().last_now());
        self.sh.isolation_mut().advance(now);
        if expected == Time::NEVER || now <= expected + self.sh.cfg().pause_threshold {
            return;
        }
        self.sh.stats_mut().pauses += 1;
        self.sh.credit_pause(now, now.saturating_since(expected));
        self.sh.stats_mut().probes_abandoned += self.probing.abandon() as u64;
        self.sh.bump_health(1);
        // Nobody could reach us while we were paused: give the cluster time
        // to speak before concluding that we are cut off.
        let live = self.sh.members().live();
        self.sh.isolation_mut().heard(now, live);
        let floor = now + self.sh.cfg().suspicion_min;
        self.suspicions.postpone(floor, self.sh.local().id());
        let probe = self.sh.timers().get(Timer::Probe).max(now);
        self.sh.timers_mut().set(Timer::Probe, probe);
        self.sh.push_event(Event::Paused {
            gap_ms: now.saturating_since(expected).as_millis() as u64,
        });
    }

    /// The next packet to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit<I>> {
        self.sh.out_mut().next_packet().map(Outgoing::encode)
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event<I>> {
        self.sh.out_mut().pop_event()
    }

    /// The next packet to send, not encoded: for a simulator that hands it
    /// to [`Node::handle_packet`] of its addressee. A runtime calls
    /// [`Node::poll_transmit`] instead.
    pub fn poll_packet(&mut self) -> Option<Outgoing<I>> {
        self.sh.out_mut().next_packet()
    }

    /// Processes `packet`, received on `channel`, whose encoding takes `len`
    /// bytes: the same as [`Node::handle_datagram`] or
    /// [`Node::handle_stream`] of its encoding, for a packet another node's
    /// [`Node::poll_packet`] returned (`len` is its [`Outgoing::len`]), given
    /// that identities decode to what they encode. A packet that would not
    /// decode to itself ([`Packet::round_trips`]) is encoded and decoded.
    pub fn handle_packet(
        &mut self,
        now: Time,
        channel: Channel,
        mut packet: Packet<I>,
        len: usize,
    ) -> Result<(), ReceiveError> {
        match channel {
            Channel::Datagram => {
                self.sh.stats_mut().datagrams_in += 1;
                self.sh.stats_mut().datagram_bytes_in += len as u64;
            }
            Channel::Stream => {
                self.sh.stats_mut().streams_in += 1;
                self.sh.stats_mut().stream_bytes_in += len as u64;
            }
        }
        if !packet.round_trips(channel, len) {
            return self.receive(now, &packet.encode(), channel);
        }
        if !packet.header.is_of(self.sh.local().cluster()) {
            let e = DecodeError::ForeignCluster;
            self.sh.stats_mut().drop(DropReason::of(&e));
            return Err(e.into());
        }
        // As decoding does: the header holds the receiver's cluster id
        // (from version 3 on, the wire carries only its low half).
        packet.header.cluster = self.sh.local().cluster();
        self.receive_decoded(now, packet, channel)
    }

    /// Whether this node has concluded that it is cut off from the cluster.
    pub fn is_cut_off(&self) -> bool {
        self.sh.isolation().phase().is_cut_off()
    }

    /// A hash of what a digest sync compares (every member's identity,
    /// incarnation and state, this node's own record included), whatever
    /// the order: two nodes in agreement compute the same value. A sum of
    /// one mixed FNV-1a hash per record: a difference in any record changes
    /// it, except with negligible probability.
    ///
    /// Once this node has sent or read a summary, or restored a snapshot
    /// in version 4, the members' part is kept up to date by the table as
    /// records change (`Table::keep_view_sum`): a summary
    /// then costs no walk over 10,000 records. Below version 4 a snapshot
    /// still loads without hashing each record.
    pub fn view_hash(&self) -> u64 {
        self.sh.view_hash()
    }
}
