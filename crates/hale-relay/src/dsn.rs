//! Sentry DSNs: `{scheme}://{public_key}@{host}[:{port}]/{path/}{project_id}`.

use std::fmt;
use std::str::FromStr;

/// A parsed Sentry DSN: where to send envelopes and with which key.
#[derive(Clone, PartialEq, Eq)]
pub struct Dsn {
    scheme: String,
    key: String,
    host: String,
    port: Option<u16>,
    path: String,
    project: String,
}

/// Why a DSN could not be parsed. Nothing was configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DsnError {
    /// The scheme is neither `http` nor `https`.
    #[error("the scheme must be http or https")]
    Scheme,
    /// There is no `key@` before the host.
    #[error("no public key (expected scheme://KEY@host/project)")]
    NoKey,
    /// The host or port is missing or malformed.
    #[error("bad host or port")]
    Host,
    /// The path does not end in a numeric project id.
    #[error("the path must end in a numeric project id")]
    Project,
}

impl FromStr for Dsn {
    type Err = DsnError;

    fn from_str(s: &str) -> Result<Dsn, DsnError> {
        let (scheme, rest) = s.split_once("://").ok_or(DsnError::Scheme)?;
        if scheme != "http" && scheme != "https" {
            return Err(DsnError::Scheme);
        }
        let (userinfo, rest) = rest.split_once('@').ok_or(DsnError::NoKey)?;
        // `key:secret@` is the legacy form; only the public key is used.
        let key = userinfo.split(':').next().unwrap_or_default();
        if key.is_empty() {
            return Err(DsnError::NoKey);
        }
        let (hostport, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => {
                (h, Some(p.parse::<u16>().map_err(|_| DsnError::Host)?))
            }
            _ => (hostport, None),
        };
        if host.is_empty() {
            return Err(DsnError::Host);
        }
        let path = path.trim_end_matches('/');
        let (prefix, project) = path.rsplit_once('/').ok_or(DsnError::Project)?;
        if project.is_empty() || !project.bytes().all(|b| b.is_ascii_digit()) {
            return Err(DsnError::Project);
        }
        Ok(Dsn {
            scheme: scheme.to_owned(),
            key: key.to_owned(),
            host: host.to_owned(),
            port,
            path: format!("{prefix}/"),
            project: project.to_owned(),
        })
    }
}

impl Dsn {
    /// The public key (`sentry_key`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The project id.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The envelope endpoint: `{scheme}://{host}{path}api/{project}/envelope/`.
    pub fn envelope_url(&self) -> String {
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!(
            "{}://{}{}{}api/{}/envelope/",
            self.scheme, self.host, port, self.path, self.project
        )
    }

    /// The `X-Sentry-Auth` header value for this DSN.
    pub fn auth_header(&self) -> String {
        format!(
            "Sentry sentry_version=7, sentry_client=hale-relay/{}, sentry_key={}",
            env!("CARGO_PKG_VERSION"),
            self.key
        )
    }
}

impl fmt::Display for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        write!(
            f,
            "{}://{}@{}{}{}{}",
            self.scheme, self.key, self.host, port, self.path, self.project
        )
    }
}

impl fmt::Debug for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key is not secret (it ships in clients), but keep logs short.
        write!(f, "Dsn({self})")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    #[test]
    fn parses_the_usual_forms() {
        let d: Dsn = "https://abc@o1.ingest.example.com/42".parse().unwrap();
        assert_eq!(d.key(), "abc");
        assert_eq!(d.project(), "42");
        assert_eq!(
            d.envelope_url(),
            "https://o1.ingest.example.com/api/42/envelope/"
        );
        let d: Dsn = "http://k:secret@127.0.0.1:9000/sentry/7".parse().unwrap();
        assert_eq!(
            d.envelope_url(),
            "http://127.0.0.1:9000/sentry/api/7/envelope/"
        );
        assert_eq!("ftp://k@h/1".parse::<Dsn>().unwrap_err(), DsnError::Scheme);
        assert_eq!("http://h/1".parse::<Dsn>().unwrap_err(), DsnError::NoKey);
        assert_eq!(
            "http://k@h/x".parse::<Dsn>().unwrap_err(),
            DsnError::Project
        );
        assert_eq!("http://k@h:x/1".parse::<Dsn>().unwrap_err(), DsnError::Host);
    }
}
