//! `POST /v1/reload`: what a configuration reload applied, or why it was
//! refused (also the details of the `config-reloaded` and
//! `config-reload-refused` events).

use serde::{Deserialize, Serialize};

hale_core::named_enum! {
    /// How a key changed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum ChangeKind {
        /// It is new (a service, check or role).
        Added => "added",
        /// It is gone.
        Removed => "removed",
        /// Its value changed.
        Changed => "changed",
    }
}

/// One change a reload applied: a key of hale.toml, services and roles
/// named in brackets (`service[pg].check[tcp 127.0.0.1:5432]`,
/// `role[db].priority`, `relay.keys`, `membership.gossip_fanout`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigChange {
    /// The key.
    pub key: String,
    /// How it changed.
    pub change: ChangeKind,
}

/// A reload was applied, all of it: the agent now runs the file's
/// configuration (`POST /v1/reload`'s 200, `config-reloaded`'s detail).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadView {
    /// What changed (empty: the file says what already ran).
    pub changes: Vec<ConfigChange>,
}

/// Why a reload was refused. In every case nothing changed: the agent runs
/// the configuration it ran before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalReason {
    /// The agent was started without a configuration file.
    NoFile,
    /// The file could not be read.
    Unreadable,
    /// The file is not a valid configuration (what starting with it would
    /// refuse too).
    Invalid,
    /// Keys changed that cannot change while the agent runs.
    Unreloadable,
    /// The agent is stopping.
    Stopping,
}

/// A key a reload could not apply, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedKey {
    /// The key (`agent.bind`, `role[db]`, `service[0].check[1].http`...),
    /// empty when the problem names no key (a file that does not parse
    /// says where in its message).
    pub key: String,
    /// What is wrong, or what to do instead.
    pub problem: String,
}

/// A reload was refused and nothing changed (`POST /v1/reload`'s 409 or
/// 422, `config-reload-refused`'s detail). Its `error` is what every
/// error body has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadRefusal {
    /// The whole story, in one message.
    pub error: String,
    /// Why, as a word.
    pub reason: RefusalReason,
    /// The keys concerned.
    pub keys: Vec<RefusedKey>,
}
