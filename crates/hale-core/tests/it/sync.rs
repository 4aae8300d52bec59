//! The periodic sync: a summary of the view first (wire version 3 on),
//! digests where views differ, and whole records only where a side knows
//! better.

use hale_core::wire::{MemberRecord, Message, WireState, VERSION};
use hale_core::{Channel, Node, NodeId, Time, Transmit};

use crate::support::*;

/// Runs `n`'s timers until it sends its periodic sync's first step: the
/// view's hash in a datagram (version 3 on), or its digest (version 2).
fn until_sync(n: &mut Node<NodeId>) -> (Time, Transmit<NodeId>) {
    loop {
        let t = n.poll_timeout().unwrap();
        n.handle_timeout(t);
        if let Some(x) = drain(n)
            .into_iter()
            .find(|x| summary(x).is_some() || !push_pulls(x).is_empty())
        {
            return (t, x);
        }
    }
}

/// The view hash `x` carries, if it is a summary.
fn summary(x: &Transmit<NodeId>) -> Option<u64> {
    decode(x).messages.into_iter().find_map(|m| match m {
        Message::Summary { hash } => Some(hash),
        _ => None,
    })
}

/// What `n` sends that holds a push/pull.
fn syncs_of(n: &mut Node<NodeId>) -> Vec<Transmit<NodeId>> {
    drain(n)
        .into_iter()
        .filter(|x| !push_pulls(x).is_empty())
        .collect()
}

/// `all` known alive with metadata, at incarnation 0 except `newer`,
/// writing the newest wire version.
fn node_with_meta(
    me: &NodeId,
    all: &[NodeId],
    seed: u64,
    newer: Option<(&NodeId, u32)>,
) -> Node<NodeId> {
    // No probing (its pings would go unanswered here and suspicions change
    // what each side knows better).
    let cfg = hale_core::Config {
        walk_interval: std::time::Duration::from_secs(3600),
        ..config(seed)
    };
    let mut n = Node::new(me.clone(), cfg, Time::ZERO).unwrap();
    n.set_wire_version(VERSION);
    n.restore(
        Time::ZERO,
        all.iter().filter(|i| *i != me).map(|i| {
            let inc = newer.filter(|(id, _)| *id == i).map_or(0, |(_, inc)| inc);
            MemberRecord {
                id: i.clone(),
                incarnation: inc,
                state: WireState::Alive,
                meta: format!("metadata of {i:?}, inc {inc}").into_bytes().into(),
            }
        }),
    );
    n
}

fn push_pulls(x: &Transmit<NodeId>) -> Vec<(bool, bool, Vec<MemberRecord<NodeId>>)> {
    decode(x)
        .messages
        .into_iter()
        .filter_map(|m| match m {
            Message::PushPull {
                reply,
                digest,
                members,
                ..
            } => Some((reply, digest, members)),
            _ => None,
        })
        .collect()
}

#[test]
fn members_in_agreement_exchange_one_summary_datagram_and_nothing_else() {
    let all = ids(6);
    let mut a = node_with_meta(&all[0], &all, 1, None);
    let (t, sync) = until_sync(&mut a);
    assert_eq!(sync.channel, Channel::Datagram);
    assert!(
        push_pulls(&sync).is_empty(),
        "no digest until the views differ"
    );
    let mut b = node_with_meta(&sync.to, &all, 2, None);
    assert_eq!(
        summary(&sync),
        Some(b.view_hash()),
        "the same view, the same hash"
    );
    deliver(&mut b, &sync, t);
    assert!(drain(&mut b).is_empty(), "nothing to answer");
}

