//! Several lease requests in one: an agent's renewals of every role it
//! holds and its acquisitions, sent together and written as one log entry
//! ([`LeaseRequest::Batch`]), so that the control plane's load grows with
//! hosts, not roles.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use axum::Json;

use super::api::{self, Answer, BatchItem, Refusal};
use super::{ControlError, ControlPlane};
use crate::lease::{LeaseRejection, LeaseRequest, LeaseResponse};
use crate::protocol::Asker;

/// Where the answers to one entry of the batch go: one item, or each
/// renewal of a [`LeaseRequest::Renewals`].
enum Slot {
    One(usize),
    Many(Vec<usize>),
}

/// One holder's renewals in a batch: each role with its epoch and the
/// item it answers, and the marks of the replicated ones.
#[derive(Default)]
struct Renewing {
    leases: Vec<(String, u64, usize)>,
    marks: Vec<(String, crate::replication::Mark)>,
}

impl ControlPlane {
    /// Answers each item of `items` as [`ControlPlane::acquire`] and
    /// [`ControlPlane::write`] would, with one proposal for all of them:
    /// the grantor decides the acquisitions (a refusal answers that item
    /// alone), then the grants and writes are committed as one entry.
    /// Forwarded to the leader as a whole.
    pub async fn batch(
        &self,
        items: Vec<BatchItem>,
    ) -> Result<Vec<Answer<LeaseResponse>>, ControlError> {
        self.running()?;
        if items.len() > api::MAX_BATCH {
            return Err(ControlError::Request(format!(
                "a batch of {} items (at most {})",
                items.len(),
                api::MAX_BATCH
            )));
        }
        if self.leader() != Some(self.id) {
            return self
                .forward(api::BATCH, &items, api::batch_needs(&items))
                .await;
        }
        let mut answers: Vec<Option<Answer<LeaseResponse>>> = vec![None; items.len()];
        let (mut writes, mut slots) = (Vec::new(), Vec::new());
        // Renewals, by holder, go in one compact entry each.
        let mut renewals: BTreeMap<String, Renewing> = BTreeMap::new();
        {
            let table = self.table();
            let mut g = self.grantor.lock().expect("grantor lock");
            let Some(g) = g.as_mut() else {
                return Err(ControlError::NoLeader);
            };
            let appends = self.appends.lock().expect("appends lock");
            let now = self.now();
            for (i, item) in items.into_iter().enumerate() {
                let req = match item {
                    BatchItem::Acquire(ask) => match g.contend(&table, &appends, &ask, now) {
                        Ok(grant) => grant,
                        Err(delay) => {
                            answers[i] = Some(Err(ControlError::NotYet(delay).into()));
                            continue;
                        }
                    },
                    BatchItem::Write(LeaseRequest::Batch(_)) => {
                        let nested = LeaseResponse::Rejected(LeaseRejection::NestedBatch);
                        answers[i] = Some(Ok(nested));
                        continue;
                    }
                    BatchItem::Write(LeaseRequest::Renew {
                        role,
                        holder,
                        epoch,
                        mark,
                    }) => {
                        g.heard(&holder, now);
                        let r = renewals.entry(holder).or_default();
                        if let Some(mark) = mark {
                            r.marks.push((role.clone(), mark));
                        }
                        r.leases.push((role, epoch, i));
                        continue;
                    }
                    BatchItem::Write(req) => req,
                };
                writes.push(req);
                slots.push(Slot::One(i));
            }
        }
        for (holder, Renewing { leases, marks }) in renewals {
            slots.push(Slot::Many(leases.iter().map(|l| l.2).collect()));
            let leases = leases.into_iter().map(|(r, e, _)| (r, e)).collect();
            writes.push(LeaseRequest::Renewals {
                holder,
                leases,
                marks,
            });
        }
        if !writes.is_empty() {
            // Grants are in it: written here, never forwarded (see `write_here`).
            match self.write_here(LeaseRequest::Batch(writes)).await? {
                LeaseResponse::Batch(rs) => {
                    for (slot, r) in slots.into_iter().zip(rs) {
                        match (slot, r) {
                            (Slot::One(i), r) => answers[i] = Some(Ok(r)),
                            (Slot::Many(is), LeaseResponse::Batch(rs)) => {
                                for (i, r) in is.into_iter().zip(rs) {
                                    answers[i] = Some(Ok(r));
                                }
                            }
                            (Slot::Many(_), _) => {}
                        }
                    }
                }
                other => return Err(ControlError::Request(format!("a batch answered {other:?}"))),
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or(Err(Refusal::NoAnswer)))
            .collect())
    }
}

/// `POST /control/batch`: as [`super::routes::lease_answer`], item by item.
pub(super) async fn route(
    State(cp): State<ControlPlane>,
    asker: Asker,
    Json(items): Json<Vec<BatchItem>>,
) -> Response {
    let answers = cp.batch(items).await.map(|answers| {
        let form = |a| super::api::answer_for(a, asker.0);
        answers.into_iter().map(form).collect::<Vec<_>>()
    });
    super::routes::lease_answer(answers, asker)
}
