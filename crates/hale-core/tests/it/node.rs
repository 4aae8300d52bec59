//! The node's outputs, asserted as data.

use std::time::Duration;

use hale_core::wire::{Header, Message, Packet, PingTarget, MAX_DATAGRAM, SPOKEN, VERSION};
use hale_core::{Channel, DropReason, Event, LeaveError, MemberState, Node, NodeId, Time};

use crate::support::*;

fn cluster_of(n: usize) -> (Vec<NodeId>, Vec<Node<NodeId>>) {
    let all = ids(n);
    let nodes = all
        .iter()
        .enumerate()
        .map(|(i, me)| node(me, &all, config(i as u64 + 1)))
        .collect();
    (all, nodes)
}

fn packet_from(from: &NodeId, inc: u32, health: u8, messages: Vec<Message<NodeId>>) -> Vec<u8> {
    Packet {
        header: Header {
            version: VERSION,
            speaks: Some(SPOKEN),
            cluster: hale_core::wire::cluster_id("hale"),
            sender: from.clone(),
            incarnation: inc,
            health,
            generation: 0,
            sent_ms: 0,
        },
        messages,
    }
    .encode()
}

/// Runs `n`'s timers until it sends something (its first probe): the time, and what it sent.
fn until_first_send(n: &mut Node<NodeId>) -> (Time, Vec<hale_core::Transmit<NodeId>>) {
    loop {
        let t = n.poll_timeout().unwrap();
        n.handle_timeout(t);
        let sent = drain(n);
        if !sent.is_empty() {
            return (t, sent);
        }
    }
}

#[test]
fn a_probe_period_sends_one_ping_and_the_ack_closes_it() {
    let (all, mut nodes) = cluster_of(2);
    let (t, sent) = until_first_send(&mut nodes[0]);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].to, all[1]);
    assert_eq!(sent[0].channel, Channel::Datagram);
    let ping = decode(&sent[0]);
    let Message::Ping {
        seq,
        ref target,
        suspected: None,
    } = ping.messages[0]
    else {
        panic!("expected a ping, got {:?}", ping.messages);
    };
    assert_eq!(target, &tag(&all[1]), "named by its 4-byte tag");
    deliver(&mut nodes[1], &sent[0], t);
    let reply = drain(&mut nodes[1]);
    assert_eq!(reply.len(), 1);
    assert_eq!(decode(&reply[0]).messages, vec![Message::Ack { seq }]);
    deliver(&mut nodes[0], &reply[0], t + Duration::from_millis(1));
    assert_eq!(nodes[0].stats().acks, 1);
    // The probe is closed: no indirect probe follows at its timeout.
    let later = run_timers(&mut nodes[0], t + Duration::from_millis(999));
    assert!(later
        .iter()
        .all(|x| !matches!(decode(x).messages[0], Message::PingReq { .. })));
    assert_eq!(nodes[0].stats().probe_failures, 0);
}

#[test]
fn an_unanswered_ping_asks_three_others_and_a_stream_ping_then_suspects() {
    let (all, mut nodes) = cluster_of(5);
    let a = &mut nodes[0];
    let (t, mut sent) = until_first_send(a);
    let ping = sent.remove(0);
    let target = ping.to.clone();
    // No ack. At half the probe timeout, the same ping once more.
    let again = run_timers(a, t + Duration::from_millis(250));
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].to, target);
    assert_eq!(decode(&again[0]).messages, decode(&ping).messages);
    // At the probe timeout: ping-reqs to three relays, and a stream ping.
    let out = run_timers(a, t + Duration::from_millis(500));
    let reqs: Vec<_> = out
        .iter()
        .filter(|x| x.channel == Channel::Datagram)
        .collect();
    let streams: Vec<_> = out
        .iter()
        .filter(|x| x.channel == Channel::Stream)
        .collect();
    assert_eq!(reqs.len(), 3);
    assert!(reqs.iter().all(|r| r.to != target && r.to != all[0]));
    for r in &reqs {
        assert!(
            matches!(decode(r).messages[0], Message::PingReq { target: ref tg, .. } if *tg == target)
        );
    }
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].to, target);
    // Every relay answers with a nack: the target is the problem, not us.
    let Message::PingReq { seq, .. } = decode(reqs[0]).messages[0] else {
        unreachable!()
    };
    for r in &reqs {
        let nack = packet_from(&r.to, 0, 0, vec![Message::Nack { seq }]);
        a.handle_datagram(t + Duration::from_millis(900), &nack)
            .unwrap();
    }
    let out = run_timers(a, t + Duration::from_millis(1000));
    let events = drain_events(a);
    assert!(events.contains(&Event::Suspected {
        member: target.clone(),
        incarnation: 0,
        accuser: all[0].clone(),
    }));
    assert_eq!(a.member(&target).unwrap().state(), MemberState::Suspect);
    assert_eq!(a.local_health(), 0, "all nacks arrived: our health is fine");
    // The suspicion is gossiped at once.
    assert!(out.iter().any(|x| decode(x)
        .messages
        .iter()
        .any(|m| matches!(m, Message::Suspect { member, .. } if *member == target))));
}

