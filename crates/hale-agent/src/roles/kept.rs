//! Finding the paused roles an earlier run of this agent kept when it
//! stopped, for their managers to adopt: one reading of the control
//! plane's table for the whole agent, shared by every role manager.
//!
//! A keep may reach the server the agent reads late (a restarted server,
//! one behind a slow link: nemesis seed 20004), so the table is read again
//! 2, 4, 8, 16 and 32 s later ([`ADOPT_READS`] answers in all, within
//! [`ADOPT_LOOKUP`]). Each manager looks for its role in every answer
//! ([`KeptTables::find`]). Read by each manager on its own, 1,000 roles
//! meant 6,000 readings of a table of ~60 KB when an agent started.

use std::sync::Arc;
use std::time::Duration;

use hale_control::raft::ControlClient;
use hale_control::LeaseTable;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long the table is read for after the agent starts.
pub const ADOPT_LOOKUP: Duration = Duration::from_secs(120);

/// How many answers are read before no paused role of this node is taken
/// to be there.
pub const ADOPT_READS: u32 = 6;

/// One answer: which one it is (1 for the first) and the table.
#[derive(Debug, Clone)]
struct Reading {
    n: u32,
    table: Arc<LeaseTable>,
}

/// The agent's readings of the table, as they come.
#[derive(Debug, Clone)]
pub struct KeptTables {
    readings: watch::Receiver<Option<Reading>>,
    started: Instant,
}

impl KeptTables {
    /// Starts reading the table through `control` (a task that ends after
    /// [`ADOPT_READS`] answers or [`ADOPT_LOOKUP`]).
    pub fn start(control: ControlClient) -> KeptTables {
        let (tx, rx) = watch::channel(None);
        let started = Instant::now();
        tokio::spawn(async move {
            let until = started + ADOPT_LOOKUP;
            let mut n = 0;
            while Instant::now() < until && n < ADOPT_READS {
                let Some(table) = control.table().await else {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                };
                n += 1;
                let table = Arc::new(table);
                if tx.send(Some(Reading { n, table })).is_err() {
                    return; // Nobody looks any more.
                }
                tokio::time::sleep(Duration::from_secs(1 << n.min(5))).await;
            }
        });
        KeptTables {
            readings: rx,
            started,
        }
    }

    /// Waits for a reading that says `node` holds `role` while it is
    /// paused: its epoch, and whether the table records the holding as
    /// kept. `None` once every reading said otherwise, or the lookup is
    /// over.
    pub async fn find(&self, role: &str, node: &str) -> Option<(u64, bool)> {
        let mut rx = self.readings.clone();
        let until = self.started + ADOPT_LOOKUP;
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                if let Some(found) = kept_by(&r.table, role, node) {
                    return Some(found);
                }
                if r.n >= ADOPT_READS {
                    return None;
                }
            }
            match tokio::time::timeout_at(until, rx.changed()).await {
                Ok(Ok(())) => {}
                // Over, or the reading task ended.
                _ => return None,
            }
        }
    }
}

/// The epoch at which `table` says `node` holds `role` while it is
/// paused, and whether it records that holding as kept.
fn kept_by(table: &LeaseTable, role: &str, node: &str) -> Option<(u64, bool)> {
    let r = table.role(role)?;
    (r.paused && r.holder.as_deref() == Some(node)).then_some((r.epoch, r.kept.is_some()))
}
