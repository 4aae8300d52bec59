//! Replay protection: packets carry their sender's generation and send time.

use std::time::Duration;

use hale_core::wire::{cluster_id, Header, Message, Packet};
use hale_core::{Config, DropReason, Node, NodeId, ReceiveError, Time};

use crate::support::{config, drain_events, ids, node, run_timers, secs};

/// A node with replay protection on (the default window of its profile).
fn guarded(me: &NodeId, all: &[NodeId]) -> Node<NodeId> {
    let cfg = Config {
        replay_window: Config::default().replay_window,
        // No probes of its own during the test: only what it receives counts.
        probe_interval: Duration::from_secs(3600),
        ..config(1)
    };
    node(me, all, cfg)
}

fn packet(from: &NodeId, generation: u64, sent: Time) -> Vec<u8> {
    packet_with(from, generation, sent, vec![Message::Ack { seq: 4242 }])
}

fn packet_with(
    from: &NodeId,
    generation: u64,
    sent: Time,
    messages: Vec<Message<NodeId>>,
) -> Vec<u8> {
    Packet {
        header: Header {
            version: 2,
            speaks: None,
            cluster: cluster_id("hale"),
            sender: from.clone(),
            incarnation: 0,
            health: 0,
            generation,
            sent_ms: sent.as_nanos() / 1_000_000,
        },
        messages,
    }
    .encode()
}

/// Delivers `bytes` at `at`, running the node's timers up to then first (a
/// node left without its timers would take the gap for a pause).
fn deliver(n: &mut Node<NodeId>, at: Time, bytes: &[u8]) -> Result<(), ReceiveError> {
    run_timers(n, at);
    n.handle_datagram(at, bytes)
}

fn last_heard(n: &Node<NodeId>, id: &NodeId) -> Time {
    n.member(id).unwrap().last_heard()
}

#[test]
fn a_replayed_packet_is_proof_of_life_for_a_probe_timeout_news_until_the_window_then_dropped() {
    let all = ids(2);
    let a = &mut guarded(&all[0], &all);
    // The sender's clock reads 100 s when ours reads 1 s: only differences count.
    let captured = packet(&all[1], 9, secs(100.0));
    deliver(a, secs(1.0), &captured).unwrap();
    assert_eq!(last_heard(a, &all[1]), secs(1.0));
    deliver(a, secs(1.4), &captured).unwrap();
    assert_eq!(
        last_heard(a, &all[1]),
        secs(1.4),
        "0.4 s late is still current"
    );
    deliver(a, secs(2.5), &captured).unwrap();
    assert_eq!(
        last_heard(a, &all[1]),
        secs(1.4),
        "1.5 s late: news, not proof of life"
    );
    assert_eq!(
        deliver(a, secs(4.0), &captured),
        Err(ReceiveError::Replay(DropReason::Stale))
    );
    assert_eq!(a.stats().dropped(DropReason::Stale), 1);
    assert_eq!(last_heard(a, &all[1]), secs(1.4));
    // A genuine packet sent now is current again.
    deliver(a, secs(5.0), &packet(&all[1], 9, secs(104.0))).unwrap();
    assert_eq!(last_heard(a, &all[1]), secs(5.0));
    assert_eq!(a.stats().pauses, 0);
    assert!(drain_events(a).is_empty());
}

#[test]
fn a_restarted_member_is_heard_and_its_previous_run_is_a_replay_from_then_on() {
    let all = ids(2);
    let a = &mut guarded(&all[0], &all);
    let old = packet(&all[1], 9, secs(50.0));
    deliver(a, secs(1.0), &old).unwrap();
    // It restarts: a newer generation, its clock back near zero.
    deliver(a, secs(3.0), &packet(&all[1], 10, secs(0.1))).unwrap();
    assert_eq!(last_heard(a, &all[1]), secs(3.0));
    assert_eq!(
        deliver(a, secs(3.1), &old),
        Err(ReceiveError::Replay(DropReason::Replayed))
    );
    assert_eq!(a.stats().dropped(DropReason::Replayed), 1);
    assert_eq!(last_heard(a, &all[1]), secs(3.0));
}

