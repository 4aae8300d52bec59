//! Ring monitoring: who pings whom, when, and how long silence takes to convict.

use std::time::Duration;

use hale_core::wire::{Header, Message, Packet};
use hale_core::{Channel, Config, Event, Node, NodeId, Time, Transmit};

use crate::support::*;

/// Monitors on (one neighbour each side), the walk out of the way.
fn ring_config(seed: u64) -> Config {
    Config {
        monitors: 1,
        walk_interval: Duration::from_secs(3600),
        ..config(seed)
    }
}

/// Runs `n`'s timers up to `until`: each packet with the time it was sent.
fn sends_until(n: &mut Node<NodeId>, until: Time) -> Vec<(Time, Transmit<NodeId>)> {
    let mut out = Vec::new();
    while let Some(t) = n.poll_timeout() {
        if t > until {
            break;
        }
        n.handle_timeout(t);
        out.extend(drain(n).into_iter().map(|x| (t, x)));
    }
    out
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
    Packet {
        header: Header {
            cluster: hale_core::wire::cluster_id("hale"),
            sender: sender.clone(),
            incarnation: 0,
            health: 0,
            generation: 0,
            sent_ms: 0,
        },
        messages,
    }
    .encode()
}

#[test]
fn a_quiet_predecessor_is_pinged_after_the_monitor_interval_and_a_quiet_successor_a_quarter_later()
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
            (secs(0.9375), succ[0].clone())
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
            target: all[0].clone(),
            suspected: None,
        }],
    );
    x.handle_datagram(secs(0.5), &ping).unwrap();
    x.note_traffic(secs(0.6), &pred);
    drain(&mut x);
    let sent = pings(&sends_until(&mut x, secs(1.5)));
    assert_eq!(
        sent,
        vec![(secs(1.35), pred.clone()), (secs(1.4375), succ.clone())]
    );
}

#[test]
fn a_silent_member_is_convicted_suspicion_min_after_its_first_unanswered_ping() {
    let all = ids(6);
    let mut x = node(&all[0], &all, ring_config(3));
    let victim = x.monitored()[0].clone();
    // 0.75 s: the ping; 1.0 s: once more; 1.25 s: indirect probes, whose
    // relays nack (the victim, not this node, is the problem).
    let sent = sends_until(&mut x, secs(1.3));
    let Some(Message::PingReq { seq, .. }) = sent
        .iter()
        .map(|(_, t)| decode(t).messages[0].clone())
        .find(|m| matches!(m, Message::PingReq { .. }))
    else {
        panic!("no indirect probe: {:?}", pings(&sent));
    };
    let to_victim: Vec<Time> = pings(&sent)
        .into_iter()
        .filter(|(_, to)| *to == victim)
        .map(|(t, _)| t)
        .collect();
    assert_eq!(to_victim, vec![secs(0.75), secs(1.0)]);
    let relays: Vec<NodeId> = sent
        .iter()
        .filter(|(_, t)| matches!(decode(t).messages[0], Message::PingReq { .. }))
        .map(|(_, t)| t.to.clone())
        .collect();
    for r in &relays {
        x.handle_datagram(secs(1.6), &from(r, vec![Message::Nack { seq }]))
            .unwrap();
    }
    // The probe fails at 1.75 s; a second healthy watcher accuses too.
    sends_until(&mut x, secs(1.8));
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
    x.handle_datagram(secs(1.9), &confirm).unwrap();
    sends_until(&mut x, secs(3.2499));
    let dead = |e: &Event<NodeId>| matches!(e, Event::Dead { member, .. } if *member == victim);
    assert!(!drain_events(&mut x).iter().any(dead), "not before 3.25 s");
    sends_until(&mut x, secs(3.25));
    assert!(
        drain_events(&mut x).iter().any(dead),
        "2.5 s after the first unanswered ping (0.75 s), not after the probe's end (1.75 s)"
    );
}
