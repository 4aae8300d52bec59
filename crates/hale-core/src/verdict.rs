//! Verdicts: how many accusers a death needs, when a suspicion's wait is
//! over, and declaring a member dead (the evidence, the direct sends, the
//! gossip). The rules themselves are listed in `state.rs`.

use std::time::Duration;

use crate::broadcast::Class;
use crate::event::{DeathEvidence, Event};
use crate::identity::Identity;
use crate::member::MemberState;
use crate::node::Node;
use crate::state::{Suspicion, VERDICT_FANOUT};
use crate::time::Time;
use crate::wire::{Channel, Message};

impl<I: Identity> Node<I> {
    /// Whether this node has heard from no live, unsuspected member other
    /// than `target` within `suspicion_max`: it is cut off, or the others
    /// are all gone.
    pub(crate) fn alone(&self, target: &I, now: Time) -> bool {
        if self.members.alive() == 0 {
            return true;
        }
        let window = self.cfg.suspicion_max;
        !self.members.iter().any(|(id, m)| {
            m.state() == MemberState::Alive
                && *id != *target
                && self.members.heard(m) > Time::ZERO
                && now.saturating_since(self.members.heard(m)) < window
        })
    }

    /// Independent healthy accusers needed for a verdict here: the
    /// configured corroboration, or fewer when the cluster has fewer
    /// unsuspected members that could confirm. (A node with no witness
    /// left has had its probes fail for lack of anyone to answer: its own
    /// accusations are discounted by then, and only `alone` decides.)
    pub(crate) fn required_accusers(&self, target: &I) -> usize {
        // The target itself is no witness (it is suspect or dead in a verdict
        // we reach, possibly still alive in one we are told about).
        let target_alive = self
            .members
            .get(target)
            .is_some_and(|m| m.state() == MemberState::Alive);
        let witnesses = self.members.alive() - usize::from(target_alive);
        self.cfg.corroboration.min(witnesses + 1).max(1)
    }

    /// Whether the suspicion of `target` is enough for a verdict: enough
    /// independent healthy accusers. A node that concluded it is cut off
    /// convicts nobody (`isolation.rs`). Only in a cluster too small for that
    /// conclusion may a node that is alone (nobody heard from lately)
    /// conclude on its own failed probes, whatever its health: nobody else
    /// could confirm, and every other member may really have failed. Such a
    /// verdict rests on one accuser, so other members do not accept it; and
    /// only a node that knows the cluster's size may reach it: one whose
    /// view never came from the cluster since it started
    /// (`Recovery::synced`; restarted behind a one-way cut, it knows only
    /// the members whose packets reached it) may be one of many.
    pub(crate) fn verdict_allowed(&self, target: &I, s: &Suspicion<I>, now: Time) -> bool {
        if self.convicts_alone() {
            return s.accused_at.is_some();
        }
        if self.isolation.phase().is_cut_off() {
            return false;
        }
        s.accusers.len() >= self.required_accusers(target)
            || (s.accused_at.is_some()
                && self.recovery.synced()
                && !self.large_enough_to_infer_cut_off()
                && self.alone(target, now))
    }

    /// Test builds only (`Fault::ConvictAlone`, a planted bug): this node's
    /// own accusation is a verdict on its own, after `suspicion_min`.
    fn convicts_alone(&self) -> bool {
        #[cfg(feature = "fault-injection")]
        if self.cfg.fault == Some(crate::config::Fault::ConvictAlone) {
            return true;
        }
        false
    }

