//! Whether the leader may resume a paused role: never while a stopped
//! agent keeps its holding (until adopted, or forced a lease and the drift
//! margin after its last renewal), and, in a mixed cluster whose keeps go
//! unrecorded, not while its holder is silent.

use std::time::Duration;

use hale_core::Time;

use super::{AppendClock, LeaseTable, LeaseTiming};

/// Why the leader refuses to resume a role ([`resume_check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResumeRefused {
    /// The paused role's holder has renewed nothing for longer than a
    /// lease: its agent stopped (keeping the role for its next run) and
    /// has not come back. Resumed, the role would go to another node while
    /// the old holder's service may still run unfenced.
    #[error(
        "{holder} holds the role but has not renewed it for {:.1} s: its agent is down. \
         Start it again (it adopts the role), or stop the service on {holder} and \
         resume with --force",
        silent.as_secs_f64()
    )]
    HolderSilent {
        /// The silent holder.
        holder: String,
        /// For how long (on the leader's clock, at least).
        silent: Duration,
    },
    /// The paused role's holding was kept by its holder's agent when it
    /// stopped, and no later run of that agent has adopted it: its service
    /// still runs, with no watchdog. Resumed, the role would go to another
    /// node beside it. `force_in`: how much longer until `--force` is
    /// accepted (a full lease plus the drift margin after the holder's last
    /// renewal); zero when it is accepted now.
    #[error(
        "{holder} kept the role when its agent stopped ({:.1} s ago) and has not adopted it: \
         its service still runs, unguarded. Start hale on {holder} (it adopts the role), then \
         resume; or stop the service on {holder} by hand and resume with --force{}",
        silent.as_secs_f64(),
        if force_in.is_zero() { String::new() } else {
            format!(" (accepted in {:.1} s, a lease after its last renewal)", force_in.as_secs_f64())
        }
    )]
    Kept {
        /// The holder that kept it.
        holder: String,
        /// How long since its last renewal (on the leader's clock, at least).
        silent: Duration,
        /// How much longer before `--force` is accepted.
        force_in: Duration,
    },
}

/// Whether the leader may resume `role` at `now` (`force`: the operator
/// says the holder's service is stopped):
///
/// * a holding its agent kept when it stopped and that no later run has
///   adopted ([`RoleLease::kept`](super::RoleLease::kept)) is resumed only with `force`, and only a
///   full lease plus the drift margin after the holder's last renewal;
/// * a holder that has renewed nothing for longer than a lease is resumed
///   only with `force` while keeps may go unrecorded (`keeps_recorded`
///   false: some server speaks a protocol older than 3, so a stopping
///   holder keeps its role by a plain renewal). Once every server records
///   keeps, a silent holding that is not kept is a dead one (its agent
///   crashed and its watchdog fenced, or its host died): resumed as any
///   lease that runs out.
pub fn resume_check(
    table: &LeaseTable,
    appends: &AppendClock,
    role: &str,
    now: Time,
    timing: LeaseTiming,
    force: bool,
    keeps_recorded: bool,
) -> Result<(), ResumeRefused> {
    let Some(r) = table.role(role) else {
        return Ok(());
    };
    let (true, Some(holder)) = (r.paused, r.holder.as_ref()) else {
        return Ok(());
    };
    let silent = now.saturating_since(appends.last(role));
    // Test builds only (see `planted.rs`): resume a kept holding at once.
    #[cfg(feature = "planted-bugs")]
    if crate::planted::active("resume-while-kept") {
        return Ok(());
    }
    if r.kept.is_some() {
        let force_in = (timing.lease + timing.drift_margin).saturating_sub(silent);
        if !force || !force_in.is_zero() {
            return Err(ResumeRefused::Kept {
                holder: holder.clone(),
                silent,
                force_in,
            });
        }
        return Ok(());
    }
    if silent > timing.lease && !force && !keeps_recorded {
        return Err(ResumeRefused::HolderSilent {
            holder: holder.clone(),
            silent,
        });
    }
    Ok(())
}
