//! The membership rules as Node applies them: how news changes a
//! member's state (`Alive`, `Suspect`, `Dead`, `Left`, closed-port
//! evidence), refutation, and what a state change does to the sub-states
//! (the walk, the ring monitors, the tombstones, the suspicions, the
//! targeted sends). The conflict rules are listed in `state.rs`, whose
//! [`crate::state::Suspicions`] keeps the evidence.

use std::time::Duration;

use crate::broadcast::Class;
use crate::event::Event;
use crate::identity::Identity;
use crate::isolation::Lifecycle;
use crate::member::MemberState;
use crate::state::MAX_ACCUSERS;
use crate::table::{Rec, META_PENDING};
use crate::time::{Time, Timer};
use crate::wire::{Channel, Message};

use super::Node;

impl<I: Identity> Node<I> {
    /// Moves a member to `state`, keeping counts, the walk, the monitors and
    /// tombstones consistent.
    pub(crate) fn set_state(&mut self, now: Time, id: &I, state: MemberState) {
        let Some(was) = self.sh.members_mut().set_state(id, state, now) else {
            return;
        };
        let (was_live, was_suspect) = (was.is_live(), was == MemberState::Suspect);
        let is_suspect = state == MemberState::Suspect;
        match (was_live, state.is_live()) {
            (true, false) => {
                self.recovery.bury(id);
                self.monitors.changed(&mut self.sh, id);
            }
            (false, true) => {
                self.probing.walk_insert(&mut self.sh, id);
                self.monitors.changed(&mut self.sh, id);
                self.sh.isolation_mut().phase_mut().member_back();
            }
            // Suspected or cleared: the ring neighbours may change.
            (true, true) if was_suspect != is_suspect => self.monitors.changed(&mut self.sh, id),
            _ => {}
        }
        if state != MemberState::Suspect {
            self.clear_suspicion(id);
        }
        if was_suspect != is_suspect && self.sh.members().alive() < self.sh.cfg().corroboration {
            // Few witnesses are left: what a verdict needs may have changed.
            let ids: Vec<I> = self.suspicions.ids();
            for s in ids {
                self.suspicions
                    .rearm(&self.sh, self.recovery.synced(), &s, now);
            }
        }
    }

    /// Drops the suspicion of `id`: its accusations stop being gossiped
    /// or sent.
    fn clear_suspicion(&mut self, id: &I) {
        if let Some(s) = self.suspicions.remove(id) {
            for a in s.accusers.iter().chain(&s.discounted) {
                self.sh
                    .broadcasts_mut()
                    .remove(&(id.clone(), Some(a.clone())));
            }
            self.targeted.drop_about(id);
        }
    }

