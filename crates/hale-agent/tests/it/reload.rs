//! Reloading the configuration file while the agent runs: applied all of
//! it (services and checks, the relay's keys, the published metadata, live
//! membership knobs) or refused, nothing changed, with the keys named (an
//! invalid file, a key read at start only, a stranger's request, no file).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hale_agent::view::{AgentEvent, ChangeKind, RefusalReason, ReloadRefusal, ServiceView};
use hale_agent::{Agent, ConfigSource, Key, LoadedConfig, ReloadError};

use crate::support::wait_until;

/// A loopback agent `a` with a token, service `web` (check `alive`), and `extra`.
fn config(key: &str, extra: &str) -> String {
    format!(
        r#"
[agent]
name = "a"
bind = "127.0.0.1:0"
http = "127.0.0.1:0"
api_token = "tok"
meta = "rack=1"
[cluster]
name = "reload"
keys = ["{key}"]
[[service]]
name = "web"
[[service.check]]
name = "alive"
command = ["true"]
interval = "50ms"
{extra}
"#
    )
}

/// An agent started on the file `dir/hale.toml` holding `text`.
async fn start(dir: &Path, text: &str) -> (Agent, PathBuf) {
    let path = dir.join("hale.toml");
    std::fs::write(&path, text).unwrap();
    let source = ConfigSource::new(Some(path.clone()));
    let file = source.read().unwrap();
    let agent = file.validate().unwrap();
    let a = Agent::start_with_source(LoadedConfig { file, agent }, source)
        .await
        .unwrap();
    (a, path)
}

async fn services(a: &Agent) -> Vec<ServiceView> {
    a.client().services().await.unwrap()
}

/// `(service, check)` names of every check, in order.
async fn check_names(a: &Agent) -> Vec<(String, String)> {
    let s = services(a).await;
    s.iter()
        .flat_map(|s| s.checks.iter().map(|c| (s.name.clone(), c.name.clone())))
        .collect()
}

async fn alive_runs(a: &Agent) -> u64 {
    services(a).await[0].checks[0].runs
}

/// The kinds of the reload events in `a`'s history.
async fn reload_events(a: &Agent) -> Vec<AgentEvent> {
    let events = a.client().events(0).await.unwrap();
    events
        .into_iter()
        .map(|e| e.event)
        .filter(|e| {
            matches!(
                e,
                AgentEvent::ConfigReloaded(_) | AgentEvent::ConfigReloadRefused(_)
            )
        })
        .collect()
}

