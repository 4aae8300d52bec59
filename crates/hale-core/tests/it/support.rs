//! Helpers: a few nodes wired by hand, so tests see every packet.

use std::net::SocketAddr;
use std::time::Duration;

use hale_core::wire::{
    Header, MemberRecord, Message, Packet, PingTarget, WireState, SPOKEN, VERSION,
};
use hale_core::{Channel, Config, Event, Node, NodeId, Time, Transmit};

pub fn id(name: &str, port: u16) -> NodeId {
    NodeId::new(name, SocketAddr::from(([127, 0, 0, 1], port))).unwrap()
}

pub fn ids(n: usize) -> Vec<NodeId> {
    (0..n)
        .map(|i| id(&format!("n{i}"), 7000 + i as u16))
        .collect()
}

pub fn config(seed: u64) -> Config {
    Config {
        rng_seed: seed,
        // One member watched by round robin only, to keep packet flows simple.
        monitors: 0,
        // The walk's times in these tests were written for a 2 s walk (the
        // lan default before ring heartbeats).
        walk_interval: Duration::from_secs(2),
        // Hand-made packets carry no meaningful send time; the replay tests
        // turn the check on and build their headers themselves.
        replay_window: Duration::ZERO,
        ..Config::default()
    }
}

/// A node that knows `all` as alive (warm start), at time zero, writing
/// the newest wire version (what a cluster of this build negotiates).
pub fn node(me: &NodeId, all: &[NodeId], cfg: Config) -> Node<NodeId> {
    let mut n = node_unnegotiated(me, all, cfg);
    n.set_wire_version(VERSION);
    n
}

/// [`node`] before its runtime negotiated a wire version: it writes the
/// lowest of its range (version 2, the previous release's, by default).
pub fn node_unnegotiated(me: &NodeId, all: &[NodeId], cfg: Config) -> Node<NodeId> {
    let mut n = Node::new(me.clone(), cfg, Time::ZERO).unwrap();
    n.restore(
        Time::ZERO,
        all.iter().map(|i| MemberRecord {
            id: i.clone(),
            incarnation: 0,
            state: WireState::Alive,
            meta: Box::default(),
        }),
    );
    drain_events(&mut n);
    n
}

pub fn drain(n: &mut Node<NodeId>) -> Vec<Transmit<NodeId>> {
    std::iter::from_fn(|| n.poll_transmit()).collect()
}

pub fn drain_events(n: &mut Node<NodeId>) -> Vec<Event<NodeId>> {
    std::iter::from_fn(|| n.poll_event()).collect()
}

pub fn decode(t: &Transmit<NodeId>) -> Packet<NodeId> {
    Packet::decode(&t.bytes, t.channel, hale_core::wire::cluster_id("hale")).unwrap()
}

/// Runs the node's timers up to `until`, collecting what it sends.
pub fn run_timers(n: &mut Node<NodeId>, until: Time) -> Vec<Transmit<NodeId>> {
    let mut out = Vec::new();
    while let Some(t) = n.poll_timeout() {
        if t > until {
            break;
        }
        n.handle_timeout(t);
        out.extend(drain(n));
    }
    out
}

pub fn deliver(to: &mut Node<NodeId>, t: &Transmit<NodeId>, now: Time) {
    match t.channel {
        Channel::Datagram => to.handle_datagram(now, &t.bytes).unwrap(),
        Channel::Stream => to.handle_stream(now, &t.bytes).unwrap(),
    }
}

pub fn secs(s: f64) -> Time {
    Time::ZERO + Duration::from_secs_f64(s)
}

/// Runs `n`'s timers up to `until`: each packet with the time it was sent.
pub fn sends_until(n: &mut Node<NodeId>, until: Time) -> Vec<(Time, Transmit<NodeId>)> {
    let mut out = Vec::new();
    while let Some(t) = n.poll_timeout() {
        if t > until {
            break;
        }
        n.handle_timeout(t);
        out.extend(drain(n).into_iter().map(|x| (t, x)));
    }
    out
}

/// The tag a ping to `id` carries in cluster "hale" (wire version 3 on).
pub fn tag(id: &NodeId) -> PingTarget<NodeId> {
    PingTarget::Tag(hale_core::wire::target_tag(
        hale_core::wire::cluster_id("hale"),
        id,
    ))
}

/// A datagram from `sender` at `incarnation` carrying `messages`, in the
/// newest wire version.
pub fn packet_from(sender: &NodeId, incarnation: u32, messages: Vec<Message<NodeId>>) -> Vec<u8> {
    Packet {
        header: Header {
            version: VERSION,
            speaks: Some(SPOKEN),
            cluster: hale_core::wire::cluster_id("hale"),
            sender: sender.clone(),
            incarnation,
            health: 0,
            generation: 0,
            sent_ms: 0,
        },
        messages,
    }
    .encode()
}

/// Runs `n` alone (nothing delivered to it) until `until`: its events.
pub fn events_alone(n: &mut Node<NodeId>, until: Time) -> Vec<Event<NodeId>> {
    let mut events = Vec::new();
    while let Some(t) = n.poll_timeout() {
        if t > until {
            break;
        }
        n.handle_timeout(t);
        drain(n);
        events.extend(drain_events(n));
    }
    events
}

/// Whether `events` declare `who` dead.
pub fn declared_dead(events: &[Event<NodeId>], who: &NodeId) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::Dead { member, .. } if member == who))
}

/// Whether `events` report `who` suspected.
pub fn suspected(events: &[Event<NodeId>], who: &NodeId) -> bool {
    events
        .iter()
        .any(|e| matches!(e, Event::Suspected { member, .. } if member == who))
}
