//! Gossip: rounds of queued news to random members, the retransmit
//! limit, and the random picks they use.

use std::time::Duration;

use rand::Rng;

use crate::broadcast::Class;
use crate::identity::Identity;
use crate::member::MemberState;
use crate::shared::Shared;
use crate::sync::Recovery;
use crate::time::{Time, Timer};
use crate::walk::Walk;
use crate::wire::{Channel, Message};

impl<I: Identity> Shared<I> {
    /// Times each piece of news is sent: `retransmit_mult * ceil(log10(N + 2))`,
    /// and never fewer than the eager burst plus four more gossip rounds
    /// (`5 * fanout + 2`). The eager burst informs all but a few percent of
    /// the cluster within milliseconds; each later round misses a given
    /// member with probability about `e^-fanout`, so four rounds leave it
    /// uninformed with probability around 1e-7. (With memberlist's
    /// `4 * log10(N)` alone, the burst and one round used the whole budget
    /// and about one member in 300 never heard a verdict; found in `hale sim`.)
    pub(crate) fn retransmit_limit(&self) -> u32 {
        let k = u64::from(crate::broadcast::ceil_log10(self.members().live() + 2));
        let by_size = (self.cfg().retransmit_mult as u64).saturating_mul(k);
        let floor = (self.cfg().gossip_fanout as u64)
            .saturating_mul(5)
            .saturating_add(2);
        by_size.max(floor).min(u64::from(u32::MAX)) as u32
    }

    /// A gossip round: queued news to `gossip_fanout` random live members,
    /// and to one member recently declared dead.
    pub(crate) fn gossip_tick(&mut self, now: Time, walk: &Walk<I>, recovery: &Recovery<I>) {
        if self.broadcasts().is_empty() {
            self.timers_mut().set(Timer::Gossip, Time::NEVER);
            return;
        }
        let at = now + self.gossip_period();
        self.timers_mut().set(Timer::Gossip, at);
        let targets = self.random_live(walk, self.cfg().gossip_fanout, None);
        for t in targets {
            self.send(t, Channel::Datagram, Vec::new());
        }
        // One round in three also goes to a member declared dead lately, so a
        // member wrongly declared dead learns it (it also learns from dead
        // notices as soon as it speaks); every round would spend a quarter of
        // the retransmit budget on members that are usually really dead.
        if self.rng().random_ratio(1, 3) {
            if let Some(dead) = self.random_recent_dead(now, recovery) {
                self.send(dead, Channel::Datagram, Vec::new());
            }
        }
    }

    /// Time to the next gossip round: `gossip_interval` while verdicts,
    /// refutations, joins, leaves or new suspicions are queued; half a probe
    /// interval when only confirmations of known suspicions are (they also
    /// ride on every probe and ack).
    fn gossip_period(&self) -> Duration {
        if self.broadcasts().has_urgent() {
            self.cfg().gossip_interval
        } else {
            self.cfg().probe_interval / 2
        }
    }

    /// Queues news and gossips it right away; but another accuser's
    /// confirmation of a suspicion already known (`Class::Confirmation`)
    /// rides on the next gossip round and on probes, without a round of its
    /// own (under a storm of stalls, rounds for every confirmation were most
    /// of the traffic).
    pub(crate) fn broadcast(
        &mut self,
        now: Time,
        class: Class,
        key: (I, Option<I>),
        msg: Message<I>,
    ) {
        self.broadcasts_mut().push(class, key, msg);
        self.stats_mut().broadcasts_dropped = self.broadcasts().dropped();
        let due = match class {
            Class::Confirmation => now + self.gossip_period(),
            _ => now,
        };
        let at = self.timers().get(Timer::Gossip).min(due);
        self.timers_mut().set(Timer::Gossip, at);
    }

    /// Up to `k` distinct random live members, never `except`.
    pub(crate) fn random_live(&mut self, walk: &Walk<I>, k: usize, except: Option<&I>) -> Vec<I> {
        self.random_members(walk, k, except, MemberState::is_live)
    }

    /// Up to `k` distinct random members that are alive and unsuspected,
    /// never `except`: the members that can be expected to relay a probe
    /// and nack it.
    pub(crate) fn random_unsuspected(
        &mut self,
        walk: &Walk<I>,
        k: usize,
        except: Option<&I>,
    ) -> Vec<I> {
        self.random_members(walk, k, except, |s| s == MemberState::Alive)
    }

    /// Up to `k` distinct random members of the walk whose state is
    /// `wanted`, never `except` (at most `4k` draws).
    fn random_members(
        &mut self,
        walk: &Walk<I>,
        k: usize,
        except: Option<&I>,
        wanted: impl Fn(MemberState) -> bool,
    ) -> Vec<I> {
        let mut out: Vec<I> = Vec::with_capacity(k);
        if walk.is_empty() || k == 0 {
            return out;
        }
        for _ in 0..k * 4 {
            if out.len() >= k.min(self.members().live()) {
                break;
            }
            let Some(c) = walk.get(self.rng().random_range(0..walk.len())) else {
                break;
            };
            let ok = self.members().get(&c).is_some_and(|m| wanted(m.state()))
                && Some(&*c) != except
                && !out.contains(&c);
            if ok {
                out.push(c.into_owned());
            }
        }
        out
    }

    /// A random tombstone, if it is a member declared dead within
    /// `gossip_to_dead`.
    fn random_recent_dead(&mut self, now: Time, recovery: &Recovery<I>) -> Option<I> {
        let c = recovery.random_tombstone(&mut self.rng())?;
        let m = self.members().get(c)?;
        (m.state() == MemberState::Dead
            && now.saturating_since(self.members().since(c)) < self.cfg().gossip_to_dead)
            .then(|| c.clone())
    }

    /// Gossips this node's own `Alive` (a new incarnation or metadata).
    pub(crate) fn broadcast_self_alive(&mut self, now: Time) {
        let msg = self.local().alive();
        self.broadcast(now, Class::Alive, (self.local().id().clone(), None), msg);
    }
}