#[test]
fn views_that_differ_sync_by_digest_and_a_member_known_better_is_sent_whole() {
    let all = ids(6);
    let mut a = node_with_meta(&all[0], &all, 1, None);
    let (t, sync) = until_sync(&mut a);
    // b knows a third member at a newer incarnation, with newer metadata.
    let newer = all[1..].iter().find(|i| **i != sync.to).unwrap().clone();
    let mut b = node_with_meta(&sync.to, &all, 2, Some((&newer, 4)));
    assert_ne!(summary(&sync), Some(b.view_hash()));
    deliver(&mut b, &sync, t);
    // b starts a digest sync with a.
    let started = syncs_of(&mut b);
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].channel, Channel::Stream);
    let sent = push_pulls(&started[0]);
    assert_eq!(sent.len(), 1);
    let (reply, digest, members) = &sent[0];
    assert!(*reply && *digest);
    assert_eq!(members.len(), 6, "this node and the five others");
    assert!(members.iter().all(|m| m.meta.is_empty()));
    // a knows nothing better: only its digest back.
    deliver(&mut a, &started[0], t);
    let back = syncs_of(&mut a);
    assert_eq!(back.len(), 1);
    let parts = push_pulls(&back[0]);
    assert_eq!(parts.len(), 1, "only a's digest: nothing to teach");
    assert!(!parts[0].0 && parts[0].1);
    // b sends the record a knows worse, whole, with its metadata.
    deliver(&mut b, &back[0], t);
    let answer = syncs_of(&mut b);
    assert_eq!(answer.len(), 1);
    let parts = push_pulls(&answer[0]);
    assert_eq!(parts.len(), 1, "the better record, no further digest");
    let (reply, digest, members) = &parts[0];
    assert!(!reply && !digest);
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].id, newer);
    assert_eq!(members[0].incarnation, 4);
    assert!(!members[0].meta.is_empty());
    deliver(&mut a, &answer[0], t);
    let m = a.member(&newer).unwrap();
    assert_eq!(m.incarnation(), 4);
    assert_eq!(m.meta(), &*members[0].meta);
    assert!(syncs_of(&mut a).is_empty());
    assert_eq!(a.view_hash(), b.view_hash(), "in agreement now");
}

#[test]
fn a_view_hash_is_the_same_for_the_same_view_and_changes_with_any_incarnation_or_state() {
    let all = ids(4);
    let a = node_with_meta(&all[0], &all, 1, None);
    let same = node_with_meta(&all[0], &all, 9, None);
    assert_eq!(a.view_hash(), same.view_hash(), "whatever the seed");
    let newer = node_with_meta(&all[0], &all, 1, Some((&all[2], 1)));
    assert_ne!(a.view_hash(), newer.view_hash());
    let mut other_meta = node_with_meta(&all[0], &all, 1, None);
    other_meta
        .set_metadata(Time::ZERO, b"other".to_vec())
        .unwrap();
    assert_ne!(
        a.view_hash(),
        other_meta.view_hash(),
        "new metadata raises the incarnation"
    );
    let mut dead = node_with_meta(&all[0], &all, 1, None);
    dead.restore(
        Time::ZERO,
        [MemberRecord {
            id: all[3].clone(),
            incarnation: 0,
            state: WireState::Dead,
            meta: Box::default(),
        }],
    );
    assert_ne!(a.view_hash(), dead.view_hash());
}

#[test]
fn a_member_written_to_in_version_2_gets_the_digest_at_once_and_agreement_costs_two_digests() {
    let all = ids(6);
    let mut a = node_with_meta(&all[0], &all, 1, None);
    a.set_wire_version(2);
    let (t, sync) = until_sync(&mut a);
    assert_eq!(decode(&sync).header.version, 2);
    assert_eq!(sync.channel, Channel::Stream);
    let mut b = node_with_meta(&sync.to, &all, 2, None);
    b.set_wire_version(2);
    let sent = push_pulls(&sync);
    assert_eq!(sent.len(), 1);
    let (reply, digest, members) = &sent[0];
    assert!(*reply && *digest);
    assert_eq!(members.len(), 6, "this node and the five others");
    assert!(members.iter().all(|m| m.meta.is_empty()));
    deliver(&mut b, &sync, t);
    let answers = syncs_of(&mut b);
    assert_eq!(answers.len(), 1);
    let answer = push_pulls(&answers[0]);
    assert_eq!(answer.len(), 1, "only b's digest: nothing to teach");
    assert!(!answer[0].0 && answer[0].1);
    deliver(&mut a, &answers[0], t);
    assert!(syncs_of(&mut a).is_empty(), "nothing to teach back");
}

