//! The queue of news to piggyback on packets: most urgent and least sent first.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use crate::identity::Identity;
use crate::wire::Message;

/// Urgency classes: lower goes first. Alive (refutations, joins) before
/// leaves, before deaths, before suspicions, before further accusers'
/// confirmations of them, so that a refutation is never starved by the
/// accusations it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Class {
    Alive = 0,
    Left = 1,
    Dead = 2,
    Suspect = 3,
    Confirmation = 4,
}

/// `ceil(log10(n))` for `n >= 1`, in integers: the smallest `k` with
/// `10^k >= n` (the retransmit limit's size rule, computed on every send).
pub(crate) fn ceil_log10(n: usize) -> u32 {
    let mut k = 0;
    let mut p: usize = 1;
    while p < n {
        k += 1;
        p = p.saturating_mul(10);
    }
    k
}

/// Order: class, then fewest transmissions, then newest.
type Order = (Class, u32, Reverse<u64>);

/// A news key: the member it is about, and the accuser for suspicions (so
/// that independent confirmations travel separately).
pub(crate) type Key<I> = (I, Option<I>);

#[derive(Debug)]
struct Item<I> {
    key: Key<I>,
    msg: Message<I>,
    len: usize,
}

#[derive(Debug)]
pub(crate) struct Broadcasts<I: Identity> {
    queue: BTreeMap<Order, Item<I>>,
    index: HashMap<Key<I>, Order, rustc_hash::FxBuildHasher>,
    next_id: u64,
    max: usize,
    dropped: u64,
    /// Scratch for `take` (reused: `take` runs for every datagram sent).
    picked: Vec<Order>,
}

impl<I: Identity> Broadcasts<I> {
    pub(crate) fn new(max: usize) -> Self {
        Broadcasts {
            queue: BTreeMap::new(),
            index: HashMap::default(),
            next_id: 0,
            max,
            dropped: 0,
            picked: Vec::new(),
        }
    }

    /// News dropped because the queue was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether anything but confirmations is queued.
    pub(crate) fn has_urgent(&self) -> bool {
        self.queue
            .first_key_value()
            .is_some_and(|(o, _)| o.0 < Class::Confirmation)
    }

    /// Queues `msg`, replacing older news with the same key.
    pub(crate) fn push(&mut self, class: Class, key: Key<I>, msg: Message<I>) {
        self.remove(&key);
        self.next_id += 1;
        let order = (class, 0, Reverse(self.next_id));
        let len = msg.encoded_len();
        self.index.insert(key.clone(), order);
        self.queue.insert(order, Item { key, msg, len });
        while self.queue.len() > self.max {
            // Drop the least urgent, most transmitted, oldest.
            if let Some((_, item)) = self.queue.pop_last() {
                self.index.remove(&item.key);
                self.dropped += 1;
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &Key<I>) {
        if let Some(order) = self.index.remove(key) {
            self.queue.remove(&order);
        }
    }

    /// Takes news that fits in `budget` bytes, in order, counting one
    /// transmission each; news of class `c` sent `limits[c]` times is retired.
    /// Returns the bytes taken (their encoded length).
    pub(crate) fn take(
        &mut self,
        mut budget: usize,
        limits: [u32; 5],
        out: &mut Vec<Message<I>>,
    ) -> usize {
        let start = budget;
        let mut picked = std::mem::take(&mut self.picked);
        picked.clear();
        for (order, item) in &self.queue {
            if budget < 3 || out.len() + picked.len() >= 250 {
                break;
            }
            if item.len <= budget {
                budget -= item.len;
                picked.push(*order);
            }
        }
        out.reserve(picked.len());
        for &order in &picked {
            if let Some(item) = self.queue.remove(&order) {
                out.push(item.msg.clone());
                let sent = order.1 + 1;
                if sent >= limits[order.0 as usize] {
                    self.index.remove(&item.key);
                } else {
                    let new = (order.0, sent, order.2);
                    if let Some(o) = self.index.get_mut(&item.key) {
                        *o = new;
                    }
                    self.queue.insert(new, item);
                }
            }
        }
        self.picked = picked;
        start - budget
    }
}

#[cfg(test)]
mod tests {
    use super::ceil_log10;

    #[test]
    fn ceil_log10_agrees_with_floating_point() {
        for n in (1..=2_000_000usize).chain([9_999_999, 10_000_000, 10_000_001, 1 << 40]) {
            let want = (n as f64).log10().ceil() as u32;
            assert_eq!(ceil_log10(n), want, "n = {n}");
        }
    }
}
