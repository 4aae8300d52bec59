//! Roles and failover with real agent processes on loopback: three agents,
//! each a control-plane server and a candidate for role `db` (priorities
//! 100, 50, 10). Hooks append to one log with the machine's clock; every
//! test ends by running the history checker over it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::support::{spawn_agent_with_config, write_role_cluster_n};
use hale_control::{check, HookEvent, HookKind};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) http: SocketAddr,
    pub(crate) child: Option<Child>,
}

/// Three agents; every process (and watchdog) is killed on drop.
pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    pub(crate) nodes: Vec<Node>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(c) = n.child.as_mut() {
                let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        // Watchdogs of this cluster (started with this cluster's hook paths).
        let _ = Command::new("pkill")
            .args(["-f", &self.dir.path().display().to_string()])
            .status();
    }
}

impl Cluster {
    pub(crate) fn start(extra: &str) -> Cluster {
        Cluster::start_with_hooks(|_, _| None, |_| extra.to_owned())
    }

    /// `n` agents (the first three control-plane servers), instant hooks.
    pub(crate) fn start_n(n: usize) -> Cluster {
        Cluster::start_full(n, |_, _| None, |_| String::new(), |_| {})
    }

    /// Three agents with hook scripts and role settings of the test's own
    /// (see [`write_role_cluster_n`]).
    pub(crate) fn start_with_hooks(
        hooks: impl Fn(usize, &Path) -> Option<(String, String)>,
        extra: impl Fn(usize) -> String,
    ) -> Cluster {
        Cluster::start_prepared(hooks, extra, |_| {})
    }

    /// [`Cluster::start_with_hooks`], calling `prepare(dir)` once the
    /// configurations are written and before any agent starts.
    pub(crate) fn start_prepared(
        hooks: impl Fn(usize, &Path) -> Option<(String, String)>,
        extra: impl Fn(usize) -> String,
        prepare: impl FnOnce(&Path),
    ) -> Cluster {
        Cluster::start_full(3, hooks, extra, prepare)
    }

    /// `n` agents (the first three control-plane servers; see
    /// [`write_role_cluster_n`]), `prepare(dir)` called before any starts.
    fn start_full(
        n: usize,
        hooks: impl Fn(usize, &Path) -> Option<(String, String)>,
        extra: impl Fn(usize) -> String,
        prepare: impl FnOnce(&Path),
    ) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let written = write_role_cluster_n(dir.path(), "failover", n, hooks, extra);
        prepare(dir.path());
        let nodes = written
            .into_iter()
            .map(|n| Node {
                child: Some(spawn_agent_with_config(dir.path(), &n.name, &n.config)),
                name: n.name,
                http: n.http,
            })
            .collect();
        Cluster { dir, nodes }
    }

    pub(crate) fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    pub(crate) fn roles(&self, i: usize) -> Option<serde_json::Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(["--http", &self.nodes[i].http.to_string(), "roles", "--json"])
            .output()
            .ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The holder and epoch of `db`, as the first live node that answers sees it.
    pub(crate) fn holder(&self) -> Option<(String, u64)> {
        (0..3)
            .filter(|&i| self.nodes[i].child.is_some())
            .find_map(|i| {
                let v = self.roles(i)?;
                let l = &v["leases"]["db"];
                Some((l["holder"].as_str()?.to_owned(), l["epoch"].as_u64()?))
            })
    }

    pub(crate) fn index(&self, name: &str) -> usize {
        self.nodes.iter().position(|n| n.name == name).unwrap()
    }

    pub(crate) fn signal(&self, i: usize, s: Signal) {
        let c = self.nodes[i].child.as_ref().unwrap();
        kill(Pid::from_raw(c.id() as i32), s).unwrap();
    }

    pub(crate) fn history(&self) -> Vec<HookEvent> {
        read_history(&self.path("hooks.log"))
    }
}

pub fn read_history(log: &Path) -> Vec<HookEvent> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(HookEvent {
                at_nanos: f.first()?.parse().ok()?,
                node: f.get(1)?.to_string(),
                role: "db".into(),
                epoch: f.get(3)?.parse().ok()?,
                kind: match *f.get(2)? {
                    "promote" => HookKind::Promote,
                    "demote" => HookKind::Demote,
                    _ => return None,
                },
            })
        })
        .collect()
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn first_holder(c: &Cluster) -> (String, u64) {
    wait_for(
        "the best candidate holds db",
        Duration::from_secs(30),
        || c.holder().filter(|(h, _)| h == "n0"),
    )
}

