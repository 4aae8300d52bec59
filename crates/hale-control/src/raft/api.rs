//! The control plane's contract, owned by its server: the routes (defined
//! once, mounted by [`super::ControlPlane::routes`] and asked by
//! [`super::ControlClient`]), the requests, and the typed refusal every
//! answer carries instead of a bare message.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::ControlError;
use crate::lease::{AcquireRequest, GrantDelay, LeaseRequest};
use crate::protocol::{self, OLDEST_PROTOCOL};

/// `POST`: acquire a role ([`crate::lease::AcquireRequest`]).
pub const ACQUIRE: &str = "/control/acquire";
/// `POST`: write a lease request through the leader.
pub const WRITE: &str = "/control/write";
/// `POST`: several acquisitions and lease writes at once (`Vec<`[`BatchItem`]`>`),
/// answered item by item (`Answer<Vec<Answer<LeaseResponse>>>`).
pub const BATCH: &str = "/control/batch";
/// `GET`/`POST`: the lease table, without its failover history (read
/// role by role: [`HISTORY`]).
pub const TABLE: &str = "/control/table";
/// `POST`: a role's failover history ([`HistoryQuery`]), as the server
/// asked has applied it, answered `Option<Vec<`[`crate::lease::Change`]`>>`
/// (`null`: no such role). Servers of 0.1.0 do not serve it (a 404: the
/// client asks the next).
pub const HISTORY: &str = "/control/history";
/// `GET`/`POST`: the leader's id.
pub const LEADER: &str = "/control/leader";
/// `POST`: add a server ([`AddServer`]).
pub const SERVERS: &str = "/control/servers";
/// `POST`: remove server `{id}`.
pub const SERVER_REMOVE: &str = "/control/servers/{id}/remove";

/// Most items in one batch: an agent splits larger ones.
pub const MAX_BATCH: usize = 256;

/// One request of a batch ([`BATCH`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum BatchItem {
    /// Acquire a role (as [`ACQUIRE`]).
    Acquire(AcquireRequest),
    /// Write a lease request through the leader (as [`WRITE`]; not a batch).
    Write(LeaseRequest),
}

/// What [`HISTORY`] is asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryQuery {
    /// The role.
    pub role: String,
    /// At most this many of its last changes (default: every one kept,
    /// [`crate::lease::HISTORY_LIMIT`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// A request to add a control-plane server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddServer {
    /// The new server's id.
    pub id: u64,
    /// Its Raft/HTTP address.
    pub addr: SocketAddr,
}

/// A change to the control plane's servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerChange {
    /// Add a server as a voter.
    Add(AddServer),
    /// Remove the server with this id.
    Remove(u64),
}

impl ServerChange {
    /// The route that carries it.
    pub fn path(&self) -> String {
        match self {
            ServerChange::Add(_) => SERVERS.to_owned(),
            ServerChange::Remove(id) => SERVER_REMOVE.replace("{id}", &id.to_string()),
        }
    }

    /// Its body on that route.
    pub fn body(&self) -> Option<&AddServer> {
        match self {
            ServerChange::Add(a) => Some(a),
            ServerChange::Remove(_) => None,
        }
    }
}

/// Why the control plane did not do what it was asked, as it answers on the
/// wire (`{"Err": ...}`): the client keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "kebab-case", tag = "refusal", content = "detail")]
pub enum Refusal {
    /// No leader is known (election in progress, or no quorum).
    #[error("no control-plane leader right now")]
    NoLeader,
    /// The server asked cannot serve it now, though another may.
    #[error("this control-plane server cannot serve it now: {0}")]
    Unavailable(String),
    /// The grantor will not hand the role over yet (why, on the leader's clock).
    #[error("not yet: {0}")]
    NotYet(String),
    /// The asking candidate's copy of a replicated role's data lags the
    /// holder's last mark by more than its `max_lag`: it will not be
    /// granted the role until it catches up (`crate::replication`).
    #[error("not eligible: its copy lags the last primary position by {lag} bytes, more than max_lag_on_failover ({max_lag})")]
    Lagging {
        /// By how much (bytes).
        lag: u64,
        /// The most it may.
        max_lag: u64,
    },
    /// A resume was refused: the paused role's holder has been silent for
    /// longer than a lease ([`crate::lease::ResumeRefused`]).
    #[error("{}", crate::lease::ResumeRefused::HolderSilent { holder: holder.clone(), silent: std::time::Duration::from_millis(*silent_ms) })]
    HolderSilent {
        /// The silent holder.
        holder: String,
        /// For how long, in milliseconds.
        silent_ms: u64,
    },
    /// A resume was refused: the paused role's holding was kept by its
    /// stopped agent and not adopted since ([`crate::lease::ResumeRefused::Kept`]).
    /// Protocol 3; an older asker gets it as [`Refusal::NotYet`].
    #[error("{}", crate::lease::ResumeRefused::Kept {
        holder: holder.clone(),
        silent: std::time::Duration::from_millis(*silent_ms),
        force_in: std::time::Duration::from_millis(*force_in_ms),
    })]
    HolderKept {
        /// The holder that kept it.
        holder: String,
        /// Since its last renewal, in milliseconds.
        silent_ms: u64,
        /// How much longer before `--force` is accepted, in milliseconds.
        force_in_ms: u64,
    },
    /// The leader failed the request, or could not be reached.
    #[error("control-plane request failed: {0}")]
    Failed(String),
    /// No server answered (said by the client, never on the wire).
    #[error("no control-plane server answered")]
    NoAnswer,
    /// The request is newer than a control-plane server on its way
    /// understands (a rolling upgrade under way): nothing was done; ask
    /// again once the servers are upgraded (or of another server). Said
    /// by a server that could not decode a newer client's request, by a
    /// leader that will not write an entry some server could not apply
    /// ([`crate::protocol`]), and by the client for the previous release's
    /// decode failure (HTTP 422). Protocol 2 and later: an asker speaking
    /// 1 gets it as [`Refusal::Unavailable`] with the same words.
    #[error(
        "the request needs control-plane protocol {needs}, but a server on its way speaks only up \
         to {speaks} (a rolling upgrade under way?): nothing was done; retry once every \
         control-plane server is upgraded"
    )]
    TooNew {
        /// The protocol the request needs (for a request a server could
        /// not decode: the newest its client speaks).
        needs: u16,
        /// The newest protocol the refusing server speaks (the leader: the
        /// newest every server speaks).
        speaks: u16,
    },
}

