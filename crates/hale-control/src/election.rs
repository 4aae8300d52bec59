//! The control plane's election timing: what its Raft is configured with
//! (`raft/mod.rs`), when a server campaigns (`raft/prevote.rs`), and what
//! lease timing is checked against ([`crate::lease::LeaseTiming::check`]).
//!
//! openraft's own election timer is off: a server campaigns only when it
//! has heard from no leader for its campaign timeout
//! ([`CAMPAIGN_MIN`]..[`CAMPAIGN_MAX`], drawn again after every round) *and*
//! a majority of voters granted it a pre-vote, each of them without
//! contact for [`PREVOTE_QUIET`]. openraft's *leader lease* (the longest
//! election timeout) still makes a voter refuse any vote while it lasts
//! after its last contact; [`PREVOTE_QUIET`] outlasts it, so a voter that
//! granted a pre-vote grants the vote too (the logs permitting). So an
//! election after the leader's host dies or freezes starts between
//! [`CAMPAIGN_MIN`] and [`CAMPAIGN_MAX`] after the last heartbeat, on a
//! server whose own disk answers a durable write within 100 ms; one whose
//! disk is slower waits one more campaign timeout first (a stall of every
//! disk silences the leader too, and passes), so [`ELECTION_WORST`] holds
//! for disks that answer.

use std::time::Duration;

/// How often the leader sends heartbeats.
pub const HEARTBEAT: Duration = Duration::from_millis(100);
/// The least time a Raft RPC (append, heartbeat, vote) is given to answer,
/// the peer's disk write included (`raft/runtime.rs`): openraft 0.9 would
/// give an append one heartbeat and a vote request the shortest election
/// timeout.
pub const RPC_TIMEOUT_FLOOR: Duration = Duration::from_secs(1);
/// openraft's shortest election timeout (its timer is off; see the module).
pub const ELECTION_TIMEOUT_MIN: Duration = Duration::from_millis(200);
/// openraft's longest election timeout: every voter's *leader lease*,
/// during which, after its last contact with a leader, it votes for no one.
pub const ELECTION_TIMEOUT_MAX: Duration = Duration::from_millis(300);
/// The shortest a voter waits without contact before it asks for a
/// pre-vote: four missed heartbeats.
pub const CAMPAIGN_MIN: Duration = Duration::from_millis(400);
/// The longest a voter waits without contact before it asks.
pub const CAMPAIGN_MAX: Duration = Duration::from_millis(600);
/// How long without contact a voter must itself have been to grant a
/// pre-vote: longer than its leader lease, so the vote that follows is
/// not refused by it.
pub const PREVOTE_QUIET: Duration = Duration::from_millis(350);
/// The longest a leader's loss goes unanswered on a LAN: the last
/// heartbeat, the longest campaign timeout, and a pre-vote and a vote
/// round (0.8 s).
pub const ELECTION_WORST: Duration =
    Duration::from_millis(HEARTBEAT.as_millis() as u64 + CAMPAIGN_MAX.as_millis() as u64 + 100);