fn promote_time(h: &[HookEvent], node: &str, epoch: u64) -> Option<u64> {
    h.iter()
        .find(|e| e.node == node && e.epoch == epoch && e.kind == HookKind::Promote)
        .map(|e| e.at_nanos)
}

fn demote_time(h: &[HookEvent], node: &str, epoch: u64) -> Option<u64> {
    h.iter()
        .find(|e| e.node == node && e.epoch == epoch && e.kind == HookKind::Demote)
        .map(|e| e.at_nanos)
}

#[test]
fn killing_the_holders_agent_fences_it_before_a_standby_is_promoted() {
    let mut c = Cluster::start("");
    let (holder, epoch) = first_holder(&c);
    let i = c.index(&holder);
    c.signal(i, Signal::SIGKILL);
    let _ = c.nodes[i].child.take().unwrap().wait();
    let (next, e2) = wait_for("a standby takes db", Duration::from_secs(30), || {
        c.holder().filter(|(h, _)| *h != holder)
    });
    assert_eq!(next, "n1", "the next-best healthy candidate");
    assert!(e2 > epoch);
    let h = wait_for("hooks logged", Duration::from_secs(5), || {
        let h = c.history();
        promote_time(&h, &next, e2).map(|_| h)
    });
    let fenced =
        demote_time(&h, &holder, epoch).expect("the watchdog fenced the dead agent's service");
    assert!(fenced < promote_time(&h, &next, e2).unwrap());
    check(&h).unwrap();
}

#[test]
fn a_holder_frozen_longer_than_its_lease_is_fenced_and_stays_demoted_after_resuming() {
    let c = Cluster::start("");
    let (holder, epoch) = first_holder(&c);
    let i = c.index(&holder);
    c.signal(i, Signal::SIGSTOP);
    let (next, e2) = wait_for("a standby takes db", Duration::from_secs(30), || {
        c.holder().filter(|(h, _)| *h != holder)
    });
    c.signal(i, Signal::SIGCONT);
    // Back from the freeze, it sees its lease lost and does not act as holder.
    wait_for("the resumed agent answers", Duration::from_secs(10), || {
        c.roles(i)
    });
    crate::support::during(Duration::from_secs(2), Duration::from_millis(200), || {
        if let Some(v) = c.roles(i) {
            assert_ne!(v["local"][0]["state"], "holder", "{v}");
        }
    });
    let h = wait_for("the promote hook ran", Duration::from_secs(10), || {
        let h = c.history();
        promote_time(&h, &next, e2).map(|_| h)
    });
    let fenced = demote_time(&h, &holder, epoch).expect("fenced while frozen");
    assert!(fenced < promote_time(&h, &next, e2).expect("promoted"));
    // Its watchdog fenced while it was frozen; on resuming it must not run
    // the demote hook a second time.
    let demotes = h
        .iter()
        .filter(|e| e.node == holder && e.epoch == epoch && e.kind == HookKind::Demote)
        .count();
    assert_eq!(
        demotes, 1,
        "the lost lease ran the demote hook {demotes} times"
    );
    check(&h).unwrap();
}

#[test]
fn a_hung_essential_service_hands_the_role_over() {
    let c = Cluster::start("");
    let (holder, epoch) = first_holder(&c);
    std::fs::remove_file(c.path(&format!("healthy-{holder}"))).unwrap();
    let (next, e2) = wait_for("a standby takes db", Duration::from_secs(30), || {
        c.holder().filter(|(h, _)| *h != holder)
    });
    assert_eq!(next, "n1");
    let h = wait_for("the promote hook ran", Duration::from_secs(10), || {
        let h = c.history();
        promote_time(&h, &next, e2).map(|_| h)
    });
    assert!(demote_time(&h, &holder, epoch).unwrap() < promote_time(&h, &next, e2).unwrap());
    check(&h).unwrap();
}

