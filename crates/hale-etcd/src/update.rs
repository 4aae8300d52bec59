//! A role's record changed as the embedded control plane changes its table:
//! read it, apply the request ([`LeaseTable::apply`]), write it back if it
//! is still at the revision read (and, where asked, the holding is still
//! the one named), else read again.

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use hale_control::{LeaseRequest, LeaseResponse};

use crate::{decode, encode, EtcdLeases, Holding};

/// How many times a change is tried while other writers move the record.
const TRIES: usize = 8;

/// Why a record was not changed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum UpdateError {
    /// The role is not held as the request requires: nothing written.
    #[error("the role is not held by the holder and epoch named; nothing written")]
    NotHeld,
    /// Other writers changed the record at every try: nothing written.
    #[error("the record changed at each of {TRIES} tries; nothing written")]
    Raced,
    /// etcd did not answer in time, or failed: the change may or may not
    /// have been written.
    #[error("etcd: {0}; the change may or may not have been written")]
    Store(String),
}

impl EtcdLeases {
    /// Applies `req` to `role`'s record: its answer, written (a rejection
    /// is answered and nothing written). With `held`, only while the
    /// role's holding is that one; with `end`, the holding is deleted in the
    /// same transaction (a release).
    pub async fn update(
        &self,
        role: &str,
        req: &LeaseRequest,
        held: Option<&Holding>,
        end: bool,
    ) -> Result<LeaseResponse, UpdateError> {
        let (lease_key, record_key) = (self.key("lease", role), self.key("role", role));
        for _ in 0..TRIES {
            let (mut table, rev) = self
                .record(role)
                .await
                .map_err(|e| UpdateError::Store(e.to_string()))?;
            let answer = table.apply(req);
            if matches!(answer, LeaseResponse::Rejected(_)) {
                return Ok(answer);
            }
            let mut when = vec![Compare::mod_revision(
                record_key.as_str(),
                CompareOp::Equal,
                rev,
            )];
            if let Some(h) = held {
                when.push(Compare::value(
                    lease_key.as_str(),
                    CompareOp::Equal,
                    encode(h),
                ));
            }
            let mut then = vec![TxnOp::put(
                record_key.as_str(),
                encode(&table.part(role)),
                None,
            )];
            if end {
                then.push(TxnOp::delete(lease_key.as_str(), None));
            }
            let txn = Txn::new()
                .when(when)
                .and_then(then)
                .or_else([TxnOp::get(lease_key.as_str(), None)]);
            let resp = self
                .bounded(|| {
                    let (mut c, t) = (self.client.clone(), txn.clone());
                    async move { c.txn(t).await }
                })
                .await
                .map_err(|e| UpdateError::Store(e.to_string()))?;
            if resp.succeeded() {
                return Ok(answer);
            }
            if let Some(h) = held {
                let now = resp.op_responses().into_iter().find_map(|r| match r {
                    TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                    _ => None,
                });
                let still = now
                    .and_then(|v| decode::<Holding>(&lease_key, &v).ok())
                    .is_some_and(|now| now == *h);
                if !still {
                    return Err(UpdateError::NotHeld);
                }
            }
        }
        Err(UpdateError::Raced)
    }
}
