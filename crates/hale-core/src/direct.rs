//! Packets handed over without their bytes, for a simulator.
//!
//! A node keeps what it sends as a [`Packet`] with its encoded length;
//! [`crate::Node::poll_transmit`] encodes it (what a runtime sends on a socket).
//! A simulator, whose nodes all run in one process, can instead take the
//! packet itself ([`crate::Node::poll_packet`]) and hand it to the addressee
//! ([`crate::Node::handle_packet`]) with its length: the addressee does exactly what
//! it would do with the bytes (the same statistics, byte counts, drops and
//! protocol steps), without encoding and decoding every datagram. A packet
//! that the wire would not give back unchanged goes through the bytes.

use std::collections::VecDeque;

use crate::event::Event;
use crate::identity::Identity;
use crate::wire::{Channel, Packet};

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
    /// a closed port at `to` is reported ([`crate::Node::handle_unreachable`]), e.g.
    /// from a UDP socket connected to `to` (ECONNREFUSED after an ICMP port
    /// unreachable).
    pub probe: bool,
}

/// A packet to send, before encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing<I> {
    /// The destination.
    pub to: I,
    /// Datagram (UDP) or stream (TCP).
    pub channel: Channel,
    /// The packet.
    pub packet: Packet<I>,
    /// Bytes its encoding takes (what the sender counted as sent).
    pub len: usize,
    /// It carries a probe's ping (see [`Transmit::probe`]).
    pub probe: bool,
}

impl<I: Identity> Outgoing<I> {
    /// Its wire form.
    pub fn encode(self) -> Transmit<I> {
        let bytes = self.packet.encode();
        debug_assert_eq!(bytes.len(), self.len);
        Transmit {
            to: self.to,
            channel: self.channel,
            bytes,
            probe: self.probe,
        }
    }
}

/// What a node has produced for its runtime: packets to send and events.
///
/// Invariants: at most `max_events` events are kept (the oldest go first);
/// while muted (a snapshot loads) no event is kept.
#[derive(Debug)]
pub(crate) struct Outbox<I> {
    transmits: VecDeque<Outgoing<I>>,
    events: VecDeque<Event<I>>,
    /// A snapshot is loading (`Node::restore`). Not a [`Lifecycle`] phase:
    /// it lasts within one call and can happen in any phase.
    ///
    /// [`Lifecycle`]: crate::isolation::Lifecycle
    muted: bool,
}

/// Events' room an empty queue keeps (more is given back, see
/// [`Outbox::pop_event`]).
const KEPT_EVENT_ROOM: usize = 16;

impl<I> Outbox<I> {
    /// Empty.
    pub(crate) fn new() -> Outbox<I> {
        Outbox {
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            muted: false,
        }
    }

    /// Queues a packet.
    pub(crate) fn send(&mut self, o: Outgoing<I>) {
        self.transmits.push_back(o);
    }

    /// The next packet.
    pub(crate) fn next_packet(&mut self) -> Option<Outgoing<I>> {
        self.transmits.pop_front()
    }

    /// Queues an event, keeping at most `max`; whether an older one was dropped.
    pub(crate) fn push_event(&mut self, e: Event<I>, max: usize) -> bool {
        if self.muted {
            return false;
        }
        let full = self.events.len() >= max;
        if full {
            self.events.pop_front();
        }
        self.events.push_back(e);
        full
    }

    /// The next event. A queue drained after a burst gives its room
    /// back: a node of a 10,000-member cluster that once had a hundred
    /// events queued (a digest merged, a wave of joins) would otherwise
    /// keep room for them for good (30 MB over the simulator's 10,000
    /// nodes in `churn-10k`).
    pub(crate) fn pop_event(&mut self) -> Option<Event<I>> {
        let e = self.events.pop_front();
        if self.events.is_empty() && self.events.capacity() > KEPT_EVENT_ROOM {
            self.events = VecDeque::new();
        }
        e
    }

    /// Room the event queue holds on to once drained.
    #[cfg(test)]
    fn event_room(&self) -> usize {
        self.events.capacity()
    }

    /// Mutes (or unmutes) events.
    pub(crate) fn mute(&mut self, on: bool) {
        self.muted = on;
    }

    /// Packets queued.
    pub(crate) fn queued(&self) -> usize {
        self.transmits.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(i: u32) -> Event<u32> {
        Event::Joined {
            member: i,
            incarnation: 0,
        }
    }

    #[test]
    fn a_drained_burst_of_events_gives_its_room_back_and_a_trickle_keeps_it() {
        let mut out = Outbox::<u32>::new();
        for i in 0..200 {
            out.push_event(joined(i), 1_000);
        }
        assert!(out.event_room() >= 200);
        let drained: Vec<_> = std::iter::from_fn(|| out.pop_event()).collect();
        assert_eq!(drained.len(), 200, "every event, in order");
        assert_eq!(drained[199], joined(199));
        assert_eq!(out.event_room(), 0, "the burst's room is given back");
        // A few at a time: the room stays (no allocation per event).
        out.push_event(joined(1), 1_000);
        let room = out.event_room();
        assert_eq!(out.pop_event(), Some(joined(1)));
        assert_eq!(out.event_room(), room);
    }
}