#[test]
fn a_member_written_to_in_version_2_known_better_is_sent_whole_in_the_answer_to_the_digest() {
    let all = ids(6);
    let mut a = node_with_meta(&all[0], &all, 1, None);
    a.set_wire_version(2);
    let (t, sync) = until_sync(&mut a);
    // b knows a third member at a newer incarnation, with newer metadata.
    let newer = all[1..].iter().find(|i| **i != sync.to).unwrap().clone();
    let mut b = node_with_meta(&sync.to, &all, 2, Some((&newer, 4)));
    b.set_wire_version(2);
    deliver(&mut b, &sync, t);
    let answer = syncs_of(&mut b).pop().unwrap();
    let parts = push_pulls(&answer);
    assert_eq!(parts.len(), 2, "the better record, then b's digest");
    let (reply, digest, members) = &parts[0];
    assert!(!reply && !digest);
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].id, newer);
    assert!(!members[0].meta.is_empty());
    deliver(&mut a, &answer, t);
    assert_eq!(a.member(&newer).unwrap().incarnation(), 4);
    // And b learns a's own record back only if it knew it worse: it did not.
    assert!(syncs_of(&mut a).is_empty());
}

#[test]
fn a_ping_from_a_member_this_node_does_not_know_starts_a_full_sync_with_it_at_most_once_a_probe_interval(
) {
    // Two islands: this node knows only `all[1]` (both restarted at once,
    // each the other's only seed); `all[2]` and `all[3]` hold it alive and
    // ping it, but would never send it their state.
    let all = ids(4);
    let island = [all[0].clone(), all[1].clone()];
    let mut n = node_with_meta(&all[0], &island, 1, None);
    drain(&mut n);
    let probe = n.config().probe_interval;
    let ping = |from: &NodeId, seq| {
        packet_from(
            from,
            0,
            vec![Message::Ping {
                seq,
                target: tag(&all[0]),
                suspected: None,
            }],
        )
    };
    n.handle_datagram(secs(1.0), &ping(&all[2], 1)).unwrap();
    let out = drain(&mut n);
    let syncs: Vec<_> = out
        .iter()
        .filter(|x| !push_pulls(x).is_empty())
        .map(|x| (x.to.clone(), x.channel, push_pulls(x)))
        .collect();
    assert_eq!(syncs.len(), 1, "{out:?}");
    let (to, channel, pp) = &syncs[0];
    assert_eq!(to, &all[2]);
    assert_eq!(*channel, hale_core::wire::Channel::Stream);
    let (reply, digest, members) = &pp[0];
    assert!(*reply && !*digest, "its whole state, and asks for theirs");
    let ids_sent: Vec<_> = members.iter().map(|r| r.id.clone()).collect();
    assert!(ids_sent.contains(&all[0]) && ids_sent.contains(&all[1]));
    // The ping is answered as before.
    assert!(out
        .iter()
        .any(|x| decode(x).messages == vec![Message::Ack { seq: 1 }]));
    // Another stranger within the probe interval: answered, no second sync.
    n.handle_datagram(secs(1.0) + probe / 2, &ping(&all[3], 2))
        .unwrap();
    assert!(drain(&mut n).iter().all(|x| push_pulls(x).is_empty()));
    // A known member's ping never starts one.
    n.handle_datagram(secs(1.0) + probe * 2, &ping(&all[1], 3))
        .unwrap();
    assert!(drain(&mut n).iter().all(|x| push_pulls(x).is_empty()));
    // A stranger's join is a sync already: answered as a join, not twice.
    let join = packet_from(
        &all[3],
        0,
        vec![Message::PushPull {
            join: true,
            reply: true,
            digest: false,
            members: Vec::new(),
        }],
    );
    n.handle_stream(secs(1.0) + probe * 3, &join).unwrap();
    assert_eq!(
        drain(&mut n)
            .iter()
            .filter(|x| !push_pulls(x).is_empty())
            .count(),
        1
    );
}

