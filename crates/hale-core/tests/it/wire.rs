//! The wire format: round trips, and total decoding of any input.

use std::net::SocketAddr;

use proptest::prelude::*;

use hale_core::wire::{cluster_id, Header, MemberRecord, Message, Packet, WireState, MAX_DATAGRAM};
use hale_core::{Channel, NodeId};

fn arb_id() -> impl Strategy<Value = NodeId> {
    (
        "[a-z0-9._-]{1,64}",
        any::<[u8; 4]>(),
        any::<u16>(),
        any::<bool>(),
        any::<[u8; 16]>(),
    )
        .prop_map(|(name, v4, port, six, v6)| {
            let addr = if six {
                SocketAddr::from((v6, port))
            } else {
                SocketAddr::from((v4, port))
            };
            NodeId::new(name, addr).unwrap()
        })
}

fn arb_meta() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=512)
}

fn arb_message() -> impl Strategy<Value = Message<NodeId>> {
    prop_oneof![
        (any::<u32>(), arb_id(), any::<Option<u32>>()).prop_map(|(seq, target, suspected)| {
            Message::Ping {
                seq,
                target,
                suspected,
            }
        }),
        any::<u32>().prop_map(|seq| Message::Ack { seq }),
        any::<u32>().prop_map(|seq| Message::Nack { seq }),
        any::<u64>().prop_map(|known| Message::Superseded { known }),
        (any::<u32>(), arb_id(), any::<Option<u32>>()).prop_map(|(seq, target, suspected)| {
            Message::PingReq {
                seq,
                target,
                suspected,
            }
        }),
        (arb_id(), any::<u32>(), arb_meta()).prop_map(|(member, incarnation, meta)| {
            Message::Alive {
                member,
                incarnation,
                meta,
            }
        }),
        (arb_id(), any::<u32>(), arb_id(), any::<u8>()).prop_map(
            |(member, incarnation, accuser, accuser_health)| {
                Message::Suspect {
                    member,
                    incarnation,
                    accuser,
                    accuser_health,
                }
            }
        ),
        (arb_id(), any::<u32>(), arb_id(), any::<u8>()).prop_map(
            |(member, incarnation, declarer, accusers)| {
                Message::Dead {
                    member,
                    incarnation,
                    declarer,
                    accusers,
                }
            }
        ),
        (arb_id(), any::<u32>()).prop_map(|(member, incarnation)| Message::Left {
            member,
            incarnation
        }),
        (arb_id(), any::<u32>(), arb_id()).prop_map(|(member, incarnation, accuser)| {
            Message::Closed {
                member,
                incarnation,
                accuser,
            }
        }),
    ]
}

fn arb_record() -> impl Strategy<Value = MemberRecord<NodeId>> {
    (arb_id(), any::<u32>(), 0u8..4, arb_meta()).prop_map(|(id, incarnation, s, meta)| {
        MemberRecord {
            id,
            incarnation,
            state: [
                WireState::Alive,
                WireState::Suspect,
                WireState::Dead,
                WireState::Left,
            ][s as usize],
            meta,
        }
    })
}

fn header(sender: NodeId, incarnation: u32, health: u8) -> Header<NodeId> {
    Header {
        version: 2,
        speaks: None,
        cluster: cluster_id("hale"),
        sender,
        incarnation,
        health,
        generation: u64::from(incarnation) << 20 | u64::from(health),
        sent_ms: u64::from(incarnation).wrapping_mul(7919),
    }
}

