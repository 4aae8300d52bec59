//! Operator actions as data: what an operator does with `hale`, drawn from
//! the seed like any fault ([`crate::schedule`]); [`crate::operator`] plans
//! each into steps, [`crate::script`] carries them out.

use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

use crate::cluster::SERVERS;

/// How the holder's agent is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    /// The documented way: pause, wait until paused, SIGTERM, wait for the
    /// exit, start, wait until it holds the role again, resume.
    Documented,
    /// Resume as soon as the agent exited, before it is started again (at
    /// the heal).
    ResumeEarly,
    /// Pause, restart, and never resume (the heal phase does).
    NeverResume,
    /// SIGTERM and start again without pausing (it hands the role over).
    Unpaused,
    /// Pause and SIGTERM at once, without waiting for the holder to learn
    /// of the pause; start again, wait until it holds, resume.
    Hasty,
}

/// An operator's action. Hosts are indices; `from`: the member the
/// command is run on (any member will do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// `hale roles pause db`; heal: `hale roles resume db`.
    Pause {
        /// Where.
        from: usize,
    },
    /// `hale roles resume db`.
    Resume {
        /// Where.
        from: usize,
    },
    /// `hale roles resume db --force`, the documented way: when the
    /// holder's agent does not answer, its service (the register) is
    /// stopped first; heal: the register started again.
    ResumeForce {
        /// Where.
        from: usize,
    },
    /// `hale roles handover db [--to hN]` on the holder's host.
    Handover {
        /// The candidate named, if any.
        to: Option<usize>,
    },
    /// `hale roles switchover db --to hN [--at Ns]`; with `cancel`, the
    /// heal runs `hale roles switchover db --cancel`.
    Switchover {
        /// Where.
        from: usize,
        /// The candidate.
        to: usize,
        /// `--at` this many seconds from now (0: none).
        at_s: u32,
        /// Cancelled at the heal.
        cancel: bool,
    },
    /// `hale reload` on `host` after its `hale.toml` changed: a valid
    /// change (the role's priority), or an invalid file (an unknown key),
    /// which must be refused; the file is put back after.
    Reload {
        /// Where.
        host: usize,
        /// A valid change, or an invalid file.
        valid: bool,
        /// The new priority (valid changes).
        priority: u32,
    },
    /// A live key rotation (README): `hale keys install NEW`, `use NEW`,
    /// `remove OLD`, each repeated until every agent applied it (or given
    /// up, and the rest not done), every host's `hale.toml` written after
    /// each; skipped unless every agent runs.
    RotateKeys {
        /// Where.
        from: usize,
    },
    /// `hale control remove-server ID`; heal: `add-server ID ADDR`.
    RemoveServer {
        /// Where.
        from: usize,
        /// The server's id (1..=3).
        id: u8,
    },
    /// The holder's agent restarted.
    RestartHolder(Restart),
    /// The holder's agent downgraded to the previous release the
    /// documented way (pause, SIGTERM, start the old binary, wait until it
    /// holds, resume); heal: upgraded back (pause, the old release's way
    /// of stopping: SIGKILL its watchdog then the agent, start the current
    /// binary, wait until it holds, resume). Skipped, with a note, without
    /// the previous release's binary.
    Upgrade,
}

impl Action {
    /// A short name for reports.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Pause { .. } => "op-pause",
            Action::Resume { .. } => "op-resume",
            Action::ResumeForce { .. } => "op-resume-force",
            Action::Handover { to: None } => "op-handover",
            Action::Handover { to: Some(_) } => "op-handover-to",
            Action::Switchover { at_s: 0, .. } => "op-switchover",
            Action::Switchover { cancel: false, .. } => "op-switchover-at",
            Action::Switchover { .. } => "op-switchover-cancelled",
            Action::Reload { valid: true, .. } => "op-reload",
            Action::Reload { .. } => "op-reload-invalid",
            Action::RotateKeys { .. } => "op-rotate-keys",
            Action::RemoveServer { .. } => "op-remove-server",
            Action::RestartHolder(Restart::Documented) => "op-restart-holder",
            Action::RestartHolder(Restart::ResumeEarly) => "op-restart-holder-resume-early",
            Action::RestartHolder(Restart::NeverResume) => "op-restart-holder-never-resume",
            Action::RestartHolder(Restart::Unpaused) => "op-restart-holder-unpaused",
            Action::RestartHolder(Restart::Hasty) => "op-restart-holder-hasty",
            Action::Upgrade => "op-downgrade-upgrade",
        }
    }

    /// Draws one, uniformly over the kinds.
    pub fn draw(rng: &mut Xoshiro256PlusPlus, hosts: usize) -> Action {
        let from = rng.random_range(0..hosts);
        let other = rng.random_range(0..hosts);
        match rng.random_range(0..18) {
            0 => Action::Pause { from },
            1 => Action::Resume { from },
            2 => Action::ResumeForce { from },
            3 => Action::Handover { to: None },
            4 => Action::Handover { to: Some(other) },
            kind @ 5..=7 => Action::Switchover {
                from,
                to: other,
                at_s: if kind == 5 { 0 } else { 5 },
                cancel: kind == 7,
            },
            8 => Action::Reload {
                host: from,
                valid: true,
                priority: rng.random_range(5..=20),
            },
            9 => Action::Reload {
                host: from,
                valid: false,
                priority: 0,
            },
            10 => Action::RotateKeys { from },
            11 => Action::RemoveServer {
                from,
                id: rng.random_range(1..=SERVERS as u8),
            },
            12 => Action::RestartHolder(Restart::Documented),
            13 => Action::RestartHolder(Restart::ResumeEarly),
            14 => Action::RestartHolder(Restart::NeverResume),
            15 => Action::RestartHolder(Restart::Unpaused),
            16 => Action::RestartHolder(Restart::Hasty),
            _ => Action::Upgrade,
        }
    }
}
