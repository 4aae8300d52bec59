//! Role leases with fencing epochs: the replicated table, the grantor that
//! runs on the control-plane leader, and the holder's own view of its lease.
//!
//! # Why this cannot give two primaries
//!
//! * Every grant is a committed entry of the replicated log, and its epoch
//!   is exactly one more than the role's last epoch: epochs strictly increase
//!   and are the fencing token downstream systems check.
//! * The holder times its lease from when it *sent* a renewal that was then
//!   committed, and demotes itself `drift_margin` before `lease` runs out. The
//!   leader saw that commit after it was sent, so on any clock that runs at
//!   most `drift_margin / lease` slower or faster, the holder has stopped
//!   before the leader's view of the lease has run out.
//! * The grantor gives the role to another candidate only once the last
//!   grant or renewal of that role *appended to its own log* is a full
//!   `lease` old on its own monotonic clock ([`AppendClock`]). Every server
//!   notes, per role, when it appended such an entry; an entry reaches a
//!   server after its sender sent it, so this bound is never earlier than the
//!   holder's own. A newly elected leader holds every committed entry (Raft's
//!   election restriction), each with the time *it* appended it, so it needs
//!   no blanket wait: it waits one full lease after the last renewal it holds,
//!   which is at least one full lease after any renewal the old holder could
//!   still count on. Entries whose append time a server cannot know (its log
//!   read back after a restart, or a snapshot installed from the leader)
//!   count as appended when that happened ([`AppendClock::unknown_before`]).
//! * A grant is computed from the applied table; if entries appended under
//!   the previous leader are not applied yet, its epoch is not the next one
//!   and the table refuses it when it is applied.
//!
//! Everything here takes time as an argument ([`Time`]) and does no IO, so
//! the same code runs in the simulator's histories and in the agent.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use hale_core::Time;

use crate::replication::{Mark, Standing};
use crate::switchover::Switchover;

pub mod breaker;
pub mod changes;
mod grantor;
mod resume;
pub use changes::{Cause, Change, History, Origin, ReleaseReason, HISTORY_LIMIT};
pub use grantor::{AppendClock, GrantDelay, Grantor};
pub use resume::{resume_check, ResumeRefused};