proptest! {
    #[test]
    fn any_datagram_round_trips(sender in arb_id(), inc in any::<u32>(), health in any::<u8>(),
                                messages in prop::collection::vec(arb_message(), 0..8)) {
        let p = Packet { header: header(sender, inc, health), messages };
        let bytes = p.encode();
        prop_assert_eq!(bytes.len(), p.encoded_len());
        prop_assert_eq!(Packet::decode(&bytes, Channel::Stream, cluster_id("hale")).unwrap(), p);
    }

    #[test]
    fn any_full_state_sync_round_trips(sender in arb_id(), join in any::<bool>(), reply in any::<bool>(),
                                       members in prop::collection::vec(arb_record(), 0..20)) {
        let p = Packet { header: header(sender, 1, 0), messages: vec![Message::PushPull { join, reply, digest: false, members }] };
        let bytes = p.encode();
        prop_assert_eq!(bytes.len(), p.encoded_len());
        prop_assert_eq!(Packet::decode(&bytes, Channel::Stream, cluster_id("hale")).unwrap(), p);
    }

    #[test]
    fn any_digest_round_trips_without_its_metadata(sender in arb_id(), reply in any::<bool>(),
                                                  members in prop::collection::vec(arb_record(), 0..20)) {
        let full = Message::PushPull { join: false, reply, digest: true, members: members.clone() };
        let p = Packet { header: header(sender, 1, 0), messages: vec![full] };
        let bytes = p.encode();
        prop_assert_eq!(bytes.len(), p.encoded_len());
        let bare = members.into_iter().map(|m| MemberRecord { meta: Vec::new(), ..m }).collect();
        let expected = Packet { messages: vec![Message::PushPull { join: false, reply, digest: true, members: bare }], ..p };
        prop_assert_eq!(Packet::decode(&bytes, Channel::Stream, cluster_id("hale")).unwrap(), expected);
    }

    #[test]
    fn any_bytes_decode_to_a_packet_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = Packet::<NodeId>::decode(&bytes, Channel::Datagram, cluster_id("hale"));
        let _ = Packet::<NodeId>::decode(&bytes, Channel::Stream, cluster_id("hale"));
    }

    #[test]
    fn every_truncation_of_a_valid_packet_is_an_error(sender in arb_id(),
                                                     messages in prop::collection::vec(arb_message(), 1..4)) {
        let bytes = Packet { header: header(sender, 3, 0), messages }.encode();
        for cut in 0..bytes.len() {
            prop_assert!(Packet::<NodeId>::decode(&bytes[..cut], Channel::Stream, cluster_id("hale")).is_err());
        }
    }

    #[test]
    fn mutated_packets_never_panic(sender in arb_id(), messages in prop::collection::vec(arb_message(), 1..4),
                                   flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut bytes = Packet { header: header(sender, 3, 0), messages }.encode();
        for (i, b) in flips {
            let n = bytes.len();
            bytes[i % n] ^= b;
        }
        let _ = Packet::<NodeId>::decode(&bytes, Channel::Stream, cluster_id("hale"));
    }
}

#[test]
fn a_push_pull_is_refused_on_the_datagram_channel() {
    let a = NodeId::new("a", SocketAddr::from(([127, 0, 0, 1], 1))).unwrap();
    let p = Packet {
        header: header(a, 0, 0),
        messages: vec![Message::PushPull {
            join: true,
            reply: true,
            digest: false,
            members: vec![],
        }],
    };
    assert!(Packet::<NodeId>::decode(&p.encode(), Channel::Datagram, cluster_id("hale")).is_err());
}

#[test]
fn a_huge_member_count_is_rejected_before_allocating() {
    let a = NodeId::new("a", SocketAddr::from(([127, 0, 0, 1], 1))).unwrap();
    let mut bytes = Packet {
        header: header(a, 0, 0),
        messages: vec![Message::PushPull {
            join: false,
            reply: false,
            digest: false,
            members: vec![],
        }],
    }
    .encode();
    // Replace the member count (a single 0 byte at the end) with u64::MAX as a varint.
    bytes.pop();
    bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
    assert!(Packet::<NodeId>::decode(&bytes, Channel::Stream, cluster_id("hale")).is_err());
}

#[test]
fn another_version_is_rejected() {
    let a = NodeId::new("a", SocketAddr::from(([127, 0, 0, 1], 1))).unwrap();
    let mut bytes = Packet {
        header: header(a, 0, 0),
        messages: vec![Message::Ack { seq: 1 }],
    }
    .encode();
    bytes[2] = 1;
    assert_eq!(
        Packet::<NodeId>::decode(&bytes, Channel::Datagram, cluster_id("hale")),
        Err(hale_core::DecodeError::Version(1))
    );
    assert!(bytes.len() < MAX_DATAGRAM);
}
