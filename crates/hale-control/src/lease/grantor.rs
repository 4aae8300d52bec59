//! The grantor that runs on the control-plane leader ([`Grantor`]) and the
//! append clock every server keeps ([`AppendClock`]): who gets a free role
//! next, and not before the last holder's lease has run out on this
//! server's own clock (the module above says why that is enough).

use std::collections::BTreeMap;

use hale_core::Time;

use super::breaker::{Breaker, Hold};
use super::{AcquireRequest, LeaseRequest, LeaseTable, LeaseTiming, Origin};
use crate::replication::{self, Standing, Verdict};

/// When this control-plane server last appended a grant or renewal of each
/// role to its log, on its own monotonic clock. Kept by every server, leader
/// or not; a newly elected leader's [`Grantor`] starts from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppendClock {
    /// Entries appended before this instant may be unknown (log read back
    /// at start, snapshot installed): every role counts as renewed here.
    floor: Time,
    roles: BTreeMap<String, Time>,
}

impl AppendClock {
    /// A clock for a server that started at `start` (its log on disk, if
    /// any, counts as appended then).
    pub fn new(start: Time) -> AppendClock {
        AppendClock {
            floor: start,
            roles: BTreeMap::new(),
        }
    }

    /// `req` was appended to this server's log at `now`.
    pub fn appended(&mut self, req: &LeaseRequest, now: Time) {
        match req {
            LeaseRequest::Grant { role, .. }
            | LeaseRequest::Renew { role, .. }
            | LeaseRequest::Keep { role, .. }
            | LeaseRequest::Adopt { role, .. } => {
                self.note(role, now);
            }
            LeaseRequest::Renewals { leases, .. } => {
                for (role, _) in leases {
                    self.note(role, now);
                }
            }
            LeaseRequest::Batch(reqs) => {
                for r in reqs {
                    if !matches!(r, LeaseRequest::Batch(_)) {
                        self.appended(r, now);
                    }
                }
            }
            LeaseRequest::Release { .. }
            | LeaseRequest::Pause { .. }
            | LeaseRequest::Switchover { .. } => {}
        }
    }

    fn note(&mut self, role: &str, now: Time) {
        match self.roles.get_mut(role) {
            Some(t) => *t = (*t).max(now),
            None => {
                self.roles.insert(role.to_owned(), now);
            }
        }
    }

    /// Entries this server did not append itself arrived at `now` (a
    /// snapshot was installed): every role counts as renewed at `now`.
    pub fn unknown_before(&mut self, now: Time) {
        self.floor = self.floor.max(now);
    }

    /// The last instant a grant or renewal of `role` may have been appended.
    pub fn last(&self, role: &str) -> Time {
        self.roles
            .get(role)
            .map_or(self.floor, |t| (*t).max(self.floor))
    }
}

/// Why the grantor will not grant a role yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantDelay {
    /// The current holder's lease may still run until then on this clock.
    #[error("the current lease may run until {0}")]
    HolderLease(Time),
    /// Contenders are still being heard from before choosing the best.
    #[error("collecting contenders until {0}")]
    Arbitrating(Time),
    /// Another contender has a higher priority, or replicates the
    /// holder's data synchronously.
    #[error("{0} is a better candidate")]
    BetterCandidate(String),
    /// The control plane is unstable (the churn breaker is open: see
    /// [`super::breaker`]) and the role's last holder, whose lease ran out,
    /// is alive: it is held for it until then.
    #[error("held for {holder}, its last holder, alive, until {until} (churn breaker open)")]
    Stabilizing {
        /// The last holder.
        holder: String,
        /// Until when.
        until: Time,
    },
    /// The role is paused (maintenance): nobody is granted it until an
    /// operator resumes it.
    #[error("the role is paused: no new holder until it is resumed")]
    Paused,
    /// Strict durability: the role's last mark names synchronous standbys
    /// not heard from with a copy, or further than the asker's: one of
    /// them may hold a commit the asker lacks ([`replication::proven`]).
    #[error("strict durability: not proven to hold every acknowledged commit (synchronous standbys not heard from or further: {})", .0.join(", "))]
    Unproven(Vec<String>),
    /// The asking candidate's copy lags the holder's last mark by more
    /// than its `max_lag_on_failover` ([`crate::replication`]).
    #[error("its copy lags the last primary position by {lag} bytes, more than max_lag_on_failover ({max_lag})")]
    Lagging {
        /// By how much (bytes).
        lag: u64,
        /// The most it may.
        max_lag: u64,
    },
}

