//! `hale drill` and `hale status` against real local clusters: three agents
//! on loopback, each a control-plane server and a candidate for role `db`
//! (priorities 100, 50, 10) backed by an essential service `pg` whose check
//! is a file; n0 also runs a relay whose upstreams (primary and standby)
//! are fake Sentries in this process. Drill tests run one at a time (they share two cores).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hale_relay::fake::{FakeSentry, Mode};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::support::{
    http_get, metric, spawn_agent_with_config, wait_for, wait_until, write_role_cluster,
};

const HALE: &str = env!("CARGO_BIN_EXE_hale");

/// One drill cluster at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Kills its process on drop (SIGCONT first, in case it was stopped).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0.id() as i32), Signal::SIGCONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Node {
    name: String,
    http: SocketAddr,
    proc: Option<Proc>,
}

/// Three agents (and the fake Sentry); everything stops on drop.
struct Cluster {
    nodes: Vec<Node>,
    sentry: FakeSentry,
    _standby: FakeSentry,
    /// Keeps the fake Sentry running (dropped after it).
    _rt: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for n in &self.nodes {
                let log = self.dir.path().join(format!("{}.log", n.name));
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                eprintln!("---- last lines of {} ----", n.name);
                for l in &lines[lines.len().saturating_sub(20)..] {
                    eprintln!("{l}");
                }
            }
        }
        // Agents first (their watchdogs fence and exit when they go).
        for n in &mut self.nodes {
            n.proc.take();
        }
    }
}

