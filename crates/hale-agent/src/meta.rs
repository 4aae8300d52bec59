//! The metadata every agent publishes about itself in the membership
//! protocol: the operator's own text (`[agent] meta`), where its HTTP API
//! listens, and its role candidacies. Written by the agent, read by the
//! cluster views, the dashboard, `hale status`, `hale drill` and
//! `hale members`.

use std::collections::BTreeMap;

use serde_json::Value;

/// An agent's published metadata, as JSON
/// `{"meta": user, "http": "host:port", "roles": {role: [priority, eligible]}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentMeta {
    /// The operator's own metadata.
    pub user: String,
    /// The agent's HTTP API address.
    pub http: Option<String>,
    /// Candidacies: role -> (priority, eligible now).
    pub roles: BTreeMap<String, (i64, bool)>,
}

impl AgentMeta {
    /// The bytes to publish.
    pub fn encode(&self) -> Vec<u8> {
        let roles: serde_json::Map<String, Value> = self
            .roles
            .iter()
            .map(|(r, (p, e))| (r.clone(), serde_json::json!([p, e])))
            .collect();
        serde_json::json!({ "meta": self.user, "http": self.http, "roles": roles })
            .to_string()
            .into_bytes()
    }

    /// Reads a member's metadata; `None` unless an agent wrote it (a JSON
    /// object with a `meta` string). Malformed candidacies are left out.
    pub fn parse(raw: &str) -> Option<AgentMeta> {
        let v: Value = serde_json::from_str(raw).ok()?;
        let user = v.get("meta")?.as_str()?.to_owned();
        let roles = v["roles"]
            .as_object()
            .map(|o| {
                o.iter()
                    .filter_map(|(r, c)| {
                        Some((r.clone(), (c.get(0)?.as_i64()?, c.get(1)?.as_bool()?)))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(AgentMeta {
            user,
            // Only an IP:port: a name or a path would let a member point
            // other agents' requests wherever it likes.
            http: v["http"]
                .as_str()
                .and_then(|h| h.parse::<std::net::SocketAddr>().ok())
                .map(|a| a.to_string()),
            roles,
        })
    }
}

#[cfg(test)]
// In tests a panic is the failure report.
#[allow(clippy::unwrap_used)]
mod tests {
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

    #[test]
    fn published_metadata_round_trips_and_plain_text_is_no_agents() {
        let m = AgentMeta {
            user: "rack=3".into(),
            http: Some("127.0.0.1:9".into()),
            roles: [("db".to_owned(), (50, true))].into(),
        };
        let raw = String::from_utf8(m.encode()).unwrap_or_default();
        assert_eq!(AgentMeta::parse(&raw), Some(m));
        assert_eq!(
            AgentMeta::parse(
                r#"{"meta":"","http":"127.0.0.1:9","roles":{"db":[50,true],"x":[1]}}"#
            )
            .map(|m| (m.http, m.roles.len())),
            Some((Some("127.0.0.1:9".into()), 1)),
            "a malformed candidacy is left out"
        );
        assert_eq!(AgentMeta::parse("rack=3"), None);
        assert_eq!(AgentMeta::parse(r#"{"other":1}"#), None);
    }
}
