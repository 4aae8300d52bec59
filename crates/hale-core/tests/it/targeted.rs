//! Targeted suspicions: who hears an accusation and its refutation.

use std::time::Duration;

use hale_core::wire::Message;
use hale_core::{Channel, Config, Node, NodeId, Time, Transmit};

use crate::support::*;

/// Monitors on (one neighbour each side), the walk out of the way, and
/// suspicions targeted (the default).
/// Neighbours are pinged by turn (as in a cluster written version 2).
fn ring_config(seed: u64) -> Config {
    Config {
        monitors: 1,
        ring_heartbeats: false,
        walk_interval: Duration::from_secs(3600),
        ..config(seed)
    }
}

/// Every (time, recipient) of a datagram carrying a message that `pick` selects.
fn carrying(
    sent: &[(Time, Transmit<NodeId>)],
    pick: impl Fn(&Message<NodeId>) -> bool,
) -> Vec<(Time, NodeId)> {
    sent.iter()
        .filter(|(_, x)| x.channel == Channel::Datagram && decode(x).messages.iter().any(&pick))
        .map(|(t, x)| (*t, x.to.clone()))
        .collect()
}

fn suspicion_of(victim: &NodeId) -> impl Fn(&Message<NodeId>) -> bool + '_ {
    move |m| matches!(m, Message::Suspect { member, .. } if member == victim)
}

/// A 12-member cluster seen from `all[0]`, whose ring predecessor (`victim`)
/// never answers: its probe of the victim (pinged at 0.75 s and 1.0 s, then
/// three relays that all nack) fails at 1.75 s. Returns the node, the
/// victim, the victim's other ring neighbours (its predecessor, the one
/// before, and this node's successor), and what the node sent until `until`.
#[allow(clippy::type_complexity)] // One test fixture's tuple, named at each use.
fn failed_probe_of_predecessor(
    until: f64,
) -> (
    Node<NodeId>,
    NodeId,
    Vec<NodeId>,
    Vec<(Time, Transmit<NodeId>)>,
) {
    let all = ids(12);
    let mut x = node(&all[0], &all, ring_config(5));
    let victim = x.monitored()[0].clone();
    // The victim's own view of the ring, two deep: its predecessor is its
    // other watcher; the next ones watch it when one of those is suspected.
    let two_deep = node(
        &victim,
        &all,
        Config {
            monitors: 2,
            ..ring_config(5)
        },
    );
    assert_eq!(two_deep.watchers()[0], all[0]);
    let mut others: Vec<NodeId> = two_deep.monitored().to_vec();
    others.push(two_deep.watchers()[1].clone());
    let mut sent = sends_until(&mut x, secs(1.3));
    for (_, t) in &sent {
        if let Message::PingReq { seq, .. } = decode(t).messages[0] {
            let nack = packet_from(&t.to, 0, vec![Message::Nack { seq }]);
            x.handle_datagram(secs(1.6), &nack).unwrap();
        }
    }
    sent.extend(sends_until(&mut x, secs(until)));
    (x, victim, others, sent)
}

