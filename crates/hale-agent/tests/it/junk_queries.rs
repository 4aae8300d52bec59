//! A stranger's GET requests: every read route of the API document, with
//! junk in its path parameters and its query, gets an answer it can read
//! (a 4xx saying what was wrong, or what the route gives) within moments;
//! never a 5xx but 503, never a hang, and the agent serves on.

use std::time::Duration;

use hale_agent::Key;

use crate::support::start;

/// Values a stranger puts where a role name, a file or a node list goes.
const PATH_JUNK: &[&str] = &[
    "db",
    "nope",
    "%00",
    "..%2F..%2FCargo.toml",
    "%2e%2e",
    "%ff%fe",
    "%F0%9F%92%A9",
    "a%20b",
    "%25",
];

/// Values a stranger puts in `?name=`.
const QUERY_JUNK: &[&str] = &[
    "",
    "0",
    "-1",
    "abc",
    "1.5",
    "1e9",
    "18446744073709551616",
    "99999999999999999999999999999999",
    "%00",
    "%ff",
    "1%26limit%3D2",
    "a,b,,c",
];

/// Every GET path of the API document, with its parameters' names.
fn read_routes() -> Vec<(String, Vec<String>)> {
    let doc: serde_json::Value = serde_json::from_str(hale_agent::api::OPENAPI).unwrap();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let Some(get) = item.get("get") else { continue };
        let query = get["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["in"] == "query")
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect();
        out.push((path.clone(), query));
    }
    out
}

/// `path` with each `{param}` replaced by `value`.
fn fill(path: &str, value: &str) -> String {
    let mut out = String::new();
    let mut rest = path;
    while let Some(start) = rest.find('{') {
        let end = rest[start..].find('}').unwrap() + start;
        out.push_str(&rest[..start]);
        out.push_str(value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    out
}

#[tokio::test]
async fn every_read_route_answers_junk_parameters_with_a_client_error_or_its_answer_and_never_a_server_error(
) {
    let a = start("junk-get", "a", &Key::generate().to_base64(), None).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let long = "r".repeat(4000);
    let mut urls = Vec::new();
    for (path, query) in read_routes() {
        let values: Vec<&str> = if path.contains('{') {
            PATH_JUNK.iter().copied().chain([long.as_str()]).collect()
        } else {
            vec![""]
        };
        for v in values {
            let base = fill(&path, v);
            urls.push(base.clone());
            urls.push(format!("{base}?nope=1"));
            urls.push(format!("{base}?%ff=%ff&&=&"));
            for name in &query {
                for junk in QUERY_JUNK {
                    urls.push(format!("{base}?{name}={junk}"));
                }
                urls.push(format!("{base}?{name}=1&{name}=2"));
            }
        }
    }
    let mut seen = std::collections::BTreeMap::<u16, usize>::new();
    for url in &urls {
        let r = http
            .get(format!("http://{}{url}", a.http_addr()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: no answer within 5 s: {e}"));
        let status = r.status().as_u16();
        assert!(
            status < 500 || status == 503,
            "GET {url}: {status} {:?}",
            r.text().await
        );
        *seen.entry(status).or_default() += 1;
        // The event stream never ends by itself: its headers are enough.
        if !url.starts_with("/v1/events/stream") {
            let body = r.bytes().await.unwrap();
            if status == 400 {
                assert!(!body.is_empty(), "GET {url}: a 400 says what was wrong");
            }
        }
    }
    assert!(seen.contains_key(&400), "some junk was refused: {seen:?}");
    // The agent serves on, and says it is healthy.
    let health = http
        .get(format!("http://{}/v1/health", a.http_addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "after {} junk requests", urls.len());
    a.shutdown().await;
}
