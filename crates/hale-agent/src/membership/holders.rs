//! On a control-plane server: watches the local copy of the lease table and
//! publishes a `holder` event whenever a role changes hands, so that every
//! server's event history (and the dashboard opened later, at 3 a.m.) shows
//! failovers and handovers, not only the agents that took part; and a
//! `churn-breaker` event when the breaker opens or closes on this server
//! while it leads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hale_control::raft::ControlPlane;
use hale_control::LeaseTable;
use tokio::sync::watch;

use crate::membership::runtime::Shared;
use crate::view::AgentEvent;

/// How often the local table is read (a memory read, no request).
const POLL: Duration = Duration::from_millis(100);

/// One role's last known holder and epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Seen {
    holder: Option<String>,
    /// The last holder there was, even if the role was released since.
    last_holder: Option<String>,
    epoch: u64,
}

/// The `holder` events that `table` implies after `seen`, which it updates:
/// `(role, from, to, epoch)` for each new grant (`to` set, higher epoch)
/// and each release (`to` none).
fn changes(
    seen: &mut BTreeMap<String, Seen>,
    table: &LeaseTable,
) -> Vec<(String, Option<String>, Option<String>, u64)> {
    let mut out = Vec::new();
    for (role, lease) in table.roles() {
        let s = seen.entry(role.clone()).or_default();
        let granted = lease.epoch > s.epoch && lease.holder.is_some();
        let released = lease.epoch == s.epoch && s.holder.is_some() && lease.holder.is_none();
        if granted || released {
            out.push((
                role.clone(),
                s.holder.clone().or_else(|| s.last_holder.clone()),
                lease.holder.clone(),
                lease.epoch,
            ));
        }
        if let Some(h) = std::mem::replace(&mut s.holder, lease.holder.clone()) {
            s.last_holder = Some(h);
        }
        s.epoch = lease.epoch;
    }
    out
}

/// Publishes `holder` events (member: the new holder; detail: role, from,
/// to, epoch) until `stop`. What the table holds when it starts is the
/// baseline, not news.
pub(crate) async fn watch_holders(
    cp: ControlPlane,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut seen = BTreeMap::new();
    changes(&mut seen, &cp.table());
    let mut breaker = false;
    every(POLL, &mut stop, || {
        let open = cp.churn_breaker_open();
        if open != std::mem::replace(&mut breaker, open) {
            tracing::info!(
                open,
                "control plane: churn breaker {}",
                if open { "open" } else { "closed" }
            );
            let server = cp.id;
            shared.emit(AgentEvent::ChurnBreaker { server, open }, None);
        }
        for (role, from, to, epoch) in changes(&mut seen, &cp.table()) {
            tracing::info!(role, ?from, ?to, epoch, "role changed hands");
            let member = to.clone();
            shared.emit(
                AgentEvent::Holder {
                    role,
                    from,
                    to,
                    epoch,
                },
                member,
            );
        }
    })
    .await;
}

/// Calls `f` every `period` until `stop` changes (or its sender is gone).
pub(crate) async fn every(period: Duration, stop: &mut watch::Receiver<bool>, mut f: impl FnMut()) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => f(),
            _ = stop.changed() => return,
        }
    }
}

/// Publishes a `control-stopped` event (detail: server, error) when this
/// agent's control-plane server stops on a fatal error, a failed storage
/// write above all (disk full). `/v1/health` says `degraded` from then on,
/// and `/metrics` has `hale_control_storage_failed 1`.
pub(crate) async fn watch_storage(cp: ControlPlane, shared: Arc<Shared>) {
    let Some(error) = cp.stopped().await else {
        return; // shut down with the agent
    };
    tracing::error!(server = cp.id, %error, "the control-plane server has stopped");
    shared.emit(
        AgentEvent::ControlStopped {
            server: cp.id,
            error,
        },
        None,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_control::LeaseRequest;

    fn grant(t: &mut LeaseTable, holder: &str, epoch: u64) {
        t.apply(&LeaseRequest::Grant {
            role: "db".into(),
            holder: holder.into(),
            epoch,
            attempt: 0,
            origin: Default::default(),
        });
    }

    #[test]
    fn grants_and_releases_become_holder_changes_and_the_baseline_does_not() {
        let mut t = LeaseTable::default();
        grant(&mut t, "a", 1);
        let mut seen = BTreeMap::new();
        assert_eq!(
            changes(&mut seen, &t),
            vec![("db".into(), None, Some("a".into()), 1)]
        );
        assert!(changes(&mut seen, &t).is_empty(), "no news twice");
        t.apply(&LeaseRequest::Release {
            role: "db".into(),
            holder: "a".into(),
            epoch: 1,
            next: None,
            reason: None,
            origin: Default::default(),
        });
        assert_eq!(
            changes(&mut seen, &t),
            vec![("db".into(), Some("a".into()), None, 1)]
        );
        grant(&mut t, "b", 2);
        // Released in between: the change still names who held it before.
        assert_eq!(
            changes(&mut seen, &t),
            vec![("db".into(), Some("a".into()), Some("b".into()), 2)]
        );
    }
}