#[test]
fn indirect_probes_go_only_through_unsuspected_members() {
    let (all, mut nodes) = cluster_of(6);
    let a = &mut nodes[0];
    let (t, mut sent) = until_first_send(a);
    let ping = sent.remove(0);
    let target = ping.to.clone();
    // Meanwhile two other members are suspected (by a healthy accuser).
    let others: Vec<&NodeId> = all[1..].iter().filter(|m| **m != target).collect();
    for m in &others[..2] {
        let s = packet_from(
            others[2],
            0,
            0,
            vec![Message::Suspect {
                member: (*m).clone(),
                incarnation: 0,
                accuser: others[2].clone(),
                accuser_health: 0,
            }],
        );
        a.handle_datagram(t + Duration::from_millis(10), &s)
            .unwrap();
    }
    drain(a);
    // At the probe timeout the relays are the two unsuspected others only:
    // a suspect would not nack, and its silence would count against us.
    let out = run_timers(a, t + Duration::from_millis(500));
    let relays: Vec<&NodeId> = out
        .iter()
        .filter(|x| {
            decode(x)
                .messages
                .iter()
                .any(|m| matches!(m, Message::PingReq { .. }))
        })
        .map(|x| &x.to)
        .collect();
    assert_eq!(relays.len(), 2, "{relays:?}");
    assert!(relays.iter().all(|r| others[2..].contains(r)), "{relays:?}");
}

#[test]
fn missing_nacks_raise_local_health_and_slow_probing() {
    let (_, mut nodes) = cluster_of(5);
    let a = &mut nodes[0];
    let (t, _) = until_first_send(a);
    run_timers(a, t + Duration::from_millis(1000));
    assert_eq!(a.local_health(), 3, "three nacks missing");
    // The walk's period (2 s) is scaled by health + 1: in the next 10 s a
    // healthy node would start five probes; this one starts two.
    run_timers(a, t + Duration::from_millis(10_500));
    assert_eq!(a.stats().probes, 3, "{:?}", a.stats());
}

#[test]
fn a_suspected_node_refutes_at_once_with_a_higher_incarnation() {
    let (all, mut nodes) = cluster_of(3);
    let b = &mut nodes[1];
    let accusation = packet_from(
        &all[0],
        0,
        0,
        vec![Message::Suspect {
            member: all[1].clone(),
            incarnation: 0,
            accuser: all[0].clone(),
            accuser_health: 0,
        }],
    );
    b.handle_datagram(secs(0.1), &accusation).unwrap();
    assert_eq!(b.incarnation(), 1);
    assert!(drain_events(b).contains(&Event::Refuted {
        incarnation: 1,
        was_dead: false
    }));
    let out = drain(b);
    let to_accuser = out
        .iter()
        .find(|x| x.to == all[0])
        .expect("refutation sent to the accuser");
    assert_eq!(
        decode(to_accuser).messages[0],
        Message::Alive {
            member: all[1].clone(),
            incarnation: 1,
            meta: Box::default()
        }
    );
}