#[test]
fn a_restarted_member_told_of_its_previous_run_at_its_own_incarnation_with_other_metadata_supersedes_it(
) {
    // b restarted without leaving and has reached incarnation 2 again, with
    // new metadata; a's sync says b is alive at 2 with the old run's. At a
    // tie nobody would take b's new metadata: b must supersede it.
    let all = ids(2);
    let (a, b) = (&all[0], &all[1]);
    let mut node_b = Node::new(b.clone(), config(2), Time::ZERO).unwrap();
    for _ in 0..2 {
        node_b
            .set_metadata(Time::ZERO, b"new run".to_vec())
            .unwrap();
    }
    assert_eq!(node_b.incarnation(), 2);
    drain(&mut node_b);
    drain_events(&mut node_b);
    let sync = |meta: &[u8]| {
        packet_from(
            a,
            0,
            vec![Message::PushPull {
                join: false,
                reply: false,
                digest: false,
                members: vec![MemberRecord {
                    id: b.clone(),
                    incarnation: 2,
                    state: WireState::Alive,
                    meta: meta.into(),
                }],
            }],
        )
    };
    node_b.handle_stream(secs(1.0), &sync(b"new run")).unwrap();
    assert_eq!(
        node_b.incarnation(),
        2,
        "the same metadata: nothing to supersede"
    );
    node_b.handle_stream(secs(2.0), &sync(b"old run")).unwrap();
    assert_eq!(node_b.incarnation(), 3);
    assert!(
        drain_events(&mut node_b).contains(&hale_core::Event::Refuted {
            incarnation: 3,
            was_dead: false
        })
    );
}

/// The bucket sums `x` carries, if any.
fn buckets(x: &Transmit<NodeId>) -> Option<Box<[u64; hale_core::wire::BUCKETS]>> {
    decode(x).messages.into_iter().find_map(|m| match m {
        Message::Buckets { sums } => Some(sums),
        _ => None,
    })
}

/// The digest parts `x` carries: (buckets, reply, records).
fn digest_parts(x: &Transmit<NodeId>) -> Vec<(u64, bool, Vec<MemberRecord<NodeId>>)> {
    decode(x)
        .messages
        .into_iter()
        .filter_map(|m| match m {
            Message::DigestPart {
                buckets,
                reply,
                members,
            } => Some((buckets, reply, members.into_vec())),
            _ => None,
        })
        .collect()
}

