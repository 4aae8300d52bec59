//! The role managers' control-plane requests, carried in batches: one
//! request (and one log entry) for every renewal and acquisition due at
//! one instant, whatever the number of roles. Holders of one agent share a
//! time origin and renew on the same grid ([`hale_control::Holder`]), so
//! their renewals meet here within moments of each other.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use hale_control::raft::api::{Answer, BatchItem, Refusal, MAX_BATCH};
use hale_control::raft::ControlClient;
use hale_control::{ControlRequest, LeaseResponse};

/// How long the first request of a batch waits for others: role managers
/// woken by one tick send theirs within this.
const GATHER: Duration = Duration::from_millis(5);
/// Most JSON bytes of items in one batch (the control plane reads at most
/// 64 KiB of a request's body).
const MAX_BATCH_BYTES: usize = 48 << 10;
/// The least time a batch is given.
const MIN_LIMIT: Duration = Duration::from_millis(50);

struct Pending {
    item: BatchItem,
    bytes: usize,
    until: Instant,
    reply: oneshot::Sender<Answer<LeaseResponse>>,
}

/// Sends control-plane requests in batches; cloned into every role manager.
#[derive(Clone)]
pub struct LeaseRequests {
    tx: mpsc::UnboundedSender<Pending>,
}

impl LeaseRequests {
    /// Starts the batching task over `control`; it ends when every clone
    /// of the returned handle is dropped.
    pub fn start(control: ControlClient) -> LeaseRequests {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(control, rx));
        LeaseRequests { tx }
    }

    /// Sends `req` with the next batch and waits for its answer, at most
    /// `limit`: the answer, or the refusal ([`Refusal::NoAnswer`] when no
    /// server answered in time). The holder reads a refusal, such as the
    /// grantor's "not yet", as no answer; the role manager shows why.
    pub async fn send(&self, req: ControlRequest, limit: Duration) -> Answer<LeaseResponse> {
        let item = match req {
            ControlRequest::Acquire(a) => BatchItem::Acquire(a),
            ControlRequest::Lease(r) => BatchItem::Write(r),
        };
        let bytes = serde_json::to_vec(&item).map_or(MAX_BATCH_BYTES, |v| v.len());
        let (reply, answer) = oneshot::channel();
        let until = Instant::now() + limit;
        let pending = Pending {
            item,
            bytes,
            until,
            reply,
        };
        self.tx.send(pending).map_err(|_| Refusal::NoAnswer)?;
        match tokio::time::timeout_at(until, answer).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) | Err(_) => Err(Refusal::NoAnswer),
        }
    }
}

async fn run(control: ControlClient, mut rx: mpsc::UnboundedReceiver<Pending>) {
    while let Some(first) = rx.recv().await {
        let mut all = vec![first];
        let gather = tokio::time::sleep(GATHER);
        tokio::pin!(gather);
        loop {
            tokio::select! {
                _ = &mut gather => break,
                p = rx.recv() => match p {
                    Some(p) => all.push(p),
                    None => break,
                },
            }
        }
        for chunk in chunks(all) {
            tokio::spawn(send(control.clone(), chunk));
        }
    }
}

/// `all` in batches of at most [`MAX_BATCH`] items and [`MAX_BATCH_BYTES`].
fn chunks(all: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut out: Vec<Vec<Pending>> = Vec::new();
    let mut bytes = 0;
    for p in all {
        match out.last_mut() {
            Some(c) if c.len() < MAX_BATCH && bytes + p.bytes <= MAX_BATCH_BYTES => {
                bytes += p.bytes;
                c.push(p);
            }
            _ => {
                bytes = p.bytes;
                out.push(vec![p]);
            }
        }
    }
    out
}

async fn send(control: ControlClient, chunk: Vec<Pending>) {
    let until = chunk
        .iter()
        .map(|p| p.until)
        .min()
        .unwrap_or_else(Instant::now);
    let limit = until
        .saturating_duration_since(Instant::now())
        .max(MIN_LIMIT);
    let items: Vec<BatchItem> = chunk.iter().map(|p| p.item.clone()).collect();
    let answers = match tokio::time::timeout(limit, control.batch(&items, limit)).await {
        Ok(Ok(a)) if a.len() == chunk.len() => a,
        Ok(Ok(a)) => {
            tracing::warn!(
                asked = chunk.len(),
                answered = a.len(),
                "control plane: a batch answered short"
            );
            Vec::new()
        }
        // Every item gets the batch's refusal: a role manager reads a
        // `too-new` one (a keep or an adoption that a server of an older
        // release cannot apply) to fall back to plain renewals.
        Ok(Err(refusal)) => {
            tracing::debug!(%refusal, items = chunk.len(), "control plane: batch");
            vec![Err(refusal); chunk.len()]
        }
        Err(_) => Vec::new(),
    };
    let mut answers = answers.into_iter();
    for p in chunk {
        let r = answers.next().unwrap_or(Err(Refusal::NoAnswer));
        if let Err(refusal) = &r {
            tracing::debug!(%refusal, "control plane");
        }
        let _ = p.reply.send(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_control::LeaseRequest;

    fn pending(bytes: usize) -> Pending {
        let (reply, _) = oneshot::channel();
        Pending {
            item: BatchItem::Write(LeaseRequest::Renew {
                role: "r".into(),
                holder: "n".into(),
                epoch: 1,
                mark: None,
            }),
            bytes,
            until: Instant::now(),
            reply,
        }
    }

    #[test]
    fn batches_are_cut_at_the_item_count_and_the_byte_budget() {
        let sizes: Vec<usize> = chunks((0..MAX_BATCH + 1).map(|_| pending(10)).collect())
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, vec![MAX_BATCH, 1]);
        let big = MAX_BATCH_BYTES / 2 + 1;
        let sizes: Vec<usize> = chunks((0..3).map(|_| pending(big)).collect())
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(sizes, vec![1, 1, 1]);
    }
}
