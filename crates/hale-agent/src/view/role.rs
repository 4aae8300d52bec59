//! Roles, services and the cluster views: what `/v1/roles`, `/v1/services`,
//! `/v1/roles/{role}/...` and `/v1/cluster/...` answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use hale_control::RoleState;

use super::MemberState;

/// What sets a node apart among a role's candidates, as its `[[role]]`
/// says (Patroni's tags, the other way up): whether it may be promoted,
/// whether load balancers may send it reads, whether a primary may wait
/// for its flush. Each is `true` unless set `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RoleTags {
    /// It may take the role (`promotable`; `false` is Patroni's
    /// `nofailover`): never granted it otherwise, by failover, switchover
    /// or handover, even as the last node standing.
    pub promotable: bool,
    /// Load balancers may send it reads (`load_balance`; `false` is
    /// Patroni's `noloadbalance`): otherwise `/replica` and `/read-only`
    /// answer 503 while it is a standby.
    pub load_balance: bool,
    /// A `[role.postgres]` role's primary may wait for its flush
    /// (`synchronous_standby`; `false` is Patroni's `nosync`): otherwise
    /// it is never named in `synchronous_standby_names` nor in the
    /// holder's mark.
    pub synchronous_standby: bool,
}

impl Default for RoleTags {
    fn default() -> RoleTags {
        RoleTags {
            promotable: true,
            load_balance: true,
            synchronous_standby: true,
        }
    }
}

impl RoleTags {
    /// Whether every setting is `true`, the default (written as nothing).
    pub fn is_default(&self) -> bool {
        *self == RoleTags::default()
    }

    /// Whether a primary may wait for this node's flush: it is a
    /// synchronous standby and it may be promoted. A copy that is never
    /// promoted is never waited for either: a commit only it acknowledged
    /// would be missing from the next primary (and, under strict
    /// durability, the next primary could never be proven to hold it).
    pub fn may_be_waited_for(&self) -> bool {
        self.synchronous_standby && self.promotable
    }

    /// What these settings say in a sentence (`None`: all default).
    pub fn describe(&self) -> Option<String> {
        let mut out = Vec::new();
        if !self.promotable {
            out.push("never promoted (promotable = false)");
        }
        if !self.load_balance {
            out.push("takes no load-balanced reads (load_balance = false)");
        }
        if !self.synchronous_standby {
            out.push("never a synchronous standby (synchronous_standby = false)");
        }
        (!out.is_empty()).then(|| out.join(", "))
    }
}

/// This node's view of one of its roles, for the API.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoleView {
    /// The role.
    pub role: String,
    /// This node's priority.
    pub priority: i64,
    /// `holder`, `promoting` (granted, promote hook running), `demoting`
    /// (giving the role up), `standby` or `ineligible`.
    pub state: RoleState,
    /// The fencing epoch held, if promoting, holder or demoting.
    pub epoch: Option<u64>,
    /// Milliseconds of lease left, if it holds one.
    pub lease_left_ms: Option<u64>,
    /// Why the last change happened.
    pub last_change: Option<String>,
    /// Unix time (ms) this node became holder (its promote hook succeeded), if holder.
    pub held_since_unix_ms: Option<u64>,
    /// Promotions completed so far.
    pub promotions: u64,
    /// Demotions so far.
    pub demotions: u64,
    /// Renewals committed.
    pub renewals: u64,
    /// Runs of the demote hook that failed (each retried: the holding is
    /// never released before its demote succeeded).
    #[serde(default)]
    pub demote_failures: u64,
    /// The role is paused (maintenance), as this node's last committed
    /// renewal said: it keeps the role whatever its checks say.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// A replicated role: why the control plane will not grant it to this
    /// node now (its copy lags), if it said so at its last ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lagging: Option<Lagging>,
    /// A PostgreSQL role (`[role.postgres]`): this node's server as last measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub postgres: Option<PostgresView>,
    /// This node's settings that set it apart for the role (omitted when
    /// every one is `true`, the default).
    #[serde(default, skip_serializing_if = "RoleTags::is_default")]
    pub tags: RoleTags,
    /// A holder that may not keep the role (`promotable = false`, set by a
    /// reload while it held the role, or its disk short of room) hands it
    /// over once another node can take it: until then, why none can yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover_waits: Option<String>,
    /// Until when this node may act as holder, on this agent's clock.
    #[serde(skip)]
    pub valid_until: Option<Instant>,
}