#[test]
fn in_a_cluster_of_300_a_member_gossip_missed_costs_64_bucket_sums_and_digests_of_its_bucket_alone()
{
    let all = ids(300);
    let mut a = node_with_meta(&all[0], &all, 1, None);
    let (t, sync) = until_sync(&mut a);
    assert_eq!(sync.channel, Channel::Datagram);
    // b missed the join of one member that a knows.
    let missing = all[1..].iter().find(|i| **i != sync.to).unwrap().clone();
    let known: Vec<NodeId> = all.iter().filter(|i| **i != missing).cloned().collect();
    let mut b = node_with_meta(&sync.to, &known, 2, None);
    deliver(&mut b, &sync, t);
    // b answers with its sums, in a datagram: no digest yet.
    let out = drain(&mut b);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].channel, Channel::Datagram);
    assert!(buckets(&out[0]).is_some() && push_pulls(&out[0]).is_empty());
    // a finds one bucket that differs and sends the digest of it alone.
    deliver(&mut a, &out[0], t);
    let out = drain(&mut a);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].channel, Channel::Stream);
    let parts = digest_parts(&out[0]);
    assert_eq!(parts.len(), 1);
    let (mask, reply, members) = &parts[0];
    assert_eq!(mask.count_ones(), 1, "one bucket differs");
    assert!(*reply);
    assert!(members.iter().any(|m| m.id == missing));
    assert!(
        members.len() < 300 / 16,
        "a bucket's members, not all 300: {}",
        members.len()
    );
    assert!(members.iter().all(|m| m.meta.is_empty()));
    // b knows nothing better there: its own digest of the same bucket back.
    deliver(&mut b, &out[0], t);
    let out = drain(&mut b);
    assert_eq!(out.len(), 1);
    assert!(push_pulls(&out[0]).is_empty(), "nothing to teach");
    let back = digest_parts(&out[0]);
    assert_eq!(back.len(), 1);
    assert_eq!((back[0].0, back[0].1), (*mask, false));
    assert_eq!(back[0].2.len(), members.len() - 1, "all but the missed one");
    // a sends the missed member, whole, and the views agree.
    deliver(&mut a, &out[0], t);
    let out = drain(&mut a);
    assert_eq!(out.len(), 1);
    let whole = push_pulls(&out[0]);
    assert_eq!(whole.len(), 1);
    let (reply, digest, members) = &whole[0];
    assert!(!reply && !digest);
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].id, missing);
    assert!(!members[0].meta.is_empty());
    deliver(&mut b, &out[0], t);
    assert_eq!(
        b.member(&missing).map(|m| m.meta().to_vec()),
        Some(members[0].meta.to_vec())
    );
    assert_eq!(a.view_hash(), b.view_hash(), "in agreement now");
}

#[test]
fn a_large_cluster_member_written_to_in_version_3_gets_a_whole_digest_not_bucket_sums() {
    let all = ids(300);
    let mut a = node_with_meta(&all[0], &all, 1, None);
    a.set_wire_version(3);
    let (t, sync) = until_sync(&mut a);
    let missing = all[1..].iter().find(|i| **i != sync.to).unwrap().clone();
    let known: Vec<NodeId> = all.iter().filter(|i| **i != missing).cloned().collect();
    let mut b = node_with_meta(&sync.to, &known, 2, None);
    b.set_wire_version(3);
    deliver(&mut b, &sync, t);
    let out = syncs_of(&mut b);
    assert_eq!(out.len(), 1);
    let sent = push_pulls(&out[0]);
    assert_eq!(sent.len(), 1);
    let (reply, digest, members) = &sent[0];
    assert!(*reply && *digest);
    assert_eq!(members.len(), 299, "everyone b knows");
}

#[test]
fn bucket_sums_that_agree_by_the_time_they_arrive_start_nothing() {
    let all = ids(300);
    let mut a = node_with_meta(&all[0], &all, 1, None);
    let (t, sync) = until_sync(&mut a);
    let newer = all[1..].iter().find(|i| **i != sync.to).unwrap().clone();
    let mut b = node_with_meta(&sync.to, &all, 2, Some((&newer, 2)));
    deliver(&mut b, &sync, t);
    let sums = drain(&mut b).pop().unwrap();
    assert!(buckets(&sums).is_some());
    // Gossip brings a the news before b's sums arrive.
    let alive = b
        .state_records()
        .into_iter()
        .find(|r| r.id == newer)
        .unwrap();
    a.restore(t, [alive]);
    deliver(&mut a, &sums, t);
    assert!(drain(&mut a).is_empty(), "nothing differs any more");
}

#[test]
fn the_sync_period_stays_put_as_the_cluster_grows_in_version_4_and_grows_with_it_before() {
    let all = ids(1000);
    // Gaps between the periodic syncs of one node over six periods.
    let gaps = |version: u8| {
        let mut a = node_with_meta(&all[0], &all, 1, None);
        a.set_wire_version(version);
        let mut times = Vec::new();
        while times.len() < 6 {
            times.push(until_sync(&mut a).0);
        }
        times
            .windows(2)
            .map(|w| w[1].saturating_since(w[0]).as_secs_f64())
            .collect::<Vec<_>>()
    };
    // 30 s, jittered by half either way.
    let v4 = gaps(4);
    assert!(v4.iter().all(|g| (15.0..=45.0).contains(g)), "{v4:?}");
    // 30 s times ceil(1000 / 200), jittered the same way.
    let v3 = gaps(3);
    assert!(v3.iter().all(|g| (75.0..=225.0).contains(g)), "{v3:?}");
}

