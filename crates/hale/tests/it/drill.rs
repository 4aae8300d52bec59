//! `hale drill` and `hale status` against real local clusters: three agents
//! on loopback, each a control-plane server and a candidate for role `db`
//! (priorities 100, 50, 10) backed by an essential service `pg` whose check
//! is a file; n0 also runs a relay whose upstreams (primary and standby)
//! are fake Sentries in this process. Drill tests run one at a time (they share two cores).

use hale_agent::view::MemberState;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hale_agent::view::Fault;
use hale_relay::fake::{FakeSentry, Mode};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use crate::drill_report::{Check, Outcome, Report};
use crate::support::{call, db_holder, hale_bin, metric, wait_for, wait_until, Cluster, Proc};

/// One drill cluster at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A role cluster whose n0 runs a relay to two fake Sentries (primary and
/// standby) in this process; the agents stop first on drop.
struct Bench {
    c: Cluster,
    sentry: FakeSentry,
    _standby: FakeSentry,
    _serial: std::sync::MutexGuard<'static, ()>,
}

impl Bench {
    /// Starts the cluster and waits until it is healthy: every member
    /// alive, n0 holding `db`, both standbys eligible, every check passing.
    fn start(test: &str) -> Bench {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let sentry = call(FakeSentry::start(Mode::Up)).unwrap();
        let standby = call(FakeSentry::start(Mode::Up)).unwrap();
        let relay = format!(
            "[relay]\nprimary = {{ dsn = \"{}\" }}\nstandby = {{ dsn = \"{}\" }}\n",
            sentry.dsn(),
            standby.dsn()
        );
        let extra = |i: usize| if i == 0 { relay.clone() } else { String::new() };
        let c = Cluster::roles_with(test, 3, |_, _| None, extra, |_| {});
        let b = Bench {
            c,
            sentry,
            _standby: standby,
            _serial: serial,
        };
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let last = b.status();
            if last.as_ref().is_some_and(healthy) {
                return b;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster never became healthy in 40 s; last `hale status --json`: {last:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `hale status --json` through n0 (the CLI's own output format).
    fn status(&self) -> Option<Value> {
        let out = self.c.agents[0].cli(&["status", "--json"]);
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Runs a drill through n0 with a report directory; its exit code and report.
    fn drill(&self, args: &[&str]) -> (Option<i32>, Report, PathBuf) {
        let dir = self.c.path(&format!("report-{}", args.join("-")));
        let flags = ["--report", dir.to_str().unwrap(), "--json"];
        let out = self.c.agents[0].cli(&[args, &flags].concat());
        let report = read_report(&dir).unwrap_or_else(|| {
            panic!(
                "no report in {}; stderr:\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let written = serde_json::to_value(&report).unwrap();
        assert_eq!(printed, written, "--json prints the report it wrote");
        (out.status.code(), report, dir)
    }

    /// Whether agent `i` has no drill fault in force.
    fn no_fault(&self, i: usize) -> bool {
        call(self.c.agents[i].api().drill()).is_ok_and(|d| d.active.is_empty())
    }

    /// Asserts nothing of a drill is left: no fault on any agent, every
    /// member alive everywhere, the relay not diverted, n0 holding `db`.
    fn assert_untouched(&self) {
        for (i, a) in self.c.agents.iter().enumerate() {
            assert!(self.no_fault(i), "{}: a fault is left", a.name);
        }
        let relay = call(self.c.agents[0].api().relay()).unwrap().unwrap();
        assert!(relay.diverted.is_none(), "{relay:?}");
        self.c.wait_formed(Duration::from_secs(10));
        assert_eq!(self.c.holder().map(|h| h.0).as_deref(), Some("n0"));
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

/// The report a drill wrote into `dir` (its text shown when the test fails).
fn read_report(dir: &Path) -> Option<Report> {
    let json = std::fs::read_to_string(dir.join("report.json")).ok()?;
    let text = std::fs::read_to_string(dir.join("report.txt"));
    eprintln!("{}", text.expect("report.txt written too"));
    serde_json::from_str(&json).ok()
}

/// Asserts every check of every step passed, naming the failures.
fn assert_passed(report: &Report) {
    let failed: Vec<String> = (report.steps.iter())
        .flat_map(|s| s.checks.iter().map(move |c| (s, c)))
        .filter(|(_, c)| !c.passed)
        .map(|(s, c)| format!("{} / {}: {}", s.name, c.name, c.detail))
        .collect();
    assert!(failed.is_empty(), "failed checks: {failed:#?}");
    assert_eq!(report.outcome, Outcome::Passed);
}

fn step_names(report: &Report) -> Vec<&str> {
    report.steps.iter().map(|s| s.name.as_str()).collect()
}

/// Whether `source` reported an event of `kind` on the report's timeline.
fn timeline_has(report: &Report, source: &str, kind: &str) -> bool {
    (report.timeline.iter()).any(|e| e.source == source && e.kind == kind)
}

#[test]
fn a_sink_blackhole_drill_keeps_the_relay_answering_and_opens_then_closes_its_breaker() {
    let c = Bench::start("drill-blackhole");
    let (code, report, dir) = c.drill(&["drill", "sink-blackhole", "--duration", "4"]);
    assert_passed(&report);
    assert_eq!(code, Some(0));
    assert_eq!(report.drill, "sink-blackhole");
    let steps = step_names(&report);
    assert!(steps[0].starts_with("preflight"), "{steps:?}");
    assert!(steps[1].contains("black hole"), "{steps:?}");
    assert!(steps[2].starts_with("restore"), "{steps:?}");
    assert!(
        timeline_has(&report, "n0", "breaker"),
        "the breaker's changes are on the timeline"
    );
    assert!(timeline_has(&report, "n0", "drill-set"));
    assert!(timeline_has(&report, "n0", "drill-restored"));
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
    let c = Bench::start("drill-freeze");
    let (code, report, _) = c.drill(&["drill", "node-freeze", "n0", "--duration", "5"]);
    assert_passed(&report);
    assert_eq!(code, Some(0));
    assert_eq!(report.target.as_deref(), Some("n0"));
    let steps = step_names(&report);
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert_eq!(steps[3], "hand db back to n0");
    let checks = &report.steps[1].checks;
    assert!(
        (checks.iter()).any(|c| c.name.starts_with("a standby took db within")),
        "{checks:?}"
    );
    assert!(timeline_has(&report, "n1", "promoted"), "n1 took db");
    assert!(timeline_has(&report, "n0", "demoted"), "n0 let it go");
    c.assert_untouched();
}

#[test]
fn a_handover_drill_moves_the_role_to_each_standby_and_back() {
    let c = Bench::start("drill-handover");
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
        assert!(timeline_has(&report, n, "promoted"), "{n} promoted");
    }
    c.assert_untouched();
}

#[test]
fn a_quiet_drill_shows_probes_alone_keep_every_member_alive() {
    let c = Bench::start("drill-quiet");
    // Applications report traffic between every pair, before and during the drill.
    let stop = Arc::new(AtomicBool::new(false));
    let agents: Vec<(hale_agent::Client, Vec<String>)> =
        c.c.agents
            .iter()
            .map(|a| {
                let others = c.c.names().into_iter().filter(|o| *o != a.name).collect();
                (a.api(), others)
            })
            .collect();
    let traffic = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // Paced like an application's reports, not polling for a condition.
            while !stop.load(Ordering::Relaxed) {
                for (api, peers) in &agents {
                    let peers: Vec<&str> = peers.iter().map(String::as_str).collect();
                    let _ = call(api.traffic(&peers));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    wait_until(Duration::from_secs(5), "traffic is accepted", || {
        call(c.c.agents[0].api().traffic(&["n1"])).is_ok_and(|(status, _)| status == 202)
    });
    let (code, report, _) = c.drill(&["drill", "quiet", "--duration", "4"]);
    stop.store(true, Ordering::Relaxed);
    traffic.join().unwrap();
    assert_passed(&report);
    assert_eq!(code, Some(0));
    let checks = &report.steps[1].checks;
    assert!(
        (checks.iter()).any(|c| c.name == "no live member was suspected" && c.passed),
        "{checks:?}"
    );
    let ignored: f64 =
        c.c.agents
            .iter()
            .map(|a| {
                metric(
                    &a.metrics().unwrap(),
                    "hale_drill_traffic_ignored_total",
                    &[],
                )
            })
            .sum();
    assert!(
        ignored > 0.0,
        "traffic signals were ignored during the drill"
    );
    // Traffic counts again afterwards.
    assert!(c.no_fault(0));
    c.assert_untouched();
}

#[test]
fn a_drill_refuses_to_start_on_a_degraded_cluster_and_changes_nothing() {
    let mut c = Bench::start("drill-refused");
    c.c.agents[2].kill();
    wait_until(
        Duration::from_secs(20),
        "n0 no longer sees n2 alive",
        || {
            c.c.agents[0]
                .state_of("n2")
                .is_some_and(|s| s != MemberState::Alive)
        },
    );
    let (code, report, dir) = c.drill(&["drill", "node-freeze", "n1", "--duration", "3"]);
    assert_eq!(code, Some(3), "{report:?}");
    assert_eq!(report.outcome, Outcome::Refused);
    assert_eq!(step_names(&report).len(), 1, "only the preflight ran");
    let failed: Vec<&Check> = (report.steps[0].checks.iter())
        .filter(|c| !c.passed)
        .collect();
    assert!(
        (failed.iter()).any(|c| c.name == "every member is alive" && c.detail.contains("n2")),
        "{failed:?}"
    );
    let text = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(text.contains("REFUSED"), "{text}");
    for i in 0..2 {
        assert!(c.no_fault(i), "n{i}: something was set");
    }
}

#[test]
fn interrupting_a_drill_restores_every_fault_and_marks_the_report_aborted() {
    let c = Bench::start("drill-aborted");
    let dir = c.c.path("report-aborted");
    let out = std::fs::File::create(c.c.path("drill.out")).unwrap();
    let drill = Command::new(hale_bin())
        .args(["drill", "node-freeze", "n0", "--duration", "120", "--json"])
        .args(["--http", &c.c.agents[0].http.to_string()])
        .arg("--report")
        .arg(&dir)
        .stdout(out)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut drill = Proc(drill);
    wait_until(Duration::from_secs(20), "n0 is frozen", || {
        call(c.c.agents[0].api().drill())
            .is_ok_and(|d| d.active.first().is_some_and(|f| f.fault == Fault::Freeze))
    });
    // Mid-drill: the standby has taken over while n0 is frozen.
    wait_until(Duration::from_secs(20), "n1 holds db", || {
        db_holder(&c.c.agents[1]).is_some_and(|(h, _)| h == "n1")
    });
    kill(Pid::from_raw(drill.0.id() as i32), Signal::SIGINT).unwrap();
    let status = wait_for(Duration::from_secs(60), "the drill exits", || {
        drill.0.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(130));
    let report = read_report(&dir).unwrap();
    assert_eq!(report.outcome, Outcome::Aborted);
    let restore = report.steps.last().unwrap();
    assert_eq!(restore.name, "restore after interruption", "{report:?}");
    assert!(restore.passed(), "{restore:?}");
    // Well before the 120 s the fault was set for: nothing is left.
    c.assert_untouched();
}

#[test]
fn status_shows_members_roles_failing_checks_and_the_relay_in_text_and_json() {
    let c = Bench::start("drill-status");
    std::fs::remove_file(c.c.path("healthy-n2")).unwrap();
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
    let text = c.c.agents[0].cli_ok(&["status"]);
    eprintln!("{text}");
    assert!(
        s["cluster"]
            .as_str()
            .is_some_and(|c| c.starts_with("it-drill-status-")),
        "{s}"
    );
    for want in [
        ": 3 members, as seen by n0",
        "cluster it-drill-status-",
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
