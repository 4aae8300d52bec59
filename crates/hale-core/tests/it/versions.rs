//! Wire versions: what each version looks like, which one a node writes
//! and to whom, and what it does with one it does not speak.

use hale_core::wire::{
    cluster_id, negotiate, peek, DecodeError, Header, Message, Packet, PingTarget, Versions,
    OLDEST, SPOKEN,
};
use hale_core::{Channel, Config, Event, Node, NodeId, ReceiveError, Time};

use crate::support::{decode, drain, drain_events, id, ids, node_unnegotiated as node, secs, tag};

fn v(min: u8, max: u8) -> Versions {
    Versions { min, max }
}

fn header(
    sender: &NodeId,
    version: u8,
    speaks: Option<Versions>,
    generation: u64,
) -> Header<NodeId> {
    Header {
        version,
        speaks,
        cluster: cluster_id("hale"),
        sender: sender.clone(),
        incarnation: 0,
        health: 0,
        generation,
        sent_ms: 0,
    }
}

/// A ping from `sender` to `to`, written in `version` by the run
/// `generation`, sent at `at` of its clock (ours: the tests' clocks agree).
fn ping_from(sender: &NodeId, to: &NodeId, version: u8, generation: u64, at: Time) -> Vec<u8> {
    let speaks = (version >= 3).then_some(v(OLDEST, version));
    let mut h = header(sender, version, speaks, generation);
    h.sent_ms = at.as_nanos() / 1_000_000;
    Packet {
        header: h,
        messages: vec![Message::Ping {
            seq: 1,
            target: if version >= 3 {
                tag(to)
            } else {
                PingTarget::Id(to.clone())
            },
            suspected: None,
        }],
    }
    .encode()
}

/// The versions of the packets `a` sends answering `bytes` at `at`.
fn answered(a: &mut Node<NodeId>, bytes: &[u8], at: Time) -> Vec<u8> {
    a.handle_datagram(at, bytes).unwrap();
    let out = drain(a);
    assert!(!out.is_empty(), "answered");
    out.iter().map(|t| decode(t).header.version).collect()
}

/// A packet of a future version: the prefix every version from 3 on keeps,
/// then bytes this build cannot read.
fn future_packet(sender: &NodeId, version: u8, speaks: Versions) -> Vec<u8> {
    let mut out = b"HL".to_vec();
    out.push(version);
    out.extend_from_slice(&(cluster_id("hale") as u32).to_le_bytes());
    hale_core::Identity::encode(sender, &mut out);
    out.extend_from_slice(&[speaks.min, speaks.max, 0xff, 0xfe, 0xfd]);
    out
}

#[test]
fn this_build_speaks_versions_two_to_four() {
    assert_eq!(SPOKEN, v(2, 4));
    assert_eq!(OLDEST, 2);
    assert_eq!("2-3".parse::<Versions>(), Ok(v(2, 3)));
    assert_eq!("3".parse::<Versions>(), Ok(v(3, 3)));
    assert!("3-2".parse::<Versions>().is_err());
    assert!("three".parse::<Versions>().is_err());
    assert_eq!(v(2, 3).to_string(), "2-3");
    assert_eq!(v(3, 3).to_string(), "3");
}

#[test]
fn a_version_three_header_carries_the_senders_range_half_the_cluster_id_and_no_message_count() {
    let a = id("a", 1);
    let m = vec![Message::Ack { seq: 9 }];
    let v3 = Packet {
        header: header(&a, 3, Some(v(2, 3)), 5),
        messages: m.clone(),
    };
    let v2 = Packet {
        header: header(&a, 2, None, 5),
        messages: m,
    };
    let (b3, b2) = (v3.encode(), v2.encode());
    assert_eq!(
        b3.len() + 3,
        b2.len(),
        "4 bytes of cluster id and the count saved, 2 of range spent"
    );
    assert_eq!(b3.len(), v3.encoded_len());
    let c = cluster_id("hale");
    assert_eq!(Packet::decode(&b3, Channel::Datagram, c), Ok(v3));
    assert_eq!(Packet::decode(&b2, Channel::Datagram, c), Ok(v2));
    // The prefix every version from 3 on keeps: magic, version, the
    // cluster id's low half, the sender, its range.
    let sender = hale_core::Identity::encoded_len(&a);
    assert_eq!((b3[2], b2[2]), (3, 2));
    assert_eq!(b3[..2], b2[..2]);
    assert_eq!(b3[3..7], b2[3..7], "the low half of version 2's id");
    assert_eq!(b3[7..7 + sender], b2[11..11 + sender], "the sender");
    assert_eq!(b3[7 + sender..9 + sender], [2, 3], "then its range");
}

