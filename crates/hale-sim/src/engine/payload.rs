//! Packets in flight: the packet itself with its encoded length (the
//! default), or its bytes (`SimConfig::wire_bytes`).
//!
//! Every node of a run is in this process, so a packet need not be encoded
//! by its sender and decoded by its addressee: `Node::handle_packet` does
//! with the packet and its length exactly what `handle_datagram` and
//! `handle_stream` do with its bytes (same byte counts, same drops, same
//! protocol steps; `two_wire_paths_run_the_same` compares digests, views
//! and statistics of whole runs both ways). Encoding and decoding were a
//! fifth of the soak's time.

use hale_core::wire::Packet;
use hale_core::{Channel, Node, Time};

use crate::id::SimId;

/// What travels from one node to another.
#[derive(Debug)]
pub(super) enum Payload {
    /// The encoded packet.
    Bytes(Vec<u8>),
    /// The packet, and the bytes its encoding takes.
    Packet(Packet<SimId>, usize),
}

/// A packet a node sent, not yet routed.
#[derive(Debug)]
pub(super) struct Sent {
    pub(super) to: SimId,
    pub(super) channel: Channel,
    pub(super) payload: Payload,
}

/// Node `node`'s next packet: encoded if `bytes`.
pub(super) fn poll(node: &mut Node<SimId>, bytes: bool) -> Option<Sent> {
    if bytes {
        node.poll_transmit().map(|t| Sent {
            to: t.to,
            channel: t.channel,
            payload: Payload::Bytes(t.bytes),
        })
    } else {
        node.poll_packet().map(|o| Sent {
            to: o.to,
            channel: o.channel,
            payload: Payload::Packet(o.packet, o.len),
        })
    }
}

/// `node` receives `payload` on `channel` at `now`.
pub(super) fn hand(node: &mut Node<SimId>, now: Time, channel: Channel, payload: Payload) {
    match payload {
        Payload::Bytes(b) => hand_bytes(node, now, channel, &b),
        Payload::Packet(p, len) => {
            let _ = node.handle_packet(now, channel, p, len);
        }
    }
}

/// [`hand`] of a payload phase A of a window only borrows: encoded bytes
/// are read in place, a packet is copied (the node takes it whole).
pub(super) fn hand_ref(node: &mut Node<SimId>, now: Time, channel: Channel, payload: &Payload) {
    match payload {
        Payload::Bytes(b) => hand_bytes(node, now, channel, b),
        Payload::Packet(p, len) => {
            let _ = node.handle_packet(now, channel, p.clone(), *len);
        }
    }
}

fn hand_bytes(node: &mut Node<SimId>, now: Time, channel: Channel, bytes: &[u8]) {
    let _ = match channel {
        Channel::Datagram => node.handle_datagram(now, bytes),
        Channel::Stream => node.handle_stream(now, bytes),
    };
}
