//! Counters a node keeps about itself, for metrics and reports.

use crate::wire::DecodeError;

named_enum! {
    /// Why an incoming packet was dropped without being processed (its
    /// name is the metrics label).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum DropReason {
        /// Larger than the channel allows.
        Oversize => "oversize",
        /// Not hale's magic bytes.
        BadMagic => "bad_magic",
        /// A wire version this build does not speak.
        Version => "version",
        /// Another cluster's identifier.
        ForeignCluster => "foreign_cluster",
        /// Truncated or malformed.
        Malformed => "malformed",
        /// Sent by this node itself.
        FromSelf => "from_self",
        /// Arrived after this node left the cluster.
        AfterLeave => "after_leave",
        /// From an older run of its sender than one already heard: a replay.
        Replayed => "replayed",
        /// Later than its sender's clock allows (`Config::replay_window`): a
        /// replay, or a packet held up longer than any network would.
        Stale => "stale",
    }
}

impl DropReason {
    pub(crate) fn of(e: &DecodeError) -> DropReason {
        match e {
            DecodeError::Oversize(_) => DropReason::Oversize,
            DecodeError::BadMagic => DropReason::BadMagic,
            DecodeError::Version(_) => DropReason::Version,
            DecodeError::ForeignCluster => DropReason::ForeignCluster,
            DecodeError::Truncated | DecodeError::Invalid(_) | DecodeError::Trailing => {
                DropReason::Malformed
            }
        }
    }
}

/// Monotonic counters (never reset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams received (before decoding).
    pub datagrams_in: u64,
    /// Datagram bytes received.
    pub datagram_bytes_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Datagram bytes sent.
    pub datagram_bytes_out: u64,
    /// Stream frames received.
    pub streams_in: u64,
    /// Stream bytes received.
    pub stream_bytes_in: u64,
    /// Stream frames sent.
    pub streams_out: u64,
    /// Stream bytes sent.
    pub stream_bytes_out: u64,
    /// Largest datagram sent.
    pub largest_datagram: u64,
    /// Probes started (direct pings).
    pub probes: u64,
    /// Heartbeats sent to ring neighbours (`Config::ring_heartbeats`).
    pub heartbeats: u64,
    /// Round-robin visits skipped because the member was heard from recently.
    pub probes_skipped_fresh: u64,
    /// Probes answered.
    pub acks: u64,
    /// Probes answered only over the stream fallback.
    pub fallback_acks: u64,
    /// Acks carrying the number of a probe in flight (ours, or one we
    /// relay) from a member that probe did not ask: a replay.
    pub acks_ignored: u64,
    /// Nacks received from indirect probers.
    pub nacks: u64,
    /// Probes that failed.
    pub probe_failures: u64,
    /// Probes dropped unjudged because this node was paused.
    pub probes_abandoned: u64,
    /// Ping-reqs relayed for others.
    pub relays: u64,
    /// Suspicions started here (of any member, by any accuser).
    pub suspicions: u64,
    /// Accusations discounted (unhealthy or over-eager accuser).
    pub discounted_accusations: u64,
    /// Times this node refuted a suspicion or death of itself.
    pub refutations: u64,
    /// Members this node declared dead on its own verdict.
    pub deaths_declared: u64,
    /// Death verdicts of others accepted here.
    pub deaths_accepted: u64,
    /// Suspicions that expired without a verdict (not enough accusers).
    pub suspicions_expired: u64,
    /// Suspicions or deaths ignored because they named an older incarnation.
    pub stale_news: u64,
    /// Full-state syncs started.
    pub syncs: u64,
    /// Full-state sync replies refused by the rate limit.
    pub sync_replies_refused: u64,
    /// Datagrams carrying a targeted suspicion, confirmation or refutation
    /// (one per recipient and send; see `targeted_suspicions`).
    pub targeted_sent: u64,
    /// News dropped because the broadcast queue was full.
    pub broadcasts_dropped: u64,
    /// Events dropped because nobody polled them.
    pub events_dropped: u64,
    /// Pauses detected.
    pub pauses: u64,
    /// Times a peer's `Superseded` notice raised this node's generation
    /// (it had restarted with its wall clock behind a previous run's).
    pub generations_raised: u64,
    /// Times this node concluded that it was cut off (heard from nobody).
    pub cut_offs: u64,
    /// Accusations this node took back on concluding that it was cut off.
    pub accusations_withdrawn: u64,
    /// Probes that failed while this node was cut off (they accuse nobody).
    pub probe_failures_cut_off: u64,
    /// Probes (ours, or relayed for others) that found the target's port
    /// closed ([`crate::Node::handle_unreachable`]).
    pub closed_ports: u64,
    /// Packets dropped, by reason (indexed like [`DropReason::ALL`]).
    pub dropped: [u64; DropReason::ALL.len()],
}

impl Stats {
    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.dropped[reason as usize]
    }

    pub(crate) fn drop(&mut self, reason: DropReason) {
        self.dropped[reason as usize] += 1;
    }
}
