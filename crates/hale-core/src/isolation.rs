//! Knowing when this node is the one cut off.
//!
//! A member that hears from nobody at all cannot tell "everyone else died"
//! from "my own paths failed" by its probes: both look like every probe
//! failing. In a cluster of more members than a verdict needs accusers, the
//! second is overwhelmingly the likely one (a flaky top-of-rack switch, a
//! firewall reload on this host, an unplugged cable), and concluding the
//! first evicts healthy siblings: the second incident's class of bug. So a
//! node that has heard from no member for `suspicion_max` (and at least two
//! probe periods) while more than `corroboration` others are live in its
//! view concludes that **it** is cut off, and then:
//!
//! * it withdraws every accusation it made (its own failed probes since the
//!   last time it heard from anyone prove nothing about the others), here and
//!   in its queue of news, so that they never meet other returning members'
//!   accusations after the paths come back;
//! * it accuses nobody and convicts nobody while cut off (its probes still
//!   run, and still raise its Lifeguard local health score), nor on the
//!   probes it started while cut off that fail after its return;
//! * it contacts its seeds every `seed_retry_interval`
//!   ([`crate::Event::SeedFallback`] once), so it rejoins by itself.
//!
//! The first packet from any member ends it. In a cluster too small for
//! that inference (every other member may really have failed at once, as
//! when both peers of a three-member cluster crash) the node still
//! concludes on its own failed probes, and nobody else accepts such a
//! verdict, which rests on one accuser.

use crate::event::Event;
use crate::identity::Identity;
use crate::node::Node;
use crate::time::Time;

impl<I: Identity> Node<I> {
    /// Whether this node has concluded that it is cut off from the cluster.
    pub fn is_cut_off(&self) -> bool {
        self.cut_off
    }

    /// Any packet from another member of the cluster, or traffic from one,
    /// arrived: this node is not cut off.
    pub(crate) fn heard_from_someone(&mut self, now: Time) {
        self.heard_any = self.heard_any.max(now);
        if self.cut_off {
            self.cut_off = false;
            self.in_fallback = false;
            self.back_at = now;
        }
    }

    /// Whether a cluster this size lets a node that hears from nobody infer
    /// that it is the one cut off.
    pub(crate) fn large_enough_to_infer_cut_off(&self) -> bool {
        self.live > self.cfg.corroboration
    }

    /// Silence from every member after which this node concludes that it is
    /// cut off: the longest suspicion, and at least two of its probe periods
    /// (a connected node hears acks to its own probes every period).
    fn cut_off_after(&self) -> std::time::Duration {
        self.cfg.suspicion_max.max(self.cfg.probe_interval * 2)
    }

    /// Concludes that this node is cut off if it has heard from no member
    /// for `suspicion_max`; see the module documentation.
    pub(crate) fn check_cut_off(&mut self, now: Time) {
        if self.cut_off
            || self.left
            || !self.large_enough_to_infer_cut_off()
            || now.saturating_since(self.heard_any) < self.cut_off_after()
        {
            return;
        }
        self.cut_off = true;
        self.stats.cut_offs += 1;
        self.withdraw_all_accusations(now);
        if !self.seeds.is_empty() {
            if !self.in_fallback {
                self.in_fallback = true;
                self.push_event(Event::SeedFallback);
            }
            self.next_seed_retry = now;
        }
    }

    /// Takes back every accusation this node made, here and in the news
    /// still queued for others.
    fn withdraw_all_accusations(&mut self, now: Time) {
        let mut mine: Vec<I> = self
            .suspicions
            .iter()
            .filter(|(_, s)| {
                s.accused_at.is_some()
                    || s.accusers.contains(&self.me)
                    || s.discounted.contains(&self.me)
            })
            .map(|(id, _)| id.clone())
            .collect();
        mine.sort_unstable();
        for id in mine {
            let me = self.me.clone();
            if let Some(s) = self.suspicions.get_mut(&id) {
                s.accused_at = None;
                s.closed_at = None;
                s.closed.retain(|a| *a != me);
                s.accusers.retain(|a| *a != me);
                s.discounted.retain(|a| *a != me);
            }
            self.broadcasts.remove(&(id.clone(), Some(me)));
            self.stats.accusations_withdrawn += 1;
            self.rearm(&id, now);
        }
    }
}
