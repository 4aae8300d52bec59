//! The metadata every agent publishes about itself in the membership
//! protocol: the operator's own text (`[agent] meta`), where its HTTP API
//! listens, and its role candidacies. Written by the agent, read by the
//! cluster views, the dashboard, `hale status`, `hale drill` and
//! `hale members`.

use std::collections::BTreeMap;

use hale_core::Versions;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::view::RoleTags;

/// An agent's published metadata, as JSON
/// `{"http": "host:port", "meta": user, "roles": {role: [priority, eligible]},
/// "wire": [min, max], "tags": {role: ["nofailover", ...]}}` (`wire` from
/// 0.2.0 on: agents before it publish none and ignore it; `tags` from 0.2.0
/// on, only for a role with a setting off: agents before it ignore it, and
/// read `eligible`, false for a node that may not be promoted, as ever).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentMeta {
    /// The operator's own metadata.
    pub user: String,
    /// The agent's HTTP API address.
    pub http: Option<String>,
    /// Candidacies, by role.
    pub roles: BTreeMap<String, Candidacy>,
    /// The wire versions the agent speaks (`None`: a release before
    /// 0.2.0, which speaks [`hale_core::wire::OLDEST`] only).
    pub wire: Option<Versions>,
}

/// A candidacy for a role, as published (a `[priority, eligible]` pair,
/// and its tags apart).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Candidacy {
    /// The candidate's priority (higher wins).
    pub priority: i64,
    /// Whether it may take the role now: its checks pass and it may be
    /// promoted (`tags.promotable`).
    pub eligible: bool,
    /// Its settings that set it apart (an agent before 0.2.0 publishes
    /// none: every one `true`).
    pub tags: RoleTags,
}

impl From<(i64, bool)> for Candidacy {
    fn from((priority, eligible): (i64, bool)) -> Candidacy {
        Candidacy {
            priority,
            eligible,
            tags: RoleTags::default(),
        }
    }
}

/// The words `tags` publishes for the settings that are off: Patroni's
/// names for them.
const NOFAILOVER: &str = "nofailover";
const NOLOADBALANCE: &str = "noloadbalance";
const NOSYNC: &str = "nosync";

/// `tags`' words for `t` (none when every setting is on).
fn words(t: &RoleTags) -> Vec<&'static str> {
    [
        (!t.promotable, NOFAILOVER),
        (!t.load_balance, NOLOADBALANCE),
        (!t.synchronous_standby, NOSYNC),
    ]
    .into_iter()
    .filter_map(|(off, w)| off.then_some(w))
    .collect()
}

/// The settings `words` say are off (a word this release does not know is
/// ignored: a later release's).
fn from_words(words: &[String]) -> RoleTags {
    let has = |w: &str| words.iter().any(|x| x == w);
    RoleTags {
        promotable: !has(NOFAILOVER),
        load_balance: !has(NOLOADBALANCE),
        synchronous_standby: !has(NOSYNC),
    }
}

/// What [`AgentMeta::encode`] writes (fields in the order agents have
/// always written them, the newer ones last).
#[derive(Serialize)]
struct WireOut<'a> {
    http: &'a Option<String>,
    meta: &'a str,
    roles: BTreeMap<&'a str, (i64, bool)>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wire: Option<(u8, u8)>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    tags: BTreeMap<&'a str, Vec<&'static str>>,
}

/// A value that reads as None when it is malformed, rather than making
/// the whole metadata unreadable: a member's metadata is data from a peer.
#[derive(Default)]
struct Lenient<T>(Option<T>);

impl<'de, T: DeserializeOwned> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        Ok(Lenient(serde_json::from_value(v).ok()))
    }
}

/// What [`AgentMeta::parse`] reads.
#[derive(Deserialize)]
struct WireIn {
    #[serde(default)]
    http: Lenient<String>,
    meta: String,
    #[serde(default)]
    roles: Lenient<BTreeMap<String, Lenient<(i64, bool)>>>,
    #[serde(default)]
    wire: Lenient<(u8, u8)>,
    #[serde(default)]
    tags: Lenient<BTreeMap<String, Lenient<Vec<String>>>>,
}

