//! The operator's endpoints: drills (`/v1/drill`, `/v1/traffic`), the
//! relay (`/v1/relay`), keys (`/v1/keys`), and the error body every failing
//! route answers with.

use std::collections::BTreeMap;
use std::time::Duration;

use hale_relay::{BreakerGauge, UpstreamRole};
use serde::{Deserialize, Serialize};

/// The error body every failing route answers with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

/// Longest a drill fault may be set for.
pub const MAX_FAULT: Duration = Duration::from_secs(3600);

/// Longest `slow-disk` may make one durable log write wait.
pub const MAX_DISK_DELAY: Duration = Duration::from_secs(10);

/// What `slow-disk` adds to each durable log write unless told.
pub const DEFAULT_DISK_DELAY: Duration = Duration::from_millis(300);

hale_core::named_enum! {
    /// A fault a drill can set.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum Fault {
        /// The relay sends to a local black hole.
        Blackhole => "blackhole",
        /// The agent stops answering the cluster.
        Freeze => "freeze",
        /// Application traffic signals are ignored.
        Quiet => "quiet",
        /// This agent's control-plane server writes its log slowly.
        #[serde(rename = "slow-disk")]
        SlowDisk => "slow-disk",
        /// This agent's control-plane server's log writes all wait.
        #[serde(rename = "disk-stall")]
        DiskStall => "disk-stall",
    }
}

/// An active fault, as `GET /v1/drill` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FaultView {
    /// The fault.
    pub fault: Fault,
    /// Unix time it was set, in milliseconds.
    pub since_unix_ms: u64,
    /// Unix time the agent reverts it on its own, in milliseconds.
    pub until_unix_ms: u64,
    /// Where the relay is diverted to (`blackhole` only).
    pub divert: Option<String>,
    /// The time added to every durable log write (`slow-disk` only).
    pub delay_ms: Option<u64>,
}

/// `GET /v1/drill`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DrillView {
    /// This node.
    pub node: String,
    /// Active faults (empty: nothing is set).
    pub active: Vec<FaultView>,
    /// Application traffic signals ignored while `quiet` (since start).
    pub traffic_ignored: u64,
}

/// `POST /v1/drill/restore`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestoredView {
    /// The faults reverted.
    pub restored: Vec<Fault>,
    /// The drill state after.
    pub drill: DrillView,
}

/// `POST /v1/traffic`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrafficView {
    /// Members noted.
    pub noted: usize,
    /// Whether a quiet drill makes the agent ignore them.
    pub quiet: bool,
}

/// One upstream Sentry, as `/v1/relay` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UpstreamView {
    /// `primary` or `standby`.
    pub role: UpstreamRole,
    /// Where events go (`scheme://host:port/path/project`, no key).
    pub target: String,
    /// The hale member hosting it, if one is named.
    pub member: Option<String>,
    /// `closed` (requests flow), `open` (none until a probe) or `half-open`.
    pub breaker: BreakerGauge,
}

/// The relay's state, as served by `GET /v1/relay`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RelayView {
    /// Bytes held in memory now, and the cap.
    pub queue_bytes: u64,
    /// The cap on bytes held in memory.
    pub queue_cap: u64,
    /// Bytes in the disk spool now (0 without a spool).
    pub spool_bytes: u64,
    /// Whether a disk spool is configured.
    pub spool: bool,
    /// Requests to upstreams in flight now.
    pub in_flight: u64,
    /// Events accepted, forwarded (2xx upstream), written to the spool.
    pub accepted: u64,
    /// Events an upstream acknowledged.
    pub forwarded: u64,
    /// Events written to the spool.
    pub spooled: u64,
    /// Switches from the primary to the standby.
    pub failovers: u64,
    /// The upstreams, primary first.
    pub upstreams: Vec<UpstreamView>,
    /// Events dropped, per reason (every reason listed, zeros included).
    pub dropped: std::collections::BTreeMap<String, u64>,
    /// Sum of `dropped`.
    pub dropped_total: u64,
    /// Where a drill diverts every request now (a black hole), if anywhere.
    pub diverted: Option<String>,
}

