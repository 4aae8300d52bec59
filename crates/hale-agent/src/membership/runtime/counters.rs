//! The runtime's own counters (outside the core's [`hale_core::stats`]):
//! packets and streams refused or failed before the core saw them.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the runtime counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// Packets that failed authentication (wrong key, tampering).
    AuthFailed,
    /// Packets too short or of an unknown seal version.
    SealMalformed,
    /// Datagrams larger than any hale datagram.
    Oversize,
    /// Outbound streams dropped because too many were open.
    StreamsOutDropped,
    /// Inbound streams refused because too many were open.
    StreamsInRefused,
    /// Stream connections that failed (connect, read, write, timeout).
    StreamErrors,
    /// Datagrams that could not be sent.
    SendErrors,
    /// Stream connections refused: too many already open from that address.
    StreamsInPerSource,
    /// Stream frames refused: the budget of unhandled frame bytes was spent.
    StreamsInBudget,
    /// Stream frames refused: they announced more than a frame may hold.
    StreamsInOversize,
    /// Closed ports found (ICMP port unreachable on a probe socket, or a
    /// stream connection refused), reported to the core.
    ClosedPorts,
}

impl Counter {
    /// How many there are.
    const COUNT: usize = Counter::ClosedPorts as usize + 1;
}

/// The runtime's counters: bumped by the runtime's tasks, read by metrics.
#[derive(Debug, Default)]
pub struct RuntimeCounters {
    values: [AtomicU64; Counter::COUNT],
}

impl RuntimeCounters {
    /// Counts one more `c`.
    pub(crate) fn bump(&self, c: Counter) {
        self.values[c as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many `c` so far.
    pub fn get(&self, c: Counter) -> u64 {
        self.values[c as usize].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_counter_counts_apart_from_the_others() {
        let c = RuntimeCounters::default();
        c.bump(Counter::AuthFailed);
        c.bump(Counter::ClosedPorts);
        c.bump(Counter::ClosedPorts);
        assert_eq!(c.get(Counter::AuthFailed), 1);
        assert_eq!(c.get(Counter::ClosedPorts), 2);
        assert_eq!(c.get(Counter::Oversize), 0);
    }
}
