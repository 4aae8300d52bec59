//! The failover history: per role, the last [`HISTORY_LIMIT`] changes of
//! its holding (granted, released) and of what was asked of it (paused,
//! resumed, a switchover ordered or cancelled), each with the epoch, the
//! holder after the change, when, and the cause ([`Change`]). Patroni's
//! `patronictl history`, for every role, kept in the replicated table.
//!
//! * **Recorded by [`super::LeaseTable::apply`] from the entries alone**:
//!   a grant's cause is read from the table it lands on (the role still
//!   names a holder: that holder's lease expired; no holder and epoch 0:
//!   the first grant; no holder after a release: that release, recorded
//!   just before). So every server that applies the same log keeps the
//!   same history, a replay gives it again, and a grant proposed by a
//!   leader of an older release still gets its cause.
//! * **Never read to decide**: nothing in the table, the grantor or a
//!   holder depends on it. The fields that feed it ([`Origin`] on grants,
//!   releases, pauses and switchovers; [`ReleaseReason`] on releases) only
//!   inform, so they are new fields on old request kinds: a server of an
//!   older release ignores them (and keeps no history); nothing it decides
//!   changes.
//! * **Time is the leader's wall clock** when it proposed the entry
//!   ([`super::LeaseRequest::stamp`]): of one server, possibly off by its
//!   clock's error, unknown (`None`) for an entry an older leader wrote.
//! * **Bounded**: the oldest change of a role is dropped past
//!   [`HISTORY_LIMIT`]; [`Change::seq`] keeps counting, so a gap shows.
//! * **Unknown words decode**: a cause or a reason that a newer release
//!   records reads as [`Cause::Unknown`] or [`ReleaseReason::Other`], so a
//!   snapshot or an entry of a newer server never stops this one.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The most changes kept per role; older ones are dropped.
pub const HISTORY_LIMIT: usize = 100;

/// Who asked for a lease request and when its leader proposed it: for the
/// history only, never read to decide.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// Unix time in milliseconds on the control-plane leader's wall clock
    /// when it proposed the entry (set by that leader; `None`: unknown, a
    /// leader of an older release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_unix_ms: Option<u64>,
    /// The node that asked (an operator's pause, resume or switchover, as
    /// the agent that wrote it names itself), if it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

impl Origin {
    /// Asked by node `node` (the leader adds the time).
    pub fn by(node: &str) -> Origin {
        Origin {
            at_unix_ms: None,
            by: Some(node.to_owned()),
        }
    }

    /// Whether it says nothing (left out of the entry).
    pub fn is_unknown(&self) -> bool {
        self.at_unix_ms.is_none() && self.by.is_none()
    }
}

/// Why a holder gave its role up, as it said in its release (or, for a
/// switchover, as the table knows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseReason {
    /// Its service's essential checks failed for `fail_after`.
    ServiceFailing,
    /// An operator asked for a handover (`hale roles handover`).
    Handover,
    /// It carried out a switchover ordered for its holding: it released
    /// to the order's target (recorded by the table, which holds the
    /// order, whatever the holder said).
    Switchover,
    /// Its agent was stopping (shut down, or leaving the cluster).
    Leaving,
    /// Its promote hook failed.
    PromoteHookFailed,
    /// Its promote hook ran past `hook_timeout`.
    PromoteHookTimedOut,
    /// Its own lease ran out on its clock (renewals not committed in
    /// time); it demoted, then released what nobody had taken yet.
    LeaseExpired,
    /// Granted after it had stopped asking (its agent stopping, its
    /// checks failing) or too late to use: given straight back, never
    /// promoted.
    Unused,
    /// A reason this release does not know (said by a newer holder).
    #[serde(other)]
    Other,
}