/// A request to the replicated lease table (a log entry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseRequest {
    /// Give `role` to `holder` at `epoch` (proposed by the leader's grantor).
    Grant {
        /// The role.
        role: String,
        /// The new holder.
        holder: String,
        /// Must be the role's last epoch plus one, or, to answer the same
        /// acquisition `attempt` again, the epoch the role holds now.
        epoch: u64,
        /// The candidate's acquisition attempt it answers (0: none). A
        /// candidate whose answer was lost asks again with the same attempt
        /// and is granted the same epoch again (see [`LeaseTable::apply`]).
        #[serde(default)]
        attempt: u64,
        /// When the leader proposed it (the history's only: [`changes`]).
        #[serde(default, skip_serializing_if = "Origin::is_unknown")]
        origin: Origin,
    },
    /// The holder keeps `role` at `epoch`.
    Renew {
        /// The role.
        role: String,
        /// The holder.
        holder: String,
        /// Its epoch.
        epoch: u64,
        /// What the holder says of its data (replicated roles only): kept
        /// in the table when the renewal holds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mark: Option<Mark>,
    },
    /// The holder gives `role` up (graceful handover).
    Release {
        /// The role.
        role: String,
        /// The holder.
        holder: String,
        /// Its epoch.
        epoch: u64,
        /// The candidate the holder hands over to, if it names one: the
        /// grantor prefers it for one lease period.
        #[serde(default)]
        next: Option<String>,
        /// Why the holder gives it up, if it says (the history's only:
        /// [`changes`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<ReleaseReason>,
        /// When the leader proposed it (the history's only).
        #[serde(default, skip_serializing_if = "Origin::is_unknown")]
        origin: Origin,
    },
    /// `holder` keeps each of these roles at its epoch: renewals of many
    /// roles in one compact entry (answered with a [`LeaseResponse::Batch`]
    /// of one [`LeaseRequest::Renew`]'s answer per role).
    Renewals {
        /// The holder.
        holder: String,
        /// Each role with its epoch.
        leases: Vec<(String, u64)>,
        /// The marks of the replicated roles among them (see
        /// [`LeaseRequest::Renew`]'s `mark`), kept when their renewal holds.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        marks: Vec<(String, Mark)>,
    },
    /// Pause (`paused: true`) or resume the role: while it is paused no
    /// node is granted it, and its holder keeps it whatever its checks say
    /// (maintenance); its lease still has to be renewed. Any member may ask.
    Pause {
        /// The role.
        role: String,
        /// Paused from now on, or resumed.
        paused: bool,
        /// Resume even though the holder has been silent for longer than
        /// a lease (see [`resume_check`]); read by the leader before it
        /// proposes the entry, and by [`LeaseTable::apply`] for the
        /// history only.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        force: bool,
        /// Who asked and when the leader proposed it (the history's only:
        /// [`changes`]).
        #[serde(default, skip_serializing_if = "Origin::is_unknown")]
        origin: Origin,
    },
    /// Order the holder of `role` at `epoch` to hand it to `to` (none:
    /// cancel the order), not before `at_unix_ms`. Any member may ask; the
    /// order lasts as long as that holding ([`crate::switchover`]).
    Switchover {
        /// The role.
        role: String,
        /// The holding the order is for (the epoch the asker saw).
        epoch: u64,
        /// The candidate to hand over to; `None` cancels the order.
        to: Option<String>,
        /// Not before this Unix time (ms; 0: at once).
        #[serde(default)]
        at_unix_ms: u64,
        /// Who asked and when the leader proposed it (the history's only:
        /// [`changes`]).
        #[serde(default, skip_serializing_if = "Origin::is_unknown")]
        origin: Origin,
    },
    /// The holder of a paused `role` at `epoch` stops its agent but keeps
    /// the role for its next run ([`crate::holder`], keep and adopt): the
    /// table records the holding as kept by `identity` (what the next run
    /// must show to adopt it), and a resume is refused until it is adopted
    /// ([`resume_check`]). A renewal as well (appended: the grantor times
    /// the lease from it). Answered `Renewed { paused }`: a role resumed
    /// meanwhile is not kept (`paused: false`), and the holder steps down.
    /// Protocol 3.
    Keep {
        /// The role.
        role: String,
        /// The holder.
        holder: String,
        /// Its epoch.
        epoch: u64,
        /// Who keeps it: the holder's node identity.
        identity: String,
    },
    /// The next run of a kept holding's agent takes it back: applied only
    /// if `holder` holds `role` at `epoch` and the holding was kept by the
    /// same `identity`; then no longer kept. A renewal as well. Protocol 3.
    Adopt {
        /// The role.
        role: String,
        /// The holder.
        holder: String,
        /// Its epoch.
        epoch: u64,
        /// The adopting node's identity: must be the keeper's.
        identity: String,
        /// The adopting run of the agent ([`crate::HolderConfig::instance`]):
        /// only the run that adopted may be answered again as adopted.
        #[serde(default)]
        run: u64,
    },
    /// Several requests in one log entry, applied in order (an agent's
    /// renewals of every role it holds, and the grants answering its
    /// acquisitions, in one entry: the log grows with hosts, not roles).
    /// A batch inside a batch is rejected as a whole.
    Batch(Vec<LeaseRequest>),
}

impl LeaseRequest {
    /// Sets the time the leader proposes it at (Unix ms on its wall
    /// clock) on every request the history records (in a batch too):
    /// grants, releases, pauses and switchovers. What a sender put there
    /// is replaced.
    pub fn stamp(&mut self, at_unix_ms: u64) {
        match self {
            LeaseRequest::Grant { origin, .. }
            | LeaseRequest::Release { origin, .. }
            | LeaseRequest::Pause { origin, .. }
            | LeaseRequest::Switchover { origin, .. } => origin.at_unix_ms = Some(at_unix_ms),
            LeaseRequest::Batch(reqs) => reqs.iter_mut().for_each(|r| r.stamp(at_unix_ms)),
            LeaseRequest::Renew { .. }
            | LeaseRequest::Renewals { .. }
            | LeaseRequest::Keep { .. }
            | LeaseRequest::Adopt { .. } => {}
        }
    }
}

/// What applying a [`LeaseRequest`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseResponse {
    /// The role now belongs to the requested holder at this epoch.
    Granted {
        /// The new epoch.
        epoch: u64,
    },
    /// The lease was renewed.
    Renewed {
        /// Its epoch.
        epoch: u64,
        /// The role is paused (maintenance): its holder keeps it whatever
        /// its checks say.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        paused: bool,
        /// A switchover ordered for this holding, if any: the holder hands
        /// the role over when it is due ([`crate::switchover`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        switchover: Option<Switchover>,
    },
    /// A [`LeaseRequest::Pause`] took effect: the role is paused now, or not.
    Paused(bool),
    /// A [`LeaseRequest::Switchover`] took effect: the order now standing
    /// (`None`: cancelled).
    SwitchoverOrdered(Option<Switchover>),
    /// The role has no holder any more.
    Released,
    /// Nothing changed.
    Rejected(LeaseRejection),
    /// What each request of a [`LeaseRequest::Batch`] did, in its order.
    Batch(Vec<LeaseResponse>),
}

