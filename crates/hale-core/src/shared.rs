//! [`Shared`]: what every sub-state reads and writes as it works: the
//! configuration, this node's own record and local health, the member
//! table, the randomness, the news queued for gossip, where the node stands
//! (its lifecycle and isolation), the periodic timers, the outbox, the wire
//! versions and the counters.
//!
//! The sub-states ([`crate::probe::Probing`], [`crate::monitor::Monitors`],
//! [`crate::targeted::Targeted`], [`crate::sync::Recovery`], ...) own their
//! fields and their behaviour; each of their methods is handed the
//! [`Shared`] part (and whatever other sub-state it reads) as an argument.

use std::time::Duration;

use rand_xoshiro::Xoshiro256PlusPlus;

use crate::broadcast::Broadcasts;
use crate::config::Config;
use crate::direct::{Outbox, Outgoing};
use crate::event::Event;
use crate::identity::Identity;
use crate::isolation::Isolation;
use crate::local::Local;
use crate::stats::Stats;
use crate::table::Table;
use crate::time::{Time, TimerTable};
use crate::versions::Wire;
use crate::wire::{Channel, Header, Message, Packet, PingTarget, MAX_DATAGRAM, MAX_MESSAGES};

/// The state every sub-state reads and writes (see the module docs): its
/// fields are reached through methods only, so that a sub-state's method
/// states what it reads (`&Shared`) or changes (`&mut Shared`).
///
/// Invariants: `health < awareness_max`; the member table, the gossip
/// queue and the outbox keep their own (documented on their types).
#[derive(Debug)]
pub(crate) struct Shared<I: Identity> {
    cfg: Config,
    /// Identity, incarnation, metadata, generation (`local.rs`).
    local: Local<I>,
    /// The Lifeguard local health score: `< awareness_max`.
    health: u8,
    rng: Xoshiro256PlusPlus,
    /// Every other member, with live and suspect counts (`table.rs`).
    members: Table<I>,
    /// News queued for gossip (`broadcast.rs`, `gossip.rs`).
    broadcasts: Broadcasts<I>,
    /// Where this node stands: its lifecycle (active, fallen back to seeds,
    /// cut off, or left), and whether faults are its own: silence, pauses
    /// (`isolation.rs`).
    isolation: Isolation,
    /// The periodic timers (`time.rs`).
    timers: TimerTable,
    /// Packets and events for the runtime (`direct.rs`).
    out: Outbox<I>,
    /// Wire versions: written, per member, counted (`versions.rs`).
    wire: Wire,
    stats: Stats,
}

impl<I: Identity> Shared<I> {
    /// Everything but the configuration and randomness, fresh: a node
    /// named by `local`, healthy, alone, active since `now`.
    pub(crate) fn new(
        cfg: Config,
        local: Local<I>,
        rng: Xoshiro256PlusPlus,
        timers: TimerTable,
        now: Time,
    ) -> Self {
        Shared {
            local,
            health: 0,
            rng,
            members: Table::new(),
            broadcasts: Broadcasts::new(cfg.max_broadcasts),
            isolation: Isolation::new(now),
            timers,
            out: Outbox::new(),
            wire: Wire::new(cfg.wire_versions),
            stats: Stats::default(),
            cfg,
        }
    }

    /// The configuration in force.
    pub(crate) fn cfg(&self) -> &Config {
        &self.cfg
    }

    /// Puts `cfg` in force (validated by the caller).
    pub(crate) fn set_cfg(&mut self, cfg: Config) {
        self.cfg = cfg;
    }

    /// This node's own record.
    pub(crate) fn local(&self) -> &Local<I> {
        &self.local
    }

    /// This node's own record, to change.
    pub(crate) fn local_mut(&mut self) -> &mut Local<I> {
        &mut self.local
    }

    /// The Lifeguard local health score.
    pub(crate) fn health(&self) -> u8 {
        self.health
    }

    /// The node's only source of randomness.
    pub(crate) fn rng(&mut self) -> &mut Xoshiro256PlusPlus {
        &mut self.rng
    }

    /// The member table.
    pub(crate) fn members(&self) -> &Table<I> {
        &self.members
    }

    /// The member table, to change.
    pub(crate) fn members_mut(&mut self) -> &mut Table<I> {
        &mut self.members
    }

    /// News queued for gossip.
    pub(crate) fn broadcasts(&self) -> &Broadcasts<I> {
        &self.broadcasts
    }

    /// News queued for gossip, to change.
    pub(crate) fn broadcasts_mut(&mut self) -> &mut Broadcasts<I> {
        &mut self.broadcasts
    }

    /// Where this node stands.
    pub(crate) fn isolation(&self) -> &Isolation {
        &self.isolation
    }

    /// Where this node stands, to change.
    pub(crate) fn isolation_mut(&mut self) -> &mut Isolation {
        &mut self.isolation
    }