impl AgentMeta {
    /// The bytes to publish.
    pub fn encode(&self) -> Vec<u8> {
        let wire = WireOut {
            http: &self.http,
            meta: &self.user,
            roles: (self.roles.iter())
                .map(|(r, c)| (r.as_str(), (c.priority, c.eligible)))
                .collect(),
            wire: self.wire.map(|w| (w.min, w.max)),
            tags: (self.roles.iter())
                .map(|(r, c)| (r.as_str(), words(&c.tags)))
                .filter(|(_, w)| !w.is_empty())
                .collect(),
        };
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads a member's metadata; `None` unless an agent wrote it (a JSON
    /// object with a `meta` string). Malformed candidacies are left out; a
    /// malformed role's tags read as none.
    pub fn parse(raw: &str) -> Option<AgentMeta> {
        let w: WireIn = serde_json::from_str(raw).ok()?;
        let mut tags = w.tags.0.unwrap_or_default();
        Some(AgentMeta {
            user: w.meta,
            // Only an IP:port: a name or a path would let a member point
            // other agents' requests wherever it likes.
            http: w
                .http
                .0
                .and_then(|h| h.parse::<std::net::SocketAddr>().ok())
                .map(|a| a.to_string()),
            roles: w
                .roles
                .0
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(r, c)| {
                    let (priority, eligible) = c.0?;
                    let words = tags.remove(&r).and_then(|t| t.0).unwrap_or_default();
                    let tags = from_words(&words);
                    Some((
                        r,
                        Candidacy {
                            priority,
                            eligible,
                            tags,
                        },
                    ))
                })
                .collect(),
            wire: w
                .wire
                .0
                .filter(|(min, max)| min <= max)
                .map(|(min, max)| Versions { min, max }),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    #[test]
    fn a_published_http_address_that_is_not_an_ip_and_port_is_ignored() {
        for bad in [
            "evil.example:80",
            "127.0.0.1:80/admin",
            "127.0.0.1",
            "http://127.0.0.1:80",
            "127.0.0.1:80@evil",
        ] {
            let raw = serde_json::json!({ "meta": "", "http": bad }).to_string();
            assert_eq!(super::AgentMeta::parse(&raw).unwrap().http, None, "{bad}");
        }
        let raw = serde_json::json!({ "meta": "", "http": "[::1]:7947" }).to_string();
        assert_eq!(
            super::AgentMeta::parse(&raw).unwrap().http.as_deref(),
            Some("[::1]:7947")
        );
    }

    use super::AgentMeta;
    use hale_core::Versions;

    #[test]
    fn published_metadata_round_trips_and_plain_text_is_no_agents() {
        let m = AgentMeta {
            user: "rack=3".into(),
            http: Some("127.0.0.1:9".into()),
            roles: [("db".to_owned(), (50, true).into())].into(),
            wire: None,
        };
        let raw = String::from_utf8(m.encode()).unwrap_or_default();
        assert_eq!(AgentMeta::parse(&raw), Some(m.clone()));
        assert_eq!(
            AgentMeta::parse(
                r#"{"meta":"","http":"127.0.0.1:9","roles":{"db":[50,true],"x":[1]}}"#
            )
            .map(|m| (m.http, m.roles.len())),
            Some((Some("127.0.0.1:9".into()), 1)),
            "a malformed candidacy is left out"
        );
        assert_eq!(
            String::from_utf8(m.encode()).unwrap(),
            r#"{"http":"127.0.0.1:9","meta":"rack=3","roles":{"db":[50,true]}}"#,
            "the bytes agents have always published"
        );
        let new = AgentMeta {
            wire: Some(Versions { min: 2, max: 3 }),
            ..m.clone()
        };
        let raw = String::from_utf8(new.encode()).unwrap();
        assert_eq!(
            raw, r#"{"http":"127.0.0.1:9","meta":"rack=3","roles":{"db":[50,true]},"wire":[2,3]}"#,
            "the wire range comes last, a field older agents ignore"
        );
        assert_eq!(AgentMeta::parse(&raw), Some(new));
        assert_eq!(
            AgentMeta::parse(r#"{"meta":"","wire":[3,2]}"#).map(|m| m.wire),
            Some(None),
            "an empty range is no range"
        );
        assert_eq!(AgentMeta::parse("rack=3"), None);
        assert_eq!(AgentMeta::parse(r#"{"other":1}"#), None);
    }

    #[test]
    fn a_roles_tags_are_published_apart_so_that_the_previous_release_reads_the_pair_as_ever() {
        let mut m = AgentMeta {
            user: String::new(),
            http: None,
            roles: [("db".to_owned(), (5, false).into())].into(),
            wire: Some(Versions { min: 2, max: 3 }),
        };
        if let Some(c) = m.roles.get_mut("db") {
            c.tags.promotable = false;
            c.tags.synchronous_standby = false;
        }
        let raw = String::from_utf8(m.encode()).unwrap();
        assert_eq!(
            raw,
            r#"{"http":null,"meta":"","roles":{"db":[5,false]},"wire":[2,3],"tags":{"db":["nofailover","nosync"]}}"#
        );
        assert_eq!(AgentMeta::parse(&raw), Some(m.clone()));
        // What the previous release reads: the same pair, the tags unknown
        // to it and ignored (its reader, field for field).
        #[derive(serde::Deserialize)]
        struct Previous {
            #[allow(dead_code)]
            meta: String,
            roles: std::collections::BTreeMap<String, (i64, bool)>,
        }
        let old: Previous = serde_json::from_str(&raw).unwrap();
        assert_eq!(old.roles["db"], (5, false));
        // Tags this release does not know, or malformed, are no tags.
        let later = r#"{"meta":"","roles":{"db":[5,true],"x":[1,true]},"tags":{"db":["nosync","future"],"x":7}}"#;
        let m = AgentMeta::parse(later).unwrap();
        assert!(!m.roles["db"].tags.synchronous_standby && m.roles["db"].tags.promotable);
        assert!(m.roles["x"].tags.is_default());
        let bad = r#"{"meta":"","roles":{"db":[5,true]},"tags":[1]}"#;
        assert!(AgentMeta::parse(bad).unwrap().roles["db"].tags.is_default());
    }
}
