//! The control plane's election timing: what its Raft is configured with
//! (`raft/mod.rs`) and what lease timing is checked against
//! ([`crate::lease::LeaseTiming::check`]).
//!
//! openraft 0.9 keeps a follower that has a leader from campaigning until
//! its *leader lease* (the longest election timeout) **and** its own
//! election timeout have both passed since the last heartbeat
//! (`RaftCore::handle_tick_election`: `leader_lease + election_timeout`),
//! and a voter refuses any vote while its own leader lease lasts. So an
//! election after the leader's host dies or freezes starts between
//! `ELECTION_TIMEOUT_MAX + ELECTION_TIMEOUT_MIN` and twice
//! `ELECTION_TIMEOUT_MAX` after the last heartbeat, not within one timeout.

use std::time::Duration;

/// How often the leader sends heartbeats.
pub const HEARTBEAT: Duration = Duration::from_millis(100);
/// The least time a Raft RPC (append, heartbeat, vote) is given to answer,
/// the peer's disk write included (`raft/runtime.rs`): openraft 0.9 would
/// give an append one heartbeat and a vote request the shortest election
/// timeout.
pub const RPC_TIMEOUT_FLOOR: Duration = Duration::from_secs(1);
/// The shortest election timeout a server draws (once, for its life).
pub const ELECTION_TIMEOUT_MIN: Duration = Duration::from_millis(200);
/// The longest election timeout a server draws; also every follower's
/// leader lease, during which it neither campaigns nor votes.
pub const ELECTION_TIMEOUT_MAX: Duration = Duration::from_millis(300);
/// The longest a leader's loss goes unanswered on a LAN: the last
/// heartbeat, the leader lease, the longest election timeout, and a vote
/// round (0.8 s). A follower campaigns after 0.5–0.6 s without a
/// heartbeat: five missed heartbeats at least.
pub const ELECTION_WORST: Duration = Duration::from_millis(
    HEARTBEAT.as_millis() as u64 + 2 * ELECTION_TIMEOUT_MAX.as_millis() as u64 + 100,
);
