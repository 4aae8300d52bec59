//! The control plane's election timing: what its Raft is configured with
//! (`raft/mod.rs`) and what lease timing is checked against
//! ([`crate::lease::LeaseTiming::check`]).

use std::time::Duration;

/// How often the leader sends heartbeats.
pub const HEARTBEAT: Duration = Duration::from_millis(100);
/// The shortest a follower waits without a heartbeat before campaigning.
pub const ELECTION_TIMEOUT_MIN: Duration = Duration::from_millis(300);
/// The longest a follower waits without a heartbeat before campaigning.
pub const ELECTION_TIMEOUT_MAX: Duration = Duration::from_millis(600);
/// The longest a leader's loss goes unanswered on a LAN: the last
/// heartbeat, the longest election timeout, and a vote round.
pub const ELECTION_WORST: Duration = Duration::from_millis(
    HEARTBEAT.as_millis() as u64 + ELECTION_TIMEOUT_MAX.as_millis() as u64 + 100,
);
