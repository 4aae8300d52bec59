//! The wire format: round trips in every version, the exact bytes of each
//! version, and total decoding of any input.

use std::net::SocketAddr;

use proptest::prelude::*;

use hale_core::wire::{
    cluster_id, target_tag, Header, MemberRecord, Message, Packet, PingTarget, Versions, WireState,
    BUCKETS, MAX_DATAGRAM, SPOKEN,
};
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

/// A ping's target as `version` names it.
fn arb_target(version: u8) -> BoxedStrategy<PingTarget<NodeId>> {
    if version >= 3 {
        any::<u32>().prop_map(PingTarget::Tag).boxed()
    } else {
        arb_id().prop_map(PingTarget::Id).boxed()
    }
}

/// Any message a packet of `version` carries.
fn arb_message(version: u8) -> impl Strategy<Value = Message<NodeId>> {
    let summary = (
        any::<u64>(),
        0..5u8,
        arb_id(),
        any::<bool>(),
        prop::collection::vec(arb_record(), 0..4),
    )
        .prop_map(
            move |(hash, which, target, reply, mut members)| match (version, which) {
                (4.., 3) => Message::Buckets {
                    sums: Box::new(std::array::from_fn(|b| hash.rotate_left(b as u32))),
                },
                (4.., 4) => {
                    for m in &mut members {
                        m.meta = Box::default();
                    }
                    Message::DigestPart {
                        buckets: hash,
                        reply,
                        members: members.into(),
                    }
                }
                (3.., 0) => Message::Summary { hash },
                (3.., 1) => Message::Heartbeat,
                (3.., _) => Message::Corroborate { target },
                _ => Message::Ack { seq: hash as u32 },
            },
        );
    prop_oneof![
        (any::<u32>(), arb_target(version), any::<Option<u32>>()).prop_map(
            |(seq, target, suspected)| Message::Ping {
                seq,
                target,
                suspected,
            }
        ),
        summary,
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
                meta: meta.into(),
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
            meta: meta.into(),
        }
    })
}

/// A version this build speaks.
fn arb_version() -> impl Strategy<Value = u8> {
    SPOKEN.min..=SPOKEN.max
}

/// A version and messages of it.
fn arb_messages(n: std::ops::Range<usize>) -> impl Strategy<Value = (u8, Vec<Message<NodeId>>)> {
    arb_version()
        .prop_flat_map(move |v| (Just(v), prop::collection::vec(arb_message(v), n.clone())))
}

fn header(sender: NodeId, incarnation: u32, health: u8) -> Header<NodeId> {
    header_v(3, sender, incarnation, health)
}

