//! Random sequences of inputs to a node: datagrams (raw bytes or structured
//! messages from known members, in wire versions 2 to 4), stream frames,
//! traffic notes, timeouts, metadata changes, leaving, and the wire version
//! the node writes. The node must never panic, never send a
//! datagram over the limit, and never ask for a timer in the past.
#![no_main]

use std::net::SocketAddr;
use std::time::Duration;

use arbitrary::Arbitrary;
use hale_core::wire::{cluster_id, target_tag, Header, Message, Packet, PingTarget, MAX_DATAGRAM, SPOKEN};
use hale_core::{Channel, Config, Node, NodeId, Time};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Msg {
    Ping { seq: u32, to_me: bool, suspected: Option<u32> },
    Ack { seq: u32 },
    Nack { seq: u32 },
    PingReq { seq: u32, target: u8 },
    Alive { member: u8, inc: u32, meta: Vec<u8> },
    Suspect { member: u8, inc: u32, accuser: u8, health: u8 },
    Dead { member: u8, inc: u32, declarer: u8, accusers: u8 },
    Left { member: u8, inc: u32 },
    Closed { member: u8, inc: u32, accuser: u8 },
    Superseded { known: u64 },
    Summary { hash: u64 },
    Heartbeat,
    Corroborate { target: u8 },
    Buckets { fill: u64, differ: u8 },
    DigestPart { buckets: u64, reply: bool, members: Vec<(u8, u32, u8)> },
}

#[derive(Arbitrary, Debug)]
enum Input {
    Raw { bytes: Vec<u8>, stream: bool },
    Packet { from: u8, inc: u32, health: u8, generation: u8, sent: u32, msgs: Vec<Msg>, stream: bool, version: u8 },
    Sync { from: u8, members: Vec<(u8, u32, u8)>, version: u8 },
    Traffic { from: u8 },
    Timeout,
    Advance { millis: u16 },
    Meta { bytes: Vec<u8> },
    Leave,
    Unreachable { peer: u8 },
    WriteVersion { version: u8 },
}

fn id(i: u8) -> NodeId {
    NodeId::new(format!("n{}", i % 8), SocketAddr::from(([127, 0, 0, 1], 7000 + u16::from(i % 8)))).unwrap()
}

/// One of the versions this build speaks, from any byte.
fn spoken(v: u8) -> u8 {
    SPOKEN.min + v % (SPOKEN.max - SPOKEN.min + 1)
}

/// A header from `from` in `version` (one of [`SPOKEN`]).
fn header(version: u8, from: u8, inc: u32, health: u8, generation: u64, sent_ms: u64) -> Header<NodeId> {
    Header { version, speaks: (version >= 3).then_some(SPOKEN), cluster: cluster_id("hale"), sender: id(from), incarnation: inc, health, generation, sent_ms }
}

/// Sync records from fuzz bytes.
fn records(members: Vec<(u8, u32, u8)>) -> Vec<hale_core::MemberRecord<NodeId>> {
    members.into_iter().take(16).map(|(m, inc, s)| hale_core::MemberRecord {
        id: id(m),
        incarnation: inc,
        state: [hale_core::wire::WireState::Alive, hale_core::wire::WireState::Suspect, hale_core::wire::WireState::Dead, hale_core::wire::WireState::Left][usize::from(s % 4)],
        meta: Box::default(),
    }).collect()
}

