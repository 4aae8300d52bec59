//! What a reload would change: the running configuration against the
//! file's new one, key by key, each key either applicable while the agent
//! runs (a [`ConfigChange`] and what to apply) or not (a [`RefusedKey`]).
//! Pure: it reads no file and touches nothing. The agent
//! (`crate::config::reload`) adds what only it knows (which roles this node
//! holds), then applies all of it or nothing.
//!
//! Live: `[[service]]` and their checks; `[[role]]` added, removed,
//! [`HELD_LIVE`] (always) and `service`, `promote`, `demote`,
//! `hook_timeout`, `fail_after` (the agent refuses them for a role this
//! node holds);
//! `agent.meta`; `relay.keys` and `relay.body_limit`; the `[membership]`
//! knobs of [`Tuning`]; `control.bootstrap` (read only by a server's first
//! start). Everything else that changed is refused, naming its key.

use std::fmt::Debug;

use hale_core::Tuning;
use hale_keyring::{Key, Keyring};

use super::{
    AgentConfig, AgentSection, ClusterSection, ControlSection, FileConfig, MembershipSection,
    RelaySection, RoleSpec, ServiceSpec,
};
use crate::view::{ChangeKind, ConfigChange, RefusedKey};

/// A configuration as the agent runs it: the file as read (its `HALE_*`
/// overrides applied) and what it validated into.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The file, as read.
    pub file: FileConfig,
    /// What it validated into.
    pub agent: AgentConfig,
}

/// How one `[[role]]` differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleDiff {
    /// A new candidacy.
    Added(RoleSpec),
    /// A candidacy gone (by name).
    Removed(String),
    /// Settings of a candidacy changed: the new ones, and the keys that
    /// changed (`priority`, `promotable`, `load_balance`,
    /// `synchronous_standby`, `service`, `promote`, `demote`,
    /// `hook_timeout`, `fail_after`).
    Changed {
        /// The role's settings now.
        spec: RoleSpec,
        /// Which changed.
        keys: Vec<&'static str>,
    },
}

/// What differs between the running configuration and a new one.
#[derive(Debug, Clone, Default)]
pub struct ConfigDiff {
    /// Keys that changed and cannot change while the agent runs.
    pub refused: Vec<RefusedKey>,
    /// Keys that changed and can.
    pub changes: Vec<ConfigChange>,
    /// The services and checks to run, if they changed.
    pub services: Option<Vec<ServiceSpec>>,
    /// The candidacies that changed.
    pub roles: Vec<RoleDiff>,
    /// The relay's new client keys and body limit, if either changed.
    pub relay_access: Option<(Vec<String>, usize)>,
    /// The membership knobs to retune, if any of them changed.
    pub tuning: Option<Tuning>,
    /// This member's new `[agent] meta`, if it changed.
    pub meta: Option<String>,
}

/// The differences between the running configuration `old` and `new`;
/// `keys_in_use` is the keyring the agent runs with (a live rotation may
/// have changed it since the start).
pub fn diff(old: &LoadedConfig, new: &LoadedConfig, keys_in_use: Option<&Keyring>) -> ConfigDiff {
    let mut d = ConfigDiff::default();
    d.agent(old, new);
    d.cluster(old, new, keys_in_use);
    d.control(&new.file, &old.agent, &new.agent);
    d.relay(&old.file, new);
    d.services(&old.agent.services, &new.agent.services);
    d.roles(&old.agent.roles, &new.agent.roles);
    d
}

/// The `[[role]]` keys a reload changes even on a role this node holds:
/// they move nothing by themselves (`promotable = false` on the holder
/// hands the role over once another node can take it, as a switchover).
pub const HELD_LIVE: [&str; 4] = [
    "priority",
    "promotable",
    "load_balance",
    "synchronous_standby",
];

/// What a key read only at start says when it changed.
const AT_START: &str = "read at start only: restart the agent to change it";

