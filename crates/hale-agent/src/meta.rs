//! The metadata every agent publishes about itself in the membership
//! protocol: the operator's own text (`[agent] meta`), where its HTTP API
//! listens, and its role candidacies. Written by the agent, read by the
//! cluster views, the dashboard, `hale status`, `hale drill` and
//! `hale members`.

use std::collections::BTreeMap;

use hale_core::Versions;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

/// An agent's published metadata, as JSON
/// `{"http": "host:port", "meta": user, "roles": {role: [priority, eligible]},
/// "wire": [min, max]}` (`wire` from 0.2.0 on: agents before it publish none
/// and ignore it).
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

/// A candidacy for a role, as published (a `[priority, eligible]` pair).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(i64, bool)", into = "(i64, bool)")]
pub struct Candidacy {
    /// The candidate's priority (higher wins).
    pub priority: i64,
    /// Whether it may hold the role now (its checks pass).
    pub eligible: bool,
}

impl From<(i64, bool)> for Candidacy {
    fn from((priority, eligible): (i64, bool)) -> Candidacy {
        Candidacy { priority, eligible }
    }
}

impl From<Candidacy> for (i64, bool) {
    fn from(c: Candidacy) -> (i64, bool) {
        (c.priority, c.eligible)
    }
}

/// What [`AgentMeta::encode`] writes (fields in the order agents have
/// always written them).
#[derive(Serialize)]
struct WireOut<'a> {
    http: &'a Option<String>,
    meta: &'a str,
    roles: &'a BTreeMap<String, Candidacy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wire: Option<(u8, u8)>,
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
    roles: Lenient<BTreeMap<String, Lenient<Candidacy>>>,
    #[serde(default)]
    wire: Lenient<(u8, u8)>,
}

impl AgentMeta {
    /// The bytes to publish.
    pub fn encode(&self) -> Vec<u8> {
        let wire = WireOut {
            http: &self.http,
            meta: &self.user,
            roles: &self.roles,
            wire: self.wire.map(|w| (w.min, w.max)),
        };
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    /// Reads a member's metadata; `None` unless an agent wrote it (a JSON
    /// object with a `meta` string). Malformed candidacies are left out.
    pub fn parse(raw: &str) -> Option<AgentMeta> {
        let w: WireIn = serde_json::from_str(raw).ok()?;
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
                .filter_map(|(r, c)| Some((r, c.0?)))
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
}
