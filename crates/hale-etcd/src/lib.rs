//! hale's leases on an etcd v3 cluster: the safety core of the second lease
//! store (issue 44), not yet selectable in the agent.
//!
//! One [`EtcdLeases`] per agent. It holds one etcd lease (TTL: the role
//! lease, rounded up to whole seconds, as etcd counts) that every role it
//! holds is attached to, so one keep-alive renews them all, as one
//! `Renewals` entry does on the embedded control plane.
//!
//! Keys, under the configured prefix:
//! * `lease/<role>`: the holding, `{"holder", "epoch"}`, attached to the
//!   holder's etcd lease: etcd deletes it when that lease runs out.
//! * `role/<role>`: the role's record, never deleted: its part of hale's
//!   [`LeaseTable`] (the last epoch, the holder last named, the mark, pause,
//!   switchover order and failover history), changed only by
//!   [`LeaseTable::apply`], as on the embedded control plane.
//!
//! **A grant** is one transaction: if `lease/<role>` does not exist
//! (`create_revision == 0`) and `role/<role>` is still at the revision read,
//! write both (the record with the grant applied: epoch + 1). Two askers
//! racing see one succeed, the other told [`GrantError::Raced`]; epochs
//! increase by one per grant and never go back (the record is only written
//! by a transaction that read it). Every other change of a record is the
//! same read, apply, compare-and-swap ([`EtcdLeases::update`]).
//!
//! **Why a holder never overlaps the next one.** etcd revokes a lease only
//! a TTL after the last keep-alive reached its leader, on that leader's
//! clock; a newly elected etcd leader gives every lease a full TTL again
//! (it only ever moves expiry later). A keep-alive is answered after it was
//! sent, so expiry is never before `sent + ttl` ([`Renewed`]): a holder that
//! acts until `sent + ttl - drift` (hale's `HeldLease` rule) has stopped
//! before `lease/<role>` can vanish, and only then can a grant create it
//! again. A lost answer costs the holder its lease, never the other way.

mod answer;
mod update;

use std::time::{Duration, Instant};

pub use answer::Candidacy;
pub use update::UpdateError;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn,
    TxnOp, TxnOpResponse,
};
use hale_control::{LeaseRequest, LeaseResponse, LeaseTable, Origin, ReleaseReason};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// Where the leases live and how long they last.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// The etcd members' client URLs (`http://10.0.0.1:2379`, ...).
    pub endpoints: Vec<String>,
    /// The key prefix of this hale cluster (`/hale/<cluster>`).
    pub prefix: String,
    /// The role lease: the etcd lease's TTL, rounded up to whole seconds.
    pub lease: Duration,
    /// How long one call to etcd may take.
    pub timeout: Duration,
}

/// A role's holding as the store has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holding {
    /// The holder's name.
    pub holder: String,
    /// Its fencing epoch.
    pub epoch: u64,
}

/// A keep-alive's answer: every role this store holds is held until at least
/// `sent + ttl` on etcd's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewed {
    /// When the keep-alive was sent, on this process's monotonic clock.
    pub sent: Instant,
    /// The TTL etcd gave the lease.
    pub ttl: Duration,
}

/// Why [`EtcdLeases::connect`] failed: nothing was created in etcd.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No endpoint answered, or the lease could not be granted.
    #[error("etcd at {endpoints:?} did not answer: {source}")]
    Unreachable {
        /// The endpoints tried.
        endpoints: Vec<String>,
        /// What the client said.
        source: etcd_client::Error,
    },
    /// The configured lease is shorter than a second.
    #[error("lease {0:?}: etcd counts leases in whole seconds, at least 1")]
    LeaseTooShort(Duration),
}

/// Why a grant was not made.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    /// The role is held: nothing was written.
    #[error("held by {} at epoch {}", .0.holder, .0.epoch)]
    Held(Holding),
    /// The role is paused (maintenance): nothing was written.
    #[error("the role is paused; nothing written")]
    Paused,
    /// The role changed between the read and the write (another asker won,
    /// or a holding just ended): nothing was written; ask again.
    #[error("the role changed while it was being granted; nothing written")]
    Raced,
    /// etcd did not answer in time, or failed: the grant may or may not have
    /// been written; read the holding ([`EtcdLeases::holding`]) to know.
    #[error("etcd: {0}; the grant may or may not have been written")]
    Store(String),
}

/// Why a renewal failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RenewError {
    /// The etcd lease had run out: every role it held is free (their keys
    /// are gone). A new etcd lease is in place for later grants.
    #[error("the etcd lease had run out: every role this agent held is free")]
    Expired,
    /// etcd did not answer in time, or failed: nothing renewed; the holder
    /// counts from its last renewal.
    #[error("etcd: {0}; nothing renewed")]
    Store(String),
}