impl ConfigDiff {
    fn refuse(&mut self, key: impl Into<String>, problem: impl Into<String>) {
        self.refused.push(RefusedKey {
            key: key.into(),
            problem: problem.into(),
        });
    }

    fn change(&mut self, key: impl Into<String>, change: ChangeKind) {
        self.changes.push(ConfigChange {
            key: key.into(),
            change,
        });
    }

    /// `key` differs between `a` and `b`: refused, with both values.
    fn at_start<T: PartialEq + Debug>(&mut self, key: &str, a: T, b: T) {
        if a != b {
            self.refuse(key, format!("was {a:?}, now {b:?}; {AT_START}"));
        }
    }

    fn agent(&mut self, old: &LoadedConfig, new: &LoadedConfig) {
        let (a, b) = (&old.agent, &new.agent);
        // Every key of [agent], so that a new one is classified here too.
        let AgentSection {
            name: _,
            bind: _,
            advertise: _,
            http: _,
            seeds: _,
            api_token: _,
            meta: _,
            watchdog,
            state_dir: _,
            priority_boost: _,
            realtime: _,
            hooks_at_once: _,
        } = &new.file.agent;
        self.at_start("agent.name", a.id.name(), b.id.name());
        self.at_start("agent.advertise", a.id.addr(), b.id.addr());
        self.at_start("agent.bind", a.bind, b.bind);
        self.at_start("agent.http", a.http, b.http);
        self.at_start("agent.seeds", &a.seeds, &b.seeds);
        if a.api_token != b.api_token {
            self.refuse("agent.api_token", AT_START);
        }
        self.at_start("agent.watchdog", &old.file.agent.watchdog, watchdog);
        self.at_start("agent.state_dir", &a.state_dir, &b.state_dir);
        self.at_start("agent.priority_boost", a.priority_boost, b.priority_boost);
        self.at_start("agent.realtime", a.realtime, b.realtime);
        self.at_start("agent.hooks_at_once", a.hooks_at_once, b.hooks_at_once);
        if a.core.meta != b.core.meta {
            self.change("agent.meta", ChangeKind::Changed);
            self.meta = Some(String::from_utf8_lossy(&b.core.meta).into_owned());
        }
    }

    fn cluster(&mut self, old: &LoadedConfig, new: &LoadedConfig, keys_in_use: Option<&Keyring>) {
        let (a, b) = (&old.agent, &new.agent);
        let ClusterSection {
            name: _,
            profile: _,
            keys,
            insecure_plaintext,
        } = &new.file.cluster;
        self.at_start("cluster.name", &a.core.cluster, &b.core.cluster);
        self.at_start(
            "cluster.insecure_plaintext",
            old.file.cluster.insecure_plaintext,
            *insecure_plaintext,
        );
        if &old.file.cluster.keys != keys {
            // Written down after a live rotation (`hale keys`), the keys in
            // use are no change: anything else is.
            let parsed: Result<Vec<Key>, _> = keys.iter().map(|k| Key::from_base64(k)).collect();
            let in_use = keys_in_use.map(Keyring::keys);
            match parsed {
                Ok(k) if !k.is_empty() && in_use.is_some_and(|u| same_ring(&k, u)) => {
                    self.change("cluster.keys", ChangeKind::Changed);
                }
                Ok(_) => self.refuse(
                    "cluster.keys",
                    "differs from the keys in use: change keys live with `hale keys` \
                     (install, use, remove), then write the keys in use here",
                ),
                Err(e) => self.refuse("cluster.keys", e.to_string()),
            }
        }
        if a.profile != b.profile {
            self.at_start("cluster.profile", a.profile, b.profile);
            return; // Every knob of the profile differs: the profile says it.
        }
        for field in MembershipSection::differing(&a.core, &b.core) {
            let key = format!("membership.{field}");
            if Tuning::FIELDS.contains(&field) {
                self.change(key, ChangeKind::Changed);
                self.tuning = Some(b.core.tuning());
            } else {
                let problem = "the membership core keeps state shaped by it (the probe walk, \
                               ring monitors, suspicions under way): restart the agent to change it";
                self.refuse(key, problem);
            }
        }
    }

