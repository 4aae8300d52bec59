//! Ring monitoring: who pings whom, when, and how long silence takes to convict.

use std::time::Duration;

use hale_core::wire::Message;
use hale_core::{Channel, Config, Event, Node, NodeId, Time, Transmit};

use crate::support::*;

/// Monitors on (one neighbour each side), the walk out of the way.
/// Neighbours are pinged by turn (as in a cluster written version 2):
/// [`heartbeat_config`] has the heartbeats.
fn ring_config(seed: u64) -> Config {
    Config {
        monitors: 1,
        ring_heartbeats: false,
        walk_interval: Duration::from_secs(3600),
        ..config(seed)
    }
}

/// Monitors on with heartbeats (the default), the walk out of the way.
fn heartbeat_config(seed: u64) -> Config {
    Config {
        ring_heartbeats: true,
        ..ring_config(seed)
    }
}

/// Every (time, recipient) of a datagram whose first message `pick` selects.
fn sent_where(
    sent: &[(Time, Transmit<NodeId>)],
    pick: impl Fn(&Message<NodeId>) -> bool,
) -> Vec<(Time, NodeId)> {
    sent.iter()
        .filter(|(_, x)| x.channel == Channel::Datagram && pick(&decode(x).messages[0]))
        .map(|(t, x)| (*t, x.to.clone()))
        .collect()
}

/// The datagram pings among `sent`, with their times and targets.
fn pings(sent: &[(Time, Transmit<NodeId>)]) -> Vec<(Time, NodeId)> {
    sent.iter()
        .filter(|(_, x)| x.channel == Channel::Datagram)
        .filter(|(_, x)| matches!(decode(x).messages[0], Message::Ping { .. }))
        .map(|(t, x)| (*t, x.to.clone()))
        .collect()
}

fn from(sender: &NodeId, messages: Vec<Message<NodeId>>) -> Vec<u8> {
    packet_from(sender, 0, messages)
}

#[test]
fn a_quiet_predecessor_is_pinged_after_the_monitor_interval_and_a_quiet_successor_an_eighth_later()
{
    let all = ids(8);
    let mut x = node(&all[0], &all, ring_config(1));
    let (pred, succ) = (x.monitored().to_vec(), x.watchers().to_vec());
    assert_eq!((pred.len(), succ.len()), (1, 1));
    assert_ne!(pred[0], succ[0]);
    let sent = pings(&sends_until(&mut x, secs(0.95)));
    assert_eq!(
        sent,
        vec![
            (secs(0.75), pred[0].clone()),
            (secs(0.84375), succ[0].clone())
        ]
    );
}

#[test]
fn a_quiet_predecessor_gets_a_heartbeat_and_a_quiet_successor_a_ping_a_sixteenth_later_with_a_second_observer_asked_to_probe_it(
) {
    let all = ids(8);
    let mut x = node(&all[0], &all, heartbeat_config(1));
    let (pred, succ) = (x.monitored()[0].clone(), x.watchers()[0].clone());
    let sent = sends_until(&mut x, secs(0.95));
    let beats = sent_where(&sent, |m| matches!(m, Message::Heartbeat));
    assert_eq!(beats, vec![(secs(0.75), pred.clone())]);
    let beat = sent.iter().find(|(_, t)| t.to == pred).map(|(_, t)| t);
    assert!(beat.is_some_and(|t| t.probe), "sent the way a ping is");
    assert_eq!(pings(&sent), vec![(secs(0.796875), succ.clone())]);
    let asked = sent_where(
        &sent,
        |m| matches!(m, Message::Corroborate { target } if *target == succ),
    );
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].0, secs(0.796875));
    assert!(asked[0].1 != succ && asked[0].1 != all[0]);
    // Its heartbeats keep coming: never pinged again.
    let beat = from(&succ, vec![Message::Heartbeat]);
    x.handle_datagram(secs(1.0), &beat).unwrap();
    x.handle_datagram(secs(1.75), &beat).unwrap();
    let later = sends_until(&mut x, secs(2.4));
    assert!(pings(&later).iter().all(|(_, to)| *to != succ));
}

#[test]
fn a_heartbeat_that_finds_the_port_closed_starts_a_probe_with_closed_port_evidence() {
    let all = ids(8);
    let mut x = node(&all[0], &all, heartbeat_config(3));
    let pred = x.monitored()[0].clone();
    sends_until(&mut x, secs(0.76));
    x.handle_unreachable(secs(0.76), &pred);
    let sent: Vec<_> = std::iter::from_fn(|| x.poll_transmit())
        .map(|t| (secs(0.76), t))
        .collect();
    assert_eq!(pings(&sent)[..1], [(secs(0.76), pred.clone())]);
    let reqs = sent_where(&sent, |m| matches!(m, Message::PingReq { .. }));
    assert!(!reqs.is_empty(), "indirect probes asked at once");
    assert_eq!(x.stats().closed_ports, 1);
    // Long after the heartbeat, a closed port means nothing on its own.
    let mut y = node(&all[0], &all, heartbeat_config(3));
    sends_until(&mut y, secs(1.4));
    y.handle_unreachable(secs(1.4), &pred);
    assert_eq!(y.poll_transmit().map(|t| t.to), None);
    assert_eq!(y.stats().closed_ports, 0);
}