#[test]
fn a_ping_carrying_a_suspicion_is_answered_with_the_refutation_first() {
    let (all, mut nodes) = cluster_of(3);
    let b = &mut nodes[1];
    let ping = packet_from(
        &all[0],
        0,
        0,
        vec![Message::Ping {
            seq: 9,
            target: tag(&all[1]),
            suspected: Some(0),
        }],
    );
    b.handle_datagram(secs(0.1), &ping).unwrap();
    let out = drain(b);
    let ack = out
        .iter()
        .map(decode)
        .find(|p| p.messages.contains(&Message::Ack { seq: 9 }))
        .unwrap();
    assert_eq!(
        ack.header.incarnation, 1,
        "the ack itself carries the new incarnation"
    );
}

fn suspect(member: &NodeId, accuser: &NodeId, health: u8) -> Vec<u8> {
    packet_from(
        accuser,
        0,
        health,
        vec![Message::Suspect {
            member: member.clone(),
            incarnation: 0,
            accuser: accuser.clone(),
            accuser_health: health,
        }],
    )
}

/// An observer that does not probe during the test, so that only the
/// accusations the test injects count.
fn bystander(all: &[NodeId]) -> Node<NodeId> {
    let cfg = hale_core::Config {
        probe_interval: Duration::from_secs(3600),
        probe_timeout: Duration::from_secs(1800),
        ..config(77)
    };
    node(&all[5], all, cfg)
}

fn deaths(events: &[Event<NodeId>]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, Event::Dead { .. }))
        .count()
}

#[test]
fn one_accuser_alone_never_gets_a_member_declared_dead() {
    let all = ids(6);
    let x = &mut bystander(&all);
    x.handle_datagram(secs(0.0), &suspect(&all[2], &all[0], 0))
        .unwrap();
    let mut events = Vec::new();
    for s in 1..60 {
        x.handle_timeout(secs(f64::from(s)));
        events.extend(drain_events(x));
    }
    assert_eq!(deaths(&events), 0);
    assert_eq!(
        x.member(&all[2]).unwrap().state(),
        MemberState::Alive,
        "the suspicion expired"
    );
    assert_eq!(x.stats().suspicions_expired, 1);
}

#[test]
fn two_healthy_accusers_get_a_member_declared_dead_with_evidence() {
    let all = ids(6);
    let x = &mut bystander(&all);
    x.handle_datagram(secs(0.0), &suspect(&all[2], &all[0], 0))
        .unwrap();
    x.handle_datagram(secs(0.5), &suspect(&all[2], &all[1], 0))
        .unwrap();
    drain(x);
    // Before convicting on others' word, it pings the suspect itself, with
    // the suspicion attached so that a live suspect refutes in its ack.
    let mut events = Vec::new();
    let mut asked = false;
    while let Some(t) = x.poll_timeout() {
        if t > secs(2.0 * 3600.0) {
            break;
        }
        x.handle_timeout(t);
        for tx in drain(x) {
            if tx.to == all[2] {
                asked |= decode(&tx).messages.iter().any(|m| {
                    matches!(
                        m,
                        Message::Ping {
                            suspected: Some(0),
                            ..
                        }
                    )
                });
            }
        }
        events.extend(drain_events(x));
        if events.iter().any(|e| matches!(e, Event::Dead { .. })) {
            break;
        }
    }
    assert!(asked, "no verification ping to the suspect");
    let dead: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Dead {
                member, evidence, ..
            } => Some((member, evidence)),
            _ => None,
        })
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].0, &all[2]);
    // The two accusers, and now this node, whose own probe failed too.
    let accusers = &dead[0].1.accusers;
    assert!(
        accusers.contains(&all[0]) && accusers.contains(&all[1]),
        "{accusers:?}"
    );
    assert_eq!(dead[0].1.suspected_at, Some(secs(0.0)));
}

#[test]
fn an_unhealthy_accuser_is_discounted() {
    let all = ids(6);
    let x = &mut bystander(&all);
    x.handle_datagram(secs(0.0), &suspect(&all[2], &all[0], 0))
        .unwrap();
    x.handle_datagram(secs(0.5), &suspect(&all[2], &all[1], 6))
        .unwrap();
    let mut events = Vec::new();
    for s in 1..60 {
        x.handle_timeout(secs(f64::from(s)));
        events.extend(drain_events(x));
    }
    assert_eq!(deaths(&events), 0);
    assert_eq!(x.stats().discounted_accusations, 1);
}

