//! A node cut off from everyone: it convicts nobody on its own failed
//! probes while the cluster it last heard from was large enough to tell
//! that it is the one cut off, however its view shrinks during the silence.

use hale_core::wire::Message;
use hale_core::{NodeId, Transmit};

use crate::support::*;

/// A gossip packet from `accuser`: it suspects each of `members`.
fn accusations(accuser: &NodeId, members: &[NodeId]) -> Vec<u8> {
    packet_from(
        accuser,
        0,
        members
            .iter()
            .map(|m| Message::Suspect {
                member: m.clone(),
                incarnation: 0,
                accuser: accuser.clone(),
                accuser_health: 0,
            })
            .collect(),
    )
}

#[test]
fn a_node_cut_off_while_its_view_shrinks_never_convicts_the_members_it_last_heard_from() {
    // Five members. Just before this node is cut off from everyone, two
    // members tell it that two others are silent (a partition elsewhere):
    // it convicts those two on their word during its own silence, and its
    // view shrinks to the two accusers, too few to infer that it is the one
    // cut off. It used to convict both accusers on its own failed probes
    // (every other member suspected: one accuser "enough"): nemesis seed
    // 170066, an isolated leader declaring healthy members dead.
    let all = ids(5);
    let mut n = node(&all[0], &all, config(7));
    drain(&mut n);
    let far = [all[3].clone(), all[4].clone()];
    n.handle_datagram(secs(0.5), &accusations(&all[1], &far))
        .unwrap();
    n.handle_datagram(secs(0.6), &accusations(&all[2], &far))
        .unwrap();
    let events = events_alone(&mut n, secs(120.0));
    assert!(!declared_dead(&events, &all[1]), "{events:?}");
    assert!(!declared_dead(&events, &all[2]), "{events:?}");
}

/// What members `all[1]` and `all[2]` answer to `t`, sent by node
/// `all[0]`: an ack to a ping, a nack to a ping-req (they cannot reach the
/// silent members either; the nack tells the asker that its own paths
/// work, so its own health stays good).
fn answers(all: &[NodeId], t: &Transmit<NodeId>) -> Vec<Vec<u8>> {
    let Some(from) = all[1..3].iter().find(|m| **m == t.to) else {
        return Vec::new();
    };
    decode(t)
        .messages
        .into_iter()
        .filter_map(|m| match m {
            Message::Ping { seq, .. } => Some(packet_from(from, 0, vec![Message::Ack { seq }])),
            Message::PingReq { seq, .. } => Some(packet_from(from, 0, vec![Message::Nack { seq }])),
            _ => None,
        })
        .collect()
}

#[test]
fn a_node_whose_every_witness_falls_silent_convicts_nobody_on_its_own_word() {
    // Two members are silent to this node from the start (to it alone), so
    // it accuses both on its own failed probes while the other two answer
    // (their word is needed for a verdict; they cannot reach the silent two
    // either, and say so with nacks, but accuse neither). Then this node is
    // cut off: the two that answered fall suspect in turn, and with nobody
    // unsuspected left to confirm, one accuser (itself, in good health, as
    // no relay was left to miss a nack) used to be "enough": it convicted
    // the silent two before concluding that it was the one cut off.
    let all = ids(5);
    let cfg = hale_core::Config {
        walk_interval: std::time::Duration::from_secs(1),
        suspicion_max: std::time::Duration::from_secs(20),
        ..config(11)
    };
    let mut n = node(&all[0], &all, cfg);
    drain(&mut n);
    let mut events = Vec::new();
    let cut_at = secs(8.0);
    while let Some(t) = n.poll_timeout() {
        if t > secs(120.0) {
            break;
        }
        n.handle_timeout(t);
        for x in drain(&mut n) {
            if t < cut_at {
                for a in answers(&all, &x) {
                    n.handle_datagram(t, &a).unwrap();
                }
            }
        }
        events.extend(drain_events(&mut n));
    }
    assert!(suspected(&events, &all[4]), "{events:?}");
    for other in &all[1..] {
        assert!(!declared_dead(&events, other), "{events:?}");
    }
}
