//! What stands in front of every mutating endpoint of the agent's API
//! (every method but GET, HEAD and OPTIONS), in this order:
//!
//! 1. **No cross-site browser requests** (403): a request with
//!    `Sec-Fetch-Site: cross-site` or `same-site`, or with an `Origin` that
//!    is not this API's own (`http://` or `https://` + its `Host`), was
//!    sent by a web page the operator happened to have open, not by them.
//!    When the API listens on loopback, `Host` must be a loopback address
//!    or `localhost` too (a DNS-rebinding page sends its own host name).
//! 2. **The token** (401), when `agent.api_token` is set: `Authorization:
//!    Bearer <token>`, compared in constant time. A non-loopback bind
//!    without a token is refused at start ([`crate::config`]).
//! 3. **JSON only** (415): `Content-Type: application/json`, which a page
//!    cannot send cross-origin without a CORS preflight this API never
//!    answers.
//!
//! The relay's Sentry ingestion routes are not behind it: SDKs post
//! envelopes, often from browsers, with their own `sentry_key`.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use crate::http::state::error;

/// The settings the guard checks against.
#[derive(Debug)]
pub(crate) struct MutationGuard {
    /// `agent.api_token`, if set.
    pub(crate) token: Option<String>,
    /// Whether the API listens on a loopback address.
    pub(crate) loopback: bool,
}

/// Why a mutating request was refused (nothing was done).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// A browser says another site sent it.
    #[error("cross-site request refused (Sec-Fetch-Site: {0})")]
    CrossSite(String),
    /// Its `Origin` is not this API.
    #[error("request from origin {0} refused: not this API's own")]
    Origin(String),
    /// Its `Host` is not a loopback address on a loopback-only API.
    #[error("Host {0:?} refused: this API only answers to a loopback address or localhost")]
    Host(String),
    /// No token, or the wrong one.
    #[error("this endpoint needs `Authorization: Bearer <api_token>`")]
    Token,
    /// Not `Content-Type: application/json`.
    #[error("this endpoint needs `Content-Type: application/json`")]
    ContentType,
}

impl Refused {
    fn status(&self) -> StatusCode {
        match self {
            Refused::CrossSite(_) | Refused::Origin(_) | Refused::Host(_) => StatusCode::FORBIDDEN,
            Refused::Token => StatusCode::UNAUTHORIZED,
            Refused::ContentType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

fn text(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"))
}

/// Whether `host` (a `Host` header: name or address, optional port) is a
/// loopback address or `localhost`.
fn loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl MutationGuard {
    /// Checks a mutating request's headers.
    pub(crate) fn check(&self, headers: &HeaderMap) -> Result<(), Refused> {
        if let Some(site) = text(headers, header::HeaderName::from_static("sec-fetch-site")) {
            if site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site") {
                return Err(Refused::CrossSite(site.to_owned()));
            }
        }
        let host = text(headers, header::HOST).unwrap_or("");
        if let Some(origin) = text(headers, header::ORIGIN) {
            let own = !host.is_empty()
                && (origin.strip_prefix("http://") == Some(host)
                    || origin.strip_prefix("https://") == Some(host));
            if !own {
                return Err(Refused::Origin(origin.to_owned()));
            }
        }
        if self.loopback && !loopback_host(host) {
            return Err(Refused::Host(host.to_owned()));
        }
        if let Some(want) = &self.token {
            let got = text(headers, header::AUTHORIZATION)
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            // Constant time in the token's content (a length mismatch
            // fails at once: the length is not the secret).
            if !bool::from(got.as_bytes().ct_eq(want.as_bytes())) {
                return Err(Refused::Token);
            }
        }
        let json = text(headers, header::CONTENT_TYPE)
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(Refused::ContentType);
        }
        Ok(())
    }
}

/// The middleware: lets reads through, checks everything else.
pub(crate) async fn guard_mutations(
    State(g): State<Arc<MutationGuard>>,
    req: Request,
    next: Next,
) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    match g.check(req.headers()) {
        Ok(()) => next.run(req).await,
        Err(r) => error(r.status(), r.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_told_from_others() {
        for h in [
            "127.0.0.1:7947",
            "localhost:1",
            "LOCALHOST",
            "[::1]:7947",
            "127.0.0.2",
        ] {
            assert!(loopback_host(h), "{h}");
        }
        for h in [
            "evil.example:7947",
            "10.0.0.5:7947",
            "",
            "[::2]:1",
            "localhost.evil:1",
        ] {
            assert!(!loopback_host(h), "{h}");
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("a header value"));
        }
        h
    }

    #[test]
    fn a_dns_rebinding_page_is_refused_by_its_host_name_on_a_loopback_api() {
        let g = MutationGuard {
            token: None,
            loopback: true,
        };
        let json = ("content-type", "application/json");
        let rebound = headers(&[
            ("host", "evil.example:7947"),
            ("origin", "http://evil.example:7947"),
            json,
        ]);
        assert_eq!(
            g.check(&rebound),
            Err(Refused::Host("evil.example:7947".into()))
        );
        let own = headers(&[
            ("host", "127.0.0.1:7947"),
            ("origin", "http://127.0.0.1:7947"),
            json,
        ]);
        assert_eq!(g.check(&own), Ok(()));
        let public = MutationGuard {
            token: None,
            loopback: false,
        };
        assert_eq!(
            public.check(&rebound),
            Ok(()),
            "a public API is reached by name"
        );
    }
}
