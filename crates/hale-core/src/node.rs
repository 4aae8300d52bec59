//! The [`Node`]: one member's SWIM + Lifeguard state machine.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rustc_hash::FxBuildHasher;

use crate::broadcast::{Broadcasts, Class};
use crate::config::{Config, ConfigError};
use crate::direct::Outgoing;
use crate::event::Event;
use crate::freshness::Verdict;
use crate::identity::Identity;
use crate::member::{Member, MemberState};
use crate::probe::{Probe, Relay};
use crate::ring::ring_position;
use crate::state::{AccuserWindow, Suspicion};
use crate::stats::{DropReason, Stats};
use crate::table::Table;
use crate::time::Time;
use crate::wire::{
    cluster_id, Channel, DecodeError, Header, Message, Packet, MAX_DATAGRAM, MAX_MESSAGES, MAX_META,
};

pub(crate) type FxMap<K, V> = HashMap<K, V, FxBuildHasher>;

/// Bytes to send to a member, and on which channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit<I> {
    /// The destination.
    pub to: I,
    /// Datagram (UDP) or stream (TCP).
    pub channel: Channel,
    /// The encoded packet.
    pub bytes: Vec<u8>,
    /// It carries a probe's ping: a runtime that can should send it so that
    /// a closed port at `to` is reported ([`Node::handle_unreachable`]), e.g.
    /// from a UDP socket connected to `to` (ECONNREFUSED after an ICMP port
    /// unreachable).
    pub probe: bool,
}

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
#[derive(Debug)]
pub struct Node<I: Identity> {
    pub(crate) cfg: Config,
    pub(crate) cluster: u64,
    pub(crate) me: I,
    pub(crate) my_ring: u64,
    pub(crate) incarnation: u32,
    pub(crate) meta: Box<[u8]>,
    pub(crate) left: bool,
    pub(crate) rng: Xoshiro256PlusPlus,
    pub(crate) members: Table<I>,
    /// Alive or suspect members, not counting this node.
    pub(crate) live: usize,
    /// Suspected members.
    pub(crate) suspects: usize,
    // Probing.
    pub(crate) walk: Vec<I>,
    pub(crate) walk_pos: usize,
    pub(crate) walk_round: u64,
    /// Ring neighbours before this node: pinged when quiet for a monitor interval.
    pub(crate) monitored: Vec<I>,
    /// Ring neighbours after this node (they ping it): pinged when quiet longer.
    pub(crate) watchers: Vec<I>,
    /// When each of `monitored`, then `watchers`, was last pinged by turn.
    pub(crate) monitor_pinged: Vec<Time>,
    /// Ring distance of the farthest neighbour before and after (MAX when short).
    pub(crate) monitor_horizon: (u64, u64),
    pub(crate) probes: Vec<Probe<I>>,
    pub(crate) relays: Vec<Relay<I>>,
    pub(crate) next_seq: u32,
    pub(crate) next_probe: Time,
    pub(crate) health: u8,
    // Suspicion.
    pub(crate) suspicions: FxMap<I, Suspicion<I>>,
    pub(crate) deadlines: BTreeSet<(Time, I)>,
    pub(crate) accusers: FxMap<I, AccuserWindow>,
    // Gossip.
    pub(crate) broadcasts: Broadcasts<I>,
    pub(crate) next_gossip: Time,
    /// Suspicions and refutations sent to a few members (`targeted.rs`).
    pub(crate) targeted: Vec<crate::targeted::TargetedItem<I>>,
    // Sync and recovery.
    pub(crate) seeds: Vec<I>,
    pub(crate) next_push_pull: Time,
    pub(crate) next_seed_retry: Time,
    pub(crate) in_fallback: bool,
    pub(crate) next_reconnect: Time,
    pub(crate) next_reap: Time,
    pub(crate) sync_tokens: f64,
    pub(crate) sync_tokens_at: Time,
    pub(crate) tombstones: Vec<I>,
    pub(crate) dead_notices: FxMap<I, Time>,
    /// When a packet (or traffic) from another member last arrived.
    pub(crate) heard_any: Time,
    /// This node concluded that it is cut off (see `isolation.rs`).
    pub(crate) cut_off: bool,
    /// When it last stopped being cut off: probes started before then
    /// accuse nobody.
    pub(crate) back_at: Time,
    // Output.
    pub(crate) transmits: VecDeque<Outgoing<I>>,
    pub(crate) events: VecDeque<Event<I>>,
    pub(crate) stats: Stats,
    pub(crate) last_now: Time,
    /// Until when packets may be late by how much more than the replay
    /// window allows: this node was paused and they queued up meanwhile.
    pub(crate) pause_credit: (Time, Duration),
    /// This run's generation and the notices about others' (`freshness.rs`).
    pub(crate) generation: crate::freshness::Generation,
    /// Scratch space for encoding (ring positions).
    pub(crate) scratch: Vec<u8>,
    /// No events while loading a snapshot.
    pub(crate) quiet: bool,
    /// Monitors are recomputed once at the end of a snapshot load, not per
    /// record: set while loading, and when a change was deferred.
    pub(crate) defer_monitors: bool,
    pub(crate) monitors_dirty: bool,
}

