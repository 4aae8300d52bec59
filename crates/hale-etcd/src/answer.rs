//! The agent's requests ([`BatchItem`]s, as its role managers send them to
//! the embedded control plane) answered on etcd, in the same vocabulary:
//! what lets the agent take either store behind one contract.
//!
//! **Who gets a free role.** Each candidate publishes its candidacy
//! (`candidates/<role>/<name>`: priority and standing) every time it asks,
//! under an etcd lease of its own that is never renewed: a candidate that
//! stops asking (it failed its checks, retired the role, died) is gone a
//! lease later, as the embedded grantor forgets a contender not heard from.
//! The role goes to the best candidacy published, by the grantor's own
//! order ([`hale_control::replication::judge`]: a copy too far behind
//! never; the furthest synchronous copy first, then priority, then the
//! smaller name), and only the best asks etcd for it.
//!
//! Not answered yet (refused as unavailable, saying so): `Keep` and
//! `Adopt` (a stopped agent's role kept while paused), strict durability's
//! proof over the standbys' copies, the churn breaker and an operator's
//! preferred successor.

use etcd_client::PutOptions;
use hale_control::lease::AcquireRequest;
use hale_control::raft::api::{Answer, BatchItem, Refusal};
use hale_control::replication::{self, judge, Verdict};
use hale_control::{LeaseRejection, LeaseRequest, LeaseResponse, Standing};
use serde::{Deserialize, Serialize};

use crate::{decode, encode, EtcdLeases, GrantError, Holding, ReleaseError, RenewError};

/// One candidate's published candidacy for a role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Candidacy {
    /// Its priority (higher first).
    pub priority: i64,
    /// Its copy of the data (replicated roles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standing: Option<Standing>,
}

impl EtcdLeases {
    /// Answers one request as the embedded control plane would.
    pub async fn answer(&self, item: &BatchItem) -> Answer<LeaseResponse> {
        match item {
            BatchItem::Acquire(a) => self.acquire(a).await,
            BatchItem::Write(req) => self.write(req, None).await,
        }
    }

    /// Every request of a batch, in order: one keep-alive for all its
    /// renewals (it renews every role this agent holds), sent before them.
    pub async fn answer_all(&self, items: &[BatchItem]) -> Vec<Answer<LeaseResponse>> {
        let renews = items.iter().any(|i| {
            matches!(
                i,
                BatchItem::Write(LeaseRequest::Renew { .. } | LeaseRequest::Renewals { .. })
            )
        });
        let alive = if renews {
            Some(self.keep_alive().await)
        } else {
            None
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            out.push(match item {
                BatchItem::Acquire(a) => self.acquire(a).await,
                BatchItem::Write(req) => self.write(req, alive.as_ref()).await,
            });
        }
        out
    }

    async fn acquire(&self, a: &AcquireRequest) -> Answer<LeaseResponse> {
        let unavailable = |e: String| Refusal::Unavailable(format!("etcd: {e}"));
        self.publish(a).await.map_err(unavailable)?;
        // One read of the record serves the whole decision; the grant is
        // written only if it is still at this revision.
        let (table, rev) = self
            .record(&a.role)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        if let Some(h) = self
            .holding(&a.role)
            .await
            .map_err(|e| unavailable(e.to_string()))?
        {
            let same = table
                .role(&a.role)
                .is_some_and(|r| a.attempt != 0 && r.attempt == a.attempt);
            if h.holder == a.holder && same {
                // Its answer was lost: the same grant again.
                return Ok(LeaseResponse::Granted { epoch: h.epoch });
            }
            return Err(Refusal::NotYet(format!(
                "held by {} at epoch {}",
                h.holder, h.epoch
            )));
        }
        let mark = table.role(&a.role).and_then(|r| r.mark.as_ref());
        if let Verdict::Lagging { lag, max_lag } = judge(mark, &a.holder, a.standing.as_ref()) {
            return Err(Refusal::Lagging { lag, max_lag });
        }
        let candidacies = self
            .candidacies(&a.role)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let best = replication::best(
            mark,
            candidacies
                .iter()
                .map(|(n, c)| (n.as_str(), c.priority, c.standing.as_ref())),
        );
        if let Some(best) = best.filter(|b| *b != a.holder) {
            return Err(Refusal::NotYet(format!("{best} is a better candidate")));
        }
        // The holder reckons its lease from when it sent this request: the
        // etcd lease the grant attaches the holding to must last at least a
        // TTL from now, not from its last keep-alive (a lapsed one is
        // replaced by the grant, with a full TTL).
        if let Err(RenewError::Store(e)) = self.renew().await {
            return Err(unavailable(e));
        }
        match self
            .grant_on(&a.role, &a.holder, a.attempt, table, rev)
            .await
        {
            Ok(epoch) => Ok(LeaseResponse::Granted { epoch }),
            Err(GrantError::Store(e)) => Err(unavailable(e)),
            Err(e) => Err(Refusal::NotYet(e.to_string())),
        }
    }

