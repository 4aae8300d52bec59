//! The virtual network: latency, jitter, loss, partitions, one-way blocks,
//! and a TCP-like stream path.

use std::time::Duration;

use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rustc_hash::{FxHashMap, FxHashSet};

use hale_core::Channel;

/// Link and loss settings. Everything is per direction.
#[derive(Debug, Clone)]
pub struct Network {
    /// One-way latency of every link.
    pub latency: Duration,
    /// Uniform extra latency in `[0, jitter)`.
    pub jitter: Duration,
    /// Probability that any datagram is lost.
    pub loss: f64,
    /// Extra loss of datagrams sent by a node.
    pub egress_loss: FxHashMap<u32, f64>,
    /// Extra loss of datagrams received by a node.
    pub ingress_loss: FxHashMap<u32, f64>,
    /// Partition group of each node (absent: group 0). Nodes in different
    /// groups cannot exchange anything.
    pub group: FxHashMap<u32, u32>,
    /// Nodes that receive nothing (one-way isolation).
    pub ingress_blocked: FxHashSet<u32>,
    /// Nodes that send nothing.
    pub egress_blocked: FxHashSet<u32>,
    /// Streams lose nothing but are retransmitted: each datagram-loss event
    /// on their path costs this much delay, and a stream gives up after 5.
    pub stream_rto: Duration,
}

impl Default for Network {
    fn default() -> Self {
        Network {
            latency: Duration::from_micros(500),
            jitter: Duration::from_micros(500),
            loss: 0.0,
            egress_loss: FxHashMap::default(),
            ingress_loss: FxHashMap::default(),
            group: FxHashMap::default(),
            ingress_blocked: FxHashSet::default(),
            egress_blocked: FxHashSet::default(),
            stream_rto: Duration::from_millis(200),
        }
    }
}

impl Network {
    /// Whether anything can go from `from` to `to` at all.
    pub fn connected(&self, from: u32, to: u32) -> bool {
        self.group.get(&from).copied().unwrap_or(0) == self.group.get(&to).copied().unwrap_or(0)
            && !self.egress_blocked.contains(&from)
            && !self.ingress_blocked.contains(&to)
    }

    fn loss_between(&self, from: u32, to: u32) -> f64 {
        let keep = (1.0 - self.loss)
            * (1.0 - self.egress_loss.get(&from).copied().unwrap_or(0.0))
            * (1.0 - self.ingress_loss.get(&to).copied().unwrap_or(0.0));
        1.0 - keep
    }

    /// The delay of a packet from `from` to `to`, or None if it is lost.
    pub fn route(
        &self,
        rng: &mut Xoshiro256PlusPlus,
        from: u32,
        to: u32,
        channel: Channel,
    ) -> Option<Duration> {
        if !self.connected(from, to) {
            return None;
        }
        let p = self.loss_between(from, to);
        let mut delay = self.latency;
        if !self.jitter.is_zero() {
            delay += self.jitter.mul_f64(rng.random::<f64>());
        }
        match channel {
            Channel::Datagram => (p == 0.0 || rng.random::<f64>() >= p).then_some(delay),
            Channel::Stream => {
                // Handshake and data: each lost attempt costs a retransmission timeout.
                let mut tries = 0;
                while p > 0.0 && rng.random::<f64>() < p {
                    tries += 1;
                    if tries >= 5 {
                        return None;
                    }
                    delay += self.stream_rto * (1 << (tries - 1));
                }
                Some(delay * 2)
            }
        }
    }
}