#[test]
fn a_version_three_header_whose_range_excludes_three_is_malformed() {
    let a = id("a", 1);
    let p = Packet {
        header: header(&a, 3, Some(v(4, 5)), 5),
        messages: vec![],
    };
    assert_eq!(
        Packet::<NodeId>::decode(&p.encode(), Channel::Datagram, cluster_id("hale")),
        Err(DecodeError::Invalid(
            "sender's versions exclude the packet's"
        ))
    );
}

#[test]
fn the_prefix_of_a_future_version_names_its_sender_and_what_it_speaks() {
    let a = id("a", 1);
    let bytes = future_packet(&a, 5, v(4, 5));
    let c = cluster_id("hale");
    assert_eq!(
        Packet::<NodeId>::decode(&bytes, Channel::Datagram, c),
        Err(DecodeError::Version(5))
    );
    let p = peek::<NodeId>(&bytes, c).unwrap();
    assert_eq!(
        (p.version, p.sender, p.speaks),
        (5, Some(a.clone()), Some(v(4, 5)))
    );
    assert_eq!(
        peek::<NodeId>(&bytes, cluster_id("other")),
        None,
        "another cluster's"
    );
    let mut v2 = b"HL\x02".to_vec();
    v2.extend_from_slice(&c.to_le_bytes());
    hale_core::Identity::encode(&a, &mut v2);
    let p = peek::<NodeId>(&v2, c).unwrap();
    assert_eq!(
        (p.version, p.sender, p.speaks),
        (2, Some(a), None),
        "version 2's prefix: its 8-byte cluster id"
    );
    assert_eq!(peek::<NodeId>(b"HL\x01", c).map(|p| p.version), Some(1));
    assert_eq!(peek::<NodeId>(b"XX\x05", c), None);
}

#[test]
fn a_cluster_speaks_the_highest_version_every_live_member_speaks() {
    let own = v(2, 3);
    let (speak, none) = negotiate(own, [("b", Some(v(2, 3))), ("c", Some(v(3, 4)))]);
    assert_eq!((speak, none.len()), (3, 0));
    let (speak, _) = negotiate(own, [("b", Some(v(2, 3))), ("old", None)]);
    assert_eq!(
        speak, 2,
        "a member that advertises nothing speaks the oldest version"
    );
    let (speak, strangers) = negotiate(own, [("b", Some(v(2, 3))), ("far", Some(v(5, 6)))]);
    assert_eq!(
        (speak, strangers),
        (3, vec![("far", v(5, 6))]),
        "a stranger does not hold the cluster back"
    );
    let (speak, _) = negotiate::<&str>(own, []);
    assert_eq!(
        speak, 2,
        "alone, the oldest: the first member met may be old"
    );
}

#[test]
fn a_node_writes_the_lowest_version_of_its_range_until_told_otherwise() {
    let all = ids(2);
    let mut a = node(&all[0], &all, Config::default());
    drain(&mut a);
    assert_eq!((a.wire_versions(), a.wire_version()), (SPOKEN, 2));
    let t = secs(1.0);
    assert_eq!(
        answered(&mut a, &ping_from(&all[1], &all[0], 2, 7, t), t),
        [2]
    );
    assert_eq!(a.set_wire_version(9), 4, "brought within its range");
    assert_eq!(a.set_wire_version(3), 3);
    let t = secs(1.5);
    a.handle_datagram(t, &ping_from(&all[1], &all[0], 3, 7, t))
        .unwrap();
    for p in drain(&mut a).iter().map(decode) {
        assert_eq!((p.header.version, p.header.speaks), (3, Some(SPOKEN)));
    }
    let (received, sent) = a.packets_by_version();
    assert_eq!(
        (received[&2], received[&3], sent[&2], sent[&3]),
        (1, 1, 1, 1)
    );
}

#[test]
fn a_packet_of_a_version_outside_the_range_is_dropped_and_reported_once_a_minute_per_sender() {
    let all = ids(3);
    let cfg = Config {
        wire_versions: v(3, 3),
        ..Config::default()
    };
    let mut a = node(&all[0], &all, cfg);
    drain(&mut a);
    let old = ping_from(&all[1], &all[0], 2, 1, secs(1.0));
    assert_eq!(
        a.handle_datagram(secs(1.0), &old),
        Err(ReceiveError::Decode(DecodeError::Version(2)))
    );
    assert!(drain(&mut a).is_empty(), "not answered");
    let future = future_packet(&all[2], 5, v(5, 6));
    assert!(a.handle_datagram(secs(1.1), &future).is_err());
    let reports = drain_events(&mut a);
    assert_eq!(
        reports,
        vec![
            Event::UnsupportedVersion {
                sender: Some(all[1].clone()),
                version: 2,
                speaks: None,
                ours: v(3, 3),
            },
            Event::UnsupportedVersion {
                sender: Some(all[2].clone()),
                version: 5,
                speaks: Some(v(5, 6)),
                ours: v(3, 3),
            },
        ]
    );
    let reports = |a: &mut Node<NodeId>| {
        drain_events(a)
            .into_iter()
            .filter(|e| matches!(e, Event::UnsupportedVersion { .. }))
            .count()
    };
    assert!(a.handle_datagram(secs(30.0), &old).is_err());
    assert_eq!(reports(&mut a), 0, "once a minute per sender");
    assert!(a.handle_datagram(secs(62.0), &old).is_err());
    assert_eq!(reports(&mut a), 1);
    assert_eq!(a.stats().dropped(hale_core::DropReason::Version), 4);
    let (received, _) = a.packets_by_version();
    assert_eq!((received[&2], received[&5]), (3, 1));
}

