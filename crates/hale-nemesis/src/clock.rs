//! The clock every host shares: `CLOCK_MONOTONIC` of the one kernel all the
//! network namespaces run on. The agents may run under libfaketime; the
//! harness, the registers and the hooks (started with `env -u LD_PRELOAD`)
//! never do, so their timestamps are comparable across hosts.

use nix::time::{clock_gettime, ClockId};

/// Nanoseconds on the shared clock (`CLOCK_MONOTONIC`).
pub fn now_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64) * 1_000_000_000 + t.tv_nsec() as u64,
        // CLOCK_MONOTONIC always exists on Linux; 0 would show up in any history.
        Err(_) => 0,
    }
}