fn header_v(version: u8, sender: NodeId, incarnation: u32, health: u8) -> Header<NodeId> {
    Header {
        version,
        speaks: (version >= 3).then_some(Versions {
            min: 2,
            max: version,
        }),
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
                                (version, messages) in arb_messages(0..8)) {
        let p = Packet { header: header_v(version, sender, inc, health), messages };
        prop_assert!(p.round_trips(Channel::Stream, p.encoded_len()));
        let bytes = p.encode();
        prop_assert_eq!(bytes.len(), p.encoded_len());
        prop_assert_eq!(Packet::decode(&bytes, Channel::Stream, cluster_id("hale")).unwrap(), p);
    }

    #[test]
    fn any_full_state_sync_round_trips(version in arb_version(), sender in arb_id(), join in any::<bool>(),
                                       reply in any::<bool>(), members in prop::collection::vec(arb_record(), 0..20)) {
        let p = Packet { header: header_v(version, sender, 1, 0), messages: vec![Message::PushPull { join, reply, digest: false, members }] };
        let bytes = p.encode();
        prop_assert_eq!(bytes.len(), p.encoded_len());
        prop_assert_eq!(Packet::decode(&bytes, Channel::Stream, cluster_id("hale")).unwrap(), p);
    }

    #[test]
    fn any_digest_round_trips_without_its_metadata(version in arb_version(), sender in arb_id(), reply in any::<bool>(),
                                                  members in prop::collection::vec(arb_record(), 0..20)) {
        let full = Message::PushPull { join: false, reply, digest: true, members: members.clone() };
        let p = Packet { header: header_v(version, sender, 1, 0), messages: vec![full] };
        let bytes = p.encode();
        prop_assert_eq!(bytes.len(), p.encoded_len());
        let bare = members.into_iter().map(|m| MemberRecord { meta: Box::default(), ..m }).collect();
        let expected = Packet { messages: vec![Message::PushPull { join: false, reply, digest: true, members: bare }], ..p };
        prop_assert_eq!(Packet::decode(&bytes, Channel::Stream, cluster_id("hale")).unwrap(), expected);
    }

    #[test]
    fn any_bytes_decode_to_a_packet_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        let _ = Packet::<NodeId>::decode(&bytes, Channel::Datagram, cluster_id("hale"));
        let _ = Packet::<NodeId>::decode(&bytes, Channel::Stream, cluster_id("hale"));
    }

    #[test]
    fn every_truncation_of_a_version_2_packet_is_an_error(sender in arb_id(),
                                                         messages in prop::collection::vec(arb_message(2), 1..4)) {
        let bytes = Packet { header: header_v(2, sender, 3, 0), messages }.encode();
        for cut in 0..bytes.len() {
            prop_assert!(Packet::<NodeId>::decode(&bytes[..cut], Channel::Stream, cluster_id("hale")).is_err());
        }
    }

    #[test]
    fn every_truncation_of_a_version_3_packet_is_an_error_or_its_first_messages(sender in arb_id(),
                                                     messages in prop::collection::vec(arb_message(3), 1..4)) {
        // Messages run to the end of the packet (no count): a cut between
        // two messages leaves a packet of the first ones. (A datagram
        // arrives whole or not at all; a stream frame has its length.)
        let p = Packet { header: header_v(3, sender, 3, 0), messages };
        let bytes = p.encode();
        for cut in 0..bytes.len() {
            match Packet::<NodeId>::decode(&bytes[..cut], Channel::Stream, cluster_id("hale")) {
                Err(_) => {}
                Ok(q) => {
                    prop_assert_eq!(&q.header, &p.header);
                    prop_assert!(q.messages.len() < p.messages.len());
                    prop_assert_eq!(&q.messages[..], &p.messages[..q.messages.len()]);
                }
            }
        }
    }

    #[test]
    fn mutated_packets_never_panic(sender in arb_id(), (version, messages) in arb_messages(1..4),
                                   flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut bytes = Packet { header: header_v(version, sender, 3, 0), messages }.encode();
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
        header: header_v(2, a, 0, 0),
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

fn a() -> NodeId {
    NodeId::new("a", SocketAddr::from(([127, 0, 0, 1], 1))).unwrap()
}

/// A ping from "a" (incarnation 2, health 1, generation 5, sent at 300 ms)
/// with sequence 9, suspecting its target at 4, in `version`.
fn ping_packet(version: u8, target: PingTarget<NodeId>) -> Packet<NodeId> {
    Packet {
        header: Header {
            version,
            speaks: (version >= 3).then_some(SPOKEN),
            cluster: cluster_id("hale"),
            sender: a(),
            incarnation: 2,
            health: 1,
            generation: 5,
            sent_ms: 300,
        },
        messages: vec![Message::Ping {
            seq: 9,
            target,
            suspected: Some(4),
        }],
    }
}

/// "a" at 127.0.0.1:1 as `NodeId` writes itself.
const A: [u8; 9] = [1, b'a', 4, 127, 0, 0, 1, 0, 1];

#[test]
fn a_version_2_ping_packet_is_exactly_the_previous_releases_bytes() {
    let b = NodeId::new("b", SocketAddr::from(([127, 0, 0, 1], 2))).unwrap();
    let p = ping_packet(2, PingTarget::Id(b));
    let mut expected = vec![b'H', b'L', 2];
    expected.extend_from_slice(&cluster_id("hale").to_le_bytes());
    expected.extend_from_slice(&A); // the sender
    expected.extend_from_slice(&[2, 1, 5, 0xac, 0x02]); // inc, health, gen, sent
    expected.push(1); // one message
    expected.extend_from_slice(&[1, 9]); // a ping, seq 9
    expected.extend_from_slice(&[1, b'b', 4, 127, 0, 0, 1, 0, 2]); // its target
    expected.extend_from_slice(&[1, 4]); // suspected at 4
    assert_eq!(p.encode(), expected);
    assert_eq!(p.encoded_len(), expected.len());
    let c = cluster_id("hale");
    assert_eq!(Packet::decode(&expected, Channel::Datagram, c), Ok(p));
}

#[test]
fn a_version_3_ping_packet_is_exactly_its_bytes() {
    let p = ping_packet(3, PingTarget::Tag(0xaabb_ccdd));
    let mut expected = vec![b'H', b'L', 3];
    expected.extend_from_slice(&(cluster_id("hale") as u32).to_le_bytes());
    expected.extend_from_slice(&A); // the sender
    expected.extend_from_slice(&[2, 4]); // it speaks 2-4
    expected.extend_from_slice(&[2, 1, 5, 0xac, 0x02]); // inc, health, gen, sent
    expected.extend_from_slice(&[1, 9, 0xdd, 0xcc, 0xbb, 0xaa, 1, 4]); // the ping
    assert_eq!(p.encode(), expected);
    assert_eq!(p.encoded_len(), expected.len());
    let c = cluster_id("hale");
    assert_eq!(Packet::decode(&expected, Channel::Datagram, c), Ok(p));
    let v2 = ping_packet(2, PingTarget::Id(a())).encode();
    // The target's 9-byte identity becomes a 4-byte tag (5 saved), the
    // cluster id loses 4 bytes and the count 1, the range costs 2.
    assert_eq!(v2.len() - expected.len(), 5 + 4 + 1 - 2);
}

#[test]
fn a_summary_is_its_tag_and_eight_bytes_of_hash_and_only_version_3_carries_it() {
    let hash = 0x0102_0304_0506_0708;
    let mut out = Vec::new();
    Message::<NodeId>::Summary { hash }.encode(&mut out);
    assert_eq!(out, [12, 8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(Message::<NodeId>::Summary { hash }.encoded_len(), 9);
    let p = Packet {
        header: header_v(3, a(), 0, 0),
        messages: vec![Message::Summary { hash }],
    };
    let bytes = p.encode();
    let c = cluster_id("hale");
    assert_eq!(Packet::decode(&bytes, Channel::Datagram, c), Ok(p));
    // Cut anywhere inside the hash: an error, never a panic.
    for cut in bytes.len() - 8..bytes.len() {
        assert!(Packet::<NodeId>::decode(&bytes[..cut], Channel::Datagram, c).is_err());
    }
    let v2 = Packet {
        header: header_v(2, a(), 0, 0),
        messages: vec![Message::Summary { hash }],
    };
    assert!(!v2.round_trips(Channel::Datagram, v2.encoded_len()));
    assert_eq!(
        Packet::<NodeId>::decode(&v2.encode(), Channel::Datagram, c),
        Err(hale_core::DecodeError::Invalid("message tag")),
        "tag 12 means nothing in version 2"
    );
}

#[test]
fn bucket_sums_are_their_tag_and_64_sums_of_eight_bytes_and_only_version_4_carries_them() {
    let sums: Box<[u64; BUCKETS]> = Box::new(std::array::from_fn(|b| b as u64 * 0x0101));
    let m = Message::<NodeId>::Buckets { sums };
    let mut out = Vec::new();
    m.encode(&mut out);
    assert_eq!(out.len(), 1 + 8 * BUCKETS);
    assert_eq!(m.encoded_len(), out.len());
    assert_eq!(
        out[..1 + 16],
        [15, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0]
    );
    let c = cluster_id("hale");
    let p = Packet {
        header: header_v(4, a(), 0, 0),
        messages: vec![m.clone()],
    };
    assert!(p.encoded_len() <= MAX_DATAGRAM, "a datagram");
    let bytes = p.encode();
    assert_eq!(Packet::decode(&bytes, Channel::Datagram, c), Ok(p));
    for cut in bytes.len() - 8 * BUCKETS..bytes.len() {
        assert!(Packet::<NodeId>::decode(&bytes[..cut], Channel::Datagram, c).is_err());
    }
    let v3 = Packet {
        header: header_v(3, a(), 0, 0),
        messages: vec![m],
    };
    assert_eq!(
        Packet::<NodeId>::decode(&v3.encode(), Channel::Datagram, c),
        Err(hale_core::DecodeError::Invalid("message tag")),
        "tag 15 means nothing in version 3"
    );
}

#[test]
fn a_digest_part_is_its_tag_a_flag_a_mask_and_records_on_a_stream_of_version_4_only() {
    let members = vec![MemberRecord {
        id: a(),
        incarnation: 3,
        state: WireState::Suspect,
        meta: Box::default(),
    }];
    let m = Message::DigestPart {
        buckets: 0x8000_0000_0000_0001,
        reply: true,
        members: members.into(),
    };
    let mut out = Vec::new();
    m.encode(&mut out);
    let mut expected = vec![16, 1, 1, 0, 0, 0, 0, 0, 0, 0x80, 1];
    expected.extend_from_slice(&A);
    expected.extend_from_slice(&[3, 1]);
    assert_eq!(out, expected);
    let c = cluster_id("hale");
    let p = Packet {
        header: header_v(4, a(), 0, 0),
        messages: vec![m],
    };
    let bytes = p.encode();
    assert_eq!(Packet::decode(&bytes, Channel::Stream, c), Ok(p.clone()));
    assert_eq!(
        Packet::<NodeId>::decode(&bytes, Channel::Datagram, c),
        Err(hale_core::DecodeError::Invalid("digest part in a datagram"))
    );
    let mut bad_flags = bytes.clone();
    let at = bytes.len() - expected.len() + 1;
    bad_flags[at] = 2;
    assert_eq!(
        Packet::<NodeId>::decode(&bad_flags, Channel::Stream, c),
        Err(hale_core::DecodeError::Invalid("digest part flags"))
    );
    // Cut anywhere inside the message: an error, never a panic.
    for cut in bytes.len() - expected.len() + 1..bytes.len() {
        assert!(Packet::<NodeId>::decode(&bytes[..cut], Channel::Stream, c).is_err());
    }
}

#[test]
fn a_ping_whose_target_is_named_as_another_version_names_it_does_not_round_trip() {
    let by_tag = ping_packet(2, PingTarget::Tag(7));
    assert!(!by_tag.round_trips(Channel::Datagram, by_tag.encoded_len()));
    let by_id = ping_packet(3, PingTarget::Id(a()));
    assert!(!by_id.round_trips(Channel::Datagram, by_id.encoded_len()));
    let c = cluster_id("hale");
    assert_ne!(
        Packet::decode(&by_id.encode(), Channel::Datagram, c),
        Ok(by_id)
    );
}

#[test]
fn version_2_checks_all_8_bytes_of_the_cluster_id_and_version_3_its_low_half() {
    let ours = cluster_id("hale");
    // Another cluster whose id has the same low half as ours.
    let twin = ours ^ (1 << 40);
    for version in [2, 3] {
        let p = Packet {
            header: Header {
                cluster: twin,
                ..header_v(version, a(), 0, 0)
            },
            messages: vec![Message::Ack { seq: 1 }],
        };
        let got = Packet::<NodeId>::decode(&p.encode(), Channel::Datagram, ours);
        if version == 2 {
            assert_eq!(got, Err(hale_core::DecodeError::ForeignCluster));
            assert!(!p.header.is_of(ours));
        } else {
            let got = got.unwrap();
            assert_eq!(
                got.header.cluster, ours,
                "the receiver's id, which it matched"
            );
            assert!(p.header.is_of(ours));
        }
        let other = Packet::<NodeId>::decode(&p.encode(), Channel::Datagram, cluster_id("other"));
        assert_eq!(other, Err(hale_core::DecodeError::ForeignCluster));
    }
}

#[test]
fn a_ping_tag_is_the_high_half_of_a_ring_position_and_differs_between_members() {
    let b = NodeId::new("b", SocketAddr::from(([127, 0, 0, 1], 1))).unwrap();
    let c = cluster_id("hale");
    assert_eq!(target_tag(c, &a()), target_tag(c, &a().clone()));
    assert_ne!(
        target_tag(c, &a()),
        target_tag(c, &b),
        "same address, another name"
    );
    assert_ne!(target_tag(c, &a()), target_tag(cluster_id("other"), &a()));
}

#[test]
fn a_version_3_packet_of_more_than_max_messages_is_rejected() {
    let mut bytes = Packet {
        header: header_v(3, a(), 0, 0),
        messages: vec![Message::Ack { seq: 1 }; 255],
    }
    .encode();
    let c = cluster_id("hale");
    assert_eq!(
        Packet::<NodeId>::decode(&bytes, Channel::Datagram, c)
            .unwrap()
            .messages
            .len(),
        255
    );
    bytes.extend_from_slice(&[2, 1]); // a 256th ack
    assert_eq!(
        Packet::<NodeId>::decode(&bytes, Channel::Datagram, c),
        Err(hale_core::DecodeError::Invalid(
            "more than MAX_MESSAGES messages"
        ))
    );
}

#[test]
fn a_version_2_packet_with_bytes_after_its_counted_messages_is_rejected() {
    let mut bytes = Packet {
        header: header_v(2, a(), 0, 0),
        messages: vec![Message::Ack { seq: 1 }],
    }
    .encode();
    bytes.extend_from_slice(&[2, 1]);
    assert_eq!(
        Packet::<NodeId>::decode(&bytes, Channel::Datagram, cluster_id("hale")),
        Err(hale_core::DecodeError::Trailing)
    );
}

#[test]
fn a_heartbeat_is_its_tag_alone_a_corroboration_request_names_its_target_and_only_version_3_carries_them(
) {
    let c = cluster_id("hale");
    let mut out = Vec::new();
    Message::<NodeId>::Heartbeat.encode(&mut out);
    assert_eq!(out, [13]);
    let ask = Message::Corroborate {
        target: NodeId::new("b", SocketAddr::from(([127, 0, 0, 1], 2))).unwrap(),
    };
    let mut out = Vec::new();
    ask.encode(&mut out);
    assert_eq!(out[0], 14);
    assert_eq!(ask.encoded_len(), out.len());
    let p = Packet {
        header: header_v(3, a(), 0, 0),
        messages: vec![Message::Heartbeat, ask.clone()],
    };
    let bytes = p.encode();
    assert_eq!(bytes.len(), p.header.encoded_len() + 1 + out.len());
    assert_eq!(Packet::decode(&bytes, Channel::Datagram, c), Ok(p));
    for msg in [Message::Heartbeat, ask] {
        let v2 = Packet {
            header: header_v(2, a(), 0, 0),
            messages: vec![msg],
        };
        assert!(!v2.round_trips(Channel::Datagram, v2.encoded_len()));
        assert_eq!(
            Packet::<NodeId>::decode(&v2.encode(), Channel::Datagram, c),
            Err(hale_core::DecodeError::Invalid("message tag")),
            "tags 13 and 14 mean nothing in version 2"
        );
    }
}

/// Packets in flight hold their messages in memory (the simulator's
/// 10,000 nodes had 200,000 packets of up to 17 news each in flight in one
/// gossip wave), and every full sync holds one record per member: both at
/// 32 bytes for a 4-byte identity, not 40.
#[test]
fn a_message_and_a_member_record_of_a_four_byte_identity_take_32_bytes() {
    assert_eq!(std::mem::size_of::<Message<u32>>(), 32);
    assert_eq!(std::mem::size_of::<MemberRecord<u32>>(), 32);
}