#[test]
fn a_new_run_in_an_older_version_is_answered_in_its_version_for_a_while() {
    let all = ids(3);
    let (b, c) = (&all[1], &all[2]);
    let mut a = node(&all[0], &all, Config::default());
    drain(&mut a);
    a.set_wire_version(3);
    // b's first packet (a new run, for all a knows) is in version 2: maybe a
    // downgraded build that cannot read 3. c writes 3.
    let t = secs(1.0);
    assert_eq!(answered(&mut a, &ping_from(b, &all[0], 2, 7, t), t), [2]);
    let t = secs(1.2);
    assert_eq!(answered(&mut a, &ping_from(c, &all[0], 3, 9, t), t), [3]);
    // Once b writes 3, it gets 3.
    let t = secs(2.0);
    assert_eq!(answered(&mut a, &ping_from(b, &all[0], 3, 7, t), t), [3]);
    // c writing 2 in the same run is not a new run: it reads 3.
    let t = secs(2.5);
    assert_eq!(answered(&mut a, &ping_from(c, &all[0], 2, 9, t), t), [3]);
    // c restarted in version 2: answered in 2, until the grace ends.
    let t = secs(3.0);
    assert_eq!(answered(&mut a, &ping_from(c, &all[0], 2, 10, t), t), [2]);
    let t = secs(3.0) + hale_core::versions::DOWNGRADE_GRACE;
    assert_eq!(answered(&mut a, &ping_from(c, &all[0], 2, 10, t), t), [3]);
}

#[test]
fn a_new_run_writing_a_newer_version_than_this_node_is_answered_in_it() {
    let all = ids(2);
    let mut a = node(&all[0], &all, Config::default());
    drain(&mut a);
    assert_eq!(a.wire_version(), 2);
    // b speaks only 3 (its range narrowed), and has just started.
    let t = secs(1.0);
    assert_eq!(
        answered(&mut a, &ping_from(&all[1], &all[0], 3, 7, t), t),
        [3]
    );
}

#[test]
fn members_that_write_an_older_version_without_restarting_are_written_to_in_the_negotiated_one() {
    let all = ids(2);
    let b = &all[1];
    // Replay protection off: no run is known, so every packet of b may be
    // a new run. Each run is clamped once: two members that moved up must
    // not hold each other at 2 for ever.
    let cfg = Config {
        replay_window: std::time::Duration::ZERO,
        ..Config::default()
    };
    let mut a = node(&all[0], &all, cfg);
    drain(&mut a);
    a.set_wire_version(3);
    let t = secs(1.0);
    assert_eq!(answered(&mut a, &ping_from(b, &all[0], 2, 7, t), t), [2]);
    let t = secs(1.0) + hale_core::versions::DOWNGRADE_GRACE;
    assert_eq!(answered(&mut a, &ping_from(b, &all[0], 2, 7, t), t), [3]);
    let t = t + std::time::Duration::from_secs(1);
    assert_eq!(answered(&mut a, &ping_from(b, &all[0], 2, 7, t), t), [3]);
}

#[test]
fn a_wire_range_outside_this_builds_is_refused() {
    for bad in [v(1, 3), v(2, 5), v(3, 2)] {
        let cfg = Config {
            wire_versions: bad,
            ..Config::default()
        };
        let e = Node::new(id("a", 1), cfg, Time::ZERO).unwrap_err();
        assert_eq!(e.field, "wire_versions");
    }
}

