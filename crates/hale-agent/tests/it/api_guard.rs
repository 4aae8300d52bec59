//! The mutating API cannot be driven by a stranger or a web page: a
//! non-loopback API needs a token to start; every POST needs JSON, a
//! same-origin (or non-browser) sender, and the token when one is set.

use std::time::Duration;

use hale_agent::{Agent, Key, StartError};

use crate::support::{loopback_config, loopback_file};

/// Every mutating endpoint, with a body that would act if accepted.
fn mutations() -> Vec<(&'static str, &'static str)> {
    vec![
        ("/v1/join", r#"{"addrs": ["127.0.0.1:9"]}"#),
        ("/v1/traffic", r#"{"peers": ["b"]}"#),
        ("/v1/drill/freeze", r#"{"duration_ms": 60000}"#),
        ("/v1/drill/quiet", r#"{"duration_ms": 60000}"#),
        ("/v1/drill/restore", "{}"),
        ("/v1/roles/db/handover", "{}"),
        ("/v1/control/servers", r#"{"id": 9, "addr": "127.0.0.1:9"}"#),
        ("/v1/control/servers/2/remove", "{}"),
        ("/v1/leave", "{}"),
    ]
}

/// The agent is still in the cluster, and no drill fault is set.
async fn assert_nothing_done(a: &Agent) {
    let drill = a.client().drill().await.unwrap();
    assert!(drill.active.is_empty(), "a drill fault was set");
    let h = a.client().health().await.unwrap();
    assert_eq!(h.status, "ok", "the agent left");
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

#[tokio::test]
async fn a_mutating_request_that_is_not_json_gets_415_and_changes_nothing() {
    let a = Agent::start(loopback_config(
        "guard",
        "a",
        &Key::generate().to_base64(),
        None,
    ))
    .await
    .unwrap();
    let c = reqwest::Client::new();
    for (path, body) in mutations() {
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let mut r = c.post(format!("http://{}{path}", a.http_addr())).body(body);
            if let Some(ct) = ct {
                r = r.header("content-type", ct);
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 415, "{path} as {ct:?}");
        }
    }
    assert_nothing_done(&a).await;
    // The same request as JSON acts (the refusals above were for the type).
    let r = c
        .post(format!("http://{}/v1/drill/quiet", a.http_addr()))
        .header("content-type", "application/json; charset=utf-8")
        .body(r#"{"duration_ms": 60000}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(a.client().drill().await.unwrap().active.len(), 1);
    a.shutdown().await;
}

#[tokio::test]
async fn a_cross_site_browser_request_gets_403_and_changes_nothing() {
    let a = Agent::start(loopback_config(
        "guard",
        "a",
        &Key::generate().to_base64(),
        None,
    ))
    .await
    .unwrap();
    let c = reqwest::Client::new();
    let port = a.http_addr().port();
    let evil_host = format!("evil.example:{port}");
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        (
            "another origin",
            vec![("origin", "http://evil.example".into())],
        ),
        ("an opaque origin", vec![("origin", "null".into())]),
        (
            "another port of this host",
            vec![("origin", format!("http://127.0.0.1:{}", port + 1))],
        ),
        (
            "cross-site fetch",
            vec![("sec-fetch-site", "cross-site".into())],
        ),
        (
            "same-site fetch",
            vec![("sec-fetch-site", "same-site".into())],
        ),
        (
            "a DNS-rebinding page (own origin, foreign host name)",
            vec![
                ("host", evil_host.clone()),
                ("origin", format!("http://{evil_host}")),
                ("sec-fetch-site", "same-origin".into()),
            ],
        ),
    ];
    for (path, body) in mutations() {
        for (what, headers) in &cases {
            let mut r = c
                .post(format!("http://{}{path}", a.http_addr()))
                .header("content-type", "application/json")
                .body(body);
            for (k, v) in headers {
                r = r.header(*k, v);
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 403, "{path} from {what}");
        }
    }
    assert_nothing_done(&a).await;
    // The dashboard's own origin may (a same-origin fetch).
    let r = c
        .post(format!("http://{}/v1/drill/quiet", a.http_addr()))
        .header("content-type", "application/json")
        .header("origin", format!("http://{}", a.http_addr()))
        .header("sec-fetch-site", "same-origin")
        .body(r#"{"duration_ms": 60000}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(a.client().drill().await.unwrap().active.len(), 1);
    a.shutdown().await;
}

#[tokio::test]
async fn a_wrong_token_of_any_length_gets_401_and_changes_nothing() {
    let a = Agent::start(loopback_config(
        "guard",
        "a",
        &Key::generate().to_base64(),
        Some("s3cret-token"),
    ))
    .await
    .unwrap();
    let c = reqwest::Client::new();
    for (path, body) in mutations() {
        for token in [
            None,
            Some("s3cret-tokex"),
            Some("s3cret"),
            Some("s3cret-token-and-more"),
        ] {
            let mut r = c
                .post(format!("http://{}{path}", a.http_addr()))
                .header("content-type", "application/json")
                .timeout(Duration::from_secs(5))
                .body(body);
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            assert_eq!(
                r.send().await.unwrap().status(),
                401,
                "{path} with {token:?}"
            );
        }
    }
    assert_nothing_done(&a).await;
    let r = c
        .post(format!("http://{}/v1/drill/quiet", a.http_addr()))
        .json(&serde_json::json!({ "duration_ms": 60000 }))
        .bearer_auth("s3cret-token")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    a.shutdown().await;
}