/// A PostgreSQL role's server on this node, as its keeper last saw it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PostgresView {
    /// Where it stands (primary, replica, down); absent until measured.
    pub standing: Option<hale_postgres::Standing>,
    /// Its data directory carries hale's fence marker: never promoted
    /// until a rejoin reaches streaming.
    pub fenced: bool,
    /// The last rejoin step reached, if it ever rejoined.
    pub rejoin: Option<hale_postgres::RejoinStep>,
    /// The last error of a measurement or a rejoin, until the next success.
    pub error: Option<String>,
    /// The holder's last mark (its WAL position), as the control plane's
    /// table said when this node last read it (every 2 s while it follows).
    pub primary_lsn: Option<u64>,
    /// This node's `max_lag_on_failover` (bytes): the most its copy may lag
    /// for it to be promoted.
    pub max_lag: Option<u64>,
    /// The holder's last mark names this node synchronous (the primary may
    /// wait for its flush: quorum commit), as the control plane's table said
    /// when this node last read it.
    #[serde(default)]
    pub synchronous: bool,
}

impl PostgresView {
    /// Whether its server is a replica streaming from an upstream, unfenced.
    pub fn streams(&self) -> bool {
        !self.fenced
            && matches!(
                self.standing,
                Some(hale_postgres::Standing::Replica {
                    streaming: true,
                    ..
                })
            )
    }

    /// How many bytes a replica replays behind the holder's last mark.
    pub fn lag(&self) -> Option<u64> {
        self.standing.as_ref()?.replay_lag(self.primary_lsn?)
    }
}

/// How far a candidate's copy of a replicated role's data lags, as the
/// control plane judged it when it refused the role.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lagging {
    /// Bytes behind the holder's last mark.
    pub lag: u64,
    /// `max_lag_on_failover` (bytes).
    pub max_lag: u64,
}

/// A lease in the control plane's table.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LeaseView {
    /// Who holds it (None: free).
    pub holder: Option<String>,
    /// Its fencing epoch.
    pub epoch: u64,
    /// Paused by an operator: no new holder until it is resumed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// A planned switchover ordered for this holding, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<hale_control::Switchover>,
    /// The holding is kept: its holder's agent stopped while the role was
    /// paused and no later run of it has adopted it yet (its service runs
    /// unguarded; a resume is refused until it is adopted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
}

/// `GET /v1/roles`: this agent's candidacies and the leases it can see.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RolesView {
    /// Whether this agent is configured with a control plane.
    pub control_plane: bool,
    /// The control-plane leader's id, if known.
    pub leader: Option<u64>,
    /// Every lease, by role (None: no control plane, or it did not answer).
    pub leases: Option<BTreeMap<String, LeaseView>>,
    /// This node's view of each role it is a candidate for.
    pub local: Vec<RoleView>,
}

/// `GET /v1/roles/{role}/primary`: whether this node serves as the role's primary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PrimaryView {
    /// The role.
    pub role: String,
    /// This node's state for it.
    pub state: RoleState,
    /// The fencing epoch held, if any.
    pub epoch: Option<u64>,
    /// Milliseconds of lease left on this agent's clock, if it holds one.
    pub lease_left_ms: Option<u64>,
}

/// `GET /v1/roles/{role}/replica`: whether this node is a ready standby.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicaView {
    /// The role.
    pub role: String,
    /// This node's state for it.
    pub state: RoleState,
    /// A replicated role: how many bytes this node's copy replays behind
    /// the holder's last mark (`None`: not known, or no replication).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<u64>,
    /// Why the answer is 503 when this node's settings make it so (a
    /// standby set `load_balance = false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One candidate for a role, as `GET /v1/cluster/roles` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CandidateView {
    /// The node.
    pub node: String,
    /// Its priority for the role.
    pub priority: i64,
    /// Whether it says it may take the role now: healthy and ready, and
    /// promotable (`false` for a node set `promotable = false`, whatever
    /// its checks say).
    pub eligible: bool,
    /// Its membership state, as this agent sees it.
    pub member_state: MemberState,
    /// Whether it holds the role.
    pub holder: bool,
    /// Its settings that set it apart, as it publishes them (omitted when
    /// every one is `true`; an agent before 0.2.0 publishes none).
    #[serde(default, skip_serializing_if = "RoleTags::is_default")]
    pub tags: RoleTags,
}