#[test]
fn packets_that_queued_while_this_node_was_paused_are_not_taken_for_replays() {
    let all = ids(3);
    let a = &mut guarded(&all[0], &all);
    a.handle_datagram(secs(1.0), &packet(&all[1], 9, secs(1.0)))
        .unwrap();
    a.handle_datagram(secs(1.0), &packet(&all[2], 5, secs(1.0)))
        .unwrap();
    // Its next timer was due within a second; it runs again 4 s later (a
    // SIGSTOP), finding packets sent just after it stopped, now 3.9 s late.
    let due = a.poll_timeout().unwrap();
    assert!(due < secs(2.0), "next timer {due:?}");
    let resumed = secs(5.2);
    a.handle_datagram(resumed, &packet(&all[1], 9, secs(1.3)))
        .unwrap();
    a.handle_datagram(resumed, &packet(&all[2], 5, secs(1.3)))
        .unwrap();
    assert_eq!(a.stats().pauses, 1);
    assert_eq!(last_heard(a, &all[2]), resumed);
    // Once the queue is drained, replays are judged as before.
    assert_eq!(
        deliver(a, secs(9.0), &packet(&all[1], 9, secs(1.3))),
        Err(ReceiveError::Replay(DropReason::Stale))
    );
}

#[test]
fn with_the_window_at_zero_nothing_is_checked() {
    let all = ids(2);
    let a = &mut node(&all[0], &all, config(1));
    let captured = packet(&all[1], 9, secs(0.0));
    a.handle_datagram(secs(0.0), &captured).unwrap();
    a.handle_datagram(secs(600.0), &captured).unwrap();
    a.handle_datagram(secs(601.0), &packet(&all[1], 3, secs(0.0)))
        .unwrap();
    assert_eq!(last_heard(a, &all[1]), secs(601.0));
}

/// What `n` sent since the last drain, decoded, with its channel.
fn sent(n: &mut Node<NodeId>) -> Vec<(NodeId, hale_core::wire::Channel, Vec<Message<NodeId>>)> {
    crate::support::drain(n)
        .iter()
        .map(|t| (t.to.clone(), t.channel, crate::support::decode(t).messages))
        .collect()
}

#[test]
fn a_member_restarted_behind_its_last_generation_is_told_raises_it_and_is_heard_at_once() {
    let all = ids(2);
    let a = &mut guarded(&all[0], &all);
    // The previous run of member 1 started with its wall clock at 9.
    deliver(a, secs(1.0), &packet(&all[1], 9, secs(50.0))).unwrap();
    sent(a);
    // It restarts with its clock set back: generation 5.
    let cfg = Config {
        generation: 5,
        replay_window: Config::default().replay_window,
        probe_interval: Duration::from_secs(3600),
        ..config(2)
    };
    let b = &mut crate::support::node(&all[1], &all, cfg);
    run_timers(b, secs(3.0));
    drain_events(b);
    sent(b);
    assert_eq!(b.generation(), 5);
    // Its packets are dropped as replays, and it is told which generation
    // was heard from it: once, however many of its packets arrive.
    assert_eq!(
        deliver(a, secs(3.0), &packet(&all[1], 5, secs(0.1))),
        Err(ReceiveError::Replay(DropReason::Replayed))
    );
    assert_eq!(
        deliver(a, secs(3.1), &packet(&all[1], 5, secs(0.2))),
        Err(ReceiveError::Replay(DropReason::Replayed))
    );
    let notices: Vec<_> = sent(a)
        .into_iter()
        .filter(|(_, _, m)| m.iter().any(|m| matches!(m, Message::Superseded { .. })))
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    let (to, channel, msgs) = &notices[0];
    assert_eq!(to, &all[1]);
    assert_eq!(*channel, hale_core::wire::Channel::Datagram);
    assert_eq!(msgs[0], Message::Superseded { known: 9 });
    // A quarter second later a further replay is told again.
    deliver(a, secs(3.3), &packet(&all[1], 5, secs(0.4))).unwrap_err();
    assert_eq!(
        sent(a)
            .iter()
            .filter(|(_, _, m)| m.contains(&Message::Superseded { known: 9 }))
            .count(),
        1
    );
    // The restarted member takes the notice: generation 10, an event, and
    // a full sync with the peer that told it.
    let notice = packet_with(
        &all[0],
        1,
        secs(3.0),
        vec![Message::Superseded { known: 9 }],
    );
    b.handle_datagram(secs(3.0), &notice).unwrap();
    assert_eq!(b.generation(), 10);
    assert_eq!(b.stats().generations_raised, 1);
    assert_eq!(
        drain_events(b),
        vec![hale_core::Event::GenerationRaised {
            previous: 5,
            generation: 10,
            by: all[0].clone(),
        }]
    );
    let syncs: Vec<_> = sent(b)
        .into_iter()
        .filter(|(_, _, m)| matches!(m[0], Message::PushPull { join: true, .. }))
        .collect();
    assert_eq!(syncs.len(), 1);
    assert_eq!(syncs[0].0, all[0]);
    assert_eq!(syncs[0].1, hale_core::wire::Channel::Stream);
    // Its packets now carry generation 10: current at once.
    deliver(a, secs(3.4), &packet(&all[1], 10, secs(0.5))).unwrap();
    assert_eq!(last_heard(a, &all[1]), secs(3.4));
}

