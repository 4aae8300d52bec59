//! The monitoring ring: where each member sits on it.

use crate::identity::Identity;

/// A member's position on the monitoring ring: stable across nodes.
/// `buf` is scratch space, reused across calls.
pub(crate) fn ring_position<I: Identity>(cluster: u64, id: &I, buf: &mut Vec<u8>) -> u64 {
    ring_position_from(ring_seed(cluster), id, buf)
}

/// Where every ring position in `cluster` starts: the hash's state after
/// the cluster's bytes (a node keeps it, so that each position hashes only
/// the identity).
pub(crate) fn ring_seed(cluster: u64) -> u64 {
    fnv1a_zero_runs(FNV_OFFSET, &cluster.to_le_bytes())
}

/// [`ring_position`] from the cluster's [`ring_seed`]: the same value.
pub(crate) fn ring_position_from<I: Identity>(seed: u64, id: &I, buf: &mut Vec<u8>) -> u64 {
    buf.clear();
    id.encode(buf);
    // Finalise with a splitmix step so that similar names spread over the ring.
    let mut z = fnv1a_zero_runs(seed, buf).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The tag a ping carries for its target from wire version 3 on: the high
/// half of the target's ring position. Enough to tell a misdirected ping
/// (a member restarted under another identity at the same address) from
/// one meant for the receiver.
pub(crate) fn tag(ring: u64) -> u32 {
    (ring >> 32) as u32
}

/// The FNV-1a prime.
const FNV_PRIME: u64 = 0x0100_0000_01b3;
/// The FNV-1a offset basis: the hash of no bytes.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The FNV-1a prime to the `k` (wrapping), by squaring.
const fn prime_power(k: u32) -> u64 {
    let (mut p, mut b, mut e) = (1u64, FNV_PRIME, k);
    while e > 0 {
        if e & 1 == 1 {
            p = p.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    p
}

/// [`prime_power`] of the zero runs most identities have (the
/// simulator's: twelve), computed once.
const PRIME_POWERS: [u64; 33] = {
    let mut t = [0u64; 33];
    let mut k = 0;
    while k < t.len() {
        t[k] = prime_power(k as u32);
        k += 1;
    }
    t
};

/// [`fnv1a`] continued from state `h` (from
/// [`FNV_OFFSET`]: equal on every input), but a run of `k` zero bytes costs
/// one multiplication (by the prime to the `k`) instead of `k` dependent
/// ones: identities padded with zeros (the simulator's) hash several times
/// faster, and monitors are recomputed over every member. Hashing a prefix
/// and then continuing from its result equals hashing the whole.
pub(crate) fn fnv1a_zero_runs(mut h: u64, bytes: &[u8]) -> u64 {
    let pow = |k: u32| match PRIME_POWERS.get(k as usize) {
        Some(&p) => p,
        None => prime_power(k),
    };
    let mut zeros = 0u32;
    for &b in bytes {
        if b == 0 {
            zeros += 1;
            continue;
        }
        if zeros > 0 {
            h = h.wrapping_mul(pow(zeros));
            zeros = 0;
        }
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    if zeros > 0 {
        h = h.wrapping_mul(pow(zeros));
    }
    h
}

/// FNV-1a 64 over `bytes`; stable, used where a hash must agree across nodes
/// (and, being `const`, for hashes computed at compile time).
pub const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_with_zero_runs_equals_fnv1a() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly zeros, in runs of every length.
                    if x.is_multiple_of(3) {
                        (x >> 8) as u8
                    } else {
                        0
                    }
                })
                .collect();
            assert_eq!(
                fnv1a_zero_runs(FNV_OFFSET, &bytes),
                fnv1a(&bytes),
                "{bytes:?}"
            );
            let (a, b) = bytes.split_at(len / 3);
            let split = fnv1a_zero_runs(fnv1a_zero_runs(FNV_OFFSET, a), b);
            assert_eq!(split, fnv1a(&bytes), "{bytes:?} split");
        }
    }
}
