//! The members of the probe walk, in visiting order, in as few bytes as
//! their identities allow.
//!
//! Every node keeps one entry per live member: in a simulator of 10,000
//! nodes, 10^8 entries. Identities with a dense index below 2^16 (the
//! simulator's numbered nodes) are kept as that index, 2 bytes each instead
//! of the identity (4 bytes for a `SimId`: 200 MB less at that size); the
//! first other identity turns the list into identities. Either way the
//! list holds the same members in the same order: sorting compares the
//! identities, and shuffling draws the same numbers whatever the element.

use std::borrow::Cow;

use rand::seq::SliceRandom;
use rand::Rng;

use crate::identity::Identity;
use crate::table::push_sparingly;

/// The walk's members, by dense index while every one has a small one.
#[derive(Debug)]
pub(crate) enum Walk<I> {
    /// Dense indices, each below 2^16.
    Short(Vec<u16>),
    /// Identities.
    Long(Vec<I>),
}

impl<I: Identity> Walk<I> {
    /// Members.
    pub(crate) fn len(&self) -> usize {
        match self {
            Walk::Short(v) => v.len(),
            Walk::Long(v) => v.len(),
        }
    }

    /// Whether there is no member.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The member at `i`.
    pub(crate) fn get(&self, i: usize) -> Option<Cow<'_, I>> {
        match self {
            Walk::Short(v) => v.get(i).map(|&d| Cow::Owned(from_short(d))),
            Walk::Long(v) => v.get(i).map(Cow::Borrowed),
        }
    }

    /// Forgets every member (keeping the room).
    pub(crate) fn clear(&mut self) {
        match self {
            Walk::Short(v) => v.clear(),
            Walk::Long(v) => v.clear(),
        }
    }

    /// Room for `n` members.
    pub(crate) fn reserve(&mut self, n: usize) {
        match self {
            Walk::Short(v) => v.reserve(n),
            Walk::Long(v) => v.reserve(n),
        }
    }

    /// Appends `id`; growing by a sixteenth when full if `sparingly`
    /// ([`push_sparingly`]), else as `Vec` does.
    pub(crate) fn push(&mut self, id: &I, sparingly: bool) {
        let short = id.dense_index().and_then(|d| u16::try_from(d).ok());
        if let (Walk::Short(v), None) = (&*self, short) {
            let mut long = Vec::with_capacity(v.capacity());
            long.extend(v.iter().map(|&d| from_short::<I>(d)));
            *self = Walk::Long(long);
        }
        match (self, short) {
            (Walk::Short(v), Some(d)) if sparingly => push_sparingly(v, d),
            (Walk::Short(v), Some(d)) => v.push(d),
            (Walk::Long(v), _) if sparingly => push_sparingly(v, id.clone()),
            (Walk::Long(v), _) => v.push(id.clone()),
            (Walk::Short(_), None) => unreachable!("a short walk takes only small indices"),
        }
    }

    /// Swaps the members at `a` and `b`.
    pub(crate) fn swap(&mut self, a: usize, b: usize) {
        match self {
            Walk::Short(v) => v.swap(a, b),
            Walk::Long(v) => v.swap(a, b),
        }
    }

    /// Sorts the members by identity, then shuffles them with `rng`.
    pub(crate) fn sort_and_shuffle(&mut self, rng: &mut impl Rng) {
        match self {
            Walk::Short(v) => {
                v.sort_unstable_by_key(|&d| from_short::<I>(d));
                v.shuffle(rng);
            }
            Walk::Long(v) => {
                v.sort_unstable();
                v.shuffle(rng);
            }
        }
    }
}

impl<I> Default for Walk<I> {
    fn default() -> Self {
        Walk::Short(Vec::new())
    }
}

fn from_short<I: Identity>(d: u16) -> I {
    I::from_dense_index(u32::from(d)).expect("a short walk holds dense indices")
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    use super::*;
    use crate::wire::{DecodeError, Reader};

    /// An identity with a dense index whose order is not the index's.
    #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
    struct Rev(u32);

    impl Identity for Rev {
        fn encode(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0.to_le_bytes());
        }
        fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
            Ok(Rev(u32::from_le_bytes(r.array()?)))
        }
        fn encoded_len(&self) -> usize {
            4
        }
        fn dense_index(&self) -> Option<u32> {
            Some(u32::MAX - self.0)
        }
        fn from_dense_index(i: u32) -> Option<Self> {
            Some(Rev(u32::MAX - i))
        }
    }

    fn order<I: Identity>(w: &Walk<I>) -> Vec<I> {
        (0..w.len())
            .map(|i| w.get(i).expect("in range").into_owned())
            .collect()
    }

    #[test]
    fn short_and_long_walks_visit_in_the_same_order() {
        let ids: Vec<Rev> = (0..500u32)
            .map(|i| Rev(u32::MAX - (i * 7919) % 60_000))
            .collect();
        let mut short = Walk::default();
        let mut long = Walk::Long(Vec::new());
        for id in &ids {
            short.push(id, false);
            long.push(id, true);
        }
        assert!(matches!(short, Walk::Short(_)));
        short.sort_and_shuffle(&mut Xoshiro256PlusPlus::seed_from_u64(7));
        long.sort_and_shuffle(&mut Xoshiro256PlusPlus::seed_from_u64(7));
        assert_eq!(order(&short), order(&long));
        // A large index turns the walk into identities, in the same order.
        let before = order(&short);
        short.push(&Rev(0), true);
        assert!(matches!(short, Walk::Long(_)));
        assert_eq!(order(&short)[..before.len()], before[..]);
    }
}