/// `asker` asks `x` at 0.1 s to probe `target` too; what `x` sends then.
fn corroboration_asked(
    x: &mut Node<NodeId>,
    asker: &NodeId,
    target: &NodeId,
) -> Vec<(Time, Transmit<NodeId>)> {
    let ask = from(
        asker,
        vec![Message::Corroborate {
            target: target.clone(),
        }],
    );
    x.handle_datagram(secs(0.1), &ask).unwrap();
    std::iter::from_fn(|| x.poll_transmit())
        .map(|t| (secs(0.1), t))
        .collect()
}

#[test]
fn a_corroboration_request_makes_its_receiver_probe_the_member_but_not_itself_nor_a_stranger_nor_for_a_stranger(
) {
    let all = ids(8);
    let mut x = node(&all[0], &all, heartbeat_config(4));
    let asker = all[1].clone();
    for target in [all[0].clone(), ids(9)[8].clone()] {
        assert_eq!(corroboration_asked(&mut x, &asker, &target).len(), 0);
    }
    let target = all[5].clone();
    let stranger = ids(12)[11].clone();
    let none = corroboration_asked(&mut x, &stranger, &target);
    assert_eq!(pings(&none), vec![], "a stranger's request probes nobody");
    let sent = corroboration_asked(&mut x, &asker, &target);
    assert_eq!(pings(&sent), vec![(secs(0.1), target)]);
    assert_eq!(x.stats().probes, 1);
}

#[test]
fn a_neighbour_heard_from_is_pinged_only_once_quiet_for_the_interval_again() {
    let all = ids(8);
    let mut x = node(&all[0], &all, ring_config(2));
    let pred = x.monitored()[0].clone();
    let succ = x.watchers()[0].clone();
    // Its successor's ping (it watches this node) and its predecessor's
    // packet both prove them alive.
    let ping = from(
        &succ,
        vec![Message::Ping {
            seq: 7,
            target: tag(&all[0]),
            suspected: None,
        }],
    );
    x.handle_datagram(secs(0.5), &ping).unwrap();
    x.note_traffic(secs(0.6), &pred);
    drain(&mut x);
    let sent = pings(&sends_until(&mut x, secs(1.5)));
    assert_eq!(
        sent,
        vec![(secs(1.34375), succ.clone()), (secs(1.35), pred.clone())]
    );
}

/// A member silent from the start: this node's probe of it (pinged at
/// 0.75 s, again at 1.0 s, indirect at 1.25 s with every relay nacking)
/// fails at 1.75 s; a second healthy watcher's accusation arrives at
/// `second`. Returns when this node declares it dead.
fn verdict_with_second_accusation_at(second: f64) -> Time {
    let all = ids(6);
    let mut x = node(&all[0], &all, ring_config(3));
    let victim = x.monitored()[0].clone();
    let sent = sends_until(&mut x, secs(1.3));
    let to_victim: Vec<Time> = pings(&sent)
        .into_iter()
        .filter(|(_, to)| *to == victim)
        .map(|(t, _)| t)
        .collect();
    assert_eq!(to_victim, vec![secs(0.75), secs(1.0)]);
    let reqs: Vec<(NodeId, u32)> = sent
        .iter()
        .filter_map(|(_, t)| match decode(t).messages[0] {
            Message::PingReq { seq, .. } => Some((t.to.clone(), seq)),
            _ => None,
        })
        .collect();
    assert_eq!(reqs.len(), 3, "three indirect probers");
    for (r, seq) in &reqs {
        x.handle_datagram(secs(1.6), &from(r, vec![Message::Nack { seq: *seq }]))
            .unwrap();
    }
    let other = all[1..].iter().find(|m| **m != victim).unwrap().clone();
    let confirm = from(
        &other,
        vec![Message::Suspect {
            member: victim.clone(),
            incarnation: 0,
            accuser: other.clone(),
            accuser_health: 0,
        }],
    );
    sends_until(&mut x, secs(second));
    x.handle_datagram(secs(second), &confirm).unwrap();
    loop {
        let t = x.poll_timeout().unwrap();
        x.handle_timeout(t);
        drain(&mut x);
        if drain_events(&mut x)
            .iter()
            .any(|e| matches!(e, Event::Dead { member, .. } if *member == victim))
        {
            return t;
        }
        assert!(t < secs(30.0), "never convicted");
    }
}

#[test]
fn a_silent_member_is_convicted_suspicion_min_after_its_first_unanswered_pings() {
    // The other watcher's accusation at 1.9 s means its first ping went
    // out at 0.9 s: 2.5 s after the later of the two first pings, not
    // after this node's probe ended (1.75 s + 2.5 s).
    assert_eq!(verdict_with_second_accusation_at(1.9), secs(3.4));
}

#[test]
fn a_probe_failed_on_lost_packets_before_a_stall_does_not_shorten_the_suspicion() {
    // This node's probe failed (lost packets) before the member stalled at
    // about 2 s; the other watcher's accusation at 3 s dates its silence
    // from 2 s: the verdict waits 2.5 s from there, time for a 2 s stall
    // to end and be refuted.
    assert_eq!(verdict_with_second_accusation_at(3.0), secs(4.5));
}
