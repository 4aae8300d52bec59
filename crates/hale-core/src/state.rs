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

use std::collections::BTreeSet;
use std::time::Duration;

use crate::broadcast::Class;
use crate::event::Event;
use crate::identity::Identity;
use crate::member::MemberState;
use crate::node::Node;
use crate::table::FxMap;
use crate::table::{Rec, META_PENDING};
use crate::time::Time;
use crate::wire::{Channel, Message};

/// Most accusers remembered per suspicion.
const MAX_ACCUSERS: usize = 16;

/// Members a declarer sends its own verdict to at once, before gossip
/// (a death is rare; 32 datagrams reach everyone in most clusters).
pub(crate) const VERDICT_FANOUT: usize = 32;

/// What this node knows about one suspected member.
#[derive(Debug, Clone)]
pub(crate) struct Suspicion<I> {
    pub(crate) started: Time,
    /// When this node's own probe failed, if it did.
    pub(crate) accused_at: Option<Time>,
    /// Independent healthy accusers (this node included when it accused while healthy).
    pub(crate) accusers: Vec<I>,
    /// When each accuser's silence began, as far as this node can tell: its
    /// own failed probe's first ping; another's accusation, one probe
    /// period before it arrived (a probe fails that long after its ping).
    pub(crate) silent_since: Vec<(I, Time)>,
    pub(crate) discounted: Vec<I>,
    /// When it is next looked at: kept by [`Suspicions`] with its index.
    deadline: Time,
    /// A verification probe was started before a verdict on others' word.
    pub(crate) verifying: bool,
    /// Accusers that found the member's port closed (this node included).
    pub(crate) closed: Vec<I>,
    /// When this node itself found the member's port closed.
    pub(crate) closed_at: Option<Time>,
}

/// Accusations made by one accuser in the current window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AccuserWindow {
    pub(crate) start: Time,
    pub(crate) count: u32,
}

/// Every suspicion this node holds, when each is next looked at, and how
/// much each accuser has accused lately.
///
/// Invariants: `deadlines` holds `(s.deadline, id)` for every suspicion
/// `s` of `id` whose deadline is set (not `NEVER`); it may also hold stale
/// entries (an earlier deadline of the same suspicion, which
/// [`Suspicions::pop_due`] skips), exactly as many as the rules leave, as
/// their times are timer deadlines. Every suspicion is of a suspected member.
#[derive(Debug)]
pub(crate) struct Suspicions<I> {
    map: FxMap<I, Suspicion<I>>,
    deadlines: BTreeSet<(Time, I)>,
    accusers: FxMap<I, AccuserWindow>,
}

impl<I: Identity> Suspicions<I> {
    /// None.
    pub(crate) fn new() -> Suspicions<I> {
        Suspicions {
            map: FxMap::default(),
            deadlines: BTreeSet::new(),
            accusers: FxMap::default(),
        }
    }

    /// The suspicion of `id`.
    pub(crate) fn get(&self, id: &I) -> Option<&Suspicion<I>> {
        self.map.get(id)
    }

    /// The suspicion of `id`, to add evidence (not its deadline).
    fn get_mut(&mut self, id: &I) -> Option<&mut Suspicion<I>> {
        self.map.get_mut(id)
    }

    /// Drops the suspicion of `id` and its deadline.
    fn remove(&mut self, id: &I) -> Option<Suspicion<I>> {
        let s = self.map.remove(id)?;
        self.deadlines.remove(&(s.deadline, id.clone()));
        Some(s)
    }

    /// Moves the deadline of the suspicion of `id` to `t`.
    pub(crate) fn set_deadline(&mut self, id: &I, t: Time) {
        if let Some(s) = self.map.get_mut(id) {
            self.deadlines.remove(&(s.deadline, id.clone()));
            s.deadline = t;
            self.deadlines.insert((t, id.clone()));
        }
    }

    /// Sets the deadline of `id` (unset by [`Suspicions::pop_due`]) to `t`.
    pub(crate) fn add_deadline(&mut self, id: &I, t: Time) {
        if let Some(s) = self.map.get_mut(id) {
            s.deadline = t;
            self.deadlines.insert((t, id.clone()));
        }
    }

    /// A verification probe of `id` starts; it is looked at again at `t`.
    pub(crate) fn verify(&mut self, id: &I, t: Time) {
        if let Some(s) = self.map.get_mut(id) {
            s.verifying = true;
        }
        self.add_deadline(id, t);
    }

    /// A suspicion whose deadline is `now` or earlier, its deadline unset.
    pub(crate) fn pop_due(&mut self, now: Time) -> Option<I> {
        while let Some((t, id)) = self.deadlines.first().cloned() {
            if t > now {
                break;
            }
            self.deadlines.remove(&(t, id.clone()));
            match self.map.get_mut(&id) {
                Some(s) if s.deadline == t => {
                    s.deadline = Time::NEVER;
                    return Some(id);
                }
                _ => {} // A stale entry (an earlier suspicion of the member).
            }
        }
        None
    }