/// One role across the cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterRoleView {
    /// The role.
    pub role: String,
    /// Who holds its lease.
    pub holder: Option<String>,
    /// The lease's epoch (0: never granted).
    pub epoch: u64,
    /// The holder's own state for it (None: the holder was not reached).
    pub holder_state: Option<RoleState>,
    /// Milliseconds of lease left on the holder's clock.
    pub lease_left_ms: Option<u64>,
    /// Unix time (ms) the holder finished promoting.
    pub held_since_unix_ms: Option<u64>,
    /// Candidates: the holder first, then who would be promoted next.
    pub candidates: Vec<CandidateView>,
    /// Paused by an operator: no automatic promotion or demotion.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// A planned switchover ordered for the current holding, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<hale_control::Switchover>,
    /// Nobody holds the role, or its holder is not alive (the table names
    /// a lapsed holder until another is granted the role), it is not
    /// paused, and no live candidate may take it: why, candidate by
    /// candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unheld: Option<String>,
}

/// `GET /v1/cluster/roles`: every role's holder and candidates.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterRolesView {
    /// Whether this agent is configured with a control plane.
    pub control_plane: bool,
    /// The control-plane leader's id, if known.
    pub leader: Option<u64>,
    /// When this answer was put together (Unix ms).
    pub fetched_unix_ms: u64,
    /// Every role known from leases, candidacies or this node.
    pub roles: Vec<ClusterRoleView>,
}

/// One node's services, as `GET /v1/cluster/services` lists them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeServicesView {
    /// The node.
    pub node: String,
    /// Its membership state.
    pub state: MemberState,
    /// Its services (None: it could not be asked, see `error`).
    pub services: Option<Vec<ServiceView>>,
    /// Why its services are unknown.
    pub error: Option<String>,
}

/// `GET /v1/cluster/services`: services and checks per node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterServicesView {
    /// One entry per node asked.
    pub nodes: Vec<NodeServicesView>,
    /// Whether more nodes were chosen than are asked in one request.
    pub truncated: bool,
}

/// One run's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckResult {
    /// Passed or not.
    pub ok: bool,
    /// What happened (status, error, timeout).
    pub detail: String,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
    /// What kind of failure it was, where the check knows one that hale
    /// acts on (absent when it passed, and for most failures).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<CheckFailure>,
}

hale_core::named_enum! {
    /// A check's failure of a kind that hale treats apart from others.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum CheckFailure {
        /// The server works but its disk has less room than the check asks
        /// (`min_free_bytes` of a `postgres` check). A holder short of disk
        /// alone hands the role over to a node with room, and keeps it
        /// while no node can take it: a role nobody may hold helps nobody.
        ShortOfDisk => "short-of-disk",
    }
}

/// A service as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServiceView {
    /// Name.
    pub name: String,
    /// Essential or not.
    pub essential: bool,
    /// All liveness checks passing.
    pub healthy: bool,
    /// All readiness checks passing.
    pub ready: bool,
    /// Milliseconds the longest failing liveness streak has lasted.
    pub failing_for_ms: Option<u64>,
    /// Checks.
    pub checks: Vec<CheckView>,
}

/// A check as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckView {
    /// Name.
    pub name: String,
    /// Readiness check or liveness check.
    pub ready: bool,
    /// Runs so far.
    pub runs: u64,
    /// Failures so far.
    pub failures: u64,
    /// Recent results, newest last.
    pub recent: Vec<CheckResult>,
}

/// `POST /v1/roles/{role}/handover`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HandoverView {
    /// The role handed over.
    pub handover: String,
}

/// `POST /v1/roles/{role}/pause` and `/resume`: the role's state now.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PauseView {
    /// The role.
    pub role: String,
    /// Paused (no automatic promotion or demotion), or resumed.
    pub paused: bool,
}

hale_core::named_enum! {
    /// How far a planned switchover got ([`crate::view::AgentEvent::Switchover`]).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum SwitchoverStep {
        /// Written to the control plane.
        Ordered => "ordered",
        /// The order was withdrawn.
        Cancelled => "cancelled",
        /// Due, but the target has not caught up.
        Waiting => "waiting",
        /// The holder steps down for the target.
        HandingOver => "handing-over",
    }
}

/// A switchover as `POST /v1/roles/{role}/switchover` wrote it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SwitchoverView {
    /// The role.
    pub role: String,
    /// Its holder when the order was written.
    pub from: String,
    /// The holding it applies to.
    pub epoch: u64,
    /// The candidate it goes to (`None`: the order was cancelled).
    pub to: Option<String>,
    /// Not before this Unix time, in milliseconds (0: at once).
    pub at_unix_ms: u64,
}

/// The body of `POST /v1/roles/{role}/switchover`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SwitchoverRequest {
    /// The candidate to hand the role to; absent or null with `cancel`.
    pub to: Option<String>,
    /// Not before this Unix time, in milliseconds (absent: at once).
    pub at_unix_ms: Option<u64>,
    /// Withdraw the order standing for the current holding.
    pub cancel: bool,
}