    fn control(&mut self, new: &FileConfig, a: &AgentConfig, b: &AgentConfig) {
        // Every key of [control] (compared below through the plan it makes).
        if let Some(ControlSection {
            id: _,
            bind: _,
            servers: _,
            bootstrap: _,
            data_dir: _,
            lease: _,
            renew_every: _,
        }) = &new.control
        {}
        let (a, b) = match (&a.control, &b.control) {
            // No roles left: the control plane that runs keeps running.
            (_, None) => return,
            (None, Some(_)) => {
                return self.refuse(
                    "control",
                    "roles need a control plane and this agent started without one: \
                     restart it with its roles",
                );
            }
            (Some(a), Some(b)) => (a, b),
        };
        self.at_start(
            "control.id",
            a.server.map(|(id, _)| id),
            b.server.map(|(id, _)| id),
        );
        self.at_start(
            "control.bind",
            a.server.map(|(_, addr)| addr),
            b.server.map(|(_, addr)| addr),
        );
        self.at_start("control.servers", &a.servers, &b.servers);
        self.at_start("control.data_dir", &a.data_dir, &b.data_dir);
        self.at_start("control.lease", a.timing.lease, b.timing.lease);
        self.at_start(
            "control.renew_every",
            a.timing.renew_every,
            b.timing.renew_every,
        );
        if a.bootstrap != b.bootstrap {
            // Only a server's very first start reads it.
            self.change("control.bootstrap", ChangeKind::Changed);
        }
    }

    fn relay(&mut self, old: &FileConfig, new: &LoadedConfig) {
        let (a, b) = match (&old.relay, &new.file.relay) {
            (None, None) => return,
            (Some(a), Some(b)) => (a, b),
            _ => {
                return self.refuse(
                    "relay",
                    "the relay is mounted on the API at start: restart the agent to add or remove it",
                );
            }
        };
        let RelaySection {
            primary,
            standby,
            keys,
            queue_bytes,
            spool_dir,
            spool_bytes,
            spool_ttl,
            spool_drain_per_sec,
            body_limit,
            path_prefix,
        } = b;
        self.at_start("relay.primary", &a.primary, primary);
        self.at_start("relay.standby", &a.standby, standby);
        self.at_start("relay.queue_bytes", a.queue_bytes, *queue_bytes);
        self.at_start("relay.spool_dir", &a.spool_dir, spool_dir);
        self.at_start("relay.spool_bytes", a.spool_bytes, *spool_bytes);
        self.at_start("relay.spool_ttl", a.spool_ttl, *spool_ttl);
        let drain = spool_drain_per_sec;
        self.at_start("relay.spool_drain_per_sec", a.spool_drain_per_sec, *drain);
        self.at_start("relay.path_prefix", &a.path_prefix, path_prefix);
        let mut access = false;
        if &a.keys != keys {
            self.change("relay.keys", ChangeKind::Changed);
            access = true;
        }
        if &a.body_limit != body_limit {
            self.change("relay.body_limit", ChangeKind::Changed);
            access = true;
        }
        if let (true, Some(r)) = (access, &new.agent.relay) {
            self.relay_access = Some((r.keys.clone(), r.body_limit));
        }
    }

