//! The view's hash, kept by bucket.
//!
//! A view hash ([`crate::Node::view_hash`]) is a sum of one share per
//! record ([`record_hash`]): its identity, incarnation and state, hashed.
//! The identities fall into [`BUCKETS`] buckets by a hash of the identity
//! alone ([`bucket_of`]), and the shares are summed per bucket. Two nodes
//! whose views differ in one record differ in one bucket's sum: they can
//! compare the 64 sums (`Message::Buckets`) and then exchange digests of
//! that bucket alone (`Message::DigestPart`), a sixty-fourth of the
//! members, instead of all of them.
//!
//! Invariant: `sums[b]` is the wrapping sum of the shares of the records
//! whose identity falls in bucket `b`.

use crate::identity::Identity;
use crate::ring::{fnv1a_zero_runs, FNV_OFFSET};
use crate::wire::{WireState, BUCKETS};

/// The per-bucket sums of record shares.
#[derive(Debug, Clone)]
pub(crate) struct ViewSums {
    sums: Box<[u64; BUCKETS]>,
    /// Scratch for identities' wire forms (hashed on every change).
    buf: Vec<u8>,
}

impl Default for ViewSums {
    fn default() -> Self {
        ViewSums {
            sums: Box::new([0; BUCKETS]),
            buf: Vec::new(),
        }
    }
}

impl PartialEq for ViewSums {
    fn eq(&self, other: &Self) -> bool {
        self.sums == other.sums
    }
}

impl Eq for ViewSums {}

impl ViewSums {
    /// Adds a record's share.
    pub(crate) fn add<I: Identity>(&mut self, id: &I, incarnation: u32, state: WireState) {
        let (b, h) = shares(id, incarnation, state, &mut self.buf);
        self.sums[b] = self.sums[b].wrapping_add(h);
    }

    /// Takes a record's share away.
    pub(crate) fn sub<I: Identity>(&mut self, id: &I, incarnation: u32, state: WireState) {
        let (b, h) = shares(id, incarnation, state, &mut self.buf);
        self.sums[b] = self.sums[b].wrapping_sub(h);
    }

    /// The sum over every bucket: the members' part of a view hash.
    pub(crate) fn total(&self) -> u64 {
        self.sums.iter().fold(0u64, |s, &x| s.wrapping_add(x))
    }

    /// The sums, bucket by bucket.
    pub(crate) fn sums(&self) -> &[u64; BUCKETS] {
        &self.sums
    }
}

/// The bucket of `id` (`0..BUCKETS`): the top bits of a mixed FNV-1a hash
/// of its wire form, the same on every node and every build. `buf` is
/// scratch space, reused across calls.
pub(crate) fn bucket_of<I: Identity>(id: &I, buf: &mut Vec<u8>) -> usize {
    buf.clear();
    id.encode(buf);
    bucket_in(fnv1a_zero_runs(FNV_OFFSET, buf))
}

/// The bucket of an identity whose wire form FNV-1a hashes to `h`.
fn bucket_in(h: u64) -> usize {
    (mix(h) >> (64 - BUCKETS.trailing_zeros())) as usize
}

/// One record's share of a view hash ([`crate::Node::view_hash`]): its
/// identity, incarnation and state, hashed and mixed. Two nodes in
/// agreement sum the same shares, whatever the order.
pub(crate) fn record_hash<I: Identity>(id: &I, incarnation: u32, state: WireState) -> u64 {
    shares(id, incarnation, state, &mut Vec::with_capacity(32)).1
}

/// The bucket of `id` and its record's share, from one pass over its
/// wire form (written in `buf`, scratch space).
fn shares<I: Identity>(
    id: &I,
    incarnation: u32,
    state: WireState,
    buf: &mut Vec<u8>,
) -> (usize, u64) {
    buf.clear();
    id.encode(buf);
    let of_id = fnv1a_zero_runs(FNV_OFFSET, buf);
    let mut tail = [0u8; 5];
    tail[..4].copy_from_slice(&incarnation.to_le_bytes());
    tail[4] = state as u8;
    (bucket_in(of_id), mix(fnv1a_zero_runs(of_id, &tail)))
}

/// The splitmix64 finalizer: spreads a hash's bits, so that a sum of
/// hashes of records that differ in one byte differs.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
