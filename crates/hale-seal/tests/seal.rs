//! The sealed request/answer layer on its own: a request opens only at its
//! server, on its route, once and fresh; an answer opens only for its
//! request; over HTTP the guard and `call` agree, and refuse what they must.

// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::{Json, Router};
use hale_keyring::{Key, Keyring, SharedKeyring};
use hale_seal::{
    call, open_response, read_capped, seal_request, unix_ms, CallError, Guard, Refusal, Sealing,
    DEFAULT_BODY_LIMIT, REPLAY_WINDOW,
};
use serde_json::{json, Value};

fn ring(key: &Key) -> Keyring {
    Keyring::new(key.clone(), vec![])
}

#[test]
fn a_request_opens_only_at_its_server_on_its_route_once_and_fresh() {
    let key = Key::generate();
    let guard = Guard::new(7, SharedKeyring::new(ring(&key)));
    let now = unix_ms();
    let req = seal_request(&ring(&key), 7, "POST", "/a", now, b"{}");
    let admitted = guard.admit("POST", "/a", &req.body, now).unwrap();
    assert_eq!(admitted.payload, b"{}");
    assert_eq!(
        guard.admit("POST", "/a", &req.body, now).unwrap_err(),
        Refusal::Replayed
    );
    let other = Guard::new(8, SharedKeyring::new(ring(&key)));
    assert_eq!(
        other.admit("POST", "/a", &req.body, now).unwrap_err(),
        Refusal::Unauthentic,
        "sealed for server 7, delivered to 8"
    );
    let req = seal_request(&ring(&key), 7, "POST", "/b", now, b"{}");
    assert_eq!(
        guard.admit("POST", "/a", &req.body, now).unwrap_err(),
        Refusal::Unauthentic,
        "sealed for another route"
    );
    let stranger = seal_request(&ring(&Key::generate()), 7, "POST", "/a", now, b"{}");
    assert_eq!(
        guard.admit("POST", "/a", &stranger.body, now).unwrap_err(),
        Refusal::Unauthentic
    );
    assert_eq!(
        guard.admit("POST", "/a", b"short", now).unwrap_err(),
        Refusal::Malformed
    );
    let window = REPLAY_WINDOW.as_millis() as u64;
    let old = seal_request(&ring(&key), 7, "POST", "/a", now - window - 1, b"{}");
    assert!(matches!(
        guard.admit("POST", "/a", &old.body, now),
        Err(Refusal::Stale { skew_ms, .. }) if skew_ms == -(window as i64) - 1
    ));
}

#[test]
fn an_answer_opens_only_for_the_request_it_answers() {
    let key = Key::generate();
    let guard = Guard::new(1, SharedKeyring::new(ring(&key)));
    let now = unix_ms();
    let first = seal_request(&ring(&key), 1, "POST", "/a", now, b"1");
    let second = seal_request(&ring(&key), 1, "POST", "/a", now, b"2");
    let admitted = guard.admit("POST", "/a", &first.body, now).unwrap();
    let answer = guard.seal_response(&admitted, b"yes");
    assert_eq!(open_response(&ring(&key), &first, &answer).unwrap(), b"yes");
    assert!(open_response(&ring(&key), &second, &answer).is_err());
    assert!(open_response(&ring(&Key::generate()), &first, &answer).is_err());
}

/// A server at `addr` answering `POST /echo` and `POST /big` behind `guard`.
async fn server(guard: Option<Guard>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let app = Router::new()
        .route("/echo", post(|Json(v): Json<Value>| async move { Json(v) }))
        .route("/big", post(|| async { Json(json!({})) }));
    let app = match guard {
        Some(g) => app.layer(axum::middleware::from_fn_with_state(
            Arc::new(g),
            hale_seal::authenticate,
        )),
        None => app,
    };
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (
        addr,
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() }),
    )
}