#[test]
fn a_notice_naming_an_older_generation_changes_nothing() {
    let all = ids(2);
    let cfg = Config {
        generation: 20,
        ..config(2)
    };
    let b = &mut crate::support::node(&all[1], &all, cfg);
    drain_events(b);
    sent(b);
    // A replay of a notice sent to an earlier run.
    let old = packet_with(
        &all[0],
        1,
        secs(0.0),
        vec![Message::Superseded { known: 19 }],
    );
    b.handle_datagram(secs(1.0), &old).unwrap();
    assert_eq!(b.generation(), 20);
    assert!(drain_events(b).is_empty());
    assert!(sent(b).is_empty());
}

#[test]
fn a_sender_whose_clock_runs_five_percent_slow_stays_current() {
    let all = ids(2);
    let a = &mut guarded(&all[0], &all);
    // Its clock advances 0.95 s per second of ours, for ten minutes.
    for s in 1..=600u64 {
        let sent_at = Time::from_millis(s * 950);
        deliver(a, secs(s as f64), &packet(&all[1], 9, sent_at)).unwrap();
        assert_eq!(last_heard(a, &all[1]), secs(s as f64), "at {s} s");
    }
}

#[test]
fn a_member_whose_clock_stepped_back_while_it_ran_is_told_and_heard_again_in_a_new_generation() {
    let all = ids(2);
    let a = &mut guarded(&all[0], &all);
    // Member 1 runs generation 9; its clock reads 5,000 s when ours reads 1 s.
    deliver(a, secs(1.0), &packet(&all[1], 9, secs(5000.0))).unwrap();
    sent(a);
    // Its wall clock is stepped back an hour (NTP), same run: every packet
    // now looks an hour late, stale, and the reference would take ten
    // hours to creep down to it.
    let stepped = |now: f64| secs(5000.0 + now - 1.0 - 3600.0);
    assert_eq!(
        deliver(a, secs(2.0), &packet(&all[1], 9, stepped(2.0))),
        Err(ReceiveError::Replay(DropReason::Stale))
    );
    // It is told which generation was heard from it, as a replay would be.
    let notices: Vec<_> = sent(a)
        .into_iter()
        .filter(|(_, _, m)| m.iter().any(|m| matches!(m, Message::Superseded { .. })))
        .collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert_eq!(notices[0].0, all[1]);
    assert_eq!(notices[0].2[0], Message::Superseded { known: 9 });
    // The member takes it (its own generation is 9): generation 10, whose
    // first packet sets a new reference, current at once.
    let cfg = Config {
        generation: 9,
        ..config(2)
    };
    let b = &mut crate::support::node(&all[1], &all, cfg);
    drain_events(b);
    sent(b);
    let notice = packet_with(
        &all[0],
        1,
        secs(2.0),
        vec![Message::Superseded { known: 9 }],
    );
    b.handle_datagram(secs(2.0), &notice).unwrap();
    assert_eq!(b.generation(), 10);
    deliver(a, secs(2.5), &packet(&all[1], 10, stepped(2.5))).unwrap();
    assert_eq!(last_heard(a, &all[1]), secs(2.5));
}

/// A prober with replay protection on: members `all`, probing by round robin.
fn prober(all: &[NodeId]) -> Node<NodeId> {
    let cfg = Config {
        replay_window: Config::default().replay_window,
        ..config(5)
    };
    node(&all[0], all, cfg)
}

/// Runs `n`'s timers until it starts its first probe: the time, the
/// member probed and the probe's number.
fn first_probe(n: &mut Node<NodeId>) -> (Time, NodeId, u32) {
    loop {
        let t = n.poll_timeout().unwrap();
        assert!(t < secs(60.0), "no probe within a minute");
        n.handle_timeout(t);
        for (to, _, msgs) in sent(n) {
            for m in msgs {
                if let Message::Ping { seq, .. } = m {
                    return (t, to, seq);
                }
            }
        }
    }
}

/// Whether `n` asked relays to probe `target` by `until` (its direct
/// probe was not answered).
fn asks_relays(n: &mut Node<NodeId>, target: &NodeId, until: Time) -> bool {
    run_timers(n, until).iter().any(|t| {
        crate::support::decode(t)
            .messages
            .iter()
            .any(|m| matches!(m, Message::PingReq { target: tg, .. } if tg == target))
    })
}

