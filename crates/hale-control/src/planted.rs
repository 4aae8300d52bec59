//! Planted bugs, for the nemesis harness only (`crates/hale-nemesis`):
//! compiled only with the `planted-bugs` feature (off by default; never in
//! a release), each selected at run time by `HALE_PLANTED_BUG=<name>` and
//! read at exactly one point of the code. They prove that the harness's
//! checker catches what they break.
//!
//! * `no-lease-wait` (`lease.rs`, `Grantor::may_grant`): the grantor grants
//!   a role without waiting for the current holder's lease to run out.
//! * `no-watchdog` (`hale/src/roles_cmd.rs`, `hale watchdog`): the watchdog
//!   never fences.
//! * `resume-while-kept` (`lease.rs`, `resume_check`): a paused role is
//!   resumed while its holding is kept by a stopped agent (or its holder
//!   is silent), with or without `--force`.
//! * `release-after-failed-demote` (`holder.rs`, the demote's exit): a
//!   failed demote releases the role as a successful one does.
//! * `renew-after-expiry` (`holder.rs`, a renewal's answer): a renewal
//!   answered after the lease ended extends it.
//! * `fence-waits` (`hale/src/roles_cmd.rs`, `hale demote-once`): the
//!   watchdog's fence waits for the agent's demote however long it runs
//!   past the lease's end, instead of killing it there.
//! * `one-observer-convicts` (`hale/src/agent_cmd.rs`): hale-core's
//!   `Fault::ConvictAlone`, a node's own failed probe convicts without
//!   corroboration.

/// Whether planted bug `name` is selected (`HALE_PLANTED_BUG`).
pub fn active(name: &str) -> bool {
    std::env::var("HALE_PLANTED_BUG").is_ok_and(|b| b == name)
}