    /// The periodic timers.
    pub(crate) fn timers(&self) -> &TimerTable {
        &self.timers
    }

    /// The periodic timers, to set.
    pub(crate) fn timers_mut(&mut self) -> &mut TimerTable {
        &mut self.timers
    }

    /// Packets and events for the runtime.
    pub(crate) fn out(&self) -> &Outbox<I> {
        &self.out
    }

    /// Packets and events for the runtime, to queue or take.
    pub(crate) fn out_mut(&mut self) -> &mut Outbox<I> {
        &mut self.out
    }

    /// The wire versions.
    pub(crate) fn wire(&self) -> &Wire {
        &self.wire
    }

    /// The wire versions, to count or change.
    pub(crate) fn wire_mut(&mut self) -> &mut Wire {
        &mut self.wire
    }

    /// The counters.
    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The counters, to count.
    pub(crate) fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }

    /// Queues an event for the runtime (the oldest go first past
    /// `max_events`; counted when dropped).
    pub(crate) fn push_event(&mut self, e: Event<I>) {
        if self.out.push_event(e, self.cfg.max_events) {
            self.stats.events_dropped += 1;
        }
    }

    /// Sends `primary` to `to`; datagrams are topped up with queued news up
    /// to [`MAX_DATAGRAM`] bytes.
    pub(crate) fn send(&mut self, to: I, channel: Channel, mut primary: Vec<Message<I>>) {
        let header = self.header_for(&to);
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
        debug_assert!(
            primary.iter().all(|m| m.fits(header.version)),
            "a message its packet's version cannot carry"
        );
        self.wire.count_sent(header.version);
        // A heartbeat goes the way a ping does, so that a closed port is
        // reported for it (`handle_unreachable`).
        let probe = primary
            .iter()
            .any(|m| matches!(m, Message::Ping { .. } | Message::Heartbeat));
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
        self.out.send(Outgoing {
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

    /// The header a packet to `to` carries, in the version written to it.
    pub(crate) fn header_for(&mut self, to: &I) -> Header<I> {
        let now = self.isolation.last_now();
        let version = self.version_for(now, to);
        Header {
            version,
            speaks: (version >= 3).then_some(self.wire.range()),
            cluster: self.local.cluster(),
            sender: self.local.id().clone(),
            incarnation: self.local.incarnation(),
            health: self.health,
            generation: self.local.my_generation(),
            sent_ms: now.as_nanos() / 1_000_000,
        }
    }

    /// The version to write to `to`: the negotiated one, or its run's.
    pub(crate) fn version_for(&mut self, now: Time, to: &I) -> u8 {
        let local = &mut self.local;
        self.wire.version_for(now, || local.ring_of(to))
    }

    /// How a ping to `to` names it, in the version written to it: by its
    /// tag from version 3 on, by its identity in version 2.
    pub(crate) fn ping_target(&mut self, to: &I) -> PingTarget<I> {
        let now = self.isolation.last_now();
        let key = self.local.ring_of(to);
        if self.wire.version_for(now, || key) >= 3 {
            PingTarget::Tag(crate::ring::tag(key))
        } else {
            PingTarget::Id(to.clone())
        }
    }

    /// Whether packets to `to` are written in version 3 or later (which
    /// alone carry [`crate::wire::Message::Summary`]).
    pub(crate) fn writes_v3_to(&mut self, to: &I) -> bool {
        let now = self.isolation.last_now();
        self.version_for(now, to) >= 3
    }

    /// Whether packets to `to` are written in version 4 or later (which
    /// alone carry [`crate::wire::Message::Buckets`] and
    /// [`crate::wire::Message::DigestPart`]).
    pub(crate) fn writes_v4_to(&mut self, to: &I) -> bool {
        let now = self.isolation.last_now();
        self.version_for(now, to) >= 4
    }

    /// Changes the Lifeguard local health score by `delta`, within
    /// `0..awareness_max`.
    pub(crate) fn bump_health(&mut self, delta: i32) {
        let max = i32::from(self.cfg.awareness_max) - 1;
        let h = &mut self.health;
        *h = (i32::from(*h) + delta).clamp(0, max) as u8;
    }

    /// `d` scaled by the local health multiplier.
    pub(crate) fn scaled(&self, d: Duration) -> Duration {
        d * (u32::from(self.health) + 1)
    }

    /// The wire versions hear of a packet with header `h` (`new_run`: its
    /// sender's new run in an older version), its sender's ring position
    /// read only if needed.
    pub(crate) fn wire_heard(&mut self, now: Time, h: &Header<I>, new_run: bool) {
        let local = &self.local;
        let key = || local.ring_of(&h.sender);
        self.wire.heard(now, key, h.generation, h.version, new_run);
    }
}
