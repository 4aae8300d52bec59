//! Membership rules: how news changes a member's state, suspicion with
//! corroboration, verdicts and refutation.
//!
//! # Conflict rules
//!
//! * Only a member raises its own incarnation (to refute, rejoin or publish
//!   metadata). News about a member at a lower incarnation than known is old
//!   and ignored.
//! * `Alive(i)` wins over anything at an incarnation below `i`.
//! * `Suspect(i)` wins over `Alive(i)`; more `Suspect(i)` from other
//!   accusers are confirmations.
//! * `Dead(i)` wins over `Alive(i)` and `Suspect(i)` only when it rests on
//!   at least `corroboration` independent healthy accusers (fewer only when
//!   the cluster is too small to have them).
//! * `Left(i)` wins over everything at `i`: a member that said goodbye is not dead.
//! * News about this node at or above its incarnation (suspect, dead, left
//!   while it has not) is refuted by raising the incarnation above it.

use std::time::Duration;

use crate::broadcast::Class;
use crate::event::{DeathEvidence, Event};
use crate::identity::Identity;
use crate::member::{Member, MemberState};
use crate::node::{ring_position, Node};
use crate::time::Time;
use crate::wire::{Channel, Message};

/// Most accusers remembered per suspicion.
const MAX_ACCUSERS: usize = 16;

/// What this node knows about one suspected member.
#[derive(Debug, Clone)]
pub(crate) struct Suspicion<I> {
    pub(crate) started: Time,
    /// When this node's own probe failed, if it did.
    pub(crate) accused_at: Option<Time>,
    /// Independent healthy accusers (this node included when it accused while healthy).
    pub(crate) accusers: Vec<I>,
    pub(crate) discounted: Vec<I>,
    pub(crate) deadline: Time,
}

/// Accusations made by one accuser in the current window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AccuserWindow {
    pub(crate) start: Time,
    pub(crate) count: u32,
}

impl<I: Identity> Node<I> {
    /// Moves a member to `state`, keeping counts, the walk, the monitors and
    /// tombstones consistent.
    fn set_state(&mut self, now: Time, id: &I, state: MemberState) {
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        let was_live = m.state.is_live();
        m.state = state;
        m.state_since = now;
        match (was_live, state.is_live()) {
            (true, false) => {
                self.live -= 1;
                self.tombstones.push(id.clone());
                self.monitors_changed(id);
            }
            (false, true) => {
                self.live += 1;
                self.walk_insert(id);
                self.monitors_changed(id);
                self.in_fallback = false;
            }
            _ => {}
        }
        if state != MemberState::Suspect {
            self.clear_suspicion(id);
        }
    }

    fn clear_suspicion(&mut self, id: &I) {
        if let Some(s) = self.suspicions.remove(id) {
            self.deadlines.remove(&(s.deadline, id.clone()));
            for a in s.accusers.iter().chain(&s.discounted) {
                self.broadcasts.remove(&(id.clone(), Some(a.clone())));
            }
        }
    }