async fn reloads_counted(a: &Agent, result: &str) -> f64 {
    let text = a.client().metrics().await.unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.starts_with("hale_config_reloads_total{")
                && l.contains(&format!("result=\"{result}\""))
        })
        .unwrap_or_else(|| panic!("no reload counter for {result}:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The refusal of a reload that must be refused.
async fn refused(a: &Agent) -> ReloadRefusal {
    match a.reload().await {
        Ok(v) => panic!("applied: {v:?}"),
        Err(e) => e.refusal(),
    }
}

fn keys(r: &ReloadRefusal) -> Vec<&str> {
    r.keys.iter().map(|k| k.key.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_adds_and_removes_checks_and_services_and_an_unchanged_check_keeps_its_history() {
    let dir = tempfile::tempdir().unwrap();
    let key = Key::generate().to_base64();
    let (a, path) = start(dir.path(), &config(&key, "")).await;
    let ten = Duration::from_secs(10);
    wait_until("the check ran", ten, || async { alive_runs(&a).await >= 3 }).await;
    let before = alive_runs(&a).await;
    let more = r#"
[[service.check]]
name = "port"
tcp = "127.0.0.1:9"
[[service]]
name = "cache"
[[service.check]]
name = "ping"
command = ["true"]
"#;
    std::fs::write(&path, config(&key, more)).unwrap();
    let v = a.reload().await.unwrap();
    let changed: Vec<(&str, ChangeKind)> = v
        .changes
        .iter()
        .map(|c| (c.key.as_str(), c.change))
        .collect();
    assert_eq!(
        changed,
        vec![
            ("service[web].check[port]", ChangeKind::Added),
            ("service[cache]", ChangeKind::Added),
        ]
    );
    let names = check_names(&a).await;
    let want = [("web", "alive"), ("web", "port"), ("cache", "ping")];
    let want: Vec<(String, String)> = want.map(|(s, c)| (s.into(), c.into())).into();
    assert_eq!(names, want);
    assert!(
        alive_runs(&a).await >= before,
        "the unchanged check kept its history"
    );
    wait_until("the new check runs", ten, || async {
        services(&a).await[1].checks[0].runs >= 1
    })
    .await;
    // Back to the first file: what was added goes.
    std::fs::write(&path, config(&key, "")).unwrap();
    let v = a.reload().await.unwrap();
    let removed: Vec<&str> = v.changes.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(removed, ["service[web].check[port]", "service[cache]"]);
    assert_eq!(check_names(&a).await, [("web".into(), "alive".into())]);
    assert_eq!(
        a.reload().await.unwrap().changes,
        [],
        "the same file again: nothing changes"
    );
    assert_eq!(reload_events(&a).await.len(), 3);
    assert_eq!(reloads_counted(&a, "applied").await, 3.0);
    assert_eq!(reloads_counted(&a, "refused").await, 0.0);
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_with_an_invalid_file_is_refused_and_nothing_changed() {
    let dir = tempfile::tempdir().unwrap();
    let key = Key::generate().to_base64();
    let (a, path) = start(dir.path(), &config(&key, "")).await;
    let before = check_names(&a).await;
    // A new service whose check is both a command and an address.
    let bad = "[[service]]\nname = \"cache\"\n[[service.check]]\ncommand = [\"true\"]\ntcp = \"127.0.0.1:9\"\n";
    std::fs::write(&path, config(&key, bad)).unwrap();
    let r = refused(&a).await;
    assert_eq!(r.reason, RefusalReason::Invalid);
    assert_eq!(keys(&r), ["service[1].check[0].http"]);
    assert!(r.error.ends_with("nothing changed"), "{}", r.error);
    // Not TOML of this schema (an unknown key): the parser's message says where.
    std::fs::write(&path, config(&key, "").replace("meta =", "metta =")).unwrap();
    let r = refused(&a).await;
    assert_eq!(r.reason, RefusalReason::Invalid);
    assert!(r.keys[0].problem.contains("metta"), "{r:?}");
    std::fs::remove_file(&path).unwrap();
    assert_eq!(refused(&a).await.reason, RefusalReason::Unreadable);
    assert_eq!(check_names(&a).await, before, "nothing changed");
    let events = reload_events(&a).await;
    assert_eq!(events.len(), 3);
    assert!(
        matches!(&events[0], AgentEvent::ConfigReloadRefused(r) if r.reason == RefusalReason::Invalid),
        "{events:?}"
    );
    assert_eq!(reloads_counted(&a, "refused").await, 3.0);
    assert_eq!(reloads_counted(&a, "applied").await, 0.0);
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changing_an_unreloadable_key_is_refused_naming_the_key_and_applies_none_of_the_file(
) {
    let dir = tempfile::tempdir().unwrap();
    let key = Key::generate().to_base64();
    let (a, path) = start(dir.path(), &config(&key, "")).await;
    let before = check_names(&a).await;
    let service = "[[service]]\nname = \"cache\"\n";
    let text = config(
        &key,
        &format!("[membership]\nprobe_interval = \"2s\"\n{service}"),
    )
    .replace("bind = \"127.0.0.1:0\"", "bind = \"127.0.0.1:1\"")
    .replace("name = \"reload\"", "name = \"other\"");
    std::fs::write(&path, text).unwrap();
    let r = refused(&a).await;
    assert_eq!(r.reason, RefusalReason::Unreloadable);
    assert_eq!(
        keys(&r),
        [
            "agent.advertise",
            "agent.bind",
            "cluster.name",
            "membership.probe_interval"
        ]
    );
    assert!(
        r.error
            .contains("agent.bind (was 127.0.0.1:0, now 127.0.0.1:1"),
        "{}",
        r.error
    );
    assert_eq!(
        check_names(&a).await,
        before,
        "the new service was not added"
    );
    // HTTP says the same (409), to whoever has the token.
    let answer = a.client().with_token(Some("tok".into())).reload().await;
    let r2 = answer.unwrap().unwrap_err();
    assert_eq!(keys(&r2), keys(&r));
    // A knob the core takes live is applied.
    let live = config(&key, &format!("[membership]\ngossip_fanout = 4\n{service}"));
    std::fs::write(&path, live).unwrap();
    let v = a.reload().await.unwrap();
    let changed: Vec<&str> = v.changes.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(changed, ["membership.gossip_fanout", "service[cache]"]);
    a.shutdown().await;
}

/// Who tries, with which headers, and the status they get.
type Attempt = (&'static str, &'static [(&'static str, &'static str)], u16);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_cannot_trigger_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let key = Key::generate().to_base64();
    let (a, path) = start(dir.path(), &config(&key, "")).await;
    let before = check_names(&a).await;
    std::fs::write(
        &path,
        config(
            &key,
            "[[service]]\nname = \"cache\"\n[[service.check]]\ncommand = [\"true\"]\n",
        ),
    )
    .unwrap();
    let url = format!("http://{}/v1/reload", a.http_addr());
    let http = reqwest::Client::new();
    let cases: [Attempt; 5] = [
        ("no token", &[("content-type", "application/json")], 401),
        (
            "a wrong token",
            &[
                ("content-type", "application/json"),
                ("authorization", "Bearer tok2"),
            ],
            401,
        ),
        (
            "a web page",
            &[
                ("content-type", "application/json"),
                ("authorization", "Bearer tok"),
                ("origin", "http://evil.example"),
            ],
            403,
        ),
        (
            "a form",
            &[
                ("content-type", "text/plain"),
                ("authorization", "Bearer tok"),
            ],
            415,
        ),
        (
            "another site's fetch",
            &[
                ("content-type", "application/json"),
                ("authorization", "Bearer tok"),
                ("sec-fetch-site", "cross-site"),
            ],
            403,
        ),
    ];
    for (who, headers, status) in cases {
        let mut req = http.post(&url).body("{}");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let got = req.send().await.unwrap().status().as_u16();
        assert_eq!(got, status, "{who}");
    }
    assert_eq!(check_names(&a).await, before, "nothing was reloaded");
    assert!(reload_events(&a).await.is_empty());
    assert_eq!(reloads_counted(&a, "applied").await, 0.0);
    // The operator's own request (the token) applies it.
    let applied = a.client().with_token(Some("tok".into())).reload().await;
    assert_eq!(applied.unwrap().unwrap().changes.len(), 1);
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_the_relay_keys_and_the_published_metadata_live() {
    let dir = tempfile::tempdir().unwrap();
    let key = Key::generate().to_base64();
    let relay = |keys: &str| {
        format!("[relay]\nprimary = {{ dsn = \"http://k@127.0.0.1:9/1\" }}\nkeys = [{keys}]\n")
    };
    let (a, path) = start(dir.path(), &config(&key, &relay("\"old\""))).await;
    let post = |sentry_key: &'static str| {
        let url = format!(
            "http://{}/api/1/envelope/?sentry_key={sentry_key}",
            a.http_addr()
        );
        async move {
            let payload = r#"{"message":"boom","level":"error"}"#;
            let body = format!(
                "{{\"event_id\":\"0123456789abcdef0123456789abcdef\"}}\n{{\"type\":\"event\",\"length\":{}}}\n{payload}\n",
                payload.len()
            );
            let r = reqwest::Client::new().post(url).body(body).send().await;
            r.unwrap().status().as_u16()
        }
    };
    assert_eq!(post("new").await, 401);
    let text = config(&key, &relay("\"new\"")).replace("rack=1", "rack=2");
    std::fs::write(&path, text).unwrap();
    let v = a.reload().await.unwrap();
    let changed: Vec<&str> = v.changes.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(changed, ["agent.meta", "relay.keys"]);
    assert_eq!(post("new").await, 200);
    assert_eq!(post("old").await, 401);
    wait_until(
        "the new metadata is published",
        Duration::from_secs(5),
        || async {
            let me = a.members().await.unwrap().remove(0);
            hale_agent::AgentMeta::parse(&me.meta).is_some_and(|m| m.user == "rack=2")
        },
    )
    .await;
    // What the relay was started with cannot change.
    let moved = relay("\"new\"").replace("127.0.0.1:9", "127.0.0.1:10");
    std::fs::write(&path, config(&key, &moved).replace("rack=1", "rack=2")).unwrap();
    assert_eq!(keys(&refused(&a).await), ["relay.primary"]);
    a.shutdown().await;
}

#[tokio::test]
async fn an_agent_started_without_a_file_refuses_a_reload_and_changes_nothing() {
    let cfg = crate::support::loopback_config("reload", "a", &Key::generate().to_base64(), None);
    let a = Agent::start(cfg).await.unwrap();
    let e = a.reload().await.unwrap_err();
    assert!(matches!(e, ReloadError::NoFile), "{e}");
    let answer = a.client().reload().await.unwrap();
    assert_eq!(answer.unwrap_err().reason, RefusalReason::NoFile);
    a.shutdown().await;
}