#[test]
fn two_members_that_share_no_version_each_report_the_other_within_one_probe_interval() {
    let all = ids(2);
    let with = |versions| Config {
        wire_versions: versions,
        ..Config::default()
    };
    let interval = Config::default().probe_interval;
    let mut old = node(&all[0], &all, with(v(2, 2)));
    let mut new = node(&all[1], &all, with(v(3, 3)));
    let until = Time::ZERO + interval;
    let mut reports: Vec<(usize, Time, Event<NodeId>)> = Vec::new();
    loop {
        let next = [old.poll_timeout(), new.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(now) = next.filter(|t| *t <= until) else {
            break;
        };
        for i in 0..2 {
            let (from, to) = if i == 0 {
                (&mut old, &mut new)
            } else {
                (&mut new, &mut old)
            };
            from.handle_timeout(now);
            for t in drain(from) {
                // Delivered at once; the other side cannot read it.
                let _ = match t.channel {
                    Channel::Datagram => to.handle_datagram(now, &t.bytes),
                    Channel::Stream => to.handle_stream(now, &t.bytes),
                };
            }
            reports.extend(
                drain_events(to)
                    .into_iter()
                    .filter(|e| matches!(e, Event::UnsupportedVersion { .. }))
                    .map(|e| (1 - i, now, e)),
            );
        }
    }
    let about = |who: usize| {
        reports
            .iter()
            .filter(|(r, _, _)| *r == who)
            .map(|(_, _, e)| e.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        about(0),
        vec![Event::UnsupportedVersion {
            sender: Some(all[1].clone()),
            version: 3,
            speaks: Some(v(3, 3)),
            ours: v(2, 2),
        }],
        "the old side names the new member"
    );
    assert_eq!(
        about(1),
        vec![Event::UnsupportedVersion {
            sender: Some(all[0].clone()),
            version: 2,
            speaks: None,
            ours: v(3, 3),
        }],
        "the new side names the old member"
    );
    assert!(reports.iter().all(|(_, at, _)| *at <= until));
}

/// The first ping `a` sends `b`, and the sync that opens its periodic
/// sync with it (a summary, or a digest). `b` started a new run writing
/// `b_writes` at time zero (so that, for [`DOWNGRADE_GRACE`], `a` writes
/// to it in that version, and no longer than that is needed: `a` syncs
/// every 2 s), and acks `a`'s pings in it.
///
/// [`DOWNGRADE_GRACE`]: hale_core::versions::DOWNGRADE_GRACE
fn probe_and_sync_of(b_writes: u8) -> (Message<NodeId>, Packet<NodeId>) {
    let all = ids(2);
    let cfg = Config {
        push_pull_interval: std::time::Duration::from_secs(2),
        ..Config::default()
    };
    let mut a = node(&all[0], &all, cfg);
    drain(&mut a);
    a.set_wire_version(3);
    let run = |sent_at: Time, messages| {
        let mut h = header(&all[1], b_writes, (b_writes >= 3).then_some(SPOKEN), 7);
        h.sent_ms = sent_at.as_nanos() / 1_000_000;
        Packet {
            header: h,
            messages,
        }
        .encode()
    };
    a.handle_datagram(Time::ZERO, &run(Time::ZERO, vec![]))
        .unwrap();
    let (mut ping, mut sync) = (None, None);
    loop {
        let t = a.poll_timeout().unwrap();
        assert!(
            t < Time::ZERO + hale_core::versions::DOWNGRADE_GRACE,
            "no ping or sync within the grace"
        );
        a.handle_timeout(t);
        for p in drain(&mut a).iter().map(decode) {
            for m in &p.messages {
                match m {
                    Message::Ping { seq, .. } => {
                        ping.get_or_insert_with(|| m.clone());
                        let ack = run(t, vec![Message::Ack { seq: *seq }]);
                        a.handle_datagram(t, &ack).unwrap();
                    }
                    Message::Summary { .. } | Message::PushPull { .. } => {
                        sync.get_or_insert_with(|| p.clone());
                    }
                    _ => {}
                }
            }
        }
        if let (Some(ping), Some(sync)) = (&ping, &sync) {
            return (ping.clone(), sync.clone());
        }
    }
}

#[test]
fn a_member_written_to_in_version_2_gets_pings_naming_it_and_a_digest_never_a_summary() {
    let (ping, sync) = probe_and_sync_of(2);
    assert!(
        matches!(ping, Message::Ping { target: PingTarget::Id(ref id), .. } if *id == ids(2)[1]),
        "{ping:?}"
    );
    assert_eq!(sync.header.version, 2);
    assert!(matches!(
        sync.messages[..],
        [Message::PushPull { digest: true, .. }]
    ));
}

#[test]
fn a_member_written_to_in_version_3_gets_pings_naming_its_tag_and_a_summary() {
    let (ping, sync) = probe_and_sync_of(3);
    assert!(
        matches!(ping, Message::Ping { ref target, .. } if *target == tag(&ids(2)[1])),
        "{ping:?}"
    );
    assert_eq!(sync.header.version, 3);
    assert!(matches!(sync.messages[..], [Message::Summary { .. }]));
}