/// What caused a [`Change`] (`kind`, and its fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Cause {
    /// Granted to the role's first holder: nobody held it before.
    FirstGrant,
    /// Granted after `previous`'s lease expired: it held the role and
    /// stopped renewing without releasing it (its host down, its agent
    /// hung or killed, or cut off from the control plane). `previous` may
    /// be the new holder itself: the role went back to it (the churn
    /// breaker, or its renewals resumed in time to ask first).
    LeaseExpired {
        /// The holder whose lease expired.
        previous: String,
    },
    /// Granted after `previous` released the role (its release is the
    /// change before). `named`: the successor that release named, if any
    /// (the grantor prefers it for one lease).
    AfterRelease {
        /// Who released it (`None`: the release is not in the history, a
        /// server of an older release applied it).
        previous: Option<String>,
        /// The successor the release named.
        named: Option<String>,
    },
    /// Granted to the target of a switchover that `previous` carried out.
    SwitchoverDone {
        /// The holder that handed over.
        previous: String,
    },
    /// `previous` released the role (holder none after it): it stepped
    /// down for `reason` (`None`: it did not say, a holder of an older
    /// release), naming `next` as its successor if it did.
    Released {
        /// The holder that released it.
        previous: String,
        /// Why, as it said.
        reason: Option<ReleaseReason>,
        /// The successor it named.
        next: Option<String>,
    },
    /// A switchover to `to` was ordered for the current holding, due at
    /// `at_unix_ms` (0: at once), asked by `by`.
    SwitchoverOrdered {
        /// The candidate to take the role.
        to: String,
        /// Not before this Unix time in milliseconds (0: at once).
        at_unix_ms: u64,
        /// The node that asked, if known.
        by: Option<String>,
    },
    /// The switchover to `to` ordered for the current holding was
    /// withdrawn, asked by `by`.
    SwitchoverCancelled {
        /// The candidate it named.
        to: String,
        /// The node that asked, if known.
        by: Option<String>,
    },
    /// Paused by an operator (no grant, no automatic demotion), asked by `by`.
    Paused {
        /// The node that asked, if known.
        by: Option<String>,
    },
    /// Resumed by an operator, asked by `by`; `forced`: past a silent or
    /// kept holder (`--force`).
    Resumed {
        /// The node that asked, if known.
        by: Option<String>,
        /// Resumed with `--force`.
        forced: bool,
    },
    /// A cause this release does not know (recorded by a newer server).
    #[serde(other)]
    Unknown,
}

/// One change of a role, as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Its number among the role's changes (1, 2, ...): a first kept one
    /// above 1 means older ones were dropped.
    pub seq: u64,
    /// The role's epoch after it (a grant's new epoch; a release's: the
    /// epoch given up).
    pub epoch: u64,
    /// Who holds the role after it (`None`: nobody).
    pub holder: Option<String>,
    /// When, in Unix milliseconds on the control-plane leader's wall clock
    /// as it proposed the entry (`None`: unknown, an older leader's entry).
    pub at_unix_ms: Option<u64>,
    /// Why.
    pub cause: Cause,
}

/// Every role's history: cheap to clone (the table is cloned for each
/// grant decision), copied only when a change is recorded while a clone
/// is alive, and then only the map of roles and the changed role's list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct History(Arc<BTreeMap<String, Arc<Vec<Change>>>>);

impl History {
    /// `role`'s changes alone.
    pub(crate) fn part(&self, role: &str) -> History {
        let mut only = BTreeMap::new();
        if let Some(v) = self.0.get(role) {
            only.insert(role.to_owned(), Arc::clone(v));
        }
        History(Arc::new(only))
    }

    /// Takes `other`'s roles' changes in place of any this history has.
    pub(crate) fn absorb(&mut self, other: History) {
        let mine = Arc::make_mut(&mut self.0);
        for (role, v) in other.0.iter() {
            mine.insert(role.clone(), Arc::clone(v));
        }
    }

    /// Whether no role has a change recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `role`'s changes, oldest first (empty: none recorded).
    pub fn of(&self, role: &str) -> &[Change] {
        self.0.get(role).map_or(&[], |c| c.as_slice())
    }