    /// Publishes `a`'s candidacy, for a lease from now.
    async fn publish(&self, a: &AcquireRequest) -> Result<(), String> {
        let key = self.key("candidates", &format!("{}/{}", a.role, a.holder));
        let value = encode(&Candidacy {
            priority: a.priority,
            standing: a.standing,
        });
        let ttl = self.ttl;
        let id = self
            .bounded(|| {
                let mut c = self.client.clone();
                async move { c.lease_grant(ttl, None).await }
            })
            .await
            .map_err(|e| e.to_string())?
            .id();
        self.bounded(|| {
            let (mut c, k, v) = (self.client.clone(), key.clone(), value.clone());
            async move { c.put(k, v, Some(PutOptions::new().with_lease(id))).await }
        })
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    /// Every candidacy published for `role`, by candidate name.
    pub async fn candidacies(
        &self,
        role: &str,
    ) -> Result<Vec<(String, Candidacy)>, crate::ReadError> {
        let prefix = self.key("candidates", &format!("{role}/"));
        let mut out = Vec::new();
        for (key, value) in self.get_prefix(&prefix).await? {
            let name = key.strip_prefix(&prefix).unwrap_or(&key).to_owned();
            out.push((name, decode(&key, &value)?));
        }
        Ok(out)
    }

    /// `req` answered; a renewal after `alive`, the batch's keep-alive, or
    /// one of its own.
    async fn write(&self, req: &LeaseRequest, alive: Option<&Answer<()>>) -> Answer<LeaseResponse> {
        let unavailable = |e: String| Refusal::Unavailable(format!("etcd: {e}"));
        match req {
            LeaseRequest::Renew {
                role,
                holder,
                epoch,
                ..
            } => {
                self.alive(alive, role, holder, *epoch).await?;
                self.renewal(role, holder, *epoch, req).await
            }
            LeaseRequest::Renewals {
                holder,
                leases,
                marks,
            } => {
                if let Some((role, epoch)) = leases.first() {
                    self.alive(alive, role, holder, *epoch).await?;
                }
                let mut answers = Vec::new();
                for (role, epoch) in leases {
                    let mark = marks
                        .iter()
                        .find(|(r, _)| r == role)
                        .map(|(_, m)| m.clone());
                    let one = LeaseRequest::Renew {
                        role: role.clone(),
                        holder: holder.clone(),
                        epoch: *epoch,
                        mark,
                    };
                    answers.push(match self.renewal(role, holder, *epoch, &one).await {
                        Ok(a) => a,
                        Err(_) => LeaseResponse::Rejected(LeaseRejection::NotHolder {
                            holder: holder.clone(),
                            epoch: *epoch,
                        }),
                    });
                }
                Ok(LeaseResponse::Batch(answers))
            }
            LeaseRequest::Release {
                role,
                holder,
                epoch,
                next,
                reason,
                ..
            } => match self
                .release(role, holder, *epoch, next.as_deref(), *reason)
                .await
            {
                Ok(()) => Ok(LeaseResponse::Released),
                Err(ReleaseError::NotHolder { holder, epoch }) => {
                    Ok(LeaseResponse::Rejected(LeaseRejection::NotHolder {
                        holder,
                        epoch,
                    }))
                }
                Err(ReleaseError::Store(e)) => Err(unavailable(e)),
            },
            LeaseRequest::Pause { role, .. } | LeaseRequest::Switchover { role, .. } => self
                .update(role, req, None, false)
                .await
                .map_err(|e| unavailable(e.to_string())),
            LeaseRequest::Grant { .. }
            | LeaseRequest::Keep { .. }
            | LeaseRequest::Adopt { .. }
            | LeaseRequest::Batch(_) => Err(Refusal::Unavailable(
                "the etcd store does not take this request yet (grants are made by acquiring; \
                 keep and adopt are not supported)"
                    .into(),
            )),
        }
    }

    /// One keep-alive of this agent's etcd lease: refused `NotYet` when it
    /// had run out.
    async fn keep_alive(&self) -> Answer<()> {
        match self.renew().await {
            Ok(_) => Ok(()),
            Err(RenewError::Expired) => Err(Refusal::NotYet(
                "this agent's etcd lease ran out: it holds nothing".into(),
            )),
            Err(RenewError::Store(e)) => Err(Refusal::Unavailable(format!("etcd: {e}"))),
        }
    }

    /// The keep-alive a renewal of `role` by `holder` at `epoch` waits
    /// for: the batch's (`alive`), else one of its own. An etcd lease that
    /// ran out answers the renewal as the table answers a stale one.
    async fn alive(
        &self,
        alive: Option<&Answer<()>>,
        role: &str,
        holder: &str,
        epoch: u64,
    ) -> Answer<()> {
        let answer = match alive {
            Some(a) => a.clone(),
            None => self.keep_alive().await,
        };
        answer.map_err(|r| match r {
            Refusal::NotYet(_) => Refusal::NotYet(format!(
                "{holder}'s etcd lease ran out: {role} is not held at epoch {epoch}"
            )),
            other => other,
        })
    }

    /// `req`, a renewal of `role` by `holder` at `epoch`, applied to the
    /// record while the holding is that one.
    async fn renewal(
        &self,
        role: &str,
        holder: &str,
        epoch: u64,
        req: &LeaseRequest,
    ) -> Answer<LeaseResponse> {
        let held = Holding {
            holder: holder.to_owned(),
            epoch,
        };
        match self.update(role, req, Some(&held), false).await {
            Ok(a) => Ok(a),
            Err(crate::UpdateError::NotHeld) => {
                Ok(LeaseResponse::Rejected(LeaseRejection::NotHolder {
                    holder: holder.to_owned(),
                    epoch,
                }))
            }
            Err(e) => Err(Refusal::Unavailable(format!("etcd: {e}"))),
        }
    }
}