#[test]
fn a_member_whose_clock_stepped_back_a_second_still_answers_probes() {
    // An NTP step back of a second makes every packet of the member late
    // by that much until the reference creeps to it (10 s): news, not proof
    // of life. Its acks still answer our probes (their numbers are ours,
    // fresh to this probe): ignored, it would be suspected by everyone for
    // those 10 s. A replay of an ack it sent another member is answered by
    // the sender check and the random first number instead
    // (`an_ack_with_the_probes_number_closes_it_only...`).
    let all = ids(4);
    let a = &mut prober(&all);
    let (t, target, seq) = first_probe(a);
    let target = &target;
    // Its clock reads 100 s as the ping goes out; heard then, current.
    deliver(a, t, &packet_with(target, 9, secs(100.0), vec![])).unwrap();
    // Then stepped back: its answer says 98.5 s.
    let ack = packet_with(target, 9, secs(100.0 - 1.5), vec![Message::Ack { seq }]);
    a.handle_datagram(t + Duration::from_millis(10), &ack)
        .unwrap();
    assert_eq!(a.stats().acks, 1);
    assert!(!asks_relays(a, target, t + Duration::from_millis(600)));
}

#[test]
fn an_ack_with_the_probes_number_closes_it_only_from_the_target_or_a_relay_asked() {
    let all = ids(6);
    let a = &mut node(&all[0], &all, config(5));
    let (t, target, seq) = first_probe(a);
    let target = &target;
    let ack = |from: &NodeId| packet_with(from, 0, Time::ZERO, vec![Message::Ack { seq }]);
    let nack = |from: &NodeId| packet_with(from, 0, Time::ZERO, vec![Message::Nack { seq }]);
    // Another member's ack with this number (a replay of one the target
    // sent it, resent here): ignored.
    let other = all.iter().find(|i| *i != target && **i != all[0]).unwrap();
    a.handle_datagram(t + Duration::from_millis(10), &ack(other))
        .unwrap();
    assert_eq!((a.stats().acks, a.stats().acks_ignored), (0, 1));
    // Unanswered, it asks relays; a nack or an ack from a member not asked
    // counts for nothing, a relay's ack closes it.
    let out = run_timers(a, t + Duration::from_millis(600));
    let relays: Vec<NodeId> = out
        .iter()
        .filter(|x| {
            crate::support::decode(x)
                .messages
                .iter()
                .any(|m| matches!(m, Message::PingReq { .. }))
        })
        .map(|x| x.to.clone())
        .collect();
    assert_eq!(relays.len(), 3, "{out:?}");
    let stranger = all
        .iter()
        .find(|i| !relays.contains(i) && *i != target && **i != all[0])
        .unwrap();
    a.handle_datagram(t + Duration::from_millis(610), &nack(stranger))
        .unwrap();
    a.handle_datagram(t + Duration::from_millis(615), &ack(stranger))
        .unwrap();
    assert_eq!((a.stats().nacks, a.stats().acks), (0, 0));
    a.handle_datagram(t + Duration::from_millis(620), &nack(&relays[0]))
        .unwrap();
    assert_eq!(a.stats().nacks, 1);
    a.handle_datagram(t + Duration::from_millis(630), &ack(&relays[1]))
        .unwrap();
    assert_eq!(a.stats().acks, 1);
    assert_eq!(a.stats().probe_failures, 0);
}

#[test]
fn a_relay_forwards_only_the_ack_of_the_member_it_pinged() {
    let all = ids(3);
    let r = &mut node(
        &all[1],
        &all,
        Config {
            probe_interval: Duration::from_secs(3600),
            probe_timeout: Duration::from_secs(1800),
            ..config(6)
        },
    );
    let req = packet_with(
        &all[0],
        0,
        Time::ZERO,
        vec![Message::PingReq {
            seq: 77,
            target: all[2].clone(),
            suspected: None,
        }],
    );
    r.handle_datagram(secs(1.0), &req).unwrap();
    let seq = sent(r)
        .into_iter()
        .flat_map(|(to, _, m)| m.into_iter().map(move |m| (to.clone(), m)))
        .find_map(|(to, m)| match m {
            Message::Ping { seq, .. } if to == all[2] => Some(seq),
            _ => None,
        })
        .expect("the relay pings the target");
    let ack = |from: &NodeId| packet_with(from, 0, Time::ZERO, vec![Message::Ack { seq }]);
    r.handle_datagram(secs(1.01), &ack(&all[0])).unwrap();
    assert!(
        sent(r).is_empty(),
        "an ack from the origin is not forwarded"
    );
    r.handle_datagram(secs(1.02), &ack(&all[2])).unwrap();
    let fwd = sent(r);
    assert_eq!(fwd.len(), 1);
    assert_eq!(fwd[0].0, all[0]);
    assert_eq!(fwd[0].2, vec![Message::Ack { seq: 77 }]);
}