    /// Records a change of `role`, dropping the oldest past [`HISTORY_LIMIT`].
    pub(crate) fn record(
        &mut self,
        role: &str,
        (epoch, holder): (u64, Option<&str>),
        at_unix_ms: Option<u64>,
        cause: Cause,
    ) {
        let roles = Arc::make_mut(&mut self.0);
        let changes = Arc::make_mut(roles.entry(role.to_owned()).or_default());
        let seq = changes.last().map_or(0, |c| c.seq) + 1;
        changes.push(Change {
            seq,
            epoch,
            holder: holder.map(str::to_owned),
            at_unix_ms,
            cause,
        });
        if changes.len() > HISTORY_LIMIT {
            let over = changes.len() - HISTORY_LIMIT;
            changes.drain(..over);
        }
    }

    /// The cause of granting `role` to `holder`, given who held it before
    /// the grant (`previous`, still named: its lease expired) and the
    /// epoch it had (0: never granted).
    pub(crate) fn grant_cause(
        &self,
        role: &str,
        holder: &str,
        previous: Option<String>,
        epoch_before: u64,
    ) -> Cause {
        if let Some(previous) = previous {
            return Cause::LeaseExpired { previous };
        }
        if epoch_before == 0 {
            return Cause::FirstGrant;
        }
        // The release of the holding before: the last change at that epoch.
        let release = self.of(role).iter().rev().find(|c| c.epoch == epoch_before);
        match release.map(|c| &c.cause) {
            Some(Cause::Released {
                previous,
                reason: Some(ReleaseReason::Switchover),
                next: Some(next),
            }) if next == holder => Cause::SwitchoverDone {
                previous: previous.clone(),
            },
            Some(Cause::Released { previous, next, .. }) => Cause::AfterRelease {
                previous: Some(previous.clone()),
                named: next.clone(),
            },
            _ => Cause::AfterRelease {
                previous: None,
                named: None,
            },
        }
    }
}

/// Why a release happened: what the holder said, except that a release
/// to the target of the switchover ordered for its holding (a handover,
/// or a holder that did not say) is that switchover.
pub(crate) fn release_reason(
    said: Option<ReleaseReason>,
    next: Option<&str>,
    ordered_to: Option<&str>,
) -> Option<ReleaseReason> {
    match said {
        None | Some(ReleaseReason::Handover) if next.is_some() && next == ordered_to => {
            Some(ReleaseReason::Switchover)
        }
        said => said,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn causes_and_reasons_a_newer_release_records_decode_as_unknown() {
        let c: Cause = serde_json::from_str(r#"{"kind": "fenced-by-ufo", "x": 1}"#).unwrap();
        assert_eq!(c, Cause::Unknown);
        let r: ReleaseReason = serde_json::from_str(r#""cosmic-ray""#).unwrap();
        assert_eq!(r, ReleaseReason::Other);
        let r: ReleaseReason = serde_json::from_str(r#""service-failing""#).unwrap();
        assert_eq!(r, ReleaseReason::ServiceFailing);
    }

    #[test]
    fn a_change_reads_and_writes_as_documented() {
        let c = Change {
            seq: 2,
            epoch: 2,
            holder: Some("b".into()),
            at_unix_ms: Some(1_700_000_000_000),
            cause: Cause::LeaseExpired {
                previous: "a".into(),
            },
        };
        let json = serde_json::json!({"seq": 2, "epoch": 2, "holder": "b",
            "at_unix_ms": 1_700_000_000_000_u64,
            "cause": {"kind": "lease-expired", "previous": "a"}});
        assert_eq!(serde_json::to_value(&c).unwrap(), json);
        assert_eq!(serde_json::from_value::<Change>(json).unwrap(), c);
    }

    #[test]
    fn a_handover_to_the_ordered_target_is_the_switchover_and_any_other_reason_stands() {
        let h = Some(ReleaseReason::Handover);
        let s = Some(ReleaseReason::Switchover);
        assert_eq!(release_reason(h, Some("b"), Some("b")), s);
        assert_eq!(release_reason(None, Some("b"), Some("b")), s);
        assert_eq!(release_reason(h, Some("c"), Some("b")), h);
        assert_eq!(release_reason(h, None, None), h);
        let failing = Some(ReleaseReason::ServiceFailing);
        assert_eq!(release_reason(failing, Some("b"), Some("b")), failing);
    }
}
