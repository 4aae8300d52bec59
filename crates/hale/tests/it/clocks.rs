//! Clocks that jump, on real processes (libfaketime): a member restarted
//! with its wall clock behind its previous run's is never locked out, with
//! or without `state_dir`; a control-plane server whose clock is a minute
//! off still votes and serves, and both sides name the skew.

use hale_agent::view::MemberState;
use std::time::{Duration, Instant};

use hale_agent::view::AgentEvent;

use crate::support::{
    all_see, call, db_holder, during, spawn, wait_all_alive, wait_for, wait_until, Cluster,
};

/// Where Debian's libfaketime is (`apt-get install faketime`).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

macro_rules! require_faketime {
    () => {
        if !std::path::Path::new(LIBFAKETIME).exists() {
            crate::support::skip(&format!(
                "clock tests need libfaketime ({LIBFAKETIME}; apt-get install faketime)"
            ));
            return;
        }
    };
}

/// The environment that runs a process with its wall clock `offset` from
/// the true one (libfaketime's `+1h`, `-3600`, ...); its monotonic clock
/// is left alone.
fn wall_clock(offset: &str) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        ("FAKETIME".into(), offset.into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
    ]
}

/// Five agents; the last runs with its clock `before`, is killed, and
/// comes back on the same address with its clock `after`; every peer must
/// see it alive again (how long it took is printed: BENCHMARKS.md).
fn restart_with_clock(test: &str, before: Option<&str>, after: Option<&str>, state_dir: bool) {
    let mut c = Cluster::start(test, 4);
    let mut spec = c.spec("n4");
    // It comes back on the same port: one no outgoing connection can take
    // while it is down (see `Cluster::start_restartable`).
    spec.bind = std::net::SocketAddr::from(([127, 0, 0, 1], crate::support::free_port()));
    let dir = c.logs.path().join("n4-state");
    if state_dir {
        spec.env
            .push(("HALE_STATE_DIR".into(), dir.display().to_string()));
    }
    let base = spec.env.clone();
    spec.env.extend(before.map(wall_clock).unwrap_or_default());
    c.agents.push(spawn(&spec));
    c.wait_formed(Duration::from_secs(30));
    // It stays alive for one round of every peer's probe walk (2 s), so
    // that every peer has heard its generation from it directly (a peer
    // that only heard of it through gossip has nothing to compare with).
    during(Duration::from_secs(3), Duration::from_millis(250), || {
        assert!(
            all_see(&c.agents[..4], "n4", MemberState::Alive),
            "n4 stopped being alive"
        );
    });
    // It dies; the others see it dead.
    let gossip = c.agents[4].gossip;
    c.agents[4].kill();
    let others = &c.agents[..4];
    wait_until(Duration::from_secs(30), "n4 seen dead by all", || {
        all_see(others, "n4", MemberState::Dead)
    });
    // It comes back at the same address, its clock moved.
    let mut again = spec.clone();
    again.bind = gossip;
    again.env = base;
    again.env.extend(after.map(wall_clock).unwrap_or_default());
    again.log = c.logs.path().join("n4-again.log");
    let started = Instant::now();
    c.agents[4] = spawn(&again);
    wait_all_alive(
        &c.agents,
        Duration::from_secs(30),
        "every peer to see the restarted n4 alive",
    );
    eprintln!(
        "{test}: every peer saw n4 alive {:.2} s after its restart",
        started.elapsed().as_secs_f64()
    );
    // Without state_dir its generation (the wall clock at start) was
    // behind the last run's: a peer told it, and it says so.
    let raised = c.agents[4].events().is_some_and(|es| {
        es.iter()
            .any(|e| matches!(e.event, AgentEvent::GenerationRaised { .. }))
    });
    assert_eq!(raised, !state_dir, "generation-raised event on n4");
}

#[test]
fn a_member_restarted_with_its_clock_an_hour_behind_is_seen_alive_by_every_peer() {
    require_faketime!();
    restart_with_clock("clock_behind", None, Some("-1h"), false);
}

#[test]
fn a_member_corrected_after_running_an_hour_ahead_is_seen_alive_by_every_peer() {
    require_faketime!();
    restart_with_clock("clock_corrected", Some("+1h"), None, false);
}

#[test]
fn with_state_dir_a_member_restarted_an_hour_behind_is_seen_alive_by_every_peer() {
    require_faketime!();
    restart_with_clock("clock_behind_state", None, Some("-1h"), true);
}