#[test]
fn a_discounted_accuser_counts_once_it_accuses_again_in_good_health() {
    let all = ids(6);
    let x = &mut bystander(&all);
    x.handle_datagram(secs(0.0), &suspect(&all[2], &all[0], 0))
        .unwrap();
    // n1's first accusation comes while its health is poor (as when its
    // probes went through another failed member): discounted.
    x.handle_datagram(secs(0.5), &suspect(&all[2], &all[1], 6))
        .unwrap();
    // The same accusation again, still unhealthy: still not counted.
    x.handle_datagram(secs(1.0), &suspect(&all[2], &all[1], 6))
        .unwrap();
    // Then again in good health: it counts, and the verdict can follow.
    x.handle_datagram(secs(1.5), &suspect(&all[2], &all[1], 0))
        .unwrap();
    // (The bystander's own verification probe takes its long probe period.)
    let mut events = Vec::new();
    while let Some(t) = x.poll_timeout() {
        if t > secs(2.0 * 3600.0) {
            break;
        }
        x.handle_timeout(t);
        drain(x);
        events.extend(drain_events(x));
        if deaths(&events) > 0 {
            break;
        }
    }
    let evidence = events
        .iter()
        .find_map(|e| match e {
            Event::Dead { evidence, .. } => Some(evidence),
            _ => None,
        })
        .expect("a verdict once two healthy accusers stand");
    // n1 stands among the accusers (moved from the discounted ones).
    assert!(
        evidence.accusers.contains(&all[0]) && evidence.accusers.contains(&all[1]),
        "{:?}",
        evidence.accusers
    );
}

#[test]
fn a_death_verdict_resting_on_one_accuser_is_rejected() {
    let all = ids(6);
    let x = &mut bystander(&all);
    let verdict = packet_from(
        &all[0],
        0,
        0,
        vec![Message::Dead {
            member: all[2].clone(),
            incarnation: 0,
            declarer: all[0].clone(),
            accusers: 1,
        }],
    );
    x.handle_datagram(secs(0.0), &verdict).unwrap();
    assert_eq!(x.member(&all[2]).unwrap().state(), MemberState::Alive);
    assert_eq!(deaths(&drain_events(x)), 0);
}

#[test]
fn garbage_oversize_and_foreign_packets_are_dropped_counted_and_change_nothing() {
    let (all, mut nodes) = cluster_of(3);
    let x = &mut nodes[0];
    let before = x.members().count();
    assert!(x.handle_datagram(secs(0.0), b"hello world").is_err());
    assert!(x
        .handle_datagram(secs(0.0), &[0u8; MAX_DATAGRAM + 1])
        .is_err());
    let mut foreign = packet_from(&all[1], 0, 0, vec![Message::Ack { seq: 1 }]);
    foreign[3] ^= 0xff; // cluster id
    assert!(x.handle_datagram(secs(0.0), &foreign).is_err());
    let mut truncated = packet_from(&all[1], 0, 0, vec![Message::Ack { seq: 1 }]);
    truncated.pop();
    assert!(x.handle_datagram(secs(0.0), &truncated).is_err());
    let own = packet_from(&all[0], 0, 0, vec![Message::Ack { seq: 1 }]);
    assert!(x.handle_datagram(secs(0.0), &own).is_err());
    assert_eq!(x.stats().dropped(DropReason::BadMagic), 1);
    assert_eq!(x.stats().dropped(DropReason::Oversize), 1);
    assert_eq!(x.stats().dropped(DropReason::ForeignCluster), 1);
    assert_eq!(x.stats().dropped(DropReason::Malformed), 1);
    assert_eq!(x.stats().dropped(DropReason::FromSelf), 1);
    assert_eq!(x.members().count(), before);
    assert!(drain(x).is_empty());
    assert!(drain_events(x).is_empty());
}

