//! The mutating API cannot be driven by a stranger or a web page: a
//! non-loopback API needs a token to start; every POST needs JSON, a
//! same-origin (or non-browser) sender, and the token when one is set.

use std::time::Duration;

use hale_agent::{Agent, Key, StartError};

use crate::support::{loopback_config, loopback_file, start};

/// Every mutating endpoint, with a body that would act if accepted.
fn mutations() -> Vec<(&'static str, &'static str)> {
    vec![
        ("/v1/join", r#"{"addrs": ["127.0.0.1:9"]}"#),
        ("/v1/traffic", r#"{"peers": ["b"]}"#),
        ("/v1/drill/freeze", r#"{"duration_ms": 60000}"#),
        ("/v1/drill/quiet", r#"{"duration_ms": 60000}"#),
        ("/v1/drill/restore", "{}"),
        ("/v1/roles/db/handover", "{}"),
        ("/v1/roles/db/pause", "{}"),
        ("/v1/roles/db/resume", "{}"),
        ("/v1/roles/db/switchover", r#"{"to": "b"}"#),
        ("/v1/keys/install", r#"{"key": "AAAA"}"#),
        ("/v1/control/servers", r#"{"id": 9, "addr": "127.0.0.1:9"}"#),
        ("/v1/control/servers/2/remove", "{}"),
        ("/v1/reload", "{}"),
        ("/v1/leave", "{}"),
    ]
}

#[test]
fn the_guarded_list_holds_every_token_protected_post_route_of_the_openapi_document() {
    let doc: serde_json::Value = serde_json::from_str(hale_agent::api::OPENAPI).unwrap();
    let listed: Vec<&str> = mutations().into_iter().map(|(p, _)| p).collect();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if item["post"]["security"].is_null() {
            continue;
        }
        let filled = path
            .replace("{role}", "db")
            .replace("{id}", "2")
            .replace("{op}", "install");
        let covered = if filled.contains("{fault}") {
            listed
                .iter()
                .any(|l| l.starts_with("/v1/drill/") && *l != "/v1/drill/restore")
        } else {
            listed.contains(&filled.as_str())
        };
        assert!(
            covered,
            "{path} is guarded but no test here tries it as a stranger"
        );
    }
}

/// The agent is still in the cluster, and no drill fault is set.
async fn assert_nothing_done(a: &Agent) {
    let drill = a.client().drill().await.unwrap();
    assert!(drill.active.is_empty(), "a drill fault was set");
    let h = a.client().health().await.unwrap();
    assert_eq!(
        h.status,
        hale_agent::view::HealthStatus::Ok,
        "the agent left"
    );
}

#[test]
fn an_api_on_a_non_loopback_address_without_a_token_refuses_to_start() {
    let mut f = loopback_file("guard", "a", &Key::generate().to_base64());
    f.agent.http = Some("0.0.0.0:7947".into());
    let e = f.validate().unwrap_err().to_string();
    assert!(
        e.contains("agent.api_token") && e.contains("agent.http"),
        "the error names both keys: {e}"
    );
    f.agent.api_token = Some("tok".into());
    assert!(f.validate().is_ok(), "with a token it may listen anywhere");
}

#[tokio::test]
async fn an_agent_built_by_hand_with_an_unprotected_public_api_does_not_start() {
    let mut cfg = loopback_config("guard", "a", &Key::generate().to_base64(), None);
    cfg.http = "0.0.0.0:0".parse().unwrap();
    let e = Agent::start(cfg).await.unwrap_err();
    assert!(matches!(e, StartError::UnprotectedApi(_)), "{e}");
    assert!(e.to_string().contains("agent.api_token"), "{e}");
}

/// POSTs `body` to `path` on `a` with `headers` and no others: the status.
async fn post(a: &Agent, path: &str, body: &str, headers: &[(&str, &str)]) -> u16 {
    let mut r = reqwest::Client::new()
        .post(format!("http://{}{path}", a.http_addr()))
        .timeout(Duration::from_secs(5))
        .body(body.to_owned());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap().status().as_u16()
}

/// A quiet drill: what a refused request would have set.
const QUIET: &str = r#"{"duration_ms": 60000}"#;

#[tokio::test]
async fn a_mutating_request_that_is_not_json_gets_415_and_changes_nothing() {
    let a = start("guard", "a", &Key::generate().to_base64(), None).await;
    for (path, body) in mutations() {
        for ct in ["text/plain", "application/x-www-form-urlencoded", ""] {
            let headers = [("content-type", ct)];
            let headers = if ct.is_empty() { &[][..] } else { &headers };
            assert_eq!(post(&a, path, body, headers).await, 415, "{path} as {ct:?}");
        }
    }
    assert_nothing_done(&a).await;
    // The same request as JSON acts (the refusals above were for the type).
    let json = [("content-type", "application/json; charset=utf-8")];
    assert_eq!(post(&a, "/v1/drill/quiet", QUIET, &json).await, 200);
    assert_eq!(a.client().drill().await.unwrap().active.len(), 1);
    a.shutdown().await;
}

#[tokio::test]
async fn a_cross_site_browser_request_gets_403_and_changes_nothing() {
    let a = start("guard", "a", &Key::generate().to_base64(), None).await;
    let port = a.http_addr().port();
    let evil_host = format!("evil.example:{port}");
    let (evil_origin, other_port) = (
        format!("http://{evil_host}"),
        format!("http://127.0.0.1:{}", port + 1),
    );
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("another origin", vec![("origin", "http://evil.example")]),
        ("an opaque origin", vec![("origin", "null")]),
        ("another port of this host", vec![("origin", &other_port)]),
        ("cross-site fetch", vec![("sec-fetch-site", "cross-site")]),
        ("same-site fetch", vec![("sec-fetch-site", "same-site")]),
        (
            "a DNS-rebinding page (own origin, foreign host name)",
            vec![
                ("host", &evil_host),
                ("origin", &evil_origin),
                ("sec-fetch-site", "same-origin"),
            ],
        ),
    ];
    for (path, body) in mutations() {
        for (what, headers) in &cases {
            let mut headers = headers.clone();
            headers.push(("content-type", "application/json"));
            assert_eq!(
                post(&a, path, body, &headers).await,
                403,
                "{path} from {what}"
            );
        }
    }
    assert_nothing_done(&a).await;
    // The dashboard's own origin may (a same-origin fetch).
    let own = format!("http://{}", a.http_addr());
    let headers = [
        ("content-type", "application/json"),
        ("origin", &own),
        ("sec-fetch-site", "same-origin"),
    ];
    assert_eq!(post(&a, "/v1/drill/quiet", QUIET, &headers).await, 200);
    assert_eq!(a.client().drill().await.unwrap().active.len(), 1);
    a.shutdown().await;
}

#[tokio::test]
async fn a_wrong_token_of_any_length_gets_401_and_changes_nothing() {
    let token = "s3cret-token";
    let a = start("guard", "a", &Key::generate().to_base64(), Some(token)).await;
    let json = ("content-type", "application/json");
    for (path, body) in mutations() {
        for token in ["", "s3cret-tokex", "s3cret", "s3cret-token-and-more"] {
            let bearer = format!("Bearer {token}");
            let auth = [json, ("authorization", &bearer)];
            let headers = if token.is_empty() { &auth[..1] } else { &auth };
            assert_eq!(
                post(&a, path, body, headers).await,
                401,
                "{path} with {token:?}"
            );
        }
    }
    assert_nothing_done(&a).await;
    let bearer = format!("Bearer {token}");
    let headers = [json, ("authorization", &bearer)];
    assert_eq!(post(&a, "/v1/drill/quiet", QUIET, &headers).await, 200);
    a.shutdown().await;
}