/// Why a lease request changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum LeaseRejection {
    /// A grant's epoch was not the last epoch plus one.
    #[error("epoch {got} is not the next epoch ({expected})")]
    NotNextEpoch {
        /// The epoch the grant carried.
        got: u64,
        /// The epoch it needed.
        expected: u64,
    },
    /// A renewal or release came from a node that does not hold the role at that epoch.
    #[error("{holder} does not hold the role at epoch {epoch}")]
    NotHolder {
        /// Who asked.
        holder: String,
        /// At which epoch.
        epoch: u64,
    },
    /// A batch held another batch.
    #[error("a batch inside a batch")]
    NestedBatch,
    /// A switchover was asked for a holding that is over (the role moved,
    /// was released, or was never held at that epoch).
    #[error("the role is not held at epoch {epoch} any more")]
    NotHeld {
        /// The epoch the asker saw.
        epoch: u64,
    },
    /// A switchover was asked for a paused role: resume it first.
    #[error("the role is paused: resume it before a switchover")]
    Paused,
    /// An adoption came from another identity than the one that kept the
    /// holding, or for a holding that was never kept (its agent crashed:
    /// its watchdog fenced the service).
    #[error("the holding at epoch {epoch} was not kept by this node's identity")]
    NotKeeper {
        /// The epoch asked for.
        epoch: u64,
    },
}

/// One role in the replicated table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleLease {
    /// Who holds it, if anyone.
    pub holder: Option<String>,
    /// The last epoch granted (0: never granted).
    pub epoch: u64,
    /// The acquisition attempt that grant answered (0: none, or released).
    #[serde(default)]
    pub attempt: u64,
    /// What the last holder that published one said of its data
    /// (replicated roles; [`crate::replication`]): kept across grants and
    /// releases, so candidates are judged against it after the holder died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<Mark>,
    /// Paused by an operator ([`LeaseRequest::Pause`]): no grant until it
    /// is resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// A switchover ordered for the current holding, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<Switchover>,
    /// The current holding was kept by its holder's agent when it stopped
    /// (the role paused): the identity of the node that kept it, until its
    /// next run adopts it ([`LeaseRequest::Keep`], [`LeaseRequest::Adopt`]).
    /// Cleared by the next grant or release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// The run that adopted the current holding, if one did (its identity
    /// and run, [`adoption`]): the same adoption asked again by that run
    /// (its first answer lost) is answered again; a later run of the same
    /// node is not (its predecessor crashed holding it: it was not kept,
    /// and the watchdog fences it: nemesis seed 60010, where the next run
    /// adopted it and a third fence followed). Cleared by the next grant,
    /// release or keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<String>,
}

/// What [`RoleLease::adopted`] records of the adoption by run `run` of
/// the node `identity`.
pub fn adoption(identity: &str, run: u64) -> String {
    format!("{identity} run {run:016x}")
}

/// A request to the leader to grant a role (sent by candidates).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireRequest {
    /// The role.
    pub role: String,
    /// The candidate asking for it.
    pub holder: String,
    /// Its priority (higher wins among contenders).
    #[serde(default)]
    pub priority: i64,
    /// Its acquisition attempt (the same while it asks again for an
    /// answer it did not get; new after each holding; 0: none).
    #[serde(default)]
    pub attempt: u64,
    /// Its copy of the data (replicated roles only; [`crate::replication`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standing: Option<Standing>,
}

fn not_holder(holder: &str, epoch: u64) -> LeaseResponse {
    LeaseResponse::Rejected(LeaseRejection::NotHolder {
        holder: holder.to_owned(),
        epoch,
    })
}

/// The replicated lease table: applied in log order on every control-plane server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTable {
    roles: BTreeMap<String, RoleLease>,
    /// Each role's failover history ([`changes`]): recorded as entries
    /// apply, never read to decide. Absent from a snapshot of an older
    /// server (it keeps none), ignored by one.
    #[serde(default, skip_serializing_if = "History::is_empty")]
    history: History,
}