impl From<ControlError> for Refusal {
    fn from(e: ControlError) -> Refusal {
        match e {
            ControlError::NoLeader => Refusal::NoLeader,
            ControlError::Unavailable(m) => Refusal::Unavailable(m),
            ControlError::NotYet(GrantDelay::Lagging { lag, max_lag }) => {
                Refusal::Lagging { lag, max_lag }
            }
            ControlError::NotYet(d) => Refusal::NotYet(d.to_string()),
            ControlError::Resume(crate::lease::ResumeRefused::HolderSilent { holder, silent }) => {
                Refusal::HolderSilent {
                    holder,
                    silent_ms: silent.as_millis() as u64,
                }
            }
            ControlError::Resume(crate::lease::ResumeRefused::Kept {
                holder,
                silent,
                force_in,
            }) => Refusal::HolderKept {
                holder,
                silent_ms: silent.as_millis() as u64,
                force_in_ms: force_in.as_millis() as u64,
            },
            ControlError::Request(m) => Refusal::Failed(m),
            ControlError::TooNew { needs, speaks } => Refusal::TooNew { needs, speaks },
            e @ (ControlError::StoreInUse(_) | ControlError::Store(_) | ControlError::Start(_)) => {
                Refusal::Failed(e.to_string())
            }
        }
    }
}

/// What a route answers: the value, or why not.
pub type Answer<T> = Result<T, Refusal>;

impl Refusal {
    /// This refusal in a form an asker speaking `protocol` decodes: a
    /// refusal kind its version does not know becomes one it does, with
    /// the same words.
    /// Protocol 1 (0.1.0) knows neither `too-new` (read as `unavailable`:
    /// ask another server) nor `holder-silent` (read as `not-yet`: the
    /// leader's decision, for now); protocol 2 (0.2.0) does not know
    /// `holder-kept` (read as `not-yet`).
    pub fn for_asker(self, protocol: u16) -> Refusal {
        match self {
            r @ Refusal::TooNew { .. } if protocol < 2 => Refusal::Unavailable(r.to_string()),
            r @ Refusal::HolderSilent { .. } if protocol < 2 => Refusal::NotYet(r.to_string()),
            r @ Refusal::HolderKept { .. } if protocol < 3 => Refusal::NotYet(r.to_string()),
            r => r,
        }
    }
}

/// `a` in a form an asker speaking `protocol` decodes.
pub fn answer_for<T>(a: Answer<T>, protocol: u16) -> Answer<T> {
    a.map_err(|r| r.for_asker(protocol))
}

/// The protocol a batch needs: the newest its items need (an acquisition:
/// 1; a write: its kind's).
pub(crate) fn batch_needs(items: &[BatchItem]) -> u16 {
    let need = |item: &BatchItem| match item {
        BatchItem::Acquire(_) => OLDEST_PROTOCOL,
        BatchItem::Write(req) => protocol::needs(req),
    };
    items.iter().map(need).max().unwrap_or(OLDEST_PROTOCOL)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn an_old_asker_gets_a_refusal_it_can_decode() {
        let r = Refusal::TooNew {
            needs: 3,
            speaks: 2,
        };
        assert_eq!(r.clone().for_asker(2), r);
        let old = r.clone().for_asker(1);
        assert_eq!(old, Refusal::Unavailable(r.to_string()));
        let json = serde_json::to_value(&old).unwrap();
        assert_eq!(json["refusal"], "unavailable");
        assert_eq!(answer_for::<()>(Err(r), 1), Err(old));
        let silent = Refusal::HolderSilent {
            holder: "n1".into(),
            silent_ms: 4000,
        };
        assert_eq!(silent.clone().for_asker(2), silent);
        let old = silent.clone().for_asker(1);
        assert_eq!(old, Refusal::NotYet(silent.to_string()));
        assert_eq!(serde_json::to_value(&old).unwrap()["refusal"], "not-yet");
    }
}