    fn services(&mut self, old: &[ServiceSpec], new: &[ServiceSpec]) {
        if old == new {
            return;
        }
        self.services = Some(new.to_vec());
        for s in new {
            let key = format!("service[{}]", s.name);
            let Some(o) = old.iter().find(|o| o.name == s.name) else {
                self.change(key, ChangeKind::Added);
                continue;
            };
            if o.essential != s.essential {
                self.change(format!("{key}.essential"), ChangeKind::Changed);
            }
            let mut seen: Vec<&str> = Vec::new();
            for c in &s.checks {
                if seen.contains(&c.name.as_str()) {
                    continue;
                }
                seen.push(&c.name);
                let named = |list: &[super::CheckSpec]| -> Vec<super::CheckSpec> {
                    list.iter().filter(|x| x.name == c.name).cloned().collect()
                };
                let (was, now) = (named(&o.checks), named(&s.checks));
                let ck = format!("{key}.check[{}]", c.name);
                if was.is_empty() {
                    self.change(ck, ChangeKind::Added);
                } else if was != now {
                    self.change(ck, ChangeKind::Changed);
                }
            }
            for c in &o.checks {
                if !s.checks.iter().any(|x| x.name == c.name) && !seen.contains(&c.name.as_str()) {
                    seen.push(&c.name);
                    self.change(format!("{key}.check[{}]", c.name), ChangeKind::Removed);
                }
            }
        }
        for o in old.iter().filter(|o| !new.iter().any(|s| s.name == o.name)) {
            self.change(format!("service[{}]", o.name), ChangeKind::Removed);
        }
    }

    fn roles(&mut self, old: &[RoleSpec], new: &[RoleSpec]) {
        for r in new {
            let key = format!("role[{}]", r.name);
            let Some(o) = old.iter().find(|o| o.name == r.name) else {
                self.change(key, ChangeKind::Added);
                self.roles.push(RoleDiff::Added(r.clone()));
                continue;
            };
            if o.postgres != r.postgres {
                let problem = "a [role.postgres] role's settings travel with its hooks and its \
                               keeper, set at start: restart the agent to change them";
                self.refuse(format!("{key}.postgres"), problem);
                continue;
            }
            let RoleSpec {
                name: _,
                service,
                priority,
                promotable,
                load_balance,
                synchronous_standby,
                promote,
                demote,
                hook_timeout,
                fail_after,
                postgres: _,
            } = r;
            let keys: Vec<&'static str> = [
                ("service", &o.service != service),
                ("priority", &o.priority != priority),
                ("promotable", &o.promotable != promotable),
                ("load_balance", &o.load_balance != load_balance),
                (
                    "synchronous_standby",
                    &o.synchronous_standby != synchronous_standby,
                ),
                ("promote", &o.promote != promote),
                ("demote", &o.demote != demote),
                ("hook_timeout", &o.hook_timeout != hook_timeout),
                ("fail_after", &o.fail_after != fail_after),
            ]
            .into_iter()
            .filter_map(|(k, changed)| changed.then_some(k))
            .collect();
            if keys.is_empty() {
                continue;
            }
            for k in &keys {
                self.change(format!("{key}.{k}"), ChangeKind::Changed);
            }
            let spec = r.clone();
            self.roles.push(RoleDiff::Changed { spec, keys });
        }
        for o in old.iter().filter(|o| !new.iter().any(|r| r.name == o.name)) {
            self.change(format!("role[{}]", o.name), ChangeKind::Removed);
            self.roles.push(RoleDiff::Removed(o.name.clone()));
        }
    }
}