#[test]
fn a_node_restored_with_a_snapshots_sums_hashes_its_view_as_one_restored_record_by_record() {
    let all = ids(40);
    let record = |i: &NodeId, state| MemberRecord {
        id: i.clone(),
        incarnation: 3,
        state,
        meta: b"m".as_slice().into(),
    };
    let alive: Vec<_> = all.iter().map(|i| record(i, WireState::Alive)).collect();
    let mut with_dead = alive.clone();
    with_dead[5].state = WireState::Dead;
    with_dead[6].state = WireState::Suspect;
    for snapshot in [alive, with_dead] {
        let sums = hale_core::SnapshotSums::of(&snapshot);
        let mut one = node_with_meta(&all[0], &all[..1], 1, None);
        one.restore(Time::ZERO, snapshot.clone());
        let mut summed = node_with_meta(&all[0], &all[..1], 1, None);
        summed.restore_summed(Time::ZERO, &snapshot, &sums);
        assert_eq!(summed.view_hash(), one.view_hash());
        assert_eq!(summed.state_records(), one.state_records());
        // And the kept sums follow later changes (debug builds check them
        // against the records on every read).
        for n in [&mut one, &mut summed] {
            n.restore(Time::from_secs(1), [record(&all[7], WireState::Dead)]);
        }
        assert_eq!(summed.view_hash(), one.view_hash());
    }
}

#[test]
fn views_that_differ_in_many_buckets_exchange_digests_of_eight_of_them_per_sync() {
    let all = ids(300);
    let mut a = node_with_meta(&all[0], &all, 1, None);
    let (t, sync) = until_sync(&mut a);
    let mut b = node_with_meta(&sync.to, &all, 2, None);
    // b heard 200 refutations that a missed.
    let newer: Vec<MemberRecord<NodeId>> = all[1..]
        .iter()
        .filter(|i| **i != sync.to)
        .take(200)
        .map(|i| MemberRecord {
            id: i.clone(),
            incarnation: 1,
            state: WireState::Alive,
            meta: b"newer".as_slice().into(),
        })
        .collect();
    b.restore(t, newer);
    deliver(&mut b, &sync, t);
    let sums = drain(&mut b).pop().unwrap();
    deliver(&mut a, &sums, t);
    let out = drain(&mut a);
    let parts = digest_parts(&out[0]);
    assert_eq!(parts.len(), 1);
    assert_eq!(
        parts[0].0.count_ones(),
        8,
        "eight buckets of the ~60 that differ"
    );
    assert!(parts[0].2.len() < 300 / 4, "{} records", parts[0].2.len());
}

#[test]
fn a_restarted_node_that_knows_a_member_only_from_its_packets_never_convicts_it_alone() {
    // It restarts behind a one-way cut (its packets go nowhere): its joins
    // reach no seed, and one packet of a member that holds it dead (a ping
    // of its tombstone, carrying that member's refutation of a suspicion
    // of its own) is all it hears. That member is the only one in its
    // table; its own failed probes would make it "alone in a cluster of
    // two", and it used to convict at the longest suspicion time (nemesis
    // seed 150092).
    let all = ids(5);
    let mut n = Node::new(all[0].clone(), config(3), Time::ZERO).unwrap();
    n.set_wire_version(VERSION);
    n.join(Time::ZERO, all[1..].iter().cloned());
    drain(&mut n);
    let ping = packet_from(
        &all[2],
        0,
        vec![
            Message::Ping {
                seq: 9,
                target: tag(&all[0]),
                suspected: None,
            },
            Message::Alive {
                member: all[2].clone(),
                incarnation: 1,
                meta: Box::default(),
            },
        ],
    );
    n.handle_datagram(secs(1.0), &ping).unwrap();
    assert!(n.member(&all[2]).is_some());
    let events = events_alone(&mut n, secs(60.0));
    assert!(suspected(&events, &all[2]), "{events:?}");
    assert!(!declared_dead(&events, &all[2]), "{events:?}");
}

