//! What a probe's outcome does to the membership: a failed probe
//! accuses its target, a closed port is evidence. The probes themselves
//! are [`crate::probe::Probing`]'s.

use crate::identity::Identity;
use crate::probe::Probe;
use crate::time::Time;
use crate::wire::{Channel, Message};

use super::Node;

impl<I: Identity> Node<I> {
    /// Our probe of a member failed: Lifeguard's health changes, and the
    /// member is suspected unless the failure is ours (cut off, or it
    /// started before we were heard again).
    pub(super) fn probe_failed(&mut self, now: Time, p: Probe<I>) {
        self.sh.stats_mut().probe_failures += 1;
        self.sh.bump_health(p.health_delta());
        if self.sh.isolation().phase().is_cut_off() || p.started() < self.sh.isolation().back_at() {
            // We hear from nobody, or did when this probe started: the
            // failure is ours, not the target's.
            self.sh.stats_mut().probe_failures_cut_off += 1;
            return;
        }
        let Some(m) = self.sh.members().get(p.target()) else {
            return;
        };
        if m.state().is_live() && m.incarnation == p.target_inc() {
            let (target, inc, health) = (p.target().clone(), m.incarnation, self.sh.health());
            let me = self.sh.local().id().clone();
            self.apply_suspect(now, &target, inc, &me, health);
            // The member has been silent since the ping went out: the
            // suspicion time runs from there, not from the probe's end.
            if self
                .suspicions
                .date_accusation(&target, &me, now, p.started())
            {
                self.suspicions
                    .rearm(&self.sh, self.recovery.synced(), &target, now);
            }
        }
    }

    /// The runtime learned that `peer`'s port is closed: an ICMP port
    /// unreachable, or a connection refused, for a packet it sent there.
    /// Only a probe in flight to `peer` (ours, or one we relay), or a
    /// heartbeat just sent to it (which starts our probe), gives it weight: our own probe accuses with closed-port evidence and asks
    /// indirect probers at once, so that they can find the same; a relayed
    /// probe answers its origin with that evidence instead of a nack.
    ///
    /// Why a stalled or frozen process never produces it: a host answers
    /// "closed" only for a port no socket is bound to. A stopped process
    /// keeps its sockets; datagrams to it queue in (or silently overflow)
    /// its socket buffer, and its listening socket still completes TCP
    /// handshakes. A dead host answers nothing at all. So silence keeps
    /// its stall tolerance, and this evidence is for crashed processes on
    /// live hosts.
    ///
    /// What spoofing it would take: hale's packets are sealed, ICMP is
    /// not. A forged "port unreachable" must quote the probe it answers
    /// (the agent pings from a fresh ephemeral port each time, which Linux
    /// checks against the connected socket), so the forger must be on the
    /// path or guess the port within the probe's second. One forged report
    /// convicts nobody: a verdict needs `corroboration` observers, each
    /// finding the port closed with its own probe, and an ack from the
    /// member withdraws an observer's finding.
    pub fn handle_unreachable(&mut self, now: Time, peer: &I) {
        self.sh.isolation_mut().advance(now);
        if self.sh.isolation().phase().has_left()
            || !self.sh.cfg().closed_port_evidence
            || *peer == *self.sh.local().id()
        {
            return;
        }
        let me = self.sh.local().id().clone();
        if self.probing.probe_of(peer).is_none()
            && self
                .monitors
                .heartbeat_within(&self.sh, peer, now, self.sh.cfg().probe_timeout)
        {
            // Our heartbeat found the port closed: probe, as a ping would have.
            self.probing.start_probe(&mut self.sh, now, peer);
        }
        if let Some(inc) = self.probing.closed_port(&mut self.sh, peer) {
            self.sh.stats_mut().closed_ports += 1;
            self.apply_closed(now, peer, inc, &me);
        }
        let mut i = 0;
        while let Some(origin) = self.probing.take_relay_to(peer, &mut i) {
            self.sh.stats_mut().closed_ports += 1;
            let inc = self.sh.members().get(peer).map_or(0, |m| m.incarnation);
            let msg = Message::Closed {
                member: peer.clone(),
                incarnation: inc,
                accuser: me.clone(),
            };
            self.sh.send(origin, Channel::Datagram, vec![msg]);
            self.apply_closed(now, peer, inc, &me);
        }
    }
}