impl<I: Identity> Node<I> {
    /// A node named `me`, alone in its cluster until it joins.
    pub fn new(me: I, cfg: Config, now: Time) -> Result<Self, ConfigError> {
        cfg.validate()?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(cfg.rng_seed);
        let cluster = cluster_id(&cfg.cluster);
        let mut scratch = Vec::with_capacity(128);
        let my_ring = ring_position(cluster, &me, &mut scratch);
        // Random phases so that nodes started together do not probe in lockstep.
        let probe_phase = rng.random_range(0..cfg.walk_interval.as_nanos() as u64);
        let pp_phase = rng.random_range(0..cfg.push_pull_interval.as_nanos() as u64);
        let rc_phase = rng.random_range(0..cfg.reconnect_interval.as_nanos() as u64);
        Ok(Node {
            cluster,
            my_ring,
            incarnation: 0,
            meta: cfg.meta.clone().into_boxed_slice(),
            left: false,
            rng,
            members: Table::new(),
            live: 0,
            suspects: 0,
            walk: Vec::new(),
            walk_pos: 0,
            walk_round: 0,
            monitored: Vec::new(),
            watchers: Vec::new(),
            monitor_pinged: Vec::new(),
            monitor_horizon: (u64::MAX, u64::MAX),
            probes: Vec::new(),
            relays: Vec::new(),
            next_seq: 1,
            next_probe: now + Duration::from_nanos(probe_phase),
            health: 0,
            suspicions: FxMap::default(),
            deadlines: BTreeSet::new(),
            accusers: FxMap::default(),
            broadcasts: Broadcasts::new(cfg.max_broadcasts),
            next_gossip: Time::NEVER,
            targeted: Vec::new(),
            seeds: Vec::new(),
            next_push_pull: now + Duration::from_nanos(pp_phase),
            next_seed_retry: now + cfg.seed_retry_interval,
            in_fallback: false,
            next_reconnect: now + Duration::from_nanos(rc_phase),
            next_reap: now + Duration::from_secs(10),
            sync_tokens: f64::from(cfg.sync_replies_per_sec),
            sync_tokens_at: now,
            tombstones: Vec::new(),
            dead_notices: FxMap::default(),
            heard_any: now,
            cut_off: false,
            back_at: Time::ZERO,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            last_now: now,
            pause_credit: (Time::ZERO, Duration::ZERO),
            generation: crate::freshness::Generation::new(cfg.generation),
            scratch,
            quiet: false,
            defer_monitors: false,
            monitors_dirty: false,
            me,
            cfg,
        })
    }

    /// This node's identity.
    pub fn id(&self) -> &I {
        &self.me
    }

    /// The generation this node's packets carry: `Config::generation`, or
    /// higher once a peer told it that it had heard a newer one from it
    /// (a restart with the wall clock set back; see `freshness.rs`).
    pub fn generation(&self) -> u64 {
        self.generation.mine
    }

    /// This node's incarnation.
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// This node's Lifeguard local health score: 0 is healthy, up to
    /// `awareness_max - 1`; probe interval and timeout are scaled by score + 1.
    pub fn local_health(&self) -> u8 {
        self.health
    }

