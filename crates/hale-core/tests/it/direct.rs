//! Packets handed over without their bytes (`Node::poll_packet`,
//! `Node::handle_packet`) do exactly what their encoding does.

use hale_core::wire::{cluster_id, Header, Message, Packet};
use hale_core::{Channel, Node, NodeId, Outgoing, Time};

use crate::support::*;

/// Hands `o` to `twin_a` as a packet and to `twin_b` as bytes; both must
/// end in the same state.
fn both_ways(
    o: &Outgoing<NodeId>,
    twin_a: &mut Node<NodeId>,
    twin_b: &mut Node<NodeId>,
    now: Time,
) {
    let t = o.clone().encode();
    assert_eq!(t.bytes.len(), o.len);
    let by_packet = twin_a.handle_packet(now, o.channel, o.packet.clone(), o.len);
    let by_bytes = match o.channel {
        Channel::Datagram => twin_b.handle_datagram(now, &t.bytes),
        Channel::Stream => twin_b.handle_stream(now, &t.bytes),
    };
    assert_eq!(by_packet, by_bytes);
    assert_eq!(twin_a.stats(), twin_b.stats());
    assert_eq!(
        format!("{:?}", twin_a.members().collect::<Vec<_>>()),
        format!("{:?}", twin_b.members().collect::<Vec<_>>())
    );
    let (a, b): (Vec<_>, Vec<_>) = (drain(twin_a), drain(twin_b));
    assert_eq!(a, b);
}

#[test]
fn a_packet_handed_over_does_what_its_bytes_do() {
    let all = ids(4);
    let mut a = node(&all[0], &all, config(1));
    let mut twins: Vec<(Node<NodeId>, Node<NodeId>)> = (1..4)
        .map(|i| {
            (
                node(&all[i], &all, config(2)),
                node(&all[i], &all, config(2)),
            )
        })
        .collect();
    a.set_metadata(secs(0.1), vec![7; 40]).unwrap();
    let mut sent = 0;
    let mut now = secs(0.2);
    let mut rounds = 0;
    while now < secs(20.0) && rounds < 10_000 {
        rounds += 1;
        a.handle_timeout(now);
        while let Some(o) = a.poll_packet() {
            let k = all.iter().position(|i| *i == o.to).unwrap();
            assert_eq!(
                Packet::decode(&o.clone().encode().bytes, o.channel, cluster_id("hale")).unwrap(),
                o.packet
            );
            let (x, y) = &mut twins[k - 1];
            both_ways(&o, x, y, now);
            sent += 1;
        }
        now = a.poll_timeout().unwrap().max(now);
    }
    assert!(sent > 10, "{sent} packets");
}

#[test]
fn a_packet_the_wire_would_change_goes_through_the_bytes() {
    let all = ids(2);
    let (mut x, mut y) = (
        node(&all[1], &all, config(2)),
        node(&all[1], &all, config(2)),
    );
    let header = Header {
        version: 2,
        speaks: None,
        cluster: cluster_id("hale"),
        sender: all[0].clone(),
        incarnation: 0,
        health: 0,
        generation: 0,
        sent_ms: 0,
    };
    let cases = [
        // More messages than a packet holds: the encoding keeps 255.
        (Channel::Stream, vec![Message::Ack { seq: 1 }; 300]),
        // A full-state sync in a datagram: not decodable.
        (
            Channel::Datagram,
            vec![Message::PushPull {
                join: false,
                reply: false,
                digest: true,
                members: Vec::new(),
            }],
        ),
        // Too large for a datagram.
        (
            Channel::Datagram,
            vec![
                Message::Alive {
                    member: all[0].clone(),
                    incarnation: 1,
                    meta: vec![1; 500].into(),
                };
                3
            ],
        ),
    ];
    for (channel, messages) in cases {
        let packet = Packet {
            header: header.clone(),
            messages,
        };
        let len = packet.encode().len();
        assert!(!packet.round_trips(channel, len));
        let o = Outgoing {
            to: all[1].clone(),
            channel,
            packet,
            len,
            probe: false,
        };
        both_ways(&o, &mut x, &mut y, secs(1.0));
    }
    // Another cluster's packet is dropped the same way.
    let mut foreign = Packet {
        header,
        messages: vec![Message::Ack { seq: 1 }],
    };
    foreign.header.cluster ^= 1;
    let len = foreign.encode().len();
    let o = Outgoing {
        to: all[1].clone(),
        channel: Channel::Datagram,
        packet: foreign,
        len,
        probe: false,
    };
    both_ways(&o, &mut x, &mut y, secs(1.0));
}