    /// `Alive(member, incarnation)`. `meta` None keeps the known metadata.
    /// `spread` re-gossips accepted news (off for bulk state merges).
    pub(crate) fn apply_alive(
        &mut self,
        now: Time,
        member: &I,
        incarnation: u32,
        meta: Option<Vec<u8>>,
        spread: bool,
    ) {
        if *member == self.me {
            if incarnation > self.incarnation && !self.left {
                // News of a previous life of ours: supersede it.
                self.incarnation = incarnation;
                self.refute(now, incarnation, None, false);
            }
            return;
        }
        let known = self.members.get(member).map(|m| (m.state, m.incarnation));
        match known {
            None => {
                let ring = ring_position(self.cluster, member);
                self.members.insert(
                    member.clone(),
                    Member {
                        id: member.clone(),
                        incarnation,
                        state: MemberState::Dead,
                        health: 0,
                        meta: meta.unwrap_or_default().into_boxed_slice(),
                        last_heard: Time::ZERO,
                        state_since: now,
                        ring,
                        in_walk: false,
                    },
                );
                self.set_state(now, member, MemberState::Alive);
                self.push_event(Event::Joined {
                    member: member.clone(),
                    incarnation,
                });
            }
            Some((state, inc)) if incarnation > inc => {
                let m = self.members.get_mut(member).expect("known member");
                m.incarnation = incarnation;
                let meta_changed = meta.as_ref().is_some_and(|new| **new != *m.meta);
                if let Some(new) = meta {
                    m.meta = new.into_boxed_slice();
                }
                self.set_state(now, member, MemberState::Alive);
                match state {
                    MemberState::Suspect | MemberState::Dead => self.push_event(Event::Recovered {
                        member: member.clone(),
                        incarnation,
                        was_dead: state == MemberState::Dead,
                    }),
                    MemberState::Left => self.push_event(Event::Joined {
                        member: member.clone(),
                        incarnation,
                    }),
                    MemberState::Alive => {}
                }
                if meta_changed {
                    self.push_event(Event::MetadataUpdated {
                        member: member.clone(),
                        incarnation,
                    });
                }
            }
            Some(_) => return,
        }
        if spread {
            let m = &self.members[member];
            let msg = Message::Alive {
                member: member.clone(),
                incarnation,
                meta: m.meta.to_vec(),
            };
            self.broadcast(now, Class::Alive, (member.clone(), None), msg);
        }
    }

    /// Whether `accuser`'s accusations are discounted: it reports poor
    /// health, or it has accused too large a share of the cluster lately.
    fn discounted(&mut self, now: Time, accuser: &I, health: u8) -> bool {
        let window = self.cfg.accusation_window;
        let w = self.accusers.entry(accuser.clone()).or_insert(AccuserWindow {
            start: now,
            count: 0,
        });
        if now.saturating_since(w.start) > window {
            *w = AccuserWindow {
                start: now,
                count: 0,
            };
        }
        w.count += 1;
        let limit = (self.cfg.accusation_burst * (self.live + 1) as f64).ceil().max(3.0) as u32;
        health >= self.cfg.health_discount || w.count > limit
    }

    /// `accuser` suspects `member` at `incarnation`.
    pub(crate) fn apply_suspect(
        &mut self,
        now: Time,
        member: &I,
        incarnation: u32,
        accuser: &I,
        accuser_health: u8,
    ) {
        if *member == self.me {
            if incarnation >= self.incarnation && !self.left {
                self.refute(now, incarnation, Some(accuser.clone()), false);
            }
            return;
        }
        let Some(m) = self.members.get(member) else {
            return;
        };
        if !m.state.is_live() || incarnation < m.incarnation {
            return;
        }
        let fresh_suspicion = m.state == MemberState::Alive || incarnation > m.incarnation;
        if !fresh_suspicion {
            let s = self.suspicions.get(member);
            if s.is_some_and(|s| s.accusers.contains(accuser) || s.discounted.contains(accuser)) {
                return; // Already counted.
            }
        }
        let discounted = self.discounted(now, accuser, accuser_health);
        if discounted {
            self.stats.discounted_accusations += 1;
        }
        let by_me = *accuser == self.me;
        if fresh_suspicion {
            self.stats.suspicions += 1;
            self.members.get_mut(member).expect("known").incarnation = incarnation;
            self.set_state(now, member, MemberState::Suspect);
            self.clear_suspicion(member);
            self.suspicions.insert(
                member.clone(),
                Suspicion {
                    started: now,
                    accused_at: None,
                    accusers: Vec::new(),
                    discounted: Vec::new(),
                    deadline: Time::NEVER,
                },
            );
            self.push_event(Event::Suspected {
                member: member.clone(),
                incarnation,
                accuser: accuser.clone(),
            });
        }
        let s = self.suspicions.get_mut(member).expect("suspicion exists");
        if by_me && s.accused_at.is_none() {
            s.accused_at = Some(now);
        }
        let list = if discounted {
            &mut s.discounted
        } else {
            &mut s.accusers
        };
        if list.len() < MAX_ACCUSERS {
            list.push(accuser.clone());
        }
        let spread = fresh_suspicion || list.len() <= self.cfg.expected_confirmations + 1;
        self.rearm(member);
        if !spread {
            return; // Lifeguard: enough confirmations are already travelling.
        }
        let msg = Message::Suspect {
            member: member.clone(),
            incarnation,
            accuser: accuser.clone(),
            accuser_health,
        };
        self.broadcast(now, Class::Suspect, (member.clone(), Some(accuser.clone())), msg);
    }