impl LeaseTable {
    /// Applies one committed request. Deterministic: no clock, no randomness.
    pub fn apply(&mut self, req: &LeaseRequest) -> LeaseResponse {
        match req {
            LeaseRequest::Batch(reqs) => LeaseResponse::Batch(
                reqs.iter()
                    .map(|r| match r {
                        LeaseRequest::Batch(_) => {
                            LeaseResponse::Rejected(LeaseRejection::NestedBatch)
                        }
                        r => self.apply(r),
                    })
                    .collect(),
            ),
            LeaseRequest::Grant {
                role,
                holder,
                epoch,
                attempt,
                origin,
            } => {
                let r = self.roles.entry(role.clone()).or_default();
                // The same attempt again (its answer was lost): the same
                // grant, which counts as a renewal (appended now).
                let again = *attempt != 0
                    && *epoch == r.epoch
                    && r.attempt == *attempt
                    && r.holder.as_deref() == Some(holder);
                if again {
                    return LeaseResponse::Granted { epoch: *epoch };
                }
                if *epoch != r.epoch + 1 {
                    return LeaseResponse::Rejected(LeaseRejection::NotNextEpoch {
                        got: *epoch,
                        expected: r.epoch + 1,
                    });
                }
                let before = std::mem::replace(&mut r.epoch, *epoch);
                let previous = r.holder.replace(holder.clone());
                r.attempt = *attempt;
                r.switchover = None;
                r.kept = None;
                r.adopted = None;
                let cause = self.history.grant_cause(role, holder, previous, before);
                let after = (*epoch, Some(holder.as_str()));
                self.history.record(role, after, origin.at_unix_ms, cause);
                LeaseResponse::Granted { epoch: *epoch }
            }
            LeaseRequest::Renewals {
                holder,
                leases,
                marks,
            } => {
                let answers = leases
                    .iter()
                    .map(|(role, epoch)| self.renew(role, holder, *epoch))
                    .collect::<Vec<_>>();
                for (role, mark) in marks {
                    let held = leases
                        .iter()
                        .zip(&answers)
                        .any(|((r, _), a)| r == role && matches!(a, LeaseResponse::Renewed { .. }));
                    if held {
                        self.set_mark(role, mark);
                    }
                }
                LeaseResponse::Batch(answers)
            }
            LeaseRequest::Renew {
                role,
                holder,
                epoch,
                mark,
            } => {
                let answer = self.renew(role, holder, *epoch);
                if let (Some(mark), LeaseResponse::Renewed { .. }) = (mark, &answer) {
                    self.set_mark(role, mark);
                }
                answer
            }
            LeaseRequest::Pause {
                role,
                paused,
                force,
                origin,
            } => {
                let r = self.roles.entry(role.clone()).or_default();
                if r.paused != *paused {
                    r.paused = *paused;
                    let by = origin.by.clone();
                    let cause = match paused {
                        true => Cause::Paused { by },
                        false => Cause::Resumed { by, forced: *force },
                    };
                    let now = (r.epoch, r.holder.as_deref());
                    self.history.record(role, now, origin.at_unix_ms, cause);
                }
                LeaseResponse::Paused(*paused)
            }
            LeaseRequest::Switchover {
                role,
                epoch,
                to,
                at_unix_ms,
                origin,
            } => match self.roles.get_mut(role) {
                Some(r) if r.epoch == *epoch && r.holder.is_some() => {
                    if r.paused && to.is_some() {
                        return LeaseResponse::Rejected(LeaseRejection::Paused);
                    }
                    let order = to.as_ref().map(|to| Switchover {
                        to: to.clone(),
                        at_unix_ms: *at_unix_ms,
                    });
                    let by = origin.by.clone();
                    let cause = match (&order, &r.switchover) {
                        (new, old) if new == old => None,
                        (Some(o), _) => Some(Cause::SwitchoverOrdered {
                            to: o.to.clone(),
                            at_unix_ms: o.at_unix_ms,
                            by,
                        }),
                        (None, Some(old)) => Some(Cause::SwitchoverCancelled {
                            to: old.to.clone(),
                            by,
                        }),
                        (None, None) => None,
                    };
                    r.switchover = order;
                    if let Some(cause) = cause {
                        let now = (r.epoch, r.holder.as_deref());
                        self.history.record(role, now, origin.at_unix_ms, cause);
                    }
                    LeaseResponse::SwitchoverOrdered(r.switchover.clone())
                }
                _ => LeaseResponse::Rejected(LeaseRejection::NotHeld { epoch: *epoch }),
            },
            LeaseRequest::Release {
                role,
                holder,
                epoch,
                next,
                reason,
                origin,
            } => match self.roles.get_mut(role) {
                Some(r) if r.epoch == *epoch && r.holder.as_deref() == Some(holder) => {
                    r.holder = None;
                    r.attempt = 0;
                    let order = r.switchover.take();
                    r.kept = None;
                    r.adopted = None;
                    let ordered_to = order.as_ref().map(|o| o.to.as_str());
                    let cause = Cause::Released {
                        previous: holder.clone(),
                        reason: changes::release_reason(*reason, next.as_deref(), ordered_to),
                        next: next.clone(),
                    };
                    self.history
                        .record(role, (*epoch, None), origin.at_unix_ms, cause);
                    LeaseResponse::Released
                }
                _ => not_holder(holder, *epoch),
            },
            LeaseRequest::Keep {
                role,
                holder,
                epoch,
                identity,
            } => {
                let answer = self.renew(role, holder, *epoch);
                if let LeaseResponse::Renewed { paused: true, .. } = answer {
                    if let Some(r) = self.roles.get_mut(role) {
                        r.kept = Some(identity.clone());
                        r.adopted = None;
                    }
                }
                answer
            }
            LeaseRequest::Adopt {
                role,
                holder,
                epoch,
                identity,
                run,
            } => {
                let answer = self.renew(role, holder, *epoch);
                let Some(r) = self.roles.get_mut(role) else {
                    return answer;
                };
                let this = adoption(identity, *run);
                match answer {
                    LeaseResponse::Renewed { .. } if r.kept.as_ref() == Some(identity) => {
                        r.kept = None;
                        r.adopted = Some(this);
                        answer
                    }
                    // The same adoption again (its answer was lost: nemesis
                    // seed 20004, where the retry was refused and the holding
                    // left unguarded).
                    LeaseResponse::Renewed { .. } if r.adopted.as_ref() == Some(&this) => answer,
                    LeaseResponse::Renewed { .. } => {
                        LeaseResponse::Rejected(LeaseRejection::NotKeeper { epoch: *epoch })
                    }
                    other => other,
                }
            }
        }
    }