/// Runs on the control-plane leader: decides when a role may change hands,
/// and to whom, reading the leader's own [`AppendClock`] (kept by the server,
/// leader or not, and passed in).
#[derive(Debug, Clone)]
pub struct Grantor {
    timing: LeaseTiming,
    /// Per role: contenders heard from (name → priority, last request,
    /// standing), and since when this round of contention has been tracked.
    contenders: BTreeMap<String, Contention>,
    /// Per role: a candidate named by an operator handover, until when.
    preferred: BTreeMap<String, (String, Time)>,
    /// The churn breaker.
    breaker: Breaker,
}

/// One role's contention: since when it is tracked, and each contender's
/// priority, last request and standing.
type Contention = (Time, BTreeMap<String, Contender>);

/// One contender as last heard.
#[derive(Debug, Clone, Copy)]
struct Contender {
    priority: i64,
    heard: Time,
    standing: Option<Standing>,
}

impl Grantor {
    /// A grantor for a leader elected at time zero.
    pub fn new(timing: LeaseTiming) -> Grantor {
        Grantor::elected_at(timing, Time::ZERO)
    }

    /// A grantor for a leader elected at `now`.
    pub fn elected_at(timing: LeaseTiming, now: Time) -> Grantor {
        Grantor {
            timing,
            contenders: BTreeMap::new(),
            preferred: BTreeMap::new(),
            breaker: Breaker::new(timing, now),
        }
    }

    /// Agent `agent` was heard from at `now` (its renewals: see
    /// [`super::breaker`]; its acquisitions are noted by
    /// [`Grantor::contend`]).
    pub fn heard(&mut self, agent: &str, now: Time) {
        self.breaker.heard(agent, now);
    }

    /// Whether the churn breaker is open at `now`.
    pub fn breaker_open(&self, now: Time) -> bool {
        self.breaker.open(now)
    }

    /// A handover named `next` for `role`: prefer it over priority for one
    /// lease from `now`, if it asks.
    pub fn prefer(&mut self, role: &str, next: &str, now: Time) {
        self.preferred
            .insert(role.to_owned(), (next.to_owned(), now + self.timing.lease));
    }

    /// Whether `role` may be granted to a new holder at `now`, given the
    /// table and when this leader's log received the role's grants and
    /// renewals.
    pub fn may_grant(
        &self,
        table: &LeaseTable,
        appends: &AppendClock,
        role: &str,
        now: Time,
    ) -> Result<(), GrantDelay> {
        // Test builds only (see `planted.rs`): grant without waiting for the lease.
        #[cfg(feature = "planted-bugs")]
        if crate::planted::active("no-lease-wait") {
            return Ok(());
        }
        if table.role(role).is_some_and(|r| r.paused) {
            return Err(GrantDelay::Paused);
        }
        if table.role(role).is_some_and(|r| r.holder.is_some()) {
            let until = appends.last(role) + self.timing.lease;
            if now < until {
                return Err(GrantDelay::HolderLease(until));
            }
        }
        Ok(())
    }