    /// Independent healthy accusers needed for a verdict here.
    pub(crate) fn required_accusers(&self) -> usize {
        self.cfg.corroboration.min(self.live).max(1)
    }

    /// When the suspicion of `member` should next be looked at.
    fn rearm(&mut self, member: &I) {
        let required = self.required_accusers();
        let (min, max, k) = (
            self.cfg.suspicion_min,
            self.cfg.suspicion_max,
            self.cfg.expected_confirmations,
        );
        let Some(s) = self.suspicions.get_mut(member) else {
            return;
        };
        self.deadlines.remove(&(s.deadline, member.clone()));
        let expiry = s.started + max * 2;
        let verdict_at = match s.accused_at {
            // Lifeguard: from max toward min as independent confirmations arrive.
            Some(t0) => {
                let others = s.accusers.iter().filter(|a| **a != self.me).count();
                let frac = ((others + 1) as f64).ln() / ((k + 1) as f64).ln();
                let span = max.saturating_sub(min).mul_f64(frac.min(1.0));
                t0 + max.saturating_sub(span).max(min)
            }
            // No evidence of our own: wait for a verdict from an accuser, or the maximum.
            None => s.started + max,
        };
        s.deadline = if s.accusers.len() >= required {
            verdict_at.min(expiry)
        } else {
            expiry
        };
        self.deadlines.insert((s.deadline, member.clone()));
    }

    /// Looks at suspicions whose time came.
    pub(crate) fn suspicion_deadlines(&mut self, now: Time) {
        while let Some((t, id)) = self.deadlines.first().cloned() {
            if t > now {
                break;
            }
            self.deadlines.remove(&(t, id.clone()));
            let required = self.required_accusers();
            let Some(s) = self.suspicions.get_mut(&id) else {
                continue;
            };
            s.deadline = Time::NEVER;
            if s.accusers.len() >= required {
                self.declare_dead(now, &id);
            } else if now >= s.started + self.cfg.suspicion_max * 2 {
                // Never corroborated: let it go rather than hold it forever.
                self.stats.suspicions_expired += 1;
                self.set_state(now, &id, MemberState::Alive);
            } else {
                self.rearm(&id);
            }
        }
    }

    fn evidence(&self, now: Time, id: &I, declared_by: I) -> DeathEvidence<I> {
        let s = self.suspicions.get(id);
        DeathEvidence {
            declared_by,
            accusers: s.map(|s| s.accusers.clone()).unwrap_or_default(),
            discounted: s.map_or(0, |s| s.discounted.len()),
            confirmations: s.map_or(0, |s| s.accusers.len()),
            suspected_at: s.map(|s| s.started),
            last_heard: self.members.get(id).map_or(Time::ZERO, |m| m.last_heard),
            declared_at: now,
        }
    }