    /// The earliest deadline.
    pub(crate) fn next_deadline(&self) -> Time {
        self.deadlines.first().map_or(Time::NEVER, |(t, _)| *t)
    }

    /// Moves every deadline before `floor` to `floor` (after a pause).
    pub(crate) fn postpone(&mut self, floor: Time, me: &I) {
        let late: Vec<(Time, I)> = self
            .deadlines
            .range(..(floor, me.clone()))
            .cloned()
            .collect();
        for (d, id) in late {
            self.deadlines.remove(&(d, id.clone()));
            if let Some(s) = self.map.get_mut(&id) {
                s.deadline = floor;
            }
            self.deadlines.insert((floor, id));
        }
    }

    /// Dates `me`'s fresh accusation of `id` (made `now`) back to `started`,
    /// when its probe began; whether it did.
    pub(crate) fn date_accusation(&mut self, id: &I, me: &I, now: Time, started: Time) -> bool {
        let Some(s) = self.map.get_mut(id).filter(|s| s.accused_at == Some(now)) else {
            return false;
        };
        s.accused_at = Some(started);
        for (a, t) in &mut s.silent_since {
            if a == me {
                *t = started;
            }
        }
        true
    }

    /// Takes back every accusation `me` made; the members, in order.
    pub(crate) fn withdraw_all(&mut self, me: &I) -> Vec<I> {
        let mut mine: Vec<I> = self
            .map
            .iter()
            .filter(|(_, s)| {
                s.accused_at.is_some() || s.accusers.contains(me) || s.discounted.contains(me)
            })
            .map(|(id, _)| id.clone())
            .collect();
        mine.sort_unstable();
        for id in &mine {
            if let Some(s) = self.map.get_mut(id) {
                s.accused_at = None;
                s.closed_at = None;
                s.closed.retain(|a| a != me);
                s.accusers.retain(|a| a != me);
                s.discounted.retain(|a| a != me);
            }
        }
        mine
    }

    /// Forgets accusers' windows older than `window`.
    pub(crate) fn forget_accusers(&mut self, now: Time, window: Duration) {
        self.accusers
            .retain(|_, w| now.saturating_since(w.start) <= window);
    }
}

impl<I: Identity> Node<I> {
    /// Moves a member to `state`, keeping counts, the walk, the monitors and
    /// tombstones consistent.
    pub(crate) fn set_state(&mut self, now: Time, id: &I, state: MemberState) {
        let Some(was) = self.members.set_state(id, state, now) else {
            return;
        };
        let (was_live, was_suspect) = (was.is_live(), was == MemberState::Suspect);
        let is_suspect = state == MemberState::Suspect;
        match (was_live, state.is_live()) {
            (true, false) => {
                self.recovery.bury(id);
                self.monitors_changed(id);
            }
            (false, true) => {
                self.walk_insert(id);
                self.monitors_changed(id);
                self.isolation.phase_mut().member_back();
            }
            // Suspected or cleared: the ring neighbours may change.
            (true, true) if was_suspect != is_suspect => self.monitors_changed(id),
            _ => {}
        }
        if state != MemberState::Suspect {
            self.clear_suspicion(id);
        }
        if was_suspect != is_suspect && self.members.alive() < self.cfg.corroboration {
            // Few witnesses are left: what a verdict needs may have changed.
            let ids: Vec<I> = self.suspicions.map.keys().cloned().collect();
            for s in ids {
                self.rearm(&s, now);
            }
        }
    }