#[test]
fn a_node_synced_into_a_cluster_of_two_convicts_the_other_alone() {
    // The allowance the test above withholds, where it is due: the other
    // member's state says the cluster is the two of them.
    let (mut n, all) = synced_pair(secs(1.0));
    let events = events_alone(&mut n, secs(60.0));
    assert!(declared_dead(&events, &all[1]), "{events:?}");
}

/// The times at which `n` sends `seed` a join, up to `until`.
fn joins_sent(n: &mut Node<NodeId>, seed: &NodeId, until: Time) -> Vec<f64> {
    let mut at = Vec::new();
    while let Some(t) = n.poll_timeout() {
        if t > until {
            break;
        }
        n.handle_timeout(t);
        for x in drain(n) {
            let join = decode(&x)
                .messages
                .iter()
                .any(|m| matches!(m, Message::PushPull { join: true, .. }));
            if join && x.to == *seed {
                at.push(t.saturating_since(Time::ZERO).as_secs_f64());
            }
        }
    }
    at
}

#[test]
fn a_joining_node_asks_a_silent_seed_again_soon_then_backs_off_to_the_retry_interval() {
    // Agents started together: the seed may not listen yet when the join
    // goes out. The next tries come after ~0.31 s, 0.63, 1.25, 2.5 and then
    // every 5 s (the default seed_retry_interval), each within 10%.
    let all = ids(2);
    let mut n = Node::new(all[0].clone(), config(3), Time::ZERO).unwrap();
    n.set_wire_version(VERSION);
    n.join(Time::ZERO, [all[1].clone()]);
    assert_eq!(drain(&mut n).len(), 1, "the first join goes out at once");
    let at = joins_sent(&mut n, &all[1], secs(20.0));
    let gaps: Vec<f64> = std::iter::once(at[0])
        .chain(at.windows(2).map(|w| w[1] - w[0]))
        .collect();
    let want = [0.3125, 0.625, 1.25, 2.5, 5.0, 5.0];
    assert!(gaps.len() >= want.len(), "{gaps:?}");
    for (got, want) in gaps.iter().zip(want) {
        assert!((got - want).abs() <= want * 0.1 + 1e-6, "{gaps:?}");
    }
}

#[test]
fn a_node_that_joined_and_then_lost_every_member_asks_its_seeds_every_retry_interval() {
    // The quick retries are a join's only: once a member's view came, a
    // node left alone (every member gone) asks its seeds every 5 s.
    let (mut n, all) = synced_pair(secs(0.1));
    let at = joins_sent(&mut n, &all[1], secs(120.0));
    assert!(
        at.len() >= 3,
        "it falls back to its seed once alone: {at:?}"
    );
    for w in at.windows(2) {
        let gap = w[1] - w[0];
        assert!((4.5..=5.5).contains(&gap), "{at:?}");
    }
}

/// A node that joined through its one seed, and at `at` received the
/// seed's state: the two of them, alive. With the two identities.
fn synced_pair(at: Time) -> (Node<NodeId>, Vec<NodeId>) {
    let all = ids(2);
    let mut n = Node::new(all[0].clone(), config(3), Time::ZERO).unwrap();
    n.set_wire_version(VERSION);
    n.join(Time::ZERO, [all[1].clone()]);
    drain(&mut n);
    let record = |id: &NodeId| MemberRecord {
        id: id.clone(),
        incarnation: 0,
        state: WireState::Alive,
        meta: Box::default(),
    };
    let state = packet_from(
        &all[1],
        0,
        vec![Message::PushPull {
            join: false,
            reply: false,
            digest: false,
            members: vec![record(&all[0]), record(&all[1])],
        }],
    );
    n.handle_stream(at, &state).unwrap();
    (n, all)
}