    /// When the suspicion of `member` should next be looked at.
    pub(crate) fn rearm(&mut self, member: &I, now: Time) {
        let Some(s) = self.suspicions.get(member) else {
            return;
        };
        let allowed = self.verdict_allowed(member, s, now);
        let required = self.required_accusers(member);
        let (min, max, k) = (
            self.cfg.suspicion_min,
            self.cfg.suspicion_max,
            self.cfg.expected_confirmations,
        );
        let expiry = s.started + max * 2;
        let closed_ready = s.closed.len() >= required;
        let verdict_at = match s.accused_at {
            // Corroborated closed-port evidence, our own included: no stall
            // produces it, so the silence suspicion time does not apply.
            Some(_) if closed_ready && s.closed_at.is_some() => {
                s.closed_at.unwrap_or(now) + self.cfg.closed_port_min
            }
            // Others found it closed: verify it ourselves at once.
            None if closed_ready => now,
            // Lifeguard: from max toward min as independent confirmations
            // arrive, counted from when the `required`-th accuser's silence
            // began (one accuser's probe may have failed on lost packets
            // before a stall began: the others' silence must be as long).
            Some(t0) => {
                let others = if self.convicts_alone() {
                    k
                } else {
                    s.accusers
                        .iter()
                        .filter(|a| **a != *self.local.id())
                        .count()
                };
                let frac = ((others + 1) as f64).ln() / ((k + 1) as f64).ln();
                let span = max.saturating_sub(min).mul_f64(frac.min(1.0));
                let mut since: Vec<Time> = s
                    .silent_since
                    .iter()
                    .filter(|(a, _)| s.accusers.contains(a))
                    .map(|(_, t)| *t)
                    .collect();
                since.sort_unstable();
                // And never before this node has itself seen the silence
                // last that long: accusations it holds may be stale (their
                // refutation lost on its way here) and the member silent
                // now in a later stall, which the suspicion time must cover.
                let from = since
                    .get(required.saturating_sub(1))
                    .copied()
                    .unwrap_or(t0)
                    .max(t0);
                from + max.saturating_sub(span).max(min)
            }
            // No evidence of our own: an accuser's verdict usually arrives
            // first; if it was lost, conclude a second after an accuser would
            // have (Lifeguard's time from when we heard, plus one second, so a
            // refutation has even more time to reach us than it has to reach
            // the accusers).
            None => {
                let frac = ((s.accusers.len().max(1)) as f64).ln() / ((k + 1) as f64).ln();
                let span = max.saturating_sub(min).mul_f64(frac.min(1.0));
                s.started + max.saturating_sub(span).max(min) + Duration::from_secs(1)
            }
        };
        let deadline = if s.verifying && s.accused_at.is_none() {
            // A verification probe is under way or did not fail: its outcome,
            // news, or expiry decides.
            expiry
        } else if allowed {
            verdict_at.min(expiry)
        } else {
            expiry
        };
        self.suspicions.set_deadline(member, deadline);
    }

    /// Looks at suspicions whose time came.
    pub(crate) fn suspicion_deadlines(&mut self, now: Time) {
        while let Some(id) = self.suspicions.pop_due(now) {
            let s = self.suspicions.get(&id).expect("a suspicion is due");
            let allowed = self.verdict_allowed(&id, s, now);
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
            } else if now >= started + self.cfg.suspicion_max * 2 {
                // Never corroborated: let it go rather than hold it forever.
                self.stats.suspicions_expired += 1;
                self.set_state(now, &id, MemberState::Alive);
            } else if verifying {
                // Our own probe did not fail: wait for news, or let it expire.
                let expiry = started + self.cfg.suspicion_max * 2;
                self.suspicions.add_deadline(&id, expiry);
            } else {
                self.rearm(&id, now);
            }
        }
    }

    pub(crate) fn start_verification(&mut self, now: Time, id: &I) {
        let wait = self.scaled(self.cfg.probe_interval) + Duration::from_millis(50);
        self.suspicions.verify(id, now + wait);
        if self.probing.probe_of(id).is_none() {
            self.start_probe(now, id);
        }
    }

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
                .members
                .get(id)
                .map_or(Time::ZERO, |m| self.members.heard(m)),
            declared_at: now,
        }
    }

    pub(crate) fn declare_dead(&mut self, now: Time, id: &I) {
        let evidence = self.evidence(now, id, self.local.id().clone());
        let accusers = evidence.confirmations.min(255) as u8;
        let inc = self.members.get(id).expect("known member").incarnation;
        self.stats.deaths_declared += 1;
        self.set_state(now, id, MemberState::Dead);
        self.push_event(Event::Dead {
            member: id.clone(),
            incarnation: inc,
            evidence: Box::new(evidence),
        });
        let msg = Message::Dead {
            member: id.clone(),
            incarnation: inc,
            declarer: self.local.id().clone(),
            accusers,
        };
        // Our own verdict goes straight to up to VERDICT_FANOUT members
        // (everyone, in a small cluster) before it is gossiped: the last
        // member to hear of a death otherwise waits a gossip round or two.
        // Sent before it is queued, so it is not sent twice in one packet
        // and the gossip keeps its whole retransmit budget.
        let to: Vec<I> = if self.members.live() <= VERDICT_FANOUT {
            self.members
                .iter()
                .filter(|(_, m)| m.state().is_live())
                .map(|(id, _)| id.into_owned())
                .collect()
        } else {
            self.random_live(VERDICT_FANOUT, None)
        };
        for t in to {
            self.send(t, Channel::Datagram, vec![msg.clone()]);
        }
        self.broadcast(now, Class::Dead, (id.clone(), None), msg);
    }
}