    /// `holder` keeps `role` at `epoch`, if it holds it at that epoch. A
    /// renewal changes nothing in the table (the grantor times it from the
    /// log), so it only reads: no allocation per role on the hot path, and
    /// no empty entry for a role nobody was ever granted.
    fn renew(&self, role: &str, holder: &str, epoch: u64) -> LeaseResponse {
        match self.roles.get(role) {
            Some(r) if r.epoch == epoch && r.holder.as_deref() == Some(holder) => {
                LeaseResponse::Renewed {
                    epoch,
                    paused: r.paused,
                    switchover: r.switchover.clone(),
                }
            }
            _ => not_holder(holder, epoch),
        }
    }

    /// Keeps `mark` for `role` (its renewal held, so the role exists).
    fn set_mark(&mut self, role: &str, mark: &Mark) {
        if let Some(r) = self.roles.get_mut(role) {
            if r.mark.as_ref() != Some(mark) {
                r.mark = Some(mark.clone());
            }
        }
    }

    /// A role's state.
    pub fn role(&self, role: &str) -> Option<&RoleLease> {
        self.roles.get(role)
    }

    /// Every role.
    pub fn roles(&self) -> impl Iterator<Item = (&String, &RoleLease)> {
        self.roles.iter()
    }

    /// `role`'s failover history, oldest first: at most [`HISTORY_LIMIT`]
    /// changes (empty: none recorded, or no such role).
    pub fn history(&self, role: &str) -> &[Change] {
        self.history.of(role)
    }

    /// `role`'s part of this table, its lease and history: what a store that
    /// keeps each role under a key of its own (hale-etcd) writes there, and
    /// applies requests for that role to.
    pub fn part(&self, role: &str) -> LeaseTable {
        LeaseTable {
            roles: self
                .roles
                .get(role)
                .map(|r| BTreeMap::from([(role.to_owned(), r.clone())]))
                .unwrap_or_default(),
            history: self.history.part(role),
        }
    }

    /// Takes `part`'s roles (their leases and histories) in place of this
    /// table's: the whole table from a store's parts.
    pub fn absorb(&mut self, part: LeaseTable) {
        self.roles.extend(part.roles);
        self.history.absorb(part.history);
    }

