//! Bad input is refused with a reason and changes nothing: malformed
//! envelopes (400), bodies over the limit (413), zip bombs (413), wrong or
//! missing keys (401).

use std::io::Write;

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{Relay, RelayConfig};

use crate::{event_envelope, quick, serve};

async fn relay() -> (FakeSentry, Relay, std::net::SocketAddr) {
    let fake = FakeSentry::start(Mode::Up).await.unwrap();
    let mut cfg = RelayConfig::new(quick(fake.dsn()));
    cfg.keys = vec!["public".into()];
    cfg.body_limit = 64 << 10;
    let relay = Relay::start(cfg).unwrap();
    let addr = serve(&relay).await;
    (fake, relay, addr)
}

async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    auth: Option<&str>,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .body(body);
    if let Some(k) = auth {
        req = req.header(
            "x-sentry-auth",
            format!("Sentry sentry_version=7, sentry_key={k}"),
        );
    }
    if let Some(e) = encoding {
        req = req.header("content-encoding", e);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// What, path, key, content-encoding, body, expected status, expected reason.
type Case<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    Vec<u8>,
    u16,
    &'a str,
);

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_input_is_refused_with_a_reason() {
    let (_fake, relay, addr) = relay().await;
    let env = "/api/1/envelope/";
    let ok = event_envelope("0123456789abcdef0123456789abcdef");

    let cases: Vec<Case> = vec![
        (
            "empty body",
            env,
            Some("public"),
            None,
            vec![],
            400,
            "empty",
        ),
        (
            "header not JSON",
            env,
            Some("public"),
            None,
            b"hello\n".to_vec(),
            400,
            "header",
        ),
        (
            "no items",
            env,
            Some("public"),
            None,
            b"{}\n".to_vec(),
            400,
            "no items",
        ),
        (
            "item header not JSON",
            env,
            Some("public"),
            None,
            b"{}\nnope\n".to_vec(),
            400,
            "item 0",
        ),
        (
            "item without a type",
            env,
            Some("public"),
            None,
            b"{}\n{\"length\":2}\n{}\n".to_vec(),
            400,
            "item 0",
        ),
        (
            "length past the end",
            env,
            Some("public"),
            None,
            b"{}\n{\"type\":\"event\",\"length\":500}\n{}\n".to_vec(),
            400,
            "runs past",
        ),
        (
            "store body not JSON",
            "/api/1/store/",
            Some("public"),
            None,
            b"[1,2]".to_vec(),
            400,
            "not an object",
        ),
        (
            "project not numeric",
            "/api/abc/envelope/",
            Some("public"),
            None,
            ok.clone(),
            400,
            "numeric",
        ),
        (
            "bad gzip",
            env,
            Some("public"),
            Some("gzip"),
            b"not gzip".to_vec(),
            400,
            "gzip",
        ),
        (
            "unknown encoding",
            env,
            Some("public"),
            Some("br"),
            ok.clone(),
            400,
            "content-encoding",
        ),
        (
            "too big",
            env,
            Some("public"),
            None,
            vec![b'x'; 65 << 10],
            413,
            "limit",
        ),
        (
            "zip bomb",
            env,
            Some("public"),
            Some("gzip"),
            gzip(&vec![b'{'; 50 << 20]),
            413,
            "decompressed",
        ),
        (
            "wrong key",
            env,
            Some("intruder"),
            None,
            ok.clone(),
            401,
            "unknown",
        ),
        ("no key", env, None, None, ok.clone(), 401, "missing"),
    ];
    for (what, path, key, enc, body, status, reason) in cases {
        let (got, text) = post(addr, path, key, enc, body).await;
        assert_eq!(got, status, "{what}: {text}");
        assert!(text.contains(reason), "{what}: {text:?} lacks {reason:?}");
    }
    assert_eq!(relay.counters().accepted(), 0, "bad input queued nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn good_input_in_every_accepted_form_is_delivered() {
    let (fake, relay, addr) = relay().await;
    let id = |n: u8| format!("{n:032x}");
    let (s, text) = post(
        addr,
        "/api/1/envelope/",
        Some("public"),
        None,
        event_envelope(&id(1)),
    )
    .await;
    assert_eq!((s, text.contains(&id(1))), (200, true));
    let (s, _) = post(
        addr,
        "/api/1/envelope/",
        Some("public"),
        Some("gzip"),
        gzip(&event_envelope(&id(2))),
    )
    .await;
    assert_eq!(s, 200);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(&event_envelope(&id(3))).unwrap();
    let (s, _) = post(
        addr,
        "/api/1/envelope/",
        Some("public"),
        Some("deflate"),
        z.finish().unwrap(),
    )
    .await;
    assert_eq!(s, 200);
    let (s, _) = post(
        addr,
        "/api/1/envelope/?sentry_key=public&sentry_version=7",
        None,
        None,
        event_envelope(&id(4)),
    )
    .await;
    assert_eq!(s, 200);
    let store = format!("{{\"event_id\":\"{}\",\"message\":\"hi\"}}", id(5));
    let (s, text) = post(
        addr,
        "/api/1/store/",
        Some("public"),
        None,
        store.into_bytes(),
    )
    .await;
    assert_eq!((s, text.contains(&id(5))), (200, true));
    crate::until_true(
        "all five delivered",
        std::time::Duration::from_secs(10),
        || fake.event_ids().len() == 5 && relay.counters().forwarded() == 5,
    )
    .await;
}

#[tokio::test]
async fn new_keys_and_body_limit_apply_to_the_next_request_without_a_restart() {
    let (_fake, relay, addr) = relay().await;
    let path = "/api/1/envelope/";
    let body = || event_envelope("9ec79c33ec9942ab8353589fcb2e04dc");
    assert_eq!(post(addr, path, Some("public"), None, body()).await.0, 200);
    assert_eq!(post(addr, path, Some("rotated"), None, body()).await.0, 401);
    relay.set_access(vec!["rotated".into()], 16);
    assert_eq!(relay.access(), (vec!["rotated".to_owned()], 16));
    let (status, reason) = post(addr, path, Some("rotated"), None, body()).await;
    assert_eq!(status, 413, "the new limit: {reason}");
    relay.set_access(vec!["rotated".into()], 64 << 10);
    assert_eq!(post(addr, path, Some("rotated"), None, body()).await.0, 200);
    assert_eq!(post(addr, path, Some("public"), None, body()).await.0, 401);
}