/// Why a release failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ReleaseError {
    /// The role is not held by that holder at that epoch: nothing deleted.
    #[error("not held by {holder} at epoch {epoch}; nothing deleted")]
    NotHolder {
        /// The holder named.
        holder: String,
        /// The epoch named.
        epoch: u64,
    },
    /// etcd did not answer in time, or failed: the release may or may not
    /// have been written.
    #[error("etcd: {0}; the release may or may not have been written")]
    Store(String),
}

/// Why a read failed: nothing changed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ReadError {
    /// etcd did not answer in time, or failed.
    #[error("etcd: {0}")]
    Store(String),
    /// A key holds what hale never writes.
    #[error("{key}: not a value hale wrote ({detail})")]
    Corrupt {
        /// The key.
        key: String,
        /// What was wrong.
        detail: String,
    },
}

/// The etcd lease and its keep-alive stream.
struct Lease {
    id: i64,
    stream: Option<(LeaseKeeper, LeaseKeepAliveStream)>,
}

/// One agent's leases in etcd.
pub struct EtcdLeases {
    client: Client,
    cfg: EtcdConfig,
    ttl: i64,
    lease: Mutex<Lease>,
}

impl std::fmt::Debug for EtcdLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLeases")
            .field("endpoints", &self.cfg.endpoints)
            .field("prefix", &self.cfg.prefix)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl EtcdLeases {
    /// Connects to `cfg.endpoints` and takes an etcd lease of `cfg.lease`.
    pub async fn connect(cfg: EtcdConfig) -> Result<EtcdLeases, ConnectError> {
        let ttl = i64::try_from(cfg.lease.as_secs() + u64::from(cfg.lease.subsec_nanos() > 0))
            .unwrap_or(i64::MAX);
        if ttl < 1 {
            return Err(ConnectError::LeaseTooShort(cfg.lease));
        }
        let unreachable = |source| ConnectError::Unreachable {
            endpoints: cfg.endpoints.clone(),
            source,
        };
        let opts = ConnectOptions::new()
            .with_connect_timeout(cfg.timeout)
            .with_timeout(cfg.timeout);
        let mut client = Client::connect(&cfg.endpoints, Some(opts))
            .await
            .map_err(unreachable)?;
        let id = client
            .lease_grant(ttl, None)
            .await
            .map_err(unreachable)?
            .id();
        Ok(EtcdLeases {
            client,
            ttl,
            lease: Mutex::new(Lease { id, stream: None }),
            cfg,
        })
    }

    /// The etcd lease's TTL.
    pub fn ttl(&self) -> Duration {
        Duration::from_secs(self.ttl.unsigned_abs())
    }

    fn key(&self, kind: &str, role: &str) -> String {
        format!("{}/{kind}/{role}", self.cfg.prefix)
    }

    /// `role`'s holding, if held.
    pub async fn holding(&self, role: &str) -> Result<Option<Holding>, ReadError> {
        let key = self.key("lease", role);
        match self.get(&key).await? {
            None => Ok(None),
            Some((value, _)) => decode(&key, &value).map(Some),
        }
    }

    /// The last epoch granted for `role` (0: never).
    pub async fn epoch(&self, role: &str) -> Result<u64, ReadError> {
        let (table, _) = self.record(role).await?;
        Ok(table.role(role).map_or(0, |r| r.epoch))
    }

    /// `role`'s record and its revision (empty, 0 when absent).
    pub async fn record(&self, role: &str) -> Result<(LeaseTable, i64), ReadError> {
        let key = self.key("role", role);
        match self.get(&key).await? {
            None => Ok((LeaseTable::default(), 0)),
            Some((value, rev)) => Ok((decode(&key, &value)?, rev)),
        }
    }

    /// Every role's record, as one table.
    pub async fn table(&self) -> Result<LeaseTable, ReadError> {
        let mut table = LeaseTable::default();
        for (key, value) in self.get_prefix(&self.key("role", "")).await? {
            table.absorb(decode(&key, &value)?);
        }
        Ok(table)
    }

    /// Every key under `prefix`, with its value.
    async fn get_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, ReadError> {
        let resp = self
            .bounded(|| {
                let (mut c, p) = (self.client.clone(), prefix.to_owned());
                async move {
                    c.get(p, Some(etcd_client::GetOptions::new().with_prefix()))
                        .await
                }
            })
            .await
            .map_err(|e| ReadError::Store(e.to_string()))?;
        Ok(resp
            .kvs()
            .iter()
            .map(|kv| {
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                (key, kv.value().to_vec())
            })
            .collect())
    }

    /// `key`'s value and revision, if it exists.
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, i64)>, ReadError> {
        let resp = self
            .bounded(|| {
                let (mut c, k) = (self.client.clone(), key.to_owned());
                async move { c.get(k, None).await }
            })
            .await
            .map_err(|e| ReadError::Store(e.to_string()))?;
        Ok(resp
            .kvs()
            .first()
            .map(|kv| (kv.value().to_vec(), kv.mod_revision())))
    }

    /// Grants `role` to `holder` (this store's agent) at the next epoch, if
    /// nobody holds it and it is not paused, answering its acquisition
    /// `attempt`.
    pub async fn grant(&self, role: &str, holder: &str, attempt: u64) -> Result<u64, GrantError> {
        let store = |e: ReadError| GrantError::Store(e.to_string());
        let (table, rev) = self.record(role).await.map_err(store)?;
        self.grant_on(role, holder, attempt, table, rev).await
    }

    /// [`EtcdLeases::grant`] on the record `table` as read at revision
    /// `rev` (written only if it is still at `rev`).
    async fn grant_on(
        &self,
        role: &str,
        holder: &str,
        attempt: u64,
        mut table: LeaseTable,
        rev: i64,
    ) -> Result<u64, GrantError> {
        if table.role(role).is_some_and(|r| r.paused) {
            return Err(GrantError::Paused);
        }
        let epoch = table.role(role).map_or(0, |r| r.epoch) + 1;
        let grant = LeaseRequest::Grant {
            role: role.to_owned(),
            holder: holder.to_owned(),
            epoch,
            attempt,
            origin: Origin::default(),
        };
        if let LeaseResponse::Rejected(why) = table.apply(&grant) {
            return Err(GrantError::Store(format!(
                "the record refused the grant: {why}"
            )));
        }
        let (lease_key, record_key) = (self.key("lease", role), self.key("role", role));
        let value = encode(&Holding {
            holder: holder.to_owned(),
            epoch,
        });
        let record = encode(&table.part(role));
        let txn = |id: i64| {
            Txn::new()
                .when([
                    Compare::create_revision(lease_key.as_str(), CompareOp::Equal, 0),
                    Compare::mod_revision(record_key.as_str(), CompareOp::Equal, rev),
                ])
                .and_then([
                    TxnOp::put(
                        lease_key.as_str(),
                        value.clone(),
                        Some(PutOptions::new().with_lease(id)),
                    ),
                    TxnOp::put(record_key.as_str(), record.clone(), None),
                ])
                .or_else([TxnOp::get(lease_key.as_str(), None)])
        };
        let mut lease = self.lease.lock().await;
        let mut resp = self
            .bounded(|| {
                let (mut c, t) = (self.client.clone(), txn(lease.id));
                async move { c.txn(t).await }
            })
            .await;
        if matches!(resp, Err(Failed::LeaseGone)) {
            // This agent's etcd lease ran out (it held nothing, or lost it
            // all): a new one, and the same transaction once more.
            self.new_lease(&mut lease)
                .await
                .map_err(|e| GrantError::Store(e.to_string()))?;
            resp = self
                .bounded(|| {
                    let (mut c, t) = (self.client.clone(), txn(lease.id));
                    async move { c.txn(t).await }
                })
                .await;
        }
        drop(lease);
        let resp = resp.map_err(|e| GrantError::Store(e.to_string()))?;
        if resp.succeeded() {
            return Ok(epoch);
        }
        let held = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        match held {
            Some(v) => match decode::<Holding>(&lease_key, &v) {
                // A transaction sent again after no answer, that had been
                // applied: this is the grant.
                Ok(h) if h.holder == holder && h.epoch == epoch => Ok(epoch),
                Ok(h) => Err(GrantError::Held(h)),
                Err(e) => Err(GrantError::Store(e.to_string())),
            },
            None => Err(GrantError::Raced),
        }
    }

    /// Renews every role this store holds: one keep-alive of its etcd lease.
    /// On [`RenewError::Expired`] a new etcd lease is taken for later grants.
    pub async fn renew(&self) -> Result<Renewed, RenewError> {
        let mut lease = self.lease.lock().await;
        let sent = Instant::now();
        let answer =
            tokio::time::timeout(self.cfg.timeout, keep_alive(&self.client, &mut lease)).await;
        let ttl = match answer {
            Ok(Ok(ttl)) => ttl,
            Ok(Err(e)) if lease_gone(&e) => 0,
            Ok(Err(e)) => {
                lease.stream = None;
                return Err(RenewError::Store(e.to_string()));
            }
            Err(_) => {
                lease.stream = None;
                return Err(RenewError::Store(format!(
                    "no answer within {:?}",
                    self.cfg.timeout
                )));
            }
        };
        if ttl <= 0 {
            // Failing, the next grant takes one itself.
            let _ = self.new_lease(&mut lease).await;
            return Err(RenewError::Expired);
        }
        Ok(Renewed {
            sent,
            ttl: Duration::from_secs(ttl.unsigned_abs()),
        })
    }

    /// Gives `role` up, if `holder` holds it at `epoch`, naming the
    /// candidate it hands over to and why, for the record's history.
    pub async fn release(
        &self,
        role: &str,
        holder: &str,
        epoch: u64,
        next: Option<&str>,
        reason: Option<ReleaseReason>,
    ) -> Result<(), ReleaseError> {
        let held = Holding {
            holder: holder.to_owned(),
            epoch,
        };
        let req = LeaseRequest::Release {
            role: role.to_owned(),
            holder: holder.to_owned(),
            epoch,
            next: next.map(str::to_owned),
            reason,
            origin: Origin::default(),
        };
        let not_holder = || ReleaseError::NotHolder {
            holder: holder.to_owned(),
            epoch,
        };
        match self.update(role, &req, Some(&held), true).await {
            Ok(LeaseResponse::Rejected(_)) | Err(UpdateError::NotHeld) => Err(not_holder()),
            Ok(_) => Ok(()),
            Err(e) => Err(ReleaseError::Store(e.to_string())),
        }
    }

    /// Runs the call `f` makes under the configured timeout, again (after
    /// [`RETRY`]) while etcd is unreachable: the client's channel moves to
    /// another member, so one member down costs a retry, not a failure.
    async fn bounded<T, F, Fut>(&self, mut f: F) -> Result<T, Failed>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.cfg.timeout;
        loop {
            match tokio::time::timeout_at(deadline, f()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if lease_gone(&e) => return Err(Failed::LeaseGone),
                Ok(Err(e)) if unavailable(&e) && tokio::time::Instant::now() + RETRY < deadline => {
                    tokio::time::sleep(RETRY).await;
                }
                Ok(Err(e)) => return Err(Failed::Other(e.to_string())),
                Err(_) => {
                    return Err(Failed::Other(format!(
                        "no answer within {:?}",
                        self.cfg.timeout
                    )))
                }
            }
        }
    }

    /// Takes a new etcd lease in place of one that ran out.
    async fn new_lease(&self, lease: &mut Lease) -> Result<(), Failed> {
        let g = self
            .bounded(|| {
                let (mut c, ttl) = (self.client.clone(), self.ttl);
                async move { c.lease_grant(ttl, None).await }
            })
            .await?;
        lease.id = g.id();
        lease.stream = None;
        Ok(())
    }
}