#[test]
fn a_standby_with_failing_checks_is_never_promoted() {
    let c = Cluster::start("");
    let (holder, _) = first_holder(&c);
    std::fs::remove_file(c.path("healthy-n1")).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    std::fs::remove_file(c.path(&format!("healthy-{holder}"))).unwrap();
    let (next, _) = wait_for("a standby takes db", Duration::from_secs(20), || {
        c.holder().filter(|(h, _)| *h != holder)
    });
    assert_eq!(next, "n2", "n1 is unhealthy, so n2 takes over");
    check(&c.history()).unwrap();
}

#[test]
fn a_hanging_non_essential_service_changes_nothing() {
    let extra = r#"
[[service]]
name = "sentry"
essential = false
[[service.check]]
command = ["sleep", "5"]
timeout = "200ms"
"#;
    let c = Cluster::start(extra);
    let (holder, epoch) = first_holder(&c);
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        c.holder(),
        Some((holder.clone(), epoch)),
        "no failover for a non-essential service"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["--http", &c.nodes[0].http.to_string(), "members", "--json"])
        .output()
        .unwrap();
    let members: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        members
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["state"] == "alive"),
        "{members}"
    );
    // Both show in the holder's metrics: the role held, the hanging sink reported.
    let i = c.index(&holder);
    let text = crate::support::http_get(c.nodes[i].http, "/metrics").unwrap();
    let node = format!("node=\"{holder}\"");
    let m = |name: &str, labels: &[&str]| crate::support::metric(&text, name, labels);
    assert_eq!(
        m("hale_role_holder", &[&node, "role=\"db\""]),
        1.0,
        "{text}"
    );
    assert_eq!(
        m("hale_service_healthy", &[&node, "service=\"sentry\""]),
        0.0,
        "{text}"
    );
    assert_eq!(
        m("hale_service_healthy", &[&node, "service=\"pg\""]),
        1.0,
        "{text}"
    );
    assert!(m("hale_role_renewals_total", &[&node]) > 0.0, "{text}");
    assert!(
        m("hale_check_failures_total", &[&node, "service=\"sentry\""]) > 0.0,
        "{text}"
    );
    check(&c.history()).unwrap();
}

#[test]
fn an_operator_handover_goes_to_the_named_standby() {
    let c = Cluster::start("");
    let (holder, epoch) = first_holder(&c);
    let i = c.index(&holder);
    // n2 has the lowest priority; named, it still gets the role.
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args([
            "--http",
            &c.nodes[i].http.to_string(),
            "roles",
            "handover",
            "db",
            "--to",
            "n2",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (next, e2) = wait_for("n2 takes db", Duration::from_secs(20), || {
        c.holder().filter(|(h, _)| h == "n2")
    });
    assert!(e2 > epoch);
    let h = wait_for("the promote hook ran", Duration::from_secs(10), || {
        let h = c.history();
        promote_time(&h, &next, e2).map(|_| h)
    });
    assert!(demote_time(&h, &holder, epoch).unwrap() < promote_time(&h, &next, e2).unwrap());
    check(&h).unwrap();
}

#[test]
fn losing_the_control_plane_leader_during_a_failover_still_promotes_a_standby() {
    let mut c = Cluster::start("");
    let (holder, epoch) = first_holder(&c);
    let leader = wait_for(
        "the control-plane leader is known",
        Duration::from_secs(10),
        || c.roles(0)?["leader"].as_u64(),
    );
    let leader_node = (leader - 1) as usize;
    // The holder's service hangs (a handover starts) and, at once, the
    // control-plane leader's host dies (it may be the holder's own).
    std::fs::remove_file(c.path(&format!("healthy-{holder}"))).unwrap();
    c.signal(leader_node, Signal::SIGKILL);
    let _ = c.nodes[leader_node].child.take().unwrap().wait();
    let gone = c.nodes[leader_node].name.clone();
    let (next, e2) = wait_for("a standby takes db", Duration::from_secs(30), || {
        c.holder().filter(|(h, _)| *h != holder && *h != gone)
    });
    assert!(e2 > epoch);
    let h = wait_for("the promote hook ran", Duration::from_secs(10), || {
        let h = c.history();
        promote_time(&h, &next, e2).map(|_| h)
    });
    check(&h).unwrap();
}