    fn declare_dead(&mut self, now: Time, id: &I) {
        let evidence = self.evidence(now, id, self.me.clone());
        let accusers = evidence.confirmations.min(255) as u8;
        let inc = self.members[id].incarnation;
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
            declarer: self.me.clone(),
            accusers,
        };
        self.broadcast(now, Class::Dead, (id.clone(), None), msg);
    }

    /// `declarer` declared `member` dead on `accusers` healthy accusers.
    pub(crate) fn apply_dead(
        &mut self,
        now: Time,
        member: &I,
        incarnation: u32,
        declarer: &I,
        accusers: u8,
        spread: bool,
    ) {
        if *member == self.me {
            if incarnation >= self.incarnation && !self.left {
                self.refute(now, incarnation, Some(declarer.clone()), true);
            }
            return;
        }
        let Some(m) = self.members.get(member) else {
            return;
        };
        if !m.state.is_live() || incarnation < m.incarnation {
            return;
        }
        // Never let one observer convict: the verdict must rest on enough accusers.
        if usize::from(accusers) < self.cfg.corroboration.min(self.live).max(1) {
            self.stats.discounted_accusations += 1;
            return;
        }
        let evidence = self.evidence(now, member, declarer.clone());
        self.members.get_mut(member).expect("known").incarnation = incarnation;
        self.stats.deaths_accepted += 1;
        self.set_state(now, member, MemberState::Dead);
        self.push_event(Event::Dead {
            member: member.clone(),
            incarnation,
            evidence: Box::new(evidence),
        });
        if spread {
            let msg = Message::Dead {
                member: member.clone(),
                incarnation,
                declarer: declarer.clone(),
                accusers,
            };
            self.broadcast(now, Class::Dead, (member.clone(), None), msg);
        }
    }

    /// `member` left at `incarnation`.
    pub(crate) fn apply_left(&mut self, now: Time, member: &I, incarnation: u32, spread: bool) {
        if *member == self.me {
            if incarnation >= self.incarnation && !self.left {
                self.refute(now, incarnation, None, false);
            }
            return;
        }
        let Some(m) = self.members.get(member) else {
            return;
        };
        if m.state == MemberState::Left || incarnation < m.incarnation {
            return;
        }
        self.members.get_mut(member).expect("known").incarnation = incarnation;
        self.set_state(now, member, MemberState::Left);
        self.push_event(Event::Left {
            member: member.clone(),
            incarnation,
        });
        if spread {
            let msg = Message::Left {
                member: member.clone(),
                incarnation,
            };
            self.broadcast(now, Class::Left, (member.clone(), None), msg);
        }
    }

    /// This node was suspected, declared dead or said to have left at
    /// `observed`: raise the incarnation above it and tell everyone, the
    /// accuser first.
    pub(crate) fn refute(&mut self, now: Time, observed: u32, accuser: Option<I>, was_dead: bool) {
        self.incarnation = self.incarnation.max(observed) + 1;
        self.stats.refutations += 1;
        self.bump_health(1);
        self.broadcast_self_alive(now);
        if let Some(a) = accuser.filter(|a| *a != self.me) {
            let msg = Message::Alive {
                member: self.me.clone(),
                incarnation: self.incarnation,
                meta: self.meta.to_vec(),
            };
            self.send(a, Channel::Datagram, vec![msg]);
        }
        self.push_event(Event::Refuted {
            incarnation: self.incarnation,
            was_dead,
        });
    }

    /// We have fresh proof that `id` is alive: our own accusation no longer stands.
    pub(crate) fn withdraw_accusation(&mut self, id: &I) {
        let me = self.me.clone();
        let Some(s) = self.suspicions.get_mut(id) else {
            return;
        };
        if s.accused_at.take().is_some() {
            s.accusers.retain(|a| *a != me);
            self.rearm(id);
        }
    }

    /// Forgets dead and left members after the tombstone time, and old bookkeeping.
    pub(crate) fn reap(&mut self, now: Time) {
        self.next_reap = now + Duration::from_secs(10);
        let ttl = self.cfg.tombstone_ttl;
        let mut tombs = std::mem::take(&mut self.tombstones);
        tombs.sort_unstable();
        tombs.dedup();
        tombs.retain(|id| match self.members.get(id) {
            Some(m) if !m.state.is_live() => {
                if now.saturating_since(m.state_since) >= ttl {
                    self.members.remove(id);
                    false
                } else {
                    true
                }
            }
            _ => false,
        });
        self.tombstones = tombs;
        let window = self.cfg.accusation_window;
        self.accusers
            .retain(|_, w| now.saturating_since(w.start) <= window);
        let period = self.cfg.probe_interval;
        self.dead_notices
            .retain(|_, t| now.saturating_since(*t) < period);
    }
}