hale_core::named_enum! {
    /// A key operation.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum KeyOp {
        /// Add a key (it opens; the primary still seals).
        Install => "install",
        /// Make an installed key the primary (it seals from now on).
        Use => "use",
        /// Drop a key that is not the primary.
        Remove => "remove",
    }
}

/// The body of a key operation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRequest {
    /// The key, base64 (as `hale keygen` prints it).
    pub key: String,
    /// `remove` only: remove it even though a member that has not left is
    /// dead (it would be locked out when it comes back: it may never have
    /// installed the new key). Never sent to peers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}

/// One key of a ring, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyView {
    /// A keyed hash of the key (the key itself is never shown).
    pub fingerprint: String,
    /// Whether it seals (the primary) or only opens.
    pub primary: bool,
}

/// `GET /v1/keys`, and what an agent answers to a key operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeysView {
    /// The agent.
    pub node: String,
    /// Its keys, the primary first.
    pub keys: Vec<KeyView>,
}

/// What a fanned-out key operation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyReport {
    /// The operation.
    pub op: KeyOp,
    /// The key's fingerprint.
    pub key: String,
    /// Agents asked (this one included).
    pub agents: usize,
    /// Agents that applied it.
    pub ok: Vec<String>,
    /// Agents that did not, and why (with what that leaves of their keys).
    pub failed: BTreeMap<String, KeyOpError>,
}

/// Why an agent did not apply a key operation, each saying what that
/// leaves of its keys: *unchanged* (it refused, or was never asked), or
/// *unknown* (it may have applied it: list its keys). The answer of the
/// agents' own route (`/v1/cluster/keys/{op}`, sealed) is
/// `{"Ok": KeysView}` or `{"Err": KeyOpError}`, and a `KeyReport` lists
/// these per agent; on the wire an object tagged with its `reason`, e.g.
/// `{"reason": "not-installed", "key": "ab12"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "reason", rename_all = "kebab-case")]
pub enum KeyOpError {
    /// Only an installed key can become the primary: keys unchanged.
    #[error("key {key} is not installed: install it first (keys unchanged)")]
    NotInstalled {
        /// The key's fingerprint.
        key: String,
    },
    /// The primary key seals everything and cannot be removed: keys
    /// unchanged.
    #[error("key {key} is the primary key: use another key first (keys unchanged)")]
    IsPrimary {
        /// The key's fingerprint.
        key: String,
    },
    /// The keyring file could not be saved, so the change would be lost on
    /// restart: not made, keys unchanged.
    #[error("cannot save the keyring file {path}: {detail} (keys unchanged)")]
    NotSaved {
        /// The keyring file.
        path: String,
        /// The I/O error.
        detail: String,
    },
    /// The agent publishes no HTTP address, so it was not asked: keys
    /// unchanged.
    #[error("publishes no HTTP address, so it was not asked (keys unchanged)")]
    NoAddress,
    /// The agent could not be reached (connection refused, reset, no
    /// route): most likely never asked, keys unchanged unless the
    /// connection broke after the request went out.
    #[error("unreachable: {detail} (keys most likely unchanged)")]
    Unreachable {
        /// The transport's error, with its causes.
        detail: String,
    },
    /// No answer in time: it may have applied it (keys unknown).
    #[error("no answer in time: {detail} (it may have applied it: list its keys)")]
    TimedOut {
        /// The transport's error.
        detail: String,
    },
    /// The agent refused the request without reading it (401: it opens
    /// with none of the keys this agent sealed with, or the stamp was
    /// refused; 404: it has no keyring, or does not know the route): keys
    /// unchanged.
    #[error("refused with HTTP {status}: {message} (keys unchanged)")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Its explanation (not authenticated).
        message: String,
    },
    /// Its answer could not be believed (not sealed for the request, too
    /// large, or not a key operation's answer): it may have applied it
    /// (keys unknown).
    #[error("its answer cannot be trusted: {detail} (it may have applied it: list its keys)")]
    BadAnswer {
        /// What was wrong with it.
        detail: String,
    },
}
