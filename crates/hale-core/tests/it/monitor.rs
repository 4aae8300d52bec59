//! Ring monitoring: who pings whom, when, and how long silence takes to convict.

use std::time::Duration;

use hale_core::wire::Message;
use hale_core::{Channel, Config, Event, NodeId, Time, Transmit};

use crate::support::*;

/// Monitors on (one neighbour each side), the walk out of the way.
fn ring_config(seed: u64) -> Config {
    Config {
        monitors: 1,
        walk_interval: Duration::from_secs(3600),
        ..config(seed)
    }
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