    /// A candidate asks for `role` at `now` with `priority`: the role may go
    /// to it only when the role is grantable ([`Grantor::may_grant`]), the
    /// contenders have been heard from for at least one poll period, and no
    /// contender heard from lately has a higher priority (ties go to the
    /// smaller name). Candidates poll every `renew_every` while they wait.
    pub fn contend(
        &mut self,
        table: &LeaseTable,
        appends: &AppendClock,
        ask: &AcquireRequest,
        now: Time,
    ) -> Result<LeaseRequest, GrantDelay> {
        let (role, holder) = (ask.role.as_str(), ask.holder.as_str());
        let (priority, attempt) = (ask.priority, ask.attempt);
        // The holder's own attempt again: its answer was lost. Granted the
        // same epoch again, at once (a renewal, appended now).
        if let Some(r) = table.role(role) {
            if attempt != 0 && r.attempt == attempt && r.holder.as_deref() == Some(holder) {
                return Ok(LeaseRequest::Grant {
                    role: role.to_owned(),
                    holder: holder.to_owned(),
                    epoch: r.epoch,
                    attempt,
                    origin: Origin::default(),
                });
            }
        }
        let poll = self.timing.renew_every;
        let fresh = poll * 2 + poll / 2;
        let entry = self
            .contenders
            .entry(role.to_owned())
            .or_insert_with(|| (now, BTreeMap::new()));
        entry
            .1
            .retain(|_, c| now.saturating_since(c.heard) <= fresh);
        if entry.1.is_empty() {
            entry.0 = now;
        }
        let standing = ask.standing;
        self.breaker.heard(holder, now);
        entry.1.insert(
            holder.to_owned(),
            Contender {
                priority,
                heard: now,
                standing,
            },
        );
        self.may_grant(table, appends, role, now)?;
        // A copy too far behind never takes the role, whoever else asks.
        let mark = table.role(role).and_then(|r| r.mark.as_ref());
        if let Verdict::Lagging { lag, max_lag } =
            replication::judge(mark, holder, standing.as_ref())
        {
            return Err(GrantDelay::Lagging { lag, max_lag });
        }
        // A lease that ran out (the role still names its holder): while the
        // breaker is open, back to that holder if it lives.
        if let Some((last, epoch)) = table
            .role(role)
            .and_then(|r| r.holder.clone().map(|h| (h, r.epoch)))
        {
            let ended = appends.last(role) + self.timing.lease;
            match self.breaker.judge(role, (&last, epoch), ended, holder, now) {
                Hold::Pass => {}
                Hold::Return => {
                    self.contenders.remove(role);
                    return Ok(self.grant(table, role, holder, attempt));
                }
                Hold::For { holder, until } => {
                    return Err(GrantDelay::Stabilizing { holder, until });
                }
            }
        }
        let (since, contenders) = &self.contenders[role];
        if let Some((next, until)) = self.preferred.get(role) {
            if now < *until {
                if next == holder {
                    self.preferred.remove(role);
                    self.contenders.remove(role);
                    return Ok(self.grant(table, role, holder, attempt));
                }
                return Err(GrantDelay::BetterCandidate(next.clone()));
            }
        }
        let settled = *since + poll + poll / 5;
        if now < settled {
            return Err(GrantDelay::Arbitrating(settled));
        }
        // Among the eligible (the asker is one), by the one order
        // ([`replication::best`]).
        let best = replication::best(
            mark,
            contenders
                .iter()
                .map(|(n, c)| (n.as_str(), c.priority, c.standing.as_ref())),
        )
        .unwrap_or_default()
        .to_owned();
        if best != holder {
            return Err(GrantDelay::BetterCandidate(best));
        }
        // Only copies reported after the last holding ended count: by then
        // the old primary has stopped and a copy's position is final; one
        // reported before may have grown since. A holding ends with its
        // release (sent once its demote has run) or, lapsed, a lease after
        // its last append (the holder stops before, its watchdog fences at
        // that deadline).
        let released = table.role(role).is_some_and(|r| r.holder.is_none());
        let ended = if released {
            appends.last(role)
        } else {
            appends.last(role) + self.timing.lease
        };
        let heard = |n: &str| {
            contenders
                .get(n)
                .filter(|c| c.heard >= ended)
                .and_then(|c| c.standing.as_ref())
        };
        if let Err(unproven) =
            replication::proven(mark, holder, contenders[holder].standing.as_ref(), heard)
        {
            return Err(GrantDelay::Unproven(unproven));
        }
        self.contenders.remove(role);
        Ok(self.grant(table, role, holder, attempt))
    }

    /// The grant request for `holder` (epoch = last + 1) answering its
    /// acquisition `attempt`.
    pub fn grant(
        &self,
        table: &LeaseTable,
        role: &str,
        holder: &str,
        attempt: u64,
    ) -> LeaseRequest {
        LeaseRequest::Grant {
            role: role.to_owned(),
            holder: holder.to_owned(),
            epoch: table.role(role).map_or(0, |r| r.epoch) + 1,
            attempt,
            origin: Origin::default(),
        }
    }
}