#[tokio::test]
async fn call_and_the_guard_agree_and_refuse_strangers_and_large_bodies() {
    let key = Key::generate();
    let keys = SharedKeyring::new(ring(&key));
    let guard = Guard::new(3, keys.clone()).with_body_limit(|path| {
        if path == "/big" {
            1 << 20
        } else {
            DEFAULT_BODY_LIMIT
        }
    });
    let (addr, task) = server(Some(guard)).await;
    let http = reqwest::Client::new();
    let t = Duration::from_secs(5);
    let addr = addr.to_string();
    let ours = Sealing::Sealed(keys);
    let v: Value = call(&http, &ours, 3, &addr, "/echo", &json!({"a": 1}), t)
        .await
        .unwrap();
    assert_eq!(v, json!({"a": 1}));
    let theirs = Sealing::sealed(ring(&Key::generate()));
    let r = call::<_, Value>(&http, &theirs, 3, &addr, "/echo", &json!({}), t).await;
    assert!(
        matches!(r, Err(CallError::Refused { status: 401, .. })),
        "{r:?}"
    );
    let r = call::<_, Value>(&http, &ours, 4, &addr, "/echo", &json!({}), t).await;
    assert!(
        matches!(r, Err(CallError::Refused { status: 401, .. })),
        "addressed to another server: {r:?}"
    );
    let big = "x".repeat(DEFAULT_BODY_LIMIT);
    let r = call::<_, Value>(&http, &ours, 3, &addr, "/echo", &big, t).await;
    assert!(
        matches!(r, Err(CallError::Refused { status: 413, .. })),
        "{r:?}"
    );
    let _: Value = call(&http, &ours, 3, &addr, "/big", &big, t)
        .await
        .expect("a route with a larger limit reads it");
    task.abort();
}

#[tokio::test]
async fn an_unsealed_answer_is_not_believed_and_plaintext_needs_no_keys() {
    let (addr, task) = server(None).await;
    let http = reqwest::Client::new();
    let t = Duration::from_secs(5);
    let addr = addr.to_string();
    let sealed = Sealing::sealed(ring(&Key::generate()));
    // The server answers plain JSON: not an answer sealed for the request.
    let r = call::<_, Value>(&http, &sealed, 1, &addr, "/big", &json!({}), t).await;
    assert!(matches!(r, Err(CallError::Unauthentic)), "{r:?}");
    let v: Value = call(
        &http,
        &Sealing::InsecurePlaintext,
        1,
        &addr,
        "/echo",
        &json!([1]),
        t,
    )
    .await
    .unwrap();
    assert_eq!(v, json!([1]));
    let mut r = http
        .post(format!("http://{addr}/echo"))
        .json(&"y".repeat(100))
        .send()
        .await
        .unwrap();
    assert!(matches!(
        read_capped(&mut r, 50).await,
        Err(CallError::TooLarge)
    ));
    let r = call::<_, Value>(
        &http,
        &sealed,
        1,
        "127.0.0.1:1",
        "/echo",
        &json!({}),
        Duration::from_secs(2),
    )
    .await;
    assert!(matches!(r, Err(CallError::Unreachable(_))), "{r:?}");
    task.abort();
}

#[tokio::test]
async fn an_exchange_carries_headers_both_ways_and_reads_a_routes_sealed_refusal() {
    use axum::http::{HeaderMap, StatusCode};
    use hale_seal::{exchange, Target};
    let key = Key::generate();
    let keys = SharedKeyring::new(ring(&key));
    // Echoes the `x-asked` header back as `x-said`; refuses `/no` with its
    // own words (sealed by the guard, as every route answer is).
    let app = Router::new()
        .route(
            "/echo",
            post(|h: HeaderMap| async move {
                let asked = h.get("x-asked").cloned();
                let mut out = HeaderMap::new();
                if let Some(v) = asked {
                    out.insert("x-said", v);
                }
                (out, Json(json!("ok")))
            }),
        )
        .route(
            "/no",
            post(|| async { (StatusCode::UNPROCESSABLE_ENTITY, "no such thing here") }),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(Guard::new(5, keys.clone())),
            hale_seal::authenticate,
        ));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let http = reqwest::Client::new();
    let t = Duration::from_secs(5);
    let sealing = Sealing::Sealed(keys);
    let mut headers = HeaderMap::new();
    headers.insert("x-asked", "2".parse().unwrap());
    let to = |path| Target {
        target: 5,
        addr: &addr,
        path,
    };
    let reply = exchange(&http, &sealing, to("/echo"), b"{}", &headers, t)
        .await
        .unwrap();
    assert_eq!(reply.headers.get("x-said").unwrap(), "2");
    assert_eq!(reply.body, b"\"ok\"");
    let r = exchange(&http, &sealing, to("/no"), b"{}", &headers, t).await;
    match r {
        Err(CallError::Refused { status, message }) => {
            assert_eq!(status, 422);
            assert_eq!(message, "no such thing here");
        }
        r => panic!("{r:?}"),
    }
    task.abort();
}