#[test]
fn a_failed_probe_sends_the_suspicion_to_its_ring_neighbours_three_times_to_the_suspect_for_twice_suspicion_min_and_to_nobody_else(
) {
    let (_, victim, others, sent) = failed_probe_of_predecessor(8.0);
    let mut got = carrying(&sent, suspicion_of(&victim));
    got.sort();
    let mut want = Vec::new();
    for t in [1.75, 1.95, 2.15] {
        for o in &others {
            want.push((secs(t), o.clone()));
        }
    }
    // Every gossip interval from 1.75 s, while younger than 2 x 2.5 s.
    for k in 0..25 {
        want.push((secs(1.75 + 0.2 * f64::from(k)), victim.clone()));
    }
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn a_refutation_stops_the_resends_of_the_accusation() {
    let (mut x, victim, _, _) = failed_probe_of_predecessor(1.8);
    let alive = packet_from(
        &victim,
        1,
        vec![Message::Alive {
            member: victim.clone(),
            incarnation: 1,
            meta: Box::default(),
        }],
    );
    x.handle_datagram(secs(1.8), &alive).unwrap();
    let later = sends_until(&mut x, secs(3.0));
    assert_eq!(carrying(&later, suspicion_of(&victim)), vec![]);
    // Nor is the refutation gossiped on: only those who heard the suspicion need it.
    let alive_of_victim =
        |m: &Message<NodeId>| matches!(m, Message::Alive { member, .. } if *member == victim);
    assert_eq!(carrying(&later, alive_of_victim), vec![]);
}

#[test]
fn a_suspected_member_refutes_to_its_accuser_and_its_ring_neighbours_two_deep_only() {
    let all = ids(12);
    let mut v = node(&all[0], &all, ring_config(6));
    let accuser = all[7].clone();
    let suspect = packet_from(
        &accuser,
        0,
        vec![Message::Suspect {
            member: all[0].clone(),
            incarnation: 0,
            accuser: accuser.clone(),
            accuser_health: 0,
        }],
    );
    v.handle_datagram(secs(0.1), &suspect).unwrap();
    assert_eq!(v.incarnation(), 1);
    let mut sent: Vec<(Time, Transmit<NodeId>)> =
        drain(&mut v).into_iter().map(|x| (secs(0.1), x)).collect();
    sent.extend(sends_until(&mut v, secs(0.6)));
    let refutes = |m: &Message<NodeId>| matches!(m, Message::Alive { incarnation: 1, member, .. } if *member == all[0]);
    let mut got = carrying(&sent, refutes);
    got.sort();
    // Its ring neighbours two deep on each side: where accusations of it go.
    let two_deep = node(
        &all[0],
        &all,
        Config {
            monitors: 2,
            ..ring_config(6)
        },
    );
    let mut to = vec![accuser.clone()];
    for n in two_deep.monitored().iter().chain(two_deep.watchers()) {
        if !to.contains(n) {
            to.push(n.clone());
        }
    }
    let mut want = Vec::new();
    for t in [0.1, 0.3, 0.5] {
        for r in &to {
            want.push((secs(t), r.clone()));
        }
    }
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn an_accusation_older_than_the_refutation_is_answered_with_it() {
    let all = ids(12);
    let mut v = node(&all[0], &all, ring_config(7));
    let late = all[9].clone();
    let old = |accuser: &NodeId| {
        packet_from(
            accuser,
            0,
            vec![Message::Suspect {
                member: all[0].clone(),
                incarnation: 0,
                accuser: accuser.clone(),
                accuser_health: 0,
            }],
        )
    };
    v.handle_datagram(secs(0.1), &old(&all[7])).unwrap();
    drain(&mut v);
    v.handle_datagram(secs(0.15), &old(&late)).unwrap();
    let answers: Vec<NodeId> = drain(&mut v)
        .iter()
        .filter(|t| {
            decode(t).messages.iter().any(
                |m| matches!(m, Message::Alive { incarnation: 1, member, .. } if *member == all[0]),
            )
        })
        .map(|t| t.to.clone())
        .collect();
    assert_eq!(answers, vec![late]);
}

#[test]
fn another_members_accusation_is_not_gossiped_on_but_a_further_accuser_hears_of_ours_once() {
    let (mut x, victim, others, _) = failed_probe_of_predecessor(1.8);
    let third = ids(12)[1..]
        .iter()
        .find(|m| **m != victim && !others.contains(m))
        .unwrap()
        .clone();
    let theirs = packet_from(
        &third,
        0,
        vec![Message::Suspect {
            member: victim.clone(),
            incarnation: 0,
            accuser: third.clone(),
            accuser_health: 0,
        }],
    );
    x.handle_datagram(secs(1.8), &theirs).unwrap();
    let now: Vec<(Time, Transmit<NodeId>)> =
        drain(&mut x).into_iter().map(|t| (secs(1.8), t)).collect();
    let accused_by = |who: NodeId| move |m: &Message<NodeId>| matches!(m, Message::Suspect { accuser, .. } if *accuser == who);
    assert_eq!(carrying(&now, accused_by(third.clone())), vec![]);
    assert_eq!(
        carrying(&now, accused_by(ids(12)[0].clone())),
        vec![(secs(1.8), third.clone())]
    );
    // Its second copy is already counted: no second answer.
    x.handle_datagram(secs(2.0), &theirs).unwrap();
    let again: Vec<(Time, Transmit<NodeId>)> =
        drain(&mut x).into_iter().map(|t| (secs(2.0), t)).collect();
    assert_eq!(carrying(&again, accused_by(ids(12)[0].clone())), vec![]);
}

#[test]
fn with_targeting_off_a_suspicion_is_gossiped_to_the_cluster() {
    let all = ids(12);
    let cfg = Config {
        targeted_suspicions: false,
        ..ring_config(8)
    };
    let mut x = node(&all[0], &all, cfg);
    let victim = all[3].clone();
    let theirs = packet_from(
        &all[7],
        0,
        vec![Message::Suspect {
            member: victim.clone(),
            incarnation: 0,
            accuser: all[7].clone(),
            accuser_health: 0,
        }],
    );
    x.handle_datagram(secs(0.1), &theirs).unwrap();
    let mut sent: Vec<(Time, Transmit<NodeId>)> =
        drain(&mut x).into_iter().map(|t| (secs(0.1), t)).collect();
    sent.extend(sends_until(&mut x, secs(1.0)));
    let got = carrying(&sent, suspicion_of(&victim));
    assert!(got.len() >= 3, "re-gossiped in gossip rounds: {got:?}");
}

#[test]
fn a_declarer_sends_its_verdict_at_once_to_every_live_member_of_a_small_cluster() {
    let (mut x, victim, others, _) = failed_probe_of_predecessor(1.8);
    let second = packet_from(
        &others[0],
        0,
        vec![Message::Suspect {
            member: victim.clone(),
            incarnation: 0,
            accuser: others[0].clone(),
            accuser_health: 0,
        }],
    );
    x.handle_datagram(secs(1.8), &second).unwrap();
    drain(&mut x);
    let sent = sends_until(&mut x, secs(6.0));
    let dead = |m: &Message<NodeId>| matches!(m, Message::Dead { member, .. } if *member == victim);
    let verdicts = carrying(&sent, dead);
    let first = verdicts.first().expect("a verdict").0;
    let mut at_once: Vec<NodeId> = verdicts
        .iter()
        .filter(|(t, _)| *t == first)
        .map(|(_, to)| to.clone())
        .collect();
    at_once.sort();
    at_once.dedup();
    let mut live: Vec<NodeId> = ids(12)[1..]
        .iter()
        .filter(|m| **m != victim)
        .cloned()
        .collect();
    live.sort();
    assert_eq!(at_once, live);
}

#[test]
fn a_refutation_right_after_a_metadata_change_lets_the_change_still_reach_the_others() {
    let all = ids(12);
    let mut v = node(&all[0], &all, ring_config(10));
    v.set_metadata(secs(0.05), b"v2".to_vec()).unwrap();
    assert_eq!(v.incarnation(), 1);
    let accuser = all[7].clone();
    let suspect = packet_from(
        &accuser,
        0,
        vec![Message::Suspect {
            member: all[0].clone(),
            incarnation: 1,
            accuser: accuser.clone(),
            accuser_health: 0,
        }],
    );
    v.handle_datagram(secs(0.06), &suspect).unwrap();
    assert_eq!(v.incarnation(), 2);
    let mut sent: Vec<(Time, Transmit<NodeId>)> =
        drain(&mut v).into_iter().map(|x| (secs(0.06), x)).collect();
    sent.extend(sends_until(&mut v, secs(3.0)));
    let change = |m: &Message<NodeId>| matches!(m, Message::Alive { member, incarnation: 1, meta } if *member == all[0] && **meta == *b"v2");
    // The refutation's targets: the accuser and the ring neighbours two deep.
    let two_deep = node(
        &all[0],
        &all,
        Config {
            monitors: 2,
            ..ring_config(10)
        },
    );
    let mut targets = vec![accuser.clone()];
    targets.extend(two_deep.monitored().iter().cloned());
    targets.extend(two_deep.watchers().iter().cloned());
    let others: Vec<NodeId> = carrying(&sent, change)
        .into_iter()
        .map(|(_, to)| to)
        .filter(|to| !targets.contains(to))
        .collect();
    assert!(
        !others.is_empty(),
        "the change went only to the refutation's targets"
    );
}
