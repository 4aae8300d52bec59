//! Verdicts: how many accusers a death needs, when a suspicion's wait is
//! over, and declaring a member dead (the evidence, the direct sends, the
//! gossip). The rules themselves are listed in `state.rs`.

use std::time::Duration;

use super::Node;
use crate::broadcast::Class;
use crate::event::{DeathEvidence, Event};
use crate::identity::Identity;
use crate::member::MemberState;
use crate::state::{Suspicions, VERDICT_FANOUT};
use crate::time::Time;
use crate::wire::{Channel, Message};

impl<I: Identity> Node<I> {
    /// Looks at suspicions whose time came.
    pub(crate) fn suspicion_deadlines(&mut self, now: Time) {
        while let Some(id) = self.suspicions.pop_due(now) {
            let s = self.suspicions.get(&id).expect("a suspicion is due");
            let allowed =
                Suspicions::verdict_allowed(&self.sh, self.recovery.synced(), &id, s, now);
            let started = s.started;
            let own_evidence = s.accused_at.is_some();
            let verifying = s.verifying;
            if allowed && !own_evidence && !verifying {
                // Never convict on others' word alone: probe it ourselves
                // first (the ping carries the suspicion, so a live member
                // refutes in its ack). A failed probe concludes at once.
                self.start_verification(now, &id);
            } else if allowed && own_evidence {
                self.declare_dead(now, &id);
            } else if now >= started + self.sh.cfg().suspicion_max * 2 {
                // Never corroborated: let it go rather than hold it forever.
                self.sh.stats_mut().suspicions_expired += 1;
                self.set_state(now, &id, MemberState::Alive);
            } else if verifying {
                // Our own probe did not fail: wait for news, or let it expire.
                let expiry = started + self.sh.cfg().suspicion_max * 2;
                self.suspicions.add_deadline(&id, expiry);
            } else {
                self.suspicions
                    .rearm(&self.sh, self.recovery.synced(), &id, now);
            }
        }
    }

    /// Probes `id` ourselves before a verdict on others' word, and looks
    /// at the suspicion again once that probe is over.
    pub(crate) fn start_verification(&mut self, now: Time, id: &I) {
        let wait = self.sh.scaled(self.sh.cfg().probe_interval) + Duration::from_millis(50);
        self.suspicions.verify(id, now + wait);
        if self.probing.probe_of(id).is_none() {
            self.probing.start_probe(&mut self.sh, now, id);
        }
    }

    /// What a verdict on `id` rests on, as the `Dead` event reports it.
    pub(crate) fn evidence(&self, now: Time, id: &I, declared_by: I) -> DeathEvidence<I> {
        let s = self.suspicions.get(id);
        DeathEvidence {
            declared_by,
            accusers: s.map(|s| s.accusers.clone()).unwrap_or_default(),
            discounted: s.map_or(0, |s| s.discounted.len()),
            confirmations: s.map_or(0, |s| {
                s.accusers.len().max(usize::from(s.accused_at.is_some()))
            }),
            closed_port: s.map_or(0, |s| s.closed.len()),
            suspected_at: s.map(|s| s.started),
            last_heard: self
                .sh
                .members()
                .get(id)
                .map_or(Time::ZERO, |m| self.sh.members().heard(m)),
            declared_at: now,
        }
    }

    /// Declares `id` dead: the event, our verdict straight to up to
    /// `VERDICT_FANOUT` members, then gossip.
    pub(crate) fn declare_dead(&mut self, now: Time, id: &I) {
        let evidence = self.evidence(now, id, self.sh.local().id().clone());
        let accusers = evidence.confirmations.min(255) as u8;
        let inc = self.sh.members().get(id).expect("known member").incarnation;
        self.sh.stats_mut().deaths_declared += 1;
        self.set_state(now, id, MemberState::Dead);
        self.sh.push_event(Event::Dead {
            member: id.clone(),
            incarnation: inc,
            evidence: Box::new(evidence),
        });
        let msg = Message::Dead {
            member: id.clone(),
            incarnation: inc,
            declarer: self.sh.local().id().clone(),
            accusers,
        };
        // Our own verdict goes straight to up to VERDICT_FANOUT members
        // (everyone, in a small cluster) before it is gossiped: the last
        // member to hear of a death otherwise waits a gossip round or two.
        // Sent before it is queued, so it is not sent twice in one packet
        // and the gossip keeps its whole retransmit budget.
        let to: Vec<I> = if self.sh.members().live() <= VERDICT_FANOUT {
            self.sh
                .members()
                .iter()
                .filter(|(_, m)| m.state().is_live())
                .map(|(id, _)| id.into_owned())
                .collect()
        } else {
            self.sh
                .random_live(self.probing.walk(), VERDICT_FANOUT, None)
        };
        for t in to {
            self.sh.send(t, Channel::Datagram, vec![msg.clone()]);
        }
        self.sh.broadcast(now, Class::Dead, (id.clone(), None), msg);
    }
}
