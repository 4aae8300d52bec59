//! The live dashboard, served by every agent at `/` on its HTTP address.
//!
//! Plain HTML, CSS and JavaScript (an ES module, no build step), embedded
//! in the binary. The page reads the agent's own API (`/v1/members`,
//! `/v1/events/stream`, `/v1/cluster/roles`, `/v1/cluster/services`,
//! `/v1/relay`, `/v1/health`). Assets are revalidated on every load
//! (`Cache-Control: no-cache` with an `ETag` of their content), so an
//! upgraded agent never serves a stale page.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

/// One embedded file.
struct Asset {
    name: &'static str,
    body: &'static [u8],
    content_type: &'static str,
    /// FNV-1a of the body: a content hash for `ETag`, computed at compile time.
    etag: u64,
}

macro_rules! asset {
    ($name:literal, $ct:literal) => {{
        const BODY: &[u8] = include_bytes!(concat!("../../assets/", $name));
        Asset {
            name: $name,
            body: BODY,
            content_type: $ct,
            etag: hale_core::wire::fnv1a(BODY),
        }
    }};
}

const ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("views.js", "text/javascript; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("favicon.svg", "image/svg+xml"),
];

/// The page may only load its own assets and talk to its own agent.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
                   script-src 'self'; connect-src 'self'; frame-ancestors 'none'";

/// The dashboard's routes: `/`, `/assets/{file}`, `/favicon.ico`.
/// (Declared with the API's other routes, in `crate::http`.)
pub fn router() -> Router {
    super::dashboard_router()
}

/// Answers a request for the embedded file `name` (304 when the browser's
/// copy is current).
pub(super) fn serve(name: &str, req: &HeaderMap) -> Response {
    let Some(a) = ASSETS.iter().find(|a| a.name == name) else {
        return (StatusCode::NOT_FOUND, "no such asset").into_response();
    };
    let etag = format!("\"{:016x}\"", a.etag);
    let fresh = req
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(a.content_type),
            )],
            a.body,
        )
            .into_response()
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CONTENT_SECURITY_POLICY, CSP),
    ] {
        h.insert(name, HeaderValue::from_static(value));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_assets_are_not_found() {
        assert_eq!(
            serve("../lib.rs", &HeaderMap::new()).status(),
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn the_page_loads_only_embedded_assets() {
        let page = std::str::from_utf8(ASSETS[0].body).unwrap_or_default();
        assert!(page.contains("/assets/app.js") && page.contains("/assets/style.css"));
        assert!(!page.contains("http://") && !page.contains("https://"));
        let app = std::str::from_utf8(ASSETS[1].body).unwrap_or_default();
        assert!(
            app.contains("from './views.js'"),
            "app.js imports an embedded module"
        );
    }
}