impl Cluster {
    /// Starts the cluster and waits until it is healthy: every member
    /// alive, n0 holding `db`, both standbys eligible, every check passing.
    fn start() -> Cluster {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let sentry = rt.block_on(FakeSentry::start(Mode::Up)).unwrap();
        let standby = rt.block_on(FakeSentry::start(Mode::Up)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let relay = format!(
            "[relay]\nprimary = {{ dsn = \"{}\" }}\nstandby = {{ dsn = \"{}\" }}\n",
            sentry.dsn(),
            standby.dsn()
        );
        let nodes = write_role_cluster(dir.path(), "drill", |i| {
            if i == 0 {
                relay.clone()
            } else {
                String::new()
            }
        })
        .into_iter()
        .map(|n| Node {
            proc: Some(Proc(spawn_agent_with_config(
                dir.path(),
                &n.name,
                &n.config,
            ))),
            name: n.name,
            http: n.http,
        })
        .collect();
        let c = Cluster {
            nodes,
            sentry,
            _standby: standby,
            _rt: rt,
            dir,
            _serial: serial,
        };
        wait_until(Duration::from_secs(40), "the cluster is healthy", || {
            c.status().is_some_and(|s| healthy(&s))
        });
        c
    }

    /// `hale status --json` through n0.
    fn status(&self) -> Option<Value> {
        let out = self.hale(0, &["status", "--json"]);
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Runs `hale --http <node i> ARGS`.
    fn hale(&self, i: usize, args: &[&str]) -> Output {
        Command::new(HALE)
            .args(["--http", &self.nodes[i].http.to_string()])
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs a drill through n0 with a report directory; its exit code and report.
    fn drill(&self, args: &[&str]) -> (Option<i32>, Value, PathBuf) {
        let dir = self.dir.path().join(format!("report-{}", args.join("-")));
        let out = self.hale(
            0,
            &[args, &["--report", dir.to_str().unwrap(), "--json"]].concat(),
        );
        let report = read_report(&dir).unwrap_or_else(|| {
            panic!(
                "no report in {}; stderr:\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        // Shown when the test fails (libtest captures it otherwise).
        eprintln!(
            "{}",
            std::fs::read_to_string(dir.join("report.txt")).unwrap_or_default()
        );
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(printed, report, "--json prints the report it wrote");
        (out.status.code(), report, dir)
    }

    fn get(&self, i: usize, path: &str) -> Option<Value> {
        serde_json::from_str(&http_get(self.nodes[i].http, path)?).ok()
    }

    /// The holder of `db`, as the first agent that answers sees it.
    fn holder(&self) -> Option<String> {
        (0..self.nodes.len()).find_map(|i| {
            let v = self.get(i, "/v1/roles")?;
            v["leases"]["db"]["holder"].as_str().map(str::to_owned)
        })
    }

    /// Asserts nothing of a drill is left: no fault on any agent, every
    /// member alive everywhere, the relay not diverted, n0 holding `db`.
    fn assert_untouched(&self) {
        for i in 0..self.nodes.len() {
            let d = self.get(i, "/v1/drill").unwrap();
            assert_eq!(
                d["active"],
                serde_json::json!([]),
                "{}: {d}",
                self.nodes[i].name
            );
        }
        let relay = self.get(0, "/v1/relay").unwrap();
        assert!(relay["diverted"].is_null(), "{relay}");
        wait_until(
            Duration::from_secs(10),
            "every member alive everywhere",
            || {
                (0..self.nodes.len()).all(|i| {
                    self.get(i, "/v1/members").is_some_and(|m| {
                        let m = m.as_array().cloned().unwrap_or_default();
                        m.len() == 3 && m.iter().all(|m| m["state"] == "alive")
                    })
                })
            },
        );
        assert_eq!(self.holder().as_deref(), Some("n0"));
    }
}

/// A cluster is ready for drills: 3 alive, db held by n0 with 2 eligible
/// standbys, no failing check, relay breakers closed.
fn healthy(s: &Value) -> bool {
    let alive = s["members"]["alive"].as_array().map_or(0, Vec::len);
    let role = &s["roles"][0];
    let eligible = role["standbys"]
        .as_array()
        .is_some_and(|v| v.len() == 2 && v.iter().all(|c| c[2] == true));
    alive == 3
        && role["holder"] == "n0"
        && eligible
        && s["failing_checks"] == serde_json::json!([])
        && s["unreachable"] == serde_json::json!([])
}

fn read_report(dir: &Path) -> Option<Value> {
    let json = std::fs::read_to_string(dir.join("report.json")).ok()?;
    assert!(dir.join("report.txt").exists(), "report.txt written too");
    serde_json::from_str(&json).ok()
}

/// Asserts every check of every step passed, naming the failures.
fn assert_passed(report: &Value) {
    let failed: Vec<String> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["checks"].as_array().unwrap().iter().map(move |c| (s, c)))
        .filter(|(_, c)| c["passed"] != true)
        .map(|(s, c)| format!("{} / {}: {}", s["name"], c["name"], c["detail"]))
        .collect();
    assert!(failed.is_empty(), "failed checks: {failed:#?}");
    assert_eq!(report["outcome"], "passed");
}

fn step_names(report: &Value) -> Vec<String> {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

fn timeline_has(report: &Value, source: &str, kind: &str, member: Option<&str>) -> bool {
    report["timeline"].as_array().unwrap().iter().any(|e| {
        e["source"] == source && e["kind"] == kind && member.is_none_or(|m| e["member"] == m)
    })
}

/// A plain HTTP/1.1 POST; whether the answer was 2xx.
pub(crate) fn http_post(addr: SocketAddr, path: &str, body: &str) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 2")
}

#[test]
fn a_sink_blackhole_drill_keeps_the_relay_answering_and_opens_then_closes_its_breaker() {
    let c = Cluster::start();
    let (code, report, dir) = c.drill(&["drill", "sink-blackhole", "--duration", "4"]);
    assert_passed(&report);
    assert_eq!(code, Some(0));
    assert_eq!(report["drill"], "sink-blackhole");
    let steps = step_names(&report);
    assert!(steps[0].starts_with("preflight"), "{steps:?}");
    assert!(steps[1].contains("black hole"), "{steps:?}");
    assert!(steps[2].starts_with("restore"), "{steps:?}");
    assert!(
        timeline_has(&report, "n0", "breaker", None),
        "the breaker's changes are on the timeline"
    );
    assert!(timeline_has(&report, "n0", "drill-set", None));
    assert!(timeline_has(&report, "n0", "drill-restored", None));
    let text = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(text.contains("PASSED"), "{text}");
    assert!(text.contains("the relay's breaker opened"), "{text}");
    // Test events reach the real upstream again once the hole is gone.
    wait_until(Duration::from_secs(10), "events delivered upstream", || {
        c.sentry.events() > 0
    });
    c.assert_untouched();
}

#[test]
fn freezing_the_role_holder_promotes_a_standby_in_time_and_hands_the_role_back() {
    let c = Cluster::start();
    let (code, report, _) = c.drill(&["drill", "node-freeze", "n0", "--duration", "5"]);
    assert_passed(&report);
    assert_eq!(code, Some(0));
    assert_eq!(report["target"], "n0");
    let steps = step_names(&report);
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert_eq!(steps[3], "hand db back to n0");
    let checks: Vec<String> = report["steps"][1]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        checks
            .iter()
            .any(|n| n.starts_with("a standby took db within")),
        "{checks:?}"
    );
    assert!(timeline_has(&report, "n1", "promoted", None), "n1 took db");
    assert!(timeline_has(&report, "n0", "demoted", None), "n0 let it go");
    c.assert_untouched();
}

#[test]
fn a_handover_drill_moves_the_role_to_each_standby_and_back() {
    let c = Cluster::start();
    let (code, report, _) = c.drill(&["drill", "handover", "db"]);
    assert_passed(&report);
    assert_eq!(code, Some(0));
    assert_eq!(
        step_names(&report)[1..],
        [
            "hand db from n0 to n1",
            "hand db from n1 to n2",
            "hand db back to n0"
        ]
    );
    for n in ["n1", "n2", "n0"] {
        assert!(timeline_has(&report, n, "promoted", None), "{n} promoted");
    }
    c.assert_untouched();
}

#[test]
fn a_quiet_drill_shows_probes_alone_keep_every_member_alive() {
    let c = Cluster::start();
    // Applications report traffic between every pair, before and during the drill.
    let stop = Arc::new(AtomicBool::new(false));
    let agents: Vec<(SocketAddr, String)> = c
        .nodes
        .iter()
        .map(|n| {
            let others: Vec<String> = c
                .nodes
                .iter()
                .filter(|o| o.name != n.name)
                .map(|o| format!("\"{}\"", o.name))
                .collect();
            (n.http, format!("{{\"peers\": [{}]}}", others.join(",")))
        })
        .collect();
    let traffic = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                for (addr, body) in &agents {
                    http_post(*addr, "/v1/traffic", body);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    wait_until(Duration::from_secs(5), "traffic is accepted", || {
        http_post(c.nodes[0].http, "/v1/traffic", "{\"peers\": [\"n1\"]}")
    });
    let (code, report, _) = c.drill(&["drill", "quiet", "--duration", "4"]);
    stop.store(true, Ordering::Relaxed);
    traffic.join().unwrap();
    assert_passed(&report);
    assert_eq!(code, Some(0));
    let checks = report["steps"][1]["checks"].as_array().unwrap();
    assert!(
        checks
            .iter()
            .any(|c| c["name"] == "no live member was suspected" && c["passed"] == true),
        "{checks:?}"
    );
    let ignored: f64 = (0..3)
        .map(|i| {
            let text = http_get(c.nodes[i].http, "/metrics").unwrap();
            metric(&text, "hale_drill_traffic_ignored_total", &[])
        })
        .sum();
    assert!(
        ignored > 0.0,
        "traffic signals were ignored during the drill"
    );
    // Traffic counts again afterwards.
    let after = c.get(0, "/v1/drill").unwrap();
    assert_eq!(after["active"], serde_json::json!([]));
    c.assert_untouched();
}

#[test]
fn a_drill_refuses_to_start_on_a_degraded_cluster_and_changes_nothing() {
    let mut c = Cluster::start();
    c.nodes[2].proc.take(); // Killed.
    wait_until(
        Duration::from_secs(20),
        "n0 no longer sees n2 alive",
        || {
            c.get(0, "/v1/members").is_some_and(|m| {
                m.as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["name"] == "n2" && m["state"] != "alive")
            })
        },
    );
    let (code, report, dir) = c.drill(&["drill", "node-freeze", "n1", "--duration", "3"]);
    assert_eq!(code, Some(3), "{report}");
    assert_eq!(report["outcome"], "refused");
    assert_eq!(step_names(&report).len(), 1, "only the preflight ran");
    let failed: Vec<&Value> = report["steps"][0]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["passed"] == false)
        .collect();
    assert!(
        failed.iter().any(|c| c["name"] == "every member is alive"
            && c["detail"].as_str().unwrap().contains("n2")),
        "{failed:?}"
    );
    let text = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(text.contains("REFUSED"), "{text}");
    for i in 0..2 {
        let d = c.get(i, "/v1/drill").unwrap();
        assert_eq!(d["active"], serde_json::json!([]), "nothing was set: {d}");
    }
}

#[test]
fn interrupting_a_drill_restores_every_fault_and_marks_the_report_aborted() {
    let c = Cluster::start();
    let dir = c.dir.path().join("report-aborted");
    let out = std::fs::File::create(c.dir.path().join("drill.out")).unwrap();
    let child = Command::new(HALE)
        .args(["--http", &c.nodes[0].http.to_string()])
        .args(["drill", "node-freeze", "n0", "--duration", "120", "--json"])
        .arg("--report")
        .arg(&dir)
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut drill = Proc(child);
    wait_until(Duration::from_secs(20), "n0 is frozen", || {
        c.get(0, "/v1/drill")
            .is_some_and(|d| d["active"][0]["fault"] == "freeze")
    });
    // Mid-drill: the standby has taken over while n0 is frozen.
    wait_until(Duration::from_secs(20), "n1 holds db", || {
        c.get(1, "/v1/roles")
            .is_some_and(|v| v["leases"]["db"]["holder"] == "n1")
    });
    kill(Pid::from_raw(drill.0.id() as i32), Signal::SIGINT).unwrap();
    let status = wait_for(Duration::from_secs(60), "the drill exits", || {
        drill.0.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(130));
    let report = read_report(&dir).unwrap();
    eprintln!(
        "{}",
        std::fs::read_to_string(dir.join("report.txt")).unwrap_or_default()
    );
    assert_eq!(report["outcome"], "aborted");
    let steps = step_names(&report);
    assert_eq!(
        steps.last().map(String::as_str),
        Some("restore after interruption"),
        "{steps:?}"
    );
    let restore = report["steps"].as_array().unwrap().last().unwrap();
    assert!(
        restore["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["passed"] == true),
        "{restore}"
    );
    // Well before the 120 s the fault was set for: nothing is left.
    c.assert_untouched();
}

#[test]
fn status_shows_members_roles_failing_checks_and_the_relay_in_text_and_json() {
    let c = Cluster::start();
    std::fs::remove_file(c.dir.path().join("healthy-n2")).unwrap();
    let s = wait_for(Duration::from_secs(10), "n2's check fails", || {
        c.status().filter(|s| {
            s["failing_checks"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
        })
    });
    assert_eq!(s["observer"], "n0");
    assert_eq!(s["size"], 3);
    assert_eq!(s["members"]["alive"], serde_json::json!(["n0", "n1", "n2"]));
    assert_eq!(s["roles"][0]["role"], "db");
    assert_eq!(s["roles"][0]["holder"], "n0");
    assert_eq!(s["roles"][0]["standbys"][0][0], "n1");
    let f = &s["failing_checks"][0];
    assert_eq!(
        (f["node"].as_str(), f["service"].as_str()),
        (Some("n2"), Some("pg"))
    );
    assert_eq!(f["essential"], true);
    assert_eq!(s["relays"][0][0], "n0");
    assert_eq!(s["relays"][0][1]["upstreams"][0]["breaker"], "closed");
    let out = c.hale(0, &["status"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    eprintln!("{text}");
    assert!(
        s["cluster"]
            .as_str()
            .is_some_and(|c| c.starts_with("drill-")),
        "{s}"
    );
    for want in [
        ": 3 members, as seen by n0",
        "cluster drill-",
        "MEMBERS  alive 3  suspect 0  dead 0  left 0",
        "holder n0",
        "n2           pg               ESSENTIAL failing:",
        "RELAY on n0:",
        "primary  breaker closed",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(text.lines().count() <= 24, "one screen:\n{text}");
}