    fn clear_suspicion(&mut self, id: &I) {
        if let Some(s) = self.suspicions.remove(id) {
            for a in s.accusers.iter().chain(&s.discounted) {
                self.broadcasts.remove(&(id.clone(), Some(a.clone())));
            }
            self.drop_targeted_about(id);
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
        if *member == *self.local.id() {
            let own = self.local.incarnation();
            // News of a previous life of ours: supersede it. A previous
            // run (restarted without leaving) may have reached our very
            // incarnation with other metadata: at a tie, others keep the
            // metadata they have, so ours would never spread (the wire
            // versions a restarted, upgraded agent speaks, say).
            let stale_meta =
                incarnation == own && meta.as_deref().is_some_and(|m| m != self.local.meta());
            if (incarnation > own || stale_meta) && !self.isolation.phase().has_left() {
                self.refute(now, incarnation, None, false);
            }
            return;
        }
        let known = self.members.get(member).map(|m| (m.state(), m.incarnation));
        // Whether everyone needs this news: a refutation (a live member's
        // incarnation raised, same metadata) needs to reach only those that
        // heard the suspicion, unless suspicions of it are gossiped.
        let mut for_all = true;
        match known {
            None => {
                let mut rec = Rec::new(incarnation, MemberState::Dead);
                rec.set(META_PENDING, meta.is_none());
                let meta = meta.unwrap_or_default();
                self.members.insert(member, rec, meta, now);
                self.set_state(now, member, MemberState::Alive);
                self.push_event(Event::Joined {
                    member: member.clone(),
                    incarnation,
                });
            }
            Some((_, inc))
                if incarnation == inc
                    && meta.is_some()
                    && self
                        .members
                        .get(member)
                        .is_some_and(|m| m.has(META_PENDING)) =>
            {
                // The header told us of this incarnation; here is its metadata.
                self.members.update(member, |m| m.set(META_PENDING, false));
                let new = meta.unwrap_or_default();
                for_all = *new != *self.members.meta(member);
                if for_all {
                    self.members.set_meta(member, new);
                    self.push_event(Event::MetadataUpdated {
                        member: member.clone(),
                        incarnation,
                    });
                }
            }
            Some((state, inc)) if incarnation > inc => {
                self.members.update(member, |m| {
                    m.incarnation = incarnation;
                    m.set(META_PENDING, meta.is_none());
                });
                let meta_changed = meta
                    .as_ref()
                    .is_some_and(|new| **new != *self.members.meta(member));
                if let Some(new) = meta {
                    self.members.set_meta(member, new);
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
                for_all = meta_changed || !state.is_live();
            }
            Some(_) => return,
        }
        if spread && !for_all && !self.gossips_suspicions_of(member) {
            return;
        }
        if spread {
            let msg = Message::Alive {
                member: member.clone(),
                incarnation,
                meta: self.members.meta(member).into(),
            };
            self.broadcast(now, Class::Alive, (member.clone(), None), msg);
        }
    }

    /// Whether `accuser`'s accusations are discounted: it reports poor
    /// health, or it has accused too large a share of the cluster lately.
    /// `new` counts this accusation towards that share (a renewed accusation
    /// of the same member does not count twice).
    fn discounted(&mut self, now: Time, accuser: &I, health: u8, new: bool) -> bool {
        let window = self.cfg.accusation_window;
        let w = self
            .suspicions
            .accusers
            .entry(accuser.clone())
            .or_insert(AccuserWindow {
                start: now,
                count: 0,
            });
        if now.saturating_since(w.start) > window {
            *w = AccuserWindow {
                start: now,
                count: 0,
            };
        }
        w.count += u32::from(new);
        let limit = (self.cfg.accusation_burst * (self.members.live() + 1) as f64)
            .ceil()
            .max(3.0) as u32;
        health >= self.cfg.health_discount || w.count > limit
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
        if *member == *self.local.id() {
            if incarnation >= self.local.incarnation() && !self.isolation.phase().has_left() {
                self.refute(now, incarnation, Some(accuser.clone()), dead);
            }
            return None;
        }
        let m = self.members.get(member)?;
        let (state, known) = (m.state(), m.incarnation);
        if state.is_live() && incarnation < known {
            self.stats.stale_news += 1;
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
            self.stats.discounted_accusations += 1;
        }
        let by_me = *accuser == *self.local.id();
        if fresh_suspicion {
            self.stats.suspicions += 1;
            self.members.update(member, |m| m.incarnation = incarnation);
            self.set_state(now, member, MemberState::Suspect);
            self.clear_suspicion(member);
            self.suspicions.map.insert(
                member.clone(),
                Suspicion {
                    started: now,
                    accused_at: None,
                    accusers: Vec::new(),
                    silent_since: Vec::new(),
                    discounted: Vec::new(),
                    deadline: Time::NEVER,
                    verifying: false,
                    closed: Vec::new(),
                    closed_at: None,
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
            // When this accuser's silence began, counted only once it
            // counts (a discounted accusation dates nothing: a node in poor
            // health may have failed its probe on its own): ours, our failed
            // probe's ping (`probe_failed` dates it); another's, one probe
            // period before its accusation arrived.
            if !discounted {
                let period = self.cfg.probe_interval.as_nanos() as u64;
                let theirs = Time::from_nanos(now.as_nanos().saturating_sub(period));
                s.silent_since
                    .push((accuser.clone(), if by_me { now } else { theirs }));
            }
        }
        let spread = fresh_suspicion || list.len() <= self.cfg.expected_confirmations + 1;
        let ours_stands = !by_me && s.accused_at.is_some() && s.accusers.contains(self.local.id());
        self.rearm(member, now);
        let msg = Message::Suspect {
            member: member.clone(),
            incarnation,
            accuser: accuser.clone(),
            accuser_health,
        };
        let key = (member.clone(), Some(accuser.clone()));
        if let Some(to) = self.suspicion_targets(member) {
            if by_me {
                self.send_targeted(now, key, msg, to, Some(member.clone()));
            } else if ours_stands && !discounted {
                // A further accuser: tell it of our accusation once, so
                // that it counts both too (it may not have known of ours).
                let mine = Message::Suspect {
                    member: member.clone(),
                    incarnation,
                    accuser: self.local.id().clone(),
                    accuser_health: self.probing.health(),
                };
                self.stats.targeted_sent += 1;
                self.send(accuser.clone(), Channel::Datagram, vec![mine]);
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
        self.broadcast(now, class, key, msg);
    }

    /// `accuser` found `member`'s port closed at `incarnation`: an
    /// accusation, by an observer in good standing as far as its health
    /// goes (the target's host answered it), that also counts towards a
    /// closed-port verdict.
    pub(crate) fn apply_closed(&mut self, now: Time, member: &I, incarnation: u32, accuser: &I) {
        if !self.cfg.closed_port_evidence {
            self.apply_suspect(now, member, incarnation, accuser, 0);
            return;
        }
        if *member == *self.local.id() {
            if incarnation >= self.local.incarnation() && !self.isolation.phase().has_left() {
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
        let by_me = *accuser == *self.local.id();
        let Some(s) = self.suspicions.get_mut(member) else {
            return; // Old news, or not live here.
        };
        if self.members.get(member).map(|m| m.incarnation) != Some(incarnation) {
            return;
        }
        if s.closed.len() < MAX_ACCUSERS {
            s.closed.push(accuser.clone());
        }
        if by_me && s.closed_at.is_none() {
            s.closed_at = Some(now);
        }
        let look_ourselves = !by_me && s.closed_at.is_none();
        self.rearm(member, now);
        if look_ourselves && !self.isolation.phase().is_cut_off() {
            // Someone found its port closed: ping it ourselves now, so that
            // corroboration takes a round trip, not a probe period (a probe
            // already in flight may have pinged it before it died: ping
            // again under that probe). A forged report costs one ping,
            // which the member answers.
            match self.probing.probe_of(member) {
                Some(seq) => {
                    self.send_ping(member.clone(), Channel::Datagram, seq, Some(incarnation));
                }
                None => self.start_probe(now, member),
            }
        }
        let msg = Message::Closed {
            member: member.clone(),
            incarnation,
            accuser: accuser.clone(),
        };
        let key = (member.clone(), Some(accuser.clone()));
        match self.suspicion_targets(member) {
            Some(to) if by_me => self.send_targeted(now, key, msg, to, None),
            Some(_) => {} // Targeted: the accuser told those who act on it.
            None => self.broadcast(now, Class::Suspect, key, msg),
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
        if usize::from(accusers) < self.required_accusers(member) {
            self.stats.discounted_accusations += 1;
            return;
        }
        let mut evidence = self.evidence(now, member, declarer.clone());
        // The verdict rests on the declarer's accusers, whether or not this
        // node heard the suspicion (targeted suspicions reach few).
        evidence.confirmations = evidence.confirmations.max(usize::from(accusers));
        self.members.update(member, |m| m.incarnation = incarnation);
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
        if *member == *self.local.id() {
            if incarnation >= self.local.incarnation() && !self.isolation.phase().has_left() {
                self.refute(now, incarnation, None, false);
            }
            return;
        }
        let Some(m) = self.members.get(member) else {
            return;
        };
        if m.state() == MemberState::Left || incarnation < m.incarnation {
            return;
        }
        self.members.update(member, |m| m.incarnation = incarnation);
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
        self.local.raise_incarnation(observed);
        self.stats.refutations += 1;
        self.bump_health(1);
        let msg = self.local.alive();
        let me = self.local.id().clone();
        match accuser.filter(|a| *a != *self.local.id()) {
            // A suspicion went to our ring neighbours and its accusers: so
            // does the answer (a death verdict went everywhere: so does its).
            // (A metadata change still queued keeps going to everyone.)
            Some(a) if !was_dead && self.targeted_refutation() => {
                let to = self.refutation_targets(&a);
                self.send_targeted(now, (me, None), msg, to, None);
            }
            a => {
                self.broadcast_self_alive(now);
                if let Some(a) = a {
                    self.send(a, Channel::Datagram, vec![msg]);
                }
            }
        }
        self.push_event(Event::Refuted {
            incarnation: self.local.incarnation(),
            was_dead,
        });
    }

    /// We have fresh proof that `id` is alive: our own accusation no longer stands.
    pub(crate) fn withdraw_accusation(&mut self, id: &I, now: Time) {
        let me = self.local.id().clone();
        let Some(s) = self.suspicions.get_mut(id) else {
            return;
        };
        s.closed_at = None;
        s.closed.retain(|a| *a != me);
        if s.accused_at.take().is_some() {
            s.accusers.retain(|a| *a != me);
            self.rearm(id, now);
        }
    }
}
