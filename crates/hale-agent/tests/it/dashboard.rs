//! The dashboard's assets and the cluster endpoints it reads, served by an
//! embedded agent (the page itself is tested in headless Chromium by the
//! `hale` crate's tests).

use hale_agent::view::ClusterServicesView;
use hale_agent::{Agent, Key};

use crate::support::loopback_config;

fn solo() -> hale_agent::AgentConfig {
    loopback_config("dashboard-test", "solo", &Key::generate().to_base64(), None)
}

/// GETs `path` (with `headers`) from `a`.
async fn get(a: &Agent, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new().get(format!("http://{}{path}", a.http_addr()));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

#[tokio::test]
async fn every_agent_serves_the_dashboard_and_its_assets_from_the_binary() {
    let a = Agent::start(solo()).await.unwrap();
    let page = get(&a, "/", &[]).await;
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert!(page.headers().contains_key("content-security-policy"));
    let html = page.text().await.unwrap();
    for asset in ["/assets/app.js", "/assets/style.css"] {
        assert!(html.contains(asset), "the page loads {asset}");
    }
    let js = get(&a, "/assets/app.js", &[]).await;
    let js_type = &js.headers()["content-type"];
    assert_eq!(js_type, "text/javascript; charset=utf-8");
    assert_eq!(
        js.headers()["cache-control"],
        "no-cache",
        "revalidated on every load"
    );
    let etag = js.headers()["etag"].to_str().unwrap().to_owned();
    let again = get(&a, "/assets/views.js", &[]).await;
    assert_eq!(again.status(), 200, "the module app.js imports is served");
    let cached = get(&a, "/assets/app.js", &[("if-none-match", &etag)]).await;
    assert_eq!(cached.status(), 304, "an unchanged asset is not sent again");
    assert_eq!(get(&a, "/assets/nope.js", &[]).await.status(), 404);
    let api_404 = get(&a, "/v1/nope", &[]).await.status();
    assert_eq!(api_404, 404, "unknown API paths still get the API's 404");
    a.shutdown().await;
}

#[tokio::test]
async fn the_cluster_endpoints_answer_for_an_agent_without_roles_or_peers() {
    let a = Agent::start(solo()).await.unwrap();
    let api = a.client();
    let roles = api.cluster_roles().await.unwrap();
    assert!(!roles.control_plane);
    assert!(roles.roles.is_empty());
    let services = api.cluster_services().await.unwrap();
    assert!(!services.truncated);
    assert_eq!(services.nodes[0].node, "solo");
    assert!(services.nodes[0]
        .services
        .as_ref()
        .is_some_and(Vec::is_empty));
    let path = "/v1/cluster/services?nodes=elsewhere";
    let none: ClusterServicesView = api.get(path).await.unwrap();
    assert!(none.nodes.is_empty(), "only the nodes asked for");
    a.shutdown().await;
}