#[test]
fn a_spurious_timeout_does_nothing() {
    let (_, mut nodes) = cluster_of(3);
    let x = &mut nodes[0];
    let next = x.poll_timeout().unwrap();
    x.handle_timeout(Time::ZERO);
    x.handle_timeout(Time::ZERO);
    assert!(drain(x).is_empty());
    assert_eq!(x.poll_timeout(), Some(next));
}

#[test]
fn leaving_announces_left_once() {
    let (all, mut nodes) = cluster_of(4);
    let x = &mut nodes[0];
    x.leave(secs(1.0)).unwrap();
    let out = drain(x);
    assert!(!out.is_empty());
    for t in &out {
        assert_eq!(
            decode(t).messages[0],
            Message::Left {
                member: all[0].clone(),
                incarnation: 1
            }
        );
    }
    assert_eq!(x.leave(secs(2.0)), Err(LeaveError::AlreadyLeft));
    let mut peer = node(&all[1], &all, config(9));
    deliver(&mut peer, &out[0], secs(1.0));
    assert_eq!(peer.member(&all[0]).unwrap().state(), MemberState::Left);
}

#[test]
fn application_traffic_spares_the_probe_of_a_fresh_member() {
    let (all, mut nodes) = cluster_of(2);
    let x = &mut nodes[0];
    // The first visit of the walk comes within one walk interval (2 s).
    x.note_traffic(secs(1.9), &all[1]);
    run_timers(x, secs(2.0));
    assert_eq!(x.stats().probes, 0, "no ping: traffic proved it alive");
    assert_eq!(x.stats().probes_skipped_fresh, 1);
    // Quiet for a walk interval: the next visit probes.
    run_timers(x, secs(4.5));
    assert_eq!(x.stats().probes, 1);
}

#[test]
fn a_node_declared_dead_is_told_so_when_it_speaks_and_rejoins() {
    let (all, mut nodes) = cluster_of(4);
    let verdict = packet_from(
        &all[1],
        0,
        0,
        vec![Message::Dead {
            member: all[2].clone(),
            incarnation: 0,
            declarer: all[1].clone(),
            accusers: 2,
        }],
    );
    nodes[0].handle_datagram(secs(1.0), &verdict).unwrap();
    assert_eq!(nodes[0].member(&all[2]).unwrap().state(), MemberState::Dead);
    drain(&mut nodes[0]);
    // The "dead" node pings us: we tell it it was declared dead.
    let hello = packet_from(&all[2], 0, 0, vec![Message::Ack { seq: 77 }]);
    nodes[0].handle_datagram(secs(2.0), &hello).unwrap();
    let out = drain(&mut nodes[0]);
    let notice = out.iter().find(|t| t.to == all[2]).expect("dead notice");
    let (head, rest) = nodes.split_at_mut(2);
    deliver(&mut rest[0], notice, secs(2.0));
    assert_eq!(rest[0].incarnation(), 1);
    assert!(drain_events(&mut rest[0]).contains(&Event::Refuted {
        incarnation: 1,
        was_dead: true
    }));
    let back = drain(&mut rest[0]);
    let to_us = back.iter().find(|t| t.to == all[0]).unwrap();
    deliver(&mut head[0], to_us, secs(2.1));
    assert_eq!(head[0].member(&all[2]).unwrap().state(), MemberState::Alive);
}