    /// `Alive(member, incarnation)`. `meta` None keeps the known metadata.
    /// `spread` re-gossips accepted news (off for bulk state merges).
    pub(crate) fn apply_alive(
        &mut self,
        now: Time,
        member: &I,
        incarnation: u32,
        meta: Option<Box<[u8]>>,
        spread: bool,
    ) {
        if *member == *self.sh.local().id() {
            let own = self.sh.local().incarnation();
            // News of a previous life of ours: supersede it. A previous
            // run (restarted without leaving) may have reached our very
            // incarnation with other metadata: at a tie, others keep the
            // metadata they have, so ours would never spread (the wire
            // versions a restarted, upgraded agent speaks, say).
            let stale_meta =
                incarnation == own && meta.as_deref().is_some_and(|m| m != self.sh.local().meta());
            if (incarnation > own || stale_meta) && !self.sh.isolation().phase().has_left() {
                self.refute(now, incarnation, None, false);
            }
            return;
        }
        let known = self
            .sh
            .members()
            .get(member)
            .map(|m| (m.state(), m.incarnation));
        // Whether everyone needs this news: a refutation (a live member's
        // incarnation raised, same metadata) needs to reach only those that
        // heard the suspicion, unless suspicions of it are gossiped.
        let mut for_all = true;
        match known {
            None => {
                let mut rec = Rec::new(incarnation, MemberState::Dead);
                rec.set(META_PENDING, meta.is_none());
                let meta = meta.unwrap_or_default();
                self.sh.members_mut().insert(member, rec, meta, now);
                self.set_state(now, member, MemberState::Alive);
                self.sh.push_event(Event::Joined {
                    member: member.clone(),
                    incarnation,
                });
            }
            Some((_, inc))
                if incarnation == inc
                    && meta.is_some()
                    && self
                        .sh
                        .members()
                        .get(member)
                        .is_some_and(|m| m.has(META_PENDING)) =>
            {
                // The header told us of this incarnation; here is its metadata.
                self.sh
                    .members_mut()
                    .update(member, |m| m.set(META_PENDING, false));
                let new = meta.unwrap_or_default();
                for_all = *new != *self.sh.members().meta(member);
                if for_all {
                    self.sh.members_mut().set_meta(member, new);
                    self.sh.push_event(Event::MetadataUpdated {
                        member: member.clone(),
                        incarnation,
                    });
                }
            }
            Some((state, inc)) if incarnation > inc => {
                self.sh.members_mut().update(member, |m| {
                    m.incarnation = incarnation;
                    m.set(META_PENDING, meta.is_none());
                });
                let meta_changed = meta
                    .as_ref()
                    .is_some_and(|new| **new != *self.sh.members().meta(member));
                if let Some(new) = meta {
                    self.sh.members_mut().set_meta(member, new);
                }
                self.set_state(now, member, MemberState::Alive);
                match state {
                    MemberState::Suspect | MemberState::Dead => {
                        self.sh.push_event(Event::Recovered {
                            member: member.clone(),
                            incarnation,
                            was_dead: state == MemberState::Dead,
                        })
                    }
                    MemberState::Left => self.sh.push_event(Event::Joined {
                        member: member.clone(),
                        incarnation,
                    }),
                    MemberState::Alive => {}
                }
                if meta_changed {
                    self.sh.push_event(Event::MetadataUpdated {
                        member: member.clone(),
                        incarnation,
                    });
                }
                for_all = meta_changed || !state.is_live();
            }
            Some(_) => return,
        }
        if spread && !for_all && !self.sh.gossips_suspicions_of(member) {
            return;
        }
        if spread {
            let msg = Message::Alive {
                member: member.clone(),
                incarnation,
                meta: self.sh.members().meta(member).into(),
            };
            self.sh
                .broadcast(now, Class::Alive, (member.clone(), None), msg);
        }
    }

    /// Whether `accuser`'s accusations are discounted: it reports poor
    /// health, or it has accused too large a share of the cluster lately.
    /// `new` counts this accusation towards that share (a renewed accusation
    /// of the same member does not count twice).
    fn discounted(&mut self, now: Time, accuser: &I, health: u8, new: bool) -> bool {
        let window = self.sh.cfg().accusation_window;
        let count = self.suspicions.count_accusation(now, accuser, window, new);
        let limit = (self.sh.cfg().accusation_burst * (self.sh.members().live() + 1) as f64)
            .ceil()
            .max(3.0) as u32;
        health >= self.sh.cfg().health_discount || count > limit
    }