/// What went wrong with a call to etcd.
#[derive(Debug)]
enum Failed {
    /// The etcd lease named is gone (it ran out).
    LeaseGone,
    /// Anything else, said as text.
    Other(String),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::LeaseGone => f.write_str("the etcd lease is gone"),
            Failed::Other(s) => f.write_str(s),
        }
    }
}

/// How long to wait before calling an unreachable etcd again.
const RETRY: Duration = Duration::from_millis(50);

/// Whether the call never reached a working member (refused, reset, no
/// leader yet): safe to make again.
fn unavailable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => s.code() == tonic::Code::Unavailable,
        etcd_client::Error::TransportError(_) => true,
        _ => false,
    }
}

/// Whether etcd said the lease named is gone (etcd's `ErrLeaseNotFound`, or
/// the client's own word for it on a keep-alive).
fn lease_gone(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::LeaseKeepAliveError(m) => m == "lease not found",
        etcd_client::Error::GRpcStatus(s) => s.message().ends_with("requested lease not found"),
        _ => false,
    }
}

/// One keep-alive on `lease`'s stream (opened if need be): the TTL etcd
/// answered (0 or less: the lease is gone).
async fn keep_alive(client: &Client, lease: &mut Lease) -> Result<i64, etcd_client::Error> {
    if lease.stream.is_none() {
        lease.stream = Some(client.clone().lease_keep_alive(lease.id).await?);
    }
    let Some((keeper, stream)) = lease.stream.as_mut() else {
        return Err(etcd_client::Error::LeaseKeepAliveError(
            "no keep-alive stream".into(),
        ));
    };
    keeper.keep_alive().await?;
    match stream.message().await? {
        Some(resp) => Ok(resp.ttl()),
        None => Err(etcd_client::Error::LeaseKeepAliveError(
            "the keep-alive stream ended".into(),
        )),
    }
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn decode<T: for<'de> Deserialize<'de>>(key: &str, bytes: &[u8]) -> Result<T, ReadError> {
    serde_json::from_slice(bytes).map_err(|e| ReadError::Corrupt {
        key: key.to_owned(),
        detail: e.to_string(),
    })
}
