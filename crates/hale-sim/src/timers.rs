//! Node timers: at most one pending wake-up per node, in an indexed heap.

use hale_core::Time;

/// No entry for this node.
const NONE: u32 = u32::MAX;

/// Pending node wake-ups ordered by (time, sequence number), at most one per
/// node. Re-arming a node's timer moves its entry in place: the heap never
/// holds superseded timers. (With one binary heap of events, every re-arm
/// pushed a new entry and the superseded one was popped later only to be
/// dropped: most timer entries, at one heap operation and one cache miss on
/// the node's slot each.) Sequence numbers come from the simulator's event
/// counter, so timers and other events keep the order they had in one heap.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// (time, sequence number, node), a binary min-heap.
    heap: Vec<(Time, u64, u32)>,
    /// Where each node's entry is in `heap`, or [`NONE`].
    pos: Vec<u32>,
}

impl Timers {
    /// Sets `node`'s wake-up to `at` (sequence number `seq`), replacing any.
    pub(crate) fn set(&mut self, node: u32, at: Time, seq: u64) {
        let n = node as usize;
        if self.pos.len() <= n {
            self.pos.resize(n + 1, NONE);
        }
        let entry = (at, seq, node);
        match self.pos[n] {
            NONE => {
                self.heap.push(entry);
                let i = self.heap.len() - 1;
                self.pos[n] = i as u32;
                self.sift_up(i);
            }
            p => {
                let i = p as usize;
                let earlier = entry < self.heap[i];
                self.heap[i] = entry;
                if earlier {
                    self.sift_up(i);
                } else {
                    self.sift_down(i);
                }
            }
        }
    }

    /// Cancels `node`'s wake-up, if any.
    pub(crate) fn remove(&mut self, node: u32) {
        if let Some(&p) = self.pos.get(node as usize).filter(|&&p| p != NONE) {
            self.take(p as usize);
        }
    }

    /// `node`'s wake-up, if any: (time, sequence number).
    pub(crate) fn get(&self, node: u32) -> Option<(Time, u64)> {
        let p = *self.pos.get(node as usize).filter(|&&p| p != NONE)?;
        let (at, seq, _) = self.heap[p as usize];
        Some((at, seq))
    }

    /// The earliest wake-up: (time, sequence number, node).
    pub(crate) fn peek(&self) -> Option<(Time, u64, u32)> {
        self.heap.first().copied()
    }

    /// Calls `f` with every node whose wake-up is before `until`, in no
    /// particular order (a walk of the heap that skips every subtree at or
    /// after `until`).
    pub(crate) fn for_each_before(
        &self,
        until: Time,
        stack: &mut Vec<usize>,
        mut f: impl FnMut(u32),
    ) {
        stack.clear();
        stack.push(0);
        while let Some(i) = stack.pop() {
            match self.heap.get(i) {
                Some(&(at, _, node)) if at < until => {
                    f(node);
                    stack.push(2 * i + 2);
                    stack.push(2 * i + 1);
                }
                _ => {}
            }
        }
    }

    /// Removes and returns the earliest wake-up.
    pub(crate) fn pop(&mut self) -> Option<(Time, u64, u32)> {
        (!self.heap.is_empty()).then(|| self.take(0))
    }

    fn take(&mut self, i: usize) -> (Time, u64, u32) {
        let last = self.heap.len() - 1;
        self.swap(i, last);
        let e = self.heap.pop().expect("heap is not empty");
        self.pos[e.2 as usize] = NONE;
        if i < self.heap.len() {
            self.sift_down(i);
            self.sift_up(i);
        }
        e
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[self.heap[a].2 as usize] = a as u32;
        self.pos[self.heap[b].2 as usize] = b as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.heap[i] >= self.heap[parent] {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let l = 2 * i + 1;
            if l >= self.heap.len() {
                break;
            }
            let r = l + 1;
            let c = if r < self.heap.len() && self.heap[r] < self.heap[l] {
                r
            } else {
                l
            };
            if self.heap[c] >= self.heap[i] {
                break;
            }
            self.swap(i, c);
            i = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers_pop_in_time_then_sequence_order_with_one_entry_per_node() {
        let mut t = Timers::default();
        let at = Time::from_millis;
        t.set(0, at(50), 1);
        t.set(1, at(20), 2);
        t.set(2, at(20), 3);
        t.set(3, at(70), 4);
        t.set(0, at(10), 5); // re-armed earlier
        t.set(1, at(90), 6); // re-armed later
        t.remove(3);
        t.remove(7); // never armed
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| t.pop())
            .map(|(a, _, n)| (a.as_nanos() / 1_000_000, n))
            .collect();
        assert_eq!(order, vec![(10, 0), (20, 2), (90, 1)]);
    }

    #[test]
    fn timers_match_a_sorted_list_under_random_updates() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(7);
        let mut t = Timers::default();
        let mut model: Vec<Option<(Time, u64)>> = vec![None; 40];
        for seq in 0..5_000u64 {
            let node = rng.random_range(0..40u32);
            match rng.random_range(0..4) {
                0 => {
                    t.remove(node);
                    model[node as usize] = None;
                }
                1 => {
                    let want = model
                        .iter()
                        .enumerate()
                        .filter_map(|(n, e)| e.map(|(a, s)| (a, s, n as u32)))
                        .min();
                    assert_eq!(t.pop(), want);
                    if let Some((_, _, n)) = want {
                        model[n as usize] = None;
                    }
                }
                _ => {
                    let at = Time::from_millis(rng.random_range(0..100));
                    t.set(node, at, seq);
                    model[node as usize] = Some((at, seq));
                }
            }
        }
    }
}