    /// The gate of every accusation of `member` at `incarnation` (a
    /// suspicion, or a death verdict when `dead`): one of this node is
    /// refuted; one of a member unknown here, no longer live, or at an older
    /// incarnation goes no further (counted as stale news when the member is
    /// live). The member's state and incarnation when it passes.
    fn accused(
        &mut self,
        now: Time,
        member: &I,
        incarnation: u32,
        accuser: &I,
        dead: bool,
    ) -> Option<(MemberState, u32)> {
        if *member == *self.sh.local().id() {
            if incarnation >= self.sh.local().incarnation()
                && !self.sh.isolation().phase().has_left()
            {
                self.refute(now, incarnation, Some(accuser.clone()), dead);
            }
            return None;
        }
        let m = self.sh.members().get(member)?;
        let (state, known) = (m.state(), m.incarnation);
        if state.is_live() && incarnation < known {
            self.sh.stats_mut().stale_news += 1;
        }
        (state.is_live() && incarnation >= known).then_some((state, known))
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
        let Some((state, known)) = self.accused(now, member, incarnation, accuser, false) else {
            return;
        };
        let fresh_suspicion = state == MemberState::Alive || incarnation > known;
        let mut renewed = false;
        if !fresh_suspicion {
            let s = self.suspicions.get(member);
            if s.is_some_and(|s| s.accusers.contains(accuser)) {
                return; // Already counted.
            }
            if s.is_some_and(|s| s.discounted.contains(accuser)) {
                // Discounted before (its health was poor then, as when two
                // members fail together and each one's probes miss the
                // other's nacks): it counts once it accuses again in good
                // standing, or the verdict could wait on it forever.
                if self.discounted(now, accuser, accuser_health, false) {
                    return;
                }
                let s = self.suspicions.get_mut(member).expect("suspicion exists");
                s.discounted.retain(|a| a != accuser);
                renewed = true;
            }
        }
        let discounted = !renewed && self.discounted(now, accuser, accuser_health, true);
        if discounted {
            self.sh.stats_mut().discounted_accusations += 1;
        }
        let by_me = *accuser == *self.sh.local().id();
        if fresh_suspicion {
            self.sh.stats_mut().suspicions += 1;
            self.sh
                .members_mut()
                .update(member, |m| m.incarnation = incarnation);
            self.set_state(now, member, MemberState::Suspect);
            self.clear_suspicion(member);
            self.suspicions.start(member, now);
            self.sh.push_event(Event::Suspected {
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
            // When this accuser's silence began, counted only once it
            // counts (a discounted accusation dates nothing: a node in poor
            // health may have failed its probe on its own): ours, our failed
            // probe's ping (`probe_failed` dates it); another's, one probe
            // period before its accusation arrived.
            if !discounted {
                let period = self.sh.cfg().probe_interval.as_nanos() as u64;
                let theirs = Time::from_nanos(now.as_nanos().saturating_sub(period));
                s.silent_since
                    .push((accuser.clone(), if by_me { now } else { theirs }));
            }
        }
        let spread = fresh_suspicion || list.len() <= self.sh.cfg().expected_confirmations + 1;
        let ours_stands =
            !by_me && s.accused_at.is_some() && s.accusers.contains(self.sh.local().id());
        self.suspicions
            .rearm(&self.sh, self.recovery.synced(), member, now);
        let msg = Message::Suspect {
            member: member.clone(),
            incarnation,
            accuser: accuser.clone(),
            accuser_health,
        };
        let key = (member.clone(), Some(accuser.clone()));
        if let Some(to) = self.sh.suspicion_targets(&self.suspicions, member) {
            if by_me {
                self.targeted
                    .send(&mut self.sh, now, key, msg, to, Some(member.clone()));
            } else if ours_stands && !discounted {
                // A further accuser: tell it of our accusation once, so
                // that it counts both too (it may not have known of ours).
                let mine = Message::Suspect {
                    member: member.clone(),
                    incarnation,
                    accuser: self.sh.local().id().clone(),
                    accuser_health: self.sh.health(),
                };
                self.sh.stats_mut().targeted_sent += 1;
                self.sh.send(accuser.clone(), Channel::Datagram, vec![mine]);
            }
            return; // Targeted: nobody re-gossips another's accusation.
        }
        if !spread {
            return; // Lifeguard: enough confirmations are already travelling.
        }
        let class = if fresh_suspicion {
            Class::Suspect
        } else {
            Class::Confirmation
        };
        self.sh.broadcast(now, class, key, msg);
    }

    /// `accuser` found `member`'s port closed at `incarnation`: an
    /// accusation, by an observer in good standing as far as its health
    /// goes (the target's host answered it), that also counts towards a
    /// closed-port verdict.
    pub(crate) fn apply_closed(&mut self, now: Time, member: &I, incarnation: u32, accuser: &I) {
        if !self.sh.cfg().closed_port_evidence {
            self.apply_suspect(now, member, incarnation, accuser, 0);
            return;
        }
        if *member == *self.sh.local().id() {
            if incarnation >= self.sh.local().incarnation()
                && !self.sh.isolation().phase().has_left()
            {
                self.refute(now, incarnation, Some(accuser.clone()), false);
            }
            return;
        }
        if self
            .suspicions
            .get(member)
            .is_some_and(|s| s.closed.contains(accuser))
        {
            return;
        }
        self.apply_suspect(now, member, incarnation, accuser, 0);
        let by_me = *accuser == *self.sh.local().id();
        let Some(s) = self.suspicions.get_mut(member) else {
            return; // Old news, or not live here.
        };
        if self.sh.members().get(member).map(|m| m.incarnation) != Some(incarnation) {
            return;
        }
        if s.closed.len() < MAX_ACCUSERS {
            s.closed.push(accuser.clone());
        }
        if by_me && s.closed_at.is_none() {
            s.closed_at = Some(now);
        }
        let look_ourselves = !by_me && s.closed_at.is_none();
        self.suspicions
            .rearm(&self.sh, self.recovery.synced(), member, now);
        if look_ourselves && !self.sh.isolation().phase().is_cut_off() {
            // Someone found its port closed: ping it ourselves now, so that
            // corroboration takes a round trip, not a probe period (a probe
            // already in flight may have pinged it before it died: ping
            // again under that probe). A forged report costs one ping,
            // which the member answers.
            match self.probing.probe_of(member) {
                Some(seq) => {
                    self.sh
                        .send_ping(member.clone(), Channel::Datagram, seq, Some(incarnation));
                }
                None => self.probing.start_probe(&mut self.sh, now, member),
            }
        }
        let msg = Message::Closed {
            member: member.clone(),
            incarnation,
            accuser: accuser.clone(),
        };
        let key = (member.clone(), Some(accuser.clone()));
        match self.sh.suspicion_targets(&self.suspicions, member) {
            Some(to) if by_me => self.targeted.send(&mut self.sh, now, key, msg, to, None),
            Some(_) => {} // Targeted: the accuser told those who act on it.
            None => self.sh.broadcast(now, Class::Suspect, key, msg),
        }
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
        if self
            .accused(now, member, incarnation, declarer, true)
            .is_none()
        {
            return;
        }
        // Never let one observer convict: the verdict must rest on enough accusers.
        if usize::from(accusers) < self.sh.required_accusers(member) {
            self.sh.stats_mut().discounted_accusations += 1;
            return;
        }
        let mut evidence = self.evidence(now, member, declarer.clone());
        // The verdict rests on the declarer's accusers, whether or not this
        // node heard the suspicion (targeted suspicions reach few).
        evidence.confirmations = evidence.confirmations.max(usize::from(accusers));
        self.sh
            .members_mut()
            .update(member, |m| m.incarnation = incarnation);
        self.sh.stats_mut().deaths_accepted += 1;
        self.set_state(now, member, MemberState::Dead);
        self.sh.push_event(Event::Dead {
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
            self.sh
                .broadcast(now, Class::Dead, (member.clone(), None), msg);
        }
    }

    /// `member` left at `incarnation`.
    pub(crate) fn apply_left(&mut self, now: Time, member: &I, incarnation: u32, spread: bool) {
        if *member == *self.sh.local().id() {
            if incarnation >= self.sh.local().incarnation()
                && !self.sh.isolation().phase().has_left()
            {
                self.refute(now, incarnation, None, false);
            }
            return;
        }
        let Some(m) = self.sh.members().get(member) else {
            return;
        };
        if m.state() == MemberState::Left || incarnation < m.incarnation {
            return;
        }
        self.sh
            .members_mut()
            .update(member, |m| m.incarnation = incarnation);
        self.set_state(now, member, MemberState::Left);
        self.sh.push_event(Event::Left {
            member: member.clone(),
            incarnation,
        });
        if spread {
            let msg = Message::Left {
                member: member.clone(),
                incarnation,
            };
            self.sh
                .broadcast(now, Class::Left, (member.clone(), None), msg);
        }
    }

    /// This node was suspected, declared dead or said to have left at
    /// `observed`: raise the incarnation above it and tell everyone, the
    /// accuser first.
    pub(crate) fn refute(&mut self, now: Time, observed: u32, accuser: Option<I>, was_dead: bool) {
        self.sh.local_mut().raise_incarnation(observed);
        self.sh.stats_mut().refutations += 1;
        self.sh.bump_health(1);
        let msg = self.sh.local().alive();
        let me = self.sh.local().id().clone();
        match accuser.filter(|a| *a != *self.sh.local().id()) {
            // A suspicion went to our ring neighbours and its accusers: so
            // does the answer (a death verdict went everywhere: so does its).
            // (A metadata change still queued keeps going to everyone.)
            Some(a)
                if !was_dead
                    && self.sh.targeted_refutation(
                        self.monitors.monitored().len() + self.monitors.watchers().len(),
                    ) =>
            {
                let to = self.sh.refutation_targets(&a);
                self.targeted
                    .send(&mut self.sh, now, (me, None), msg, to, None);
            }
            a => {
                self.sh.broadcast_self_alive(now);
                if let Some(a) = a {
                    self.sh.send(a, Channel::Datagram, vec![msg]);
                }
            }
        }
        self.sh.push_event(Event::Refuted {
            incarnation: self.sh.local().incarnation(),
            was_dead,
        });
    }

    /// We have fresh proof that `id` is alive: our own accusation no longer stands.
    pub(crate) fn withdraw_accusation(&mut self, id: &I, now: Time) {
        let me = self.sh.local().id().clone();
        let Some(s) = self.suspicions.get_mut(id) else {
            return;
        };
        s.closed_at = None;
        s.closed.retain(|a| *a != me);
        if s.accused_at.take().is_some() {
            s.accusers.retain(|a| *a != me);
            self.suspicions
                .rearm(&self.sh, self.recovery.synced(), id, now);
        }
    }

    /// Silence from every member after which this node concludes that it is
    /// cut off: the longest suspicion, and at least two of its probe periods
    /// (a connected node hears acks to its own probes every period).
    fn cut_off_after(&self) -> Duration {
        self.sh
            .cfg()
            .suspicion_max
            .max(self.sh.cfg().probe_interval * 2)
    }

    /// Concludes that this node is cut off if it has heard from no member
    /// for `suspicion_max`; see the module documentation.
    pub(crate) fn check_cut_off(&mut self, now: Time) {
        if self.sh.isolation().phase().is_cut_off()
            || self.sh.isolation().phase().has_left()
            || !self.sh.large_enough_to_infer_cut_off()
            || now.saturating_since(self.sh.isolation().heard_any()) < self.cut_off_after()
        {
            return;
        }
        let seeds = !self.recovery.seeds().is_empty();
        let report = seeds && !self.sh.isolation().phase().in_fallback();
        *self.sh.isolation_mut().phase_mut() = Lifecycle::CutOff {
            fallback: self.sh.isolation().phase().in_fallback() || seeds,
        };
        self.sh.stats_mut().cut_offs += 1;
        self.withdraw_all_accusations(now);
        if seeds {
            if report {
                self.sh.push_event(Event::SeedFallback);
            }
            self.sh.timers_mut().set(Timer::SeedRetry, now);
        }
    }

    /// Takes back every accusation this node made, here and in the news
    /// still queued for others.
    fn withdraw_all_accusations(&mut self, now: Time) {
        let me = self.sh.local().id().clone();
        for id in self.suspicions.withdraw_all(&me) {
            self.sh
                .broadcasts_mut()
                .remove(&(id.clone(), Some(me.clone())));
            self.sh.stats_mut().accusations_withdrawn += 1;
            self.suspicions
                .rearm(&self.sh, self.recovery.synced(), &id, now);
        }
    }
}
