//! Reloading `hale agent`'s configuration without a restart, on real
//! processes: `hale reload` on the holder's host adds a check and a role
//! and moves nothing; what would touch the held role is refused, named;
//! SIGHUP does what `hale reload` does.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use hale_agent::view::AgentEvent;
use hale_agent::AgentMeta;
use hale_control::RoleState;
use nix::sys::signal::Signal;

use crate::failover::{first_holder, history};
use crate::support::{
    call, free_port, hook_lines, log_dir, metric, spawn_with_config, wait_for, wait_until,
    AgentProc, Cluster,
};

/// `path` with `f` applied to its text.
fn edit(path: &Path, f: impl FnOnce(String) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, f(text)).unwrap();
}

/// Runs `hale reload` beside `a`: its exit status and its output.
fn hale_reload(a: &AgentProc) -> (bool, String) {
    let out = a.cli(&["reload"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `a`'s own view of role `role`: its state, epoch, promotions and demotions.
fn local_role(a: &AgentProc, role: &str) -> Option<(RoleState, Option<u64>, u64, u64)> {
    let v = a.roles()?;
    let r = v.local.into_iter().find(|r| r.role == role)?;
    Some((r.state, r.epoch, r.promotions, r.demotions))
}

/// The candidacies `observer` sees `member` publish.
fn published_roles(observer: &AgentProc, member: &str) -> Option<AgentMeta> {
    let m = observer.members()?.into_iter().find(|m| m.name == member)?;
    AgentMeta::parse(&m.meta)
}

#[test]
fn a_reload_that_adds_a_check_and_a_role_on_the_holders_host_is_applied_and_the_holder_does_not_change(
) {
    let c = Cluster::roles("reload-holder", "");
    let held = first_holder(&c);
    let n0 = &c.agents[0];
    wait_until(Duration::from_secs(10), "n0 has promoted", || {
        local_role(n0, "db").is_some_and(|(s, e, ..)| s == RoleState::Holder && e == Some(held.1))
    });
    let config = c.path("n0.toml");
    // A second check of pg (the held role's service), a new service and a
    // role `cache` backed by it (no hooks).
    edit(&config, |t| {
        let check =
            "[[service.check]]\nname = \"second\"\ncommand = [\"true\"]\ninterval = \"200ms\"\n";
        let role = "\n[[service]]\nname = \"mem\"\n[[service.check]]\ncommand = [\"true\"]\n\
                    [[role]]\nname = \"cache\"\nservice = \"mem\"\npriority = 7\n";
        format!(
            "{}{role}",
            t.replacen("[[role]]", &format!("{check}[[role]]"), 1)
        )
    });
    let (ok, out) = hale_reload(n0);
    assert!(ok, "{out}");
    for key in ["service[pg].check[second]", "service[mem]", "role[cache]"] {
        assert!(out.contains(key), "{key} not in: {out}");
    }
    // The new role is published, granted (its only candidate) and held.
    wait_until(
        Duration::from_secs(10),
        "n1 sees n0's candidacy for cache",
        || published_roles(&c.agents[1], "n0").is_some_and(|m| m.roles.contains_key("cache")),
    );
    wait_until(Duration::from_secs(20), "n0 holds cache", || {
        local_role(n0, "cache").is_some_and(|(s, ..)| s == RoleState::Holder)
    });
    let checks = call(n0.api().services()).unwrap();
    assert_eq!(checks[0].checks.len(), 2, "{checks:?}");
    // A held role's hooks do not change under it; nor does a reload give it up.
    edit(&config, |t| {
        let demote = t
            .lines()
            .find(|l| l.starts_with("demote = "))
            .unwrap()
            .to_owned();
        t.replacen(&demote, "demote = [\"true\"]", 1)
    });
    let (ok, out) = hale_reload(n0);
    assert!(!ok, "a hook change of the held role was applied: {out}");
    assert!(out.contains("role[db].demote"), "{out}");
    assert!(out.contains("hand it over first"), "{out}");
    let without_db = {
        let t = std::fs::read_to_string(&config).unwrap();
        let start = t.find("[[role]]\nname = \"db\"").unwrap();
        let end = start + t[start..].find("\n\n").unwrap();
        format!("{}{}", &t[..start], &t[end..])
    };
    std::fs::write(&config, without_db).unwrap();
    let (ok, out) = hale_reload(n0);
    assert!(!ok, "removing the held role was applied: {out}");
    assert!(out.contains("role[db]"), "{out}");
    c.assert_holder_stays(
        Duration::from_secs(3),
        &held,
        "after reloads on the holder's host",
    );
    let (state, epoch, promotions, demotions) = local_role(n0, "db").unwrap();
    assert_eq!(
        (state, epoch, promotions, demotions),
        (RoleState::Holder, Some(held.1), 1, 0),
        "db was demoted or promoted again"
    );
    let hooks = hook_lines(&c.path("hooks.log"));
    let demoted = hooks.iter().filter(|l| l.what == "demote").count();
    assert_eq!(demoted, 0, "a demote hook ran: {hooks:?}");
    let events = n0.events().unwrap();
    let kinds = |f: fn(&AgentEvent) -> bool| events.iter().filter(|e| f(&e.event)).count();
    assert_eq!(kinds(|e| matches!(e, AgentEvent::ConfigReloaded(_))), 1);
    assert_eq!(
        kinds(|e| matches!(e, AgentEvent::ConfigReloadRefused(_))),
        2
    );
    let demoting = |e: &AgentEvent| matches!(e, AgentEvent::Demoting { role, .. } if role == "db");
    assert_eq!(events.iter().filter(|e| demoting(&e.event)).count(), 0);
    hale_control::check(&history(&c)).unwrap();
}

/// One agent with a configuration file, and the file.
fn lone_agent(dir: &Path, services: &str) -> (AgentProc, std::path::PathBuf) {
    let port = || SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (gossip, http) = (port(), port());
    let config = dir.join("a.toml");
    let text = |services: &str| {
        format!(
            "[agent]\nname = \"a\"\nbind = \"{gossip}\"\nhttp = \"{http}\"\n\
             [cluster]\nname = \"reload-hup\"\nkeys = [\"{}\"]\n{services}",
            hale_agent::Key::generate().to_base64()
        )
    };
    std::fs::write(&config, text(services)).unwrap();
    let a = spawn_with_config(dir, "a", &config, gossip, http, None, &[]);
    wait_for(Duration::from_secs(20), "the agent answers", || {
        call(a.api().health()).ok()
    });
    (a, config)
}

/// How many reload events of each outcome `a` has published.
fn reload_events(a: &AgentProc) -> (usize, usize) {
    let events = a.events().unwrap_or_default();
    let n = |f: fn(&AgentEvent) -> bool| events.iter().filter(|e| f(&e.event)).count();
    (
        n(|e| matches!(e, AgentEvent::ConfigReloaded(_))),
        n(|e| matches!(e, AgentEvent::ConfigReloadRefused(_))),
    )
}

#[test]
fn sighup_does_what_hale_reload_does() {
    let logs = log_dir("reload-hup");
    let web = "[[service]]\nname = \"web\"\n[[service.check]]\ncommand = [\"true\"]\n";
    let (a, config) = lone_agent(logs.path(), web);
    let cache = "[[service]]\nname = \"cache\"\n";
    edit(&config, |t| format!("{t}{cache}"));
    a.signal(Signal::SIGHUP);
    wait_until(Duration::from_secs(10), "SIGHUP applied the file", || {
        reload_events(&a) == (1, 0)
    });
    let names: Vec<String> = call(a.api().services())
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["web", "cache"]);
    // An invalid file: `hale reload` says why and fails; SIGHUP refuses it too.
    edit(&config, |t| t.replace("name = \"cache\"", "name = \"\""));
    let (ok, out) = hale_reload(&a);
    assert!(!ok, "{out}");
    assert!(out.contains("refused, nothing changed"), "{out}");
    assert!(out.contains("service[1].name"), "{out}");
    a.signal(Signal::SIGHUP);
    wait_until(Duration::from_secs(10), "SIGHUP refused the file", || {
        reload_events(&a) == (1, 2)
    });
    assert!(call(a.api().health()).is_ok(), "SIGHUP stopped the agent");
    let names = call(a.api().services()).unwrap().len();
    assert_eq!(names, 2, "nothing changed");
    let text = a.metrics().unwrap();
    let reloads = |r: &str| {
        metric(
            &text,
            "hale_config_reloads_total",
            &[&format!("result=\"{r}\"")],
        )
    };
    assert_eq!(
        (reloads("applied"), reloads("refused")),
        (1.0, 2.0),
        "{text}"
    );
}