/// Whether `keys` (the primary first) make the ring `in_use` (the primary
/// first, each key once).
fn same_ring(keys: &[Key], in_use: &[Key]) -> bool {
    let ring = Keyring::new(keys[0].clone(), keys[1..].to_vec());
    ring.keys() == in_use
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    fn loaded(text: &str) -> LoadedConfig {
        let file = FileConfig::parse(text, "test").unwrap();
        let mut agent = file.validate().unwrap();
        agent.watchdog_exe = "/usr/bin/hale".into();
        LoadedConfig { file, agent }
    }

    const BASE: &str = r#"
[agent]
name = "a"
[cluster]
keys = ["AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="]
[control]
id = 1
bootstrap = true
[[service]]
name = "pg"
[[role]]
name = "db"
service = "pg"
priority = 10
demote = ["true"]
"#;

    fn refused(d: &ConfigDiff) -> Vec<&str> {
        d.refused.iter().map(|k| k.key.as_str()).collect()
    }

    #[test]
    fn a_roles_priority_and_hooks_are_told_apart_and_a_new_role_is_added() {
        let old = loaded(BASE);
        let new = loaded(&format!(
            "{}\n[[role]]\nname = \"cache\"\nservice = \"pg\"\n",
            BASE.replace("priority = 10", "priority = 20")
                .replace("demote = [\"true\"]", "demote = [\"false\"]")
        ));
        let d = diff(&old, &new, None);
        assert!(d.refused.is_empty(), "{:?}", d.refused);
        let RoleDiff::Changed { keys, .. } = &d.roles[0] else {
            panic!("{:?}", d.roles);
        };
        assert_eq!(keys, &["priority", "demote"]);
        assert!(matches!(&d.roles[1], RoleDiff::Added(r) if r.name == "cache"));
        let removed = diff(&new, &old, None);
        assert!(removed.roles.contains(&RoleDiff::Removed("cache".into())));
    }

    #[test]
    fn a_roles_tags_are_each_a_change_of_their_own() {
        let base = BASE.replace(
            "demote = [\"true\"]\n",
            "[role.postgres]\ndata_dir = \"/srv/pg\"\n",
        );
        let old = loaded(&base);
        let new = loaded(&base.replace(
            "priority = 10",
            "priority = 10\npromotable = false\nload_balance = false\nsynchronous_standby = false",
        ));
        let d = diff(&old, &new, None);
        assert!(d.refused.is_empty(), "{:?}", d.refused);
        let RoleDiff::Changed { keys, spec } = &d.roles[0] else {
            panic!("{:?}", d.roles);
        };
        assert_eq!(keys, &["promotable", "load_balance", "synchronous_standby"]);
        assert!(!spec.tags().promotable && !spec.tags().may_be_waited_for());
        let shown: Vec<&str> = d.changes.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(
            shown,
            [
                "role[db].promotable",
                "role[db].load_balance",
                "role[db].synchronous_standby"
            ]
        );
    }

    #[test]
    fn keys_written_down_after_a_live_rotation_are_no_change_and_other_keys_are_refused() {
        let old = loaded(BASE);
        let other = Key::generate();
        let text = BASE.replace(
            "keys = [\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"]",
            &format!("keys = [\"{}\"]", other.to_base64()),
        );
        let new = loaded(&text);
        let started = old.agent.keyring.clone().unwrap();
        assert_eq!(refused(&diff(&old, &new, Some(&started))), ["cluster.keys"]);
        let rotated = Keyring::new(other, Vec::new());
        let d = diff(&old, &new, Some(&rotated));
        assert!(d.refused.is_empty(), "{:?}", d.refused);
        assert_eq!(d.changes[0].key, "cluster.keys");
    }

    #[test]
    fn the_control_plane_and_the_profile_are_read_at_start_but_bootstrap_is_no_matter() {
        let old = loaded(BASE);
        let new = loaded(
            &BASE
                .replace("bootstrap = true", "bootstrap = false")
                .replace("[cluster]", "[cluster]\nprofile = \"wan\""),
        );
        let d = diff(&old, &new, None);
        assert_eq!(refused(&d), ["cluster.profile"]);
        assert_eq!(d.changes[0].key, "control.bootstrap");
        let moved = loaded(&BASE.replace("id = 1", "id = 2"));
        assert_eq!(refused(&diff(&old, &moved, None)), ["control.id"]);
        // Roles where no control plane runs need a restart.
        let bare = "[agent]\nname = \"a\"\n[[service]]\nname = \"pg\"\n";
        let with_role = format!("{bare}[[role]]\nname = \"db\"\nservice = \"pg\"\n");
        let d = diff(&loaded(bare), &loaded(&with_role), None);
        assert_eq!(refused(&d), ["control"]);
        // Without roles left, the control plane that runs keeps running.
        assert!(diff(&loaded(&with_role), &loaded(bare), None)
            .refused
            .is_empty());
    }
}
