//! Faults and other scheduled actions: what [`Action`]s do to the nodes
//! and the network, and resuming frozen or stalled nodes.

use std::time::Duration;

use rand::Rng;

use hale_core::{Node, Time};

use super::{Action, Ev, Sim, Slot, Status};
use crate::id::SimId;
use crate::net::Network;

impl Sim {
    pub(super) fn resume(&mut self, i: u32) {
        let slot = &mut self.slots[i as usize];
        match slot.status {
            Status::Frozen(until) | Status::Stalled(until) if until <= self.now => {}
            _ => return,
        }
        slot.status = Status::Up;
        self.observer.resumed(i, self.now);
        let queued = std::mem::take(&mut self.slots[i as usize].queued);
        for (channel, payload) in queued {
            self.with_node(i, |n, now| super::payload::hand(n, now, channel, payload));
        }
        // Force a timer check: the node's timers are all overdue.
        self.slots[i as usize].timer_at = Time::NEVER;
        self.with_node(i, Node::handle_timeout);
    }

    fn live_seeds(&mut self, except: u32, k: usize) -> Vec<SimId> {
        let up: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&j| j != except && self.slots[j as usize].status == Status::Up)
            .collect();
        let mut out = Vec::new();
        for _ in 0..k.min(up.len()) {
            let j = up[self.rng.random_range(0..up.len())];
            if !out.contains(&SimId(j)) {
                out.push(SimId(j));
            }
        }
        out
    }

    /// Starts node `i` afresh, joining through up to three live members.
    fn start(&mut self, i: u32) {
        let seeds = self.live_seeds(i, 3);
        let mut node = self.make_node(i);
        node.join(self.now, seeds);
        let s = &mut self.slots[i as usize];
        s.node = Some(node);
        s.status = Status::Up;
        s.timer_at = Time::NEVER;
    }

    pub(super) fn act(&mut self, a: Action) {
        let now = self.now;
        self.observer.action(now, &a);
        match a {
            Action::Crash(i) | Action::Kill(i) => {
                if matches!(a, Action::Kill(_)) {
                    self.closed_ports.insert(i);
                }
                let s = &mut self.slots[i as usize];
                s.status = Status::Crashed;
                s.node = None;
                s.queued.clear();
            }
            Action::Freeze(i, d) | Action::Stall(i, d) => {
                let until = now + d;
                let s = &mut self.slots[i as usize];
                if s.status != Status::Up {
                    return;
                }
                s.status = if matches!(a, Action::Freeze(..)) {
                    Status::Frozen(until)
                } else {
                    Status::Stalled(until)
                };
                self.push(until, Ev::Resume { node: i });
            }
            Action::Slow(i, d) => {
                if self.slow.len() <= i as usize {
                    self.slow.resize(i as usize + 1, Duration::ZERO);
                }
                self.slow[i as usize] = d;
            }
            Action::Restart(i) => {
                if self.slots[i as usize].status != Status::Crashed {
                    return;
                }
                self.closed_ports.remove(&i);
                self.start(i);
                self.after_io(i);
            }
            Action::Leave(i) => {
                let _ = self.with_node(i, Node::leave);
                // The process exits shortly after announcing its departure.
                self.slots[i as usize].status = Status::Left;
            }
            Action::Join(i) => {
                let i = i.max(self.slots.len() as u32);
                self.slots.resize_with(i as usize + 1, || Slot {
                    node: None,
                    status: Status::Crashed,
                    timer_at: Time::NEVER,
                    traffic_gen: 0,
                    queued: Vec::new(),
                });
                self.start(i);
                self.observer.node_added(i, now);
                self.after_io(i);
                if self.traffic_rate > 0.0 {
                    let gen = self.slots[i as usize].traffic_gen;
                    let at = now + self.exp_interval();
                    self.push(at, Ev::Traffic { node: i, gen });
                }
            }
            Action::Loss(p) => self.net.loss = p,
            Action::IngressLoss(i, p) => {
                self.net.ingress_loss.insert(i, p);
            }
            Action::EgressLoss(i, p) => {
                self.net.egress_loss.insert(i, p);
            }
            Action::BlockIngress(i, on) => set_flag(&mut self.net.ingress_blocked, i, on),
            Action::BlockEgress(i, on) => set_flag(&mut self.net.egress_blocked, i, on),
            Action::CutOff(i, on) => {
                set_flag(&mut self.net.ingress_blocked, i, on);
                set_flag(&mut self.net.egress_blocked, i, on);
            }
            Action::Partition(groups) => {
                self.net.group.clear();
                for (g, members) in groups.iter().enumerate() {
                    for &m in members {
                        self.net.group.insert(m, g as u32 + 1);
                    }
                }
            }
            Action::Heal => {
                self.net = Network {
                    latency: self.net.latency,
                    jitter: self.net.jitter,
                    loss: self.net.loss,
                    ..Network::default()
                };
            }
            Action::Traffic(r) => self.set_traffic(r),
        }
    }
}

fn set_flag(set: &mut rustc_hash::FxHashSet<u32>, i: u32, on: bool) {
    if on {
        set.insert(i);
    } else {
        set.remove(&i);
    }
}