/// The message `m` in a packet of `version` (where a message newer than
/// the version does not decode: the node drops the packet).
fn to_msg(m: Msg, me: &NodeId, version: u8) -> Message<NodeId> {
    let v3 = version >= 3;
    match m {
        Msg::Ping { seq, to_me, suspected } => {
            let to = if to_me { me.clone() } else { id(1) };
            let target = if v3 { PingTarget::Tag(target_tag(cluster_id("hale"), &to)) } else { PingTarget::Id(to) };
            Message::Ping { seq, target, suspected }
        }
        Msg::Ack { seq } => Message::Ack { seq },
        Msg::Nack { seq } => Message::Nack { seq },
        Msg::PingReq { seq, target } => Message::PingReq { seq, target: id(target), suspected: None },
        Msg::Alive { member, inc, mut meta } => {
            meta.truncate(512);
            Message::Alive { member: id(member), incarnation: inc, meta: meta.into() }
        }
        Msg::Suspect { member, inc, accuser, health } => Message::Suspect { member: id(member), incarnation: inc, accuser: id(accuser), accuser_health: health },
        Msg::Dead { member, inc, declarer, accusers } => Message::Dead { member: id(member), incarnation: inc, declarer: id(declarer), accusers },
        Msg::Left { member, inc } => Message::Left { member: id(member), incarnation: inc },
        Msg::Closed { member, inc, accuser } => Message::Closed { member: id(member), incarnation: inc, accuser: id(accuser) },
        Msg::Superseded { known } => Message::Superseded { known },
        Msg::Summary { hash } => Message::Summary { hash },
        Msg::Heartbeat => Message::Heartbeat,
        Msg::Corroborate { target } => Message::Corroborate { target: id(target) },
        Msg::Buckets { fill, differ } => {
            let mut sums = Box::new([fill; hale_core::wire::BUCKETS]);
            sums[usize::from(differ) % hale_core::wire::BUCKETS] ^= 1;
            Message::Buckets { sums }
        }
        Msg::DigestPart { buckets, reply, members } => Message::DigestPart { buckets, reply, members: records(members).into() },
    }
}

fuzz_target!(|inputs: Vec<Input>| {
    let me = id(0);
    let cluster = cluster_id("hale");
    let mut now = Time::ZERO;
    let mut node = Node::new(me.clone(), Config::default(), now).unwrap();
    node.join(now, [id(1), id(2)]);
    for input in inputs.into_iter().take(256) {
        match input {
            Input::Raw { bytes, stream } => {
                let _ = if stream { node.handle_stream(now, &bytes) } else { node.handle_datagram(now, &bytes) };
            }
            Input::Packet { from, inc, health, generation, sent, msgs, stream, version } => {
                let version = spoken(version);
                let messages: Vec<_> = msgs.into_iter().take(8).map(|m| to_msg(m, &me, version)).collect();
                let p = Packet { header: header(version, from, inc, health, u64::from(generation), u64::from(sent)), messages };
                let bytes = p.encode();
                let _ = if stream { node.handle_stream(now, &bytes) } else { node.handle_datagram(now, &bytes) };
            }
            Input::Sync { from, members, version } => {
                let members = records(members);
                let p = Packet { header: header(spoken(version), from, 0, 0, 0, 0), messages: vec![Message::PushPull { join: true, reply: true, digest: false, members }] };
                let _ = node.handle_stream(now, &p.encode());
            }
            Input::Traffic { from } => node.note_traffic(now, &id(from)),
            Input::Timeout => {
                if let Some(t) = node.poll_timeout() {
                    assert!(t >= now || t + Duration::from_secs(3600) >= now);
                    now = now.max(t);
                    node.handle_timeout(now);
                }
            }
            Input::Advance { millis } => {
                now = now + Duration::from_millis(u64::from(millis));
                node.handle_timeout(now);
            }
            Input::Meta { bytes } => {
                let _ = node.set_metadata(now, bytes);
            }
            Input::Leave => {
                let _ = node.leave(now);
            }
            Input::Unreachable { peer } => node.handle_unreachable(now, &id(peer)),
            Input::WriteVersion { version } => {
                node.set_wire_version(version);
            }
        }
        while let Some(t) = node.poll_transmit() {
            if t.channel == Channel::Datagram {
                assert!(t.bytes.len() <= MAX_DATAGRAM, "datagram of {} bytes", t.bytes.len());
            }
            assert!(Packet::<NodeId>::decode(&t.bytes, t.channel, cluster).is_ok(), "the node sent something undecodable");
        }
        while node.poll_event().is_some() {}
        assert!(node.num_live() <= node.members().count());
    }
});