    /// Whether [`Node::leave`] was called.
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Every member this node knows of, this node excluded, in no
    /// particular order: copies, made as the iterator advances.
    pub fn members(&self) -> impl Iterator<Item = Member<I>> + '_ {
        self.members.views()
    }

    /// One member, if known: a copy.
    pub fn member(&self, id: &I) -> Option<Member<I>> {
        self.members.view(id)
    }

    /// Alive or suspected members, this node excluded.
    pub fn num_live(&self) -> usize {
        self.live
    }

    /// The ring neighbours this node pings when they are quiet for a
    /// monitor interval (its predecessors).
    pub fn monitored(&self) -> &[I] {
        &self.monitored
    }

    /// The ring neighbours that ping this node (its successors); it pings
    /// them only when they stay quiet longer than expected.
    pub fn watchers(&self) -> &[I] {
        &self.watchers
    }

    /// News waiting to be gossiped.
    pub fn pending_broadcasts(&self) -> usize {
        self.broadcasts.len()
    }

    /// This node's metadata.
    pub fn metadata(&self) -> &[u8] {
        &self.meta
    }

    /// Application traffic was received from `peer`: proof of life that
    /// spares a probe. Unknown peers are ignored.
    pub fn note_traffic(&mut self, now: Time, peer: &I) {
        self.last_now = self.last_now.max(now);
        if self.members.contains(peer) {
            self.heard_from_someone(now);
        }
        if let Some(m) = self.members.get_mut(peer) {
            if m.state().is_live() {
                self.members.set_heard(peer, now);
                self.withdraw_accusation(peer, now);
            }
        }
    }

    /// Publishes new metadata (raising the incarnation so it wins everywhere).
    pub fn set_metadata(&mut self, now: Time, meta: Vec<u8>) -> Result<(), MetadataError> {
        if self.left {
            return Err(MetadataError::Left);
        }
        if meta.len() > MAX_META {
            return Err(MetadataError::TooLarge(meta.len()));
        }
        self.meta = meta.into_boxed_slice();
        self.incarnation = self.incarnation.saturating_add(1);
        self.broadcast_self_alive(now);
        Ok(())
    }

    /// Leaves gracefully: announces it to the cluster so peers record it as
    /// left, not dead. Keep driving the node for a moment so the news spreads.
    pub fn leave(&mut self, now: Time) -> Result<(), LeaveError> {
        if self.left {
            return Err(LeaveError::AlreadyLeft);
        }
        self.left = true;
        self.incarnation = self.incarnation.saturating_add(1);
        self.probes.clear();
        self.relays.clear();
        let msg = Message::Left {
            member: self.me.clone(),
            incarnation: self.incarnation,
        };
        self.broadcasts
            .push(Class::Left, (self.me.clone(), None), msg.clone());
        let targets = self.random_live(2 * self.cfg.gossip_fanout, None);
        for t in targets {
            self.send(t, Channel::Datagram, vec![msg.clone()]);
        }
        self.next_gossip = now;
        Ok(())
    }

    /// Processes a datagram. Bad input is dropped, counted, and changes nothing.
    pub fn handle_datagram(&mut self, now: Time, bytes: &[u8]) -> Result<(), ReceiveError> {
        self.stats.datagrams_in += 1;
        self.stats.datagram_bytes_in += bytes.len() as u64;
        self.receive(now, bytes, Channel::Datagram)
    }

    /// Processes a stream frame (state sync, fallback ping).
    pub fn handle_stream(&mut self, now: Time, bytes: &[u8]) -> Result<(), ReceiveError> {
        self.stats.streams_in += 1;
        self.stats.stream_bytes_in += bytes.len() as u64;
        self.receive(now, bytes, Channel::Stream)
    }

    pub(crate) fn receive(
        &mut self,
        now: Time,
        bytes: &[u8],
        channel: Channel,
    ) -> Result<(), ReceiveError> {
        match Packet::<I>::decode(bytes, channel, self.cluster) {
            Ok(pkt) => self.receive_decoded(now, pkt, channel),
            Err(e) => {
                self.stats.drop(DropReason::of(&e));
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
        if pkt.header.sender == self.me {
            self.stats.drop(DropReason::FromSelf);
            return Err(ReceiveError::FromSelf);
        }
        if self.left {
            self.stats.drop(DropReason::AfterLeave);
            return Err(ReceiveError::Left);
        }
        self.check_pause(now);
        let current = match self.freshness(now, &pkt.header) {
            Verdict::Current => true,
            Verdict::Late => false,
            Verdict::Drop(reason) => {
                self.stats.drop(reason);
                if matches!(reason, DropReason::Replayed | DropReason::Stale) {
                    self.notice_superseded(now, &pkt.header);
                }
                return Err(ReceiveError::Replay(reason));
            }
        };
        if current {
            self.heard_from_someone(now);
        }
        let stranger = self.members.get(&pkt.header.sender).is_none()
            && !pkt
                .messages
                .iter()
                .any(|m| matches!(m, Message::PushPull { .. }));
        self.note_header(now, &pkt.header, current);
        let from = pkt.header.sender;
        for msg in pkt.messages {
            self.dispatch(now, &from, channel, msg);
        }
        if stranger {
            self.sync_with_stranger(now, &from);
        }
        Ok(())
    }

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
            if *member == self.me {
                self.answer_old_accusation(from, accuser, *incarnation);
            }
        }
        match msg {
            Message::Ping {
                seq,
                target,
                suspected,
            } => {
                if target != self.me {
                    return;
                }
                if let Some(inc) = suspected {
                    if inc >= self.incarnation {
                        self.refute(now, inc, Some(from.clone()), false);
                    }
                }
                self.send(from.clone(), channel, vec![Message::Ack { seq }]);
            }
            Message::Ack { seq } => self.handle_ack(now, seq, channel),
            Message::Nack { seq } => self.handle_nack(seq),
            Message::Superseded { known } => self.handle_superseded(from, known),
            Message::PingReq {
                seq,
                target,
                suspected,
            } => self.handle_ping_req(now, from, seq, target, suspected),
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
                self.closed_from_relay(from, &member, &accuser);
                self.apply_closed(now, &member, incarnation, &accuser);
            }
            Message::PushPull {
                reply,
                digest,
                members,
                ..
            } => self.handle_push_pull(now, from, reply, digest, members),
        }
    }

    /// What a packet's header tells about its sender: it is alive at that
    /// incarnation, with that local health.
    fn note_header(&mut self, now: Time, h: &Header<I>, current: bool) {
        let Some(m) = self.members.get_mut(&h.sender) else {
            return;
        };
        if current {
            m.set_health(h.health);
        }
        let (state, inc) = (m.state(), m.incarnation);
        if current {
            self.members.set_heard(&h.sender, now);
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
                let last = self.dead_notices.get(&h.sender).copied();
                if last.is_none_or(|t| now.saturating_since(t) >= self.cfg.probe_interval) {
                    self.dead_notices.insert(h.sender.clone(), now);
                    let notice = Message::Dead {
                        member: h.sender.clone(),
                        incarnation: inc,
                        declarer: self.me.clone(),
                        accusers: self.cfg.corroboration as u8,
                    };
                    self.send(h.sender.clone(), Channel::Datagram, vec![notice]);
                }
            }
            _ => {}
        }
    }

    /// Processes every timer that is due. Spurious calls do nothing.
    pub fn handle_timeout(&mut self, now: Time) {
        self.check_pause(now);
        self.check_cut_off(now);
        if now >= self.next_probe {
            self.probe_tick(now);
        }
        self.probe_deadlines(now);
        // After the probes' deadlines: a neighbour whose probe just failed
        // is pinged again now, not on a later call.
        self.monitor_tick(now);
        self.suspicion_deadlines(now);
        self.targeted_tick(now);
        if now >= self.next_gossip {
            self.gossip_tick(now);
        }
        if now >= self.next_push_pull {
            self.push_pull_tick(now);
        }
        if now >= self.next_seed_retry {
            self.seed_tick(now);
        }
        if now >= self.next_reconnect {
            self.reconnect_tick(now);
        }
        if now >= self.next_reap {
            self.reap(now);
        }
    }

    /// The next time [`Node::handle_timeout`] has work, if any.
    pub fn poll_timeout(&self) -> Option<Time> {
        let t = self.next_deadline();
        (t != Time::NEVER).then_some(t)
    }

    fn next_deadline(&self) -> Time {
        let mut t = self
            .next_probe
            .min(self.next_monitor_due())
            .min(self.next_push_pull)
            .min(self.next_reconnect)
            .min(self.next_reap)
            .min(self.next_targeted_due());
        if !self.broadcasts.is_empty() {
            t = t.min(self.next_gossip);
        }
        if (self.live == 0 || self.cut_off) && !self.seeds.is_empty() {
            t = t.min(self.next_seed_retry);
        }
        for p in &self.probes {
            t = t.min(p.next_deadline());
        }
        for r in &self.relays {
            t = t.min(r.next_deadline());
        }
        if let Some((d, _)) = self.deadlines.first() {
            t = t.min(*d);
        }
        t
    }

    /// Detects that this node itself was paused (stop-the-world, SIGSTOP):
    /// the caller is far later than the next timer. What was in flight cannot
    /// be judged, and suspicions get time for refutations to arrive.
    fn check_pause(&mut self, now: Time) {
        // The next deadline is never before the last input, so an input soon
        // after the previous one cannot reveal a pause: skip the work.
        if now <= self.last_now + self.cfg.pause_threshold {
            self.last_now = self.last_now.max(now);
            return;
        }
        let expected = self.next_deadline().max(self.last_now);
        self.last_now = self.last_now.max(now);
        if expected == Time::NEVER || now <= expected + self.cfg.pause_threshold {
            return;
        }
        self.stats.pauses += 1;
        self.credit_pause(now, now.saturating_since(expected));
        self.stats.probes_abandoned += self.probes.len() as u64;
        self.probes.clear();
        self.relays.clear();
        self.bump_health(1);
        // Nobody could reach us while we were paused: give the cluster time
        // to speak before concluding that we are cut off.
        self.heard_any = self.heard_any.max(now);
        let floor = now + self.cfg.suspicion_min;
        let late: Vec<(Time, I)> = self
            .deadlines
            .range(..(floor, self.me.clone()))
            .cloned()
            .collect();
        for (d, id) in late {
            self.deadlines.remove(&(d, id.clone()));
            if let Some(s) = self.suspicions.get_mut(&id) {
                s.deadline = floor;
            }
            self.deadlines.insert((floor, id));
        }
        self.next_probe = self.next_probe.max(now);
        self.push_event(Event::Paused {
            gap_ms: now.saturating_since(expected).as_millis() as u64,
        });
    }

    /// The next packet to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit<I>> {
        self.transmits.pop_front().map(Outgoing::encode)
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event<I>> {
        self.events.pop_front()
    }

    pub(crate) fn push_event(&mut self, e: Event<I>) {
        if self.quiet {
            return;
        }
        if self.events.len() >= self.cfg.max_events {
            self.events.pop_front();
            self.stats.events_dropped += 1;
        }
        self.events.push_back(e);
    }

    fn header(&self) -> Header<I> {
        Header {
            cluster: self.cluster,
            sender: self.me.clone(),
            incarnation: self.incarnation,
            health: self.health,
            generation: self.generation.mine,
            sent_ms: self.last_now.as_nanos() / 1_000_000,
        }
    }

    /// Sends `primary` to `to`; datagrams are topped up with queued news up
    /// to [`MAX_DATAGRAM`] bytes.
    pub(crate) fn send(&mut self, to: I, channel: Channel, mut primary: Vec<Message<I>>) {
        let header = self.header();
        // The encoding writes at most MAX_MESSAGES messages.
        primary.truncate(MAX_MESSAGES);
        let mut len =
            header.encoded_len() + primary.iter().map(Message::encoded_len).sum::<usize>();
        if channel == Channel::Datagram {
            let limit = self.retransmit_limit();
            let suspect = limit.min(self.cfg.suspicion_retransmits as u32);
            // A verdict is sent twice the limit: members that got it pass it
            // on in one burst, so a member that no copy reached (each gets
            // about `limit` copies, Poisson: e^-limit) has no later chance;
            // with 300 verdicts at once in 1,000 members, a few such misses
            // happened every run (`scenarios/isolation-each.toml`). Deaths
            // are rare: the extra copies cost little.
            let dead = limit.saturating_mul(2);
            len += self.broadcasts.take(
                MAX_DATAGRAM.saturating_sub(len),
                [limit, limit, dead, suspect, suspect],
                &mut primary,
            );
        }
        if primary.is_empty() {
            return;
        }
        let probe = primary.iter().any(|m| matches!(m, Message::Ping { .. }));
        match channel {
            Channel::Datagram => {
                debug_assert!(len <= MAX_DATAGRAM);
                self.stats.datagrams_out += 1;
                self.stats.datagram_bytes_out += len as u64;
                self.stats.largest_datagram = self.stats.largest_datagram.max(len as u64);
            }
            Channel::Stream => {
                self.stats.streams_out += 1;
                self.stats.stream_bytes_out += len as u64;
            }
        }
        self.transmits.push_back(Outgoing {
            to,
            channel,
            packet: Packet {
                header,
                messages: primary,
            },
            len,
            probe,
        });
    }
}