    /// This table without its history (what `/control/table` serves: the
    /// history is read role by role, [`crate::raft::api::HISTORY`]).
    pub fn without_history(&self) -> LeaseTable {
        LeaseTable {
            roles: self.roles.clone(),
            history: History::default(),
        }
    }
}

/// Lease timing, shared by grantor and holders.
///
/// What a holder rides out: its last renewal that got through was sent at
/// most `renew_every` before the control plane stopped answering, and the
/// holder acts until `lease - drift_margin` after it; so it keeps its role
/// through any control-plane hiccup (an election after the leader's host
/// died or froze, a slow commit) shorter than [`LeaseTiming::ride_through`]
/// = `lease - drift_margin - renew_every` (1.35 s by default). A Raft
/// election takes at most [`crate::election::ELECTION_WORST`] (a heartbeat,
/// the longest campaign timeout with its pre-vote, and a vote round:
/// 0.8 s on a LAN), which leaves
/// 0.55 s for the first commit under the new leader and for scheduling
/// delays on a loaded host; [`LeaseTiming::check`] refuses timing that
/// leaves less than [`MIN_COMMIT_SLACK`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a lease lasts (default 2 s): the longest a role waits for
    /// its holder after the holder's host died.
    pub lease: Duration,
    /// How often the holder renews (default 250 ms; an agent's renewals of
    /// all its roles travel in one request and one log entry).
    pub renew_every: Duration,
    /// How much earlier than `lease` the holder stops (default 400 ms:
    /// tolerates clocks running 20% apart over one lease).
    pub drift_margin: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        LeaseTiming {
            lease: Duration::from_secs(2),
            renew_every: Duration::from_millis(250),
            drift_margin: Duration::from_millis(400),
        }
    }
}

/// The least time [`LeaseTiming::check`] leaves between the longest Raft
/// election and [`LeaseTiming::ride_through`]: the new leader's first commit
/// and a loaded host's scheduling delays.
pub const MIN_COMMIT_SLACK: Duration = Duration::from_millis(400);

/// Why lease timing was refused ([`LeaseTiming::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a holder rides out {ride_through:?} without the control plane (lease - drift margin - \
     renew_every), less than an election ({election:?}) plus {slack:?}: every control-plane \
     election would risk moving roles; lengthen the lease or renew more often"
)]
pub struct TimingError {
    /// What the timing rides out.
    pub ride_through: Duration,
    /// The longest election.
    pub election: Duration,
    /// The slack required beyond it.
    pub slack: Duration,
}

impl LeaseTiming {
    /// How long the control plane may be unreachable or electing without
    /// costing a healthy holder its role.
    pub fn ride_through(&self) -> Duration {
        self.lease
            .saturating_sub(self.drift_margin)
            .saturating_sub(self.renew_every)
    }

    /// Refuses timing under which a control-plane election would cost
    /// holders their roles: [`LeaseTiming::ride_through`] must exceed the
    /// longest election by [`MIN_COMMIT_SLACK`].
    pub fn check(&self) -> Result<(), TimingError> {
        let election = crate::election::ELECTION_WORST;
        if self.ride_through() < election + MIN_COMMIT_SLACK {
            return Err(TimingError {
                ride_through: self.ride_through(),
                election,
                slack: MIN_COMMIT_SLACK,
            });
        }
        Ok(())
    }
}

/// The holder's own view of its lease: when it must have stopped acting as primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLease {
    timing: LeaseTiming,
    /// The role.
    pub role: String,
    /// The fencing epoch.
    pub epoch: u64,
    valid_until: Time,
}

impl HeldLease {
    /// A lease granted by a request this node sent at `sent_at`.
    pub fn granted(timing: LeaseTiming, role: &str, epoch: u64, sent_at: Time) -> HeldLease {
        HeldLease {
            timing,
            role: role.to_owned(),
            epoch,
            valid_until: sent_at + timing.lease - timing.drift_margin,
        }
    }

    /// A renewal sent at `sent_at` was committed.
    pub fn renewed(&mut self, sent_at: Time) {
        let until = sent_at + self.timing.lease - self.timing.drift_margin;
        self.valid_until = self.valid_until.max(until);
    }

    /// The last instant at which this node may still act as holder.
    pub fn valid_until(&self) -> Time {
        self.valid_until
    }

    /// Whether the holder must demote itself now.
    pub fn expired(&self, now: Time) -> bool {
        now >= self.valid_until
    }
}
