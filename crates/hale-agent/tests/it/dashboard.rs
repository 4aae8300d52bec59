//! The dashboard's assets and the cluster endpoints it reads, served by an
//! embedded agent (the page itself is tested in headless Chromium by the
//! `hale` crate's tests).

use hale_agent::{Agent, Key};

use crate::support::loopback_config;

fn solo() -> hale_agent::AgentConfig {
    loopback_config("dashboard-test", "solo", &Key::generate().to_base64(), None)
}

async fn get(url: &str) -> reqwest::Response {
    reqwest::Client::new().get(url).send().await.unwrap()
}

#[tokio::test]
async fn every_agent_serves_the_dashboard_and_its_assets_from_the_binary() {
    let a = Agent::start(solo()).await.unwrap();
    let base = format!("http://{}", a.http_addr());
    let page = get(&format!("{base}/")).await;
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    assert!(page.headers().contains_key("content-security-policy"));
    let html = page.text().await.unwrap();
    for asset in ["/assets/app.js", "/assets/style.css"] {
        assert!(html.contains(asset), "the page loads {asset}");
    }
    let js = get(&format!("{base}/assets/app.js")).await;
    assert_eq!(
        js.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    let etag = js.headers()["etag"].to_str().unwrap().to_owned();
    let again = reqwest::Client::new()
        .get(format!("{base}/assets/views.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200, "the module app.js imports is served");
    let cached = reqwest::Client::new()
        .get(format!("{base}/assets/app.js"))
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(cached.status(), 304, "an unchanged asset is not sent again");
    assert_eq!(get(&format!("{base}/assets/nope.js")).await.status(), 404);
    assert_eq!(
        get(&format!("{base}/v1/nope")).await.status(),
        404,
        "unknown API paths still get the API's 404"
    );
    a.shutdown().await;
}

#[tokio::test]
async fn the_cluster_endpoints_answer_for_an_agent_without_roles_or_peers() {
    let a = Agent::start(solo()).await.unwrap();
    let base = format!("http://{}", a.http_addr());
    let roles: serde_json::Value = get(&format!("{base}/v1/cluster/roles"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(roles["control_plane"], false);
    assert_eq!(roles["roles"], serde_json::json!([]));
    let services: serde_json::Value = get(&format!("{base}/v1/cluster/services"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(services["truncated"], false);
    assert_eq!(services["nodes"][0]["node"], "solo");
    assert_eq!(services["nodes"][0]["services"], serde_json::json!([]));
    let none: serde_json::Value = get(&format!("{base}/v1/cluster/services?nodes=elsewhere"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        none["nodes"],
        serde_json::json!([]),
        "only the nodes asked for"
    );
    a.shutdown().await;
}

#[test]
fn the_openapi_description_lists_the_dashboard_and_cluster_endpoints() {
    let spec: serde_json::Value = serde_json::from_str(hale_agent::api::OPENAPI).unwrap();
    for path in [
        "/",
        "/assets/{file}",
        "/v1/cluster/roles",
        "/v1/cluster/services",
    ] {
        assert!(
            spec["paths"][path]["get"].is_object(),
            "{path} is described"
        );
    }
    for schema in ["ClusterRoles", "ClusterServices"] {
        assert!(spec["components"]["schemas"][schema].is_object());
    }
}
