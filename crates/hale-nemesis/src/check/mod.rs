//! The independent checker: invariants over a recorded [`History`], one
//! per file, each `fn check(&History) -> Result<(), Violation>`. None asks
//! hale what happened; they read the registers, the hooks, the client and
//! what the agents published.
//!
//! * [`fencing`] — (a) no write accepted at an epoch after one accepted at a
//!   higher epoch anywhere; no two writers accepted at one epoch.
//! * [`durability`] — (b) every acknowledged write is on a majority of
//!   registers at the end.
//! * [`liveness`] — (c) after the last heal, exactly one primary and
//!   membership converged within the bound.
//! * [`false_death`] — (d) no death verdict that no fault explains: one
//!   that stopped the member, or cut it off from the verdict's declarer
//!   and a second host, within a grace before it was seen.
//! * [`demote_once`] — (e) every lost lease demoted exactly once.
//! * [`fenced_first`] — (f) hale fences an old primary before a new one is
//!   promoted (its register serves nothing after a newer promotion), unless
//!   everything on its host that could fence it was frozen.
//! * [`two_holders`] — (g) no two hosts serving at once by the hook logs
//!   (promote start to demote end per host).

use crate::history::History;

pub mod demote_once;
pub mod durability;
pub mod false_death;
pub mod fenced_first;
pub mod fencing;
pub mod frozen;
pub mod liveness;
pub mod two_holders;

/// A broken invariant, with the stretch of history that shows it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("({check}) {what}")]
pub struct Violation {
    /// Which invariant: `fencing`, `durability`, `liveness`, `false-death`,
    /// `demote-once`, `fenced-first`, `two-holders`.
    pub check: String,
    /// What happened.
    pub what: String,
    /// The history slice that shows it starts here (shared clock, ns)...
    pub from_ns: u64,
    /// ...and ends here.
    pub to_ns: u64,
    /// The writes it is about (the slice shows only these of all writes).
    #[serde(default)]
    pub values: Vec<u64>,
}

impl Violation {
    /// A violation of `check` shown by the history between `from_ns` and `to_ns`.
    pub fn new(check: &'static str, what: String, from_ns: u64, to_ns: u64) -> Violation {
        Violation {
            check: check.to_owned(),
            what,
            from_ns,
            to_ns,
            values: Vec::new(),
        }
    }

    /// The same, about writes `values`.
    pub fn about(mut self, values: Vec<u64>) -> Violation {
        self.values = values;
        self
    }

    /// The history slice that shows it.
    pub fn slice(&self, h: &History) -> String {
        h.slice(self.from_ns, self.to_ns, &self.values)
    }
}

/// Every check, in order; all violations found.
pub fn check_all(h: &History) -> Vec<Violation> {
    [
        fencing::check,
        durability::check,
        liveness::check,
        false_death::check,
        demote_once::check,
        fenced_first::check,
        two_holders::check,
    ]
    .iter()
    .filter_map(|c| c(h).err())
    .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::register::RegisterRecord;

    /// An accepted write at `t` s, epoch `epoch`, value `value`.
    pub fn accepted(t: u64, epoch: u64, value: u64) -> RegisterRecord {
        RegisterRecord::Accepted {
            t: t * 1_000_000_000,
            epoch,
            value,
            client: 0,
            replicas: vec!["x".into()],
        }
    }

    /// A copy at `t` s.
    pub fn replica(t: u64, epoch: u64, value: u64, from: &str) -> RegisterRecord {
        RegisterRecord::Replica {
            t: t * 1_000_000_000,
            epoch,
            value,
            from: from.into(),
        }
    }
}