#[test]
fn identical_inputs_give_identical_outputs() {
    let run = || {
        let (_, mut nodes) = cluster_of(5);
        run_timers(&mut nodes[0], secs(30.0))
            .into_iter()
            .map(|t| (t.to, t.bytes))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn a_bystander_whose_verification_ping_is_answered_never_convicts() {
    let all = ids(6);
    let x = &mut bystander(&all);
    let mut suspect_node = node(&all[2], &all, config(3));
    x.handle_datagram(secs(0.0), &suspect(&all[2], &all[0], 0))
        .unwrap();
    x.handle_datagram(secs(0.5), &suspect(&all[2], &all[1], 0))
        .unwrap();
    drain(x);
    let mut events = Vec::new();
    let mut now = secs(0.5);
    while let Some(t) = x.poll_timeout() {
        if t > secs(60.0) {
            break;
        }
        now = t;
        x.handle_timeout(t);
        for tx in drain(x) {
            if tx.to == all[2] && tx.channel == Channel::Datagram {
                // The suspect is alive: it answers, refuting in the same breath.
                suspect_node.handle_datagram(t, &tx.bytes).unwrap();
                for back in drain(&mut suspect_node) {
                    if back.to == all[5] {
                        deliver(x, &back, t + Duration::from_millis(1));
                    }
                }
            }
        }
        events.extend(drain_events(x));
    }
    assert!(
        now > secs(10.0),
        "the run went past every suspicion deadline"
    );
    assert_eq!(deaths(&events), 0, "{events:?}");
    let m = x.member(&all[2]).unwrap();
    assert_eq!(m.state(), MemberState::Alive);
    assert_eq!(m.incarnation(), 1, "it refuted");
}

#[test]
fn a_node_that_hears_from_nobody_concludes_it_is_cut_off_and_convicts_nobody() {
    let all = ids(6);
    let x = &mut node(&all[0], &all, config(31));
    x.join(Time::ZERO, [all[1].clone()]);
    drain(x);
    let mut sent = Vec::new();
    let mut events = Vec::new();
    let mut cut_off_at = None;
    while let Some(t) = x.poll_timeout() {
        if t > secs(120.0) {
            break;
        }
        x.handle_timeout(t);
        let out = drain(x);
        events.extend(drain_events(x));
        if cut_off_at.is_none() && x.is_cut_off() {
            cut_off_at = Some(t);
        }
        sent.extend(out.into_iter().map(|o| (t, o)));
    }
    assert_eq!(deaths(&events), 0, "it convicts nobody: {events:?}");
    assert!(x.members().all(|m| m.state() != MemberState::Dead));
    let cut_off_at = cut_off_at.expect("hearing from nobody, it concludes it is cut off");
    assert!(cut_off_at <= secs(12.0), "{cut_off_at:?}");
    assert!(x.stats().accusations_withdrawn > 0);
    // Once cut off, none of its accusations is sent any more...
    let accusations_after = sent
        .iter()
        .filter(|(t, _)| *t > cut_off_at)
        .flat_map(|(_, o)| decode(o).messages)
        .filter(|m| matches!(m, Message::Suspect { .. } | Message::Dead { .. }))
        .count();
    assert_eq!(accusations_after, 0);
    // ...and it falls back to its seed, so that it rejoins by itself.
    assert!(events.iter().any(|e| matches!(e, Event::SeedFallback)));
    assert!(sent.iter().any(|(t, o)| *t > cut_off_at
        && o.to == all[1]
        && o.channel == Channel::Stream
        && matches!(
            decode(o).messages[..],
            [Message::PushPull { join: true, .. }]
        )));
    // The first packet from anyone ends it.
    let ack = packet_from(&all[3], 0, 0, vec![Message::Ack { seq: 1 }]);
    x.handle_datagram(secs(121.0), &ack).unwrap();
    assert!(!x.is_cut_off());
}

fn closed(member: &NodeId, accuser: &NodeId) -> Vec<u8> {
    packet_from(
        accuser,
        0,
        0,
        vec![Message::Closed {
            member: member.clone(),
            incarnation: 0,
            accuser: accuser.clone(),
        }],
    )
}

#[test]
fn one_observer_finding_a_port_closed_convicts_nobody() {
    // ICMP is not authenticated: one forged "port unreachable" must not be
    // enough. It counts as one accusation, and the suspicion expires.
    let all = ids(6);
    let x = &mut bystander(&all);
    x.handle_datagram(secs(0.0), &closed(&all[2], &all[0]))
        .unwrap();
    let mut events = Vec::new();
    for s in 1..60 {
        x.handle_timeout(secs(f64::from(s)));
        drain(x);
        events.extend(drain_events(x));
    }
    assert_eq!(deaths(&events), 0);
    assert_eq!(x.member(&all[2]).unwrap().state(), MemberState::Alive);
}

#[test]
fn two_observers_finding_a_port_closed_convict_as_soon_as_our_own_probe_finds_it_too() {
    let all = ids(6);
    let x = &mut bystander(&all);
    x.handle_datagram(secs(0.0), &closed(&all[2], &all[0]))
        .unwrap();
    x.handle_datagram(secs(0.1), &closed(&all[2], &all[1]))
        .unwrap();
    // A port reported closed: it pings the member itself at once (on the
    // first report, again on the second)...
    let mut sent = drain(x);
    sent.extend(run_timers(x, secs(0.1)));
    let pings: Vec<_> = sent
        .into_iter()
        .filter(|o| o.to == all[2])
        .flat_map(|o| decode(&o).messages)
        .filter(|m| matches!(m, Message::Ping { .. }))
        .collect();
    assert!(!pings.is_empty() && pings.len() <= 2, "{pings:?}");
    // ...and the suspect's host answers "port closed": the verdict follows
    // at once, not after the silence suspicion time (2.5 s at least).
    x.handle_unreachable(secs(0.2), &all[2]);
    drain(x);
    run_timers(x, secs(0.2));
    let events = drain_events(x);
    let evidence = events
        .iter()
        .find_map(|e| match e {
            Event::Dead { evidence, .. } => Some(evidence),
            _ => None,
        })
        .expect("a verdict");
    assert_eq!(evidence.closed_port, 3);
    assert_eq!(x.stats().closed_ports, 1);
}

#[test]
fn a_port_found_closed_is_withdrawn_when_the_member_answers() {
    // A forged "port unreachable" followed by the real ack: no verdict.
    let all = ids(6);
    let x = &mut bystander(&all);
    x.handle_datagram(secs(0.0), &closed(&all[2], &all[0]))
        .unwrap();
    x.handle_datagram(secs(0.1), &closed(&all[2], &all[1]))
        .unwrap();
    let seq = run_timers(x, secs(0.1))
        .into_iter()
        .filter(|o| o.to == all[2])
        .flat_map(|o| decode(&o).messages)
        .find_map(|m| match m {
            Message::Ping { seq, .. } => Some(seq),
            _ => None,
        })
        .unwrap();
    x.handle_unreachable(secs(0.15), &all[2]);
    x.handle_datagram(
        secs(0.15),
        &packet_from(&all[2], 1, 0, vec![Message::Ack { seq }]),
    )
    .unwrap();
    let mut events = drain_events(x);
    for s in 1..30 {
        x.handle_timeout(secs(f64::from(s)));
        drain(x);
        events.extend(drain_events(x));
    }
    assert_eq!(deaths(&events), 0, "{events:?}");
}

#[test]
fn a_ping_meant_for_another_member_is_not_answered_whether_named_by_tag_or_by_identity() {
    let (all, mut nodes) = cluster_of(3);
    let b = &mut nodes[1];
    let ping = |target| {
        packet_from(
            &all[0],
            0,
            0,
            vec![Message::Ping {
                seq: 3,
                target,
                suspected: None,
            }],
        )
    };
    b.handle_datagram(secs(0.1), &ping(tag(&all[2]))).unwrap();
    assert!(drain(b).is_empty(), "another member's tag");
    b.handle_datagram(secs(0.2), &ping(tag(&all[1]))).unwrap();
    assert_eq!(drain(b).len(), 1, "its own tag: answered");
    // Version 2 names the target by its identity.
    let v2 = |target: &NodeId| {
        Packet {
            header: Header {
                version: 2,
                speaks: None,
                cluster: hale_core::wire::cluster_id("hale"),
                sender: all[0].clone(),
                incarnation: 0,
                health: 0,
                generation: 0,
                sent_ms: 0,
            },
            messages: vec![Message::Ping {
                seq: 4,
                target: PingTarget::Id(target.clone()),
                suspected: None,
            }],
        }
        .encode()
    };
    b.handle_datagram(secs(0.3), &v2(&all[2])).unwrap();
    assert!(drain(b).is_empty(), "another member's identity");
    b.handle_datagram(secs(0.4), &v2(&all[1])).unwrap();
    let out = drain(b);
    assert_eq!(out.len(), 1, "its own identity: answered");
}