#[test]
fn with_state_dir_a_member_corrected_after_running_an_hour_ahead_is_seen_alive_by_every_peer() {
    require_faketime!();
    restart_with_clock("clock_corrected_state", Some("+1h"), None, true);
}

#[test]
fn a_control_plane_server_a_minute_ahead_still_votes_and_its_agent_holds_the_role_and_both_sides_say_so(
) {
    require_faketime!();
    // n0 is the preferred candidate and its clock is a minute ahead of
    // the two other servers'.
    let c = Cluster::roles_with_env("clock_control", 3, |i| {
        if i == 0 {
            wall_clock("+60")
        } else {
            Vec::new()
        }
    });
    let held = wait_for(Duration::from_secs(60), "n0 to hold db", || {
        db_holder(&c.agents[1]).filter(|(h, _)| h == "n0")
    });
    assert_eq!(held.0, "n0");
    // n0 names the skew as a client of both other servers; they name it
    // as servers.
    let h = call(c.agents[0].api().health()).unwrap();
    let mut skewed: Vec<u64> = h.clock.offsets.iter().map(|o| o.server).collect();
    skewed.sort_unstable();
    assert_eq!(skewed, [2, 3], "{:?}", h.clock);
    for o in &h.clock.offsets {
        assert!((-62_000..=-58_000).contains(&o.offset_ms), "{o:?}");
    }
    wait_until(Duration::from_secs(10), "n0's clock-skew events", || {
        c.agents[0].events().is_some_and(|es| {
            es.iter()
                .filter(|e| matches!(e.event, AgentEvent::ClockSkew { .. }))
                .count()
                >= 2
        })
    });
    for a in &c.agents[1..] {
        let h = call(a.api().health()).unwrap();
        assert!(!h.clock.refused.is_empty(), "{}: {:?}", a.name, h.clock);
        let m = a.metrics().unwrap();
        assert!(m.contains("hale_control_stamps_refused_total{"), "{m}");
    }
    // n1 names n0's skew once it knows n0 as a member (the role above came
    // through the control plane, which does not wait for gossip).
    wait_until(
        Duration::from_secs(30),
        "n1's status to name n0's clock",
        || c.agents[1].cli_ok(&["status"]).contains("CLOCK n0"),
    );
    // And the control plane works: a leader every server knows.
    let leaders: Vec<Option<u64>> = c
        .agents
        .iter()
        .map(|a| {
            call(a.api().health())
                .unwrap()
                .control
                .and_then(|s| s.leader)
        })
        .collect();
    assert!(
        leaders.iter().all(|l| l.is_some() && *l == leaders[0]),
        "{leaders:?}"
    );
}

/// A watchdog whose every clock runs 5% fast (libfaketime's `x1.05`, which
/// the nemesis's clock-rate faults use) still fences at its deadline, with
/// no further word from its agent. The standard library's timed waits
/// turned the deadline into an absolute instant of the shimmed clock, which
/// the kernel waited for on its own: the watchdog fenced only when the
/// agent next wrote (nemesis seed 10026).
#[test]
fn a_watchdog_whose_clocks_run_fast_fences_at_its_deadline_without_further_orders() {
    require_faketime!();
    use std::io::Write;
    let dir = crate::support::log_dir("watchdog-fast-clock");
    let fenced = dir.path().join("fenced");
    let mut child = std::process::Command::new(crate::support::hale_bin())
        .arg("watchdog")
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME", "+0 x1.05")
        .env("FAKETIME_NO_CACHE", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let guard = hale_agent::watchdog::Order::Guard {
        h: 1,
        until_ns: hale_agent::watchdog::shared_deadline(Duration::from_secs(1)),
        hook_timeout_ms: 5_000,
        claim: dir.path().join("claim"),
        fence: vec![
            "sh".into(),
            "-c".into(),
            format!("touch {}", fenced.display()),
        ],
        env: vec![],
    };
    let stdin = child.stdin.as_mut().unwrap();
    writeln!(stdin, "{}", guard.line()).unwrap();
    stdin.flush().unwrap();
    // Its standard input stays open (the agent alive, saying nothing).
    let ok = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        fenced.exists()
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        ok,
        "the watchdog did not fence within 10 s of a 1 s deadline"
    );
}
