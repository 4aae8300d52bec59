//! Failover with hooks that take their time, as `pg_ctl promote` does, on
//! three real agents: the role must not flap, a promote hook that hangs is
//! killed with everything it started, and a lease lost during a promotion
//! kills the promote hook before the demote hook starts.
//!
//! Hook scripts log `<ns> <node> <what> <epoch> [reason]` lines, where
//! `<what>` is `promote`/`promoted` (start and end of the promote hook),
//! `demote`/`demoted` (start and end of the demote hook or watchdog fence).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use hale_agent::view::Fault;
use hale_control::{LeaseTiming, RoleState};

use crate::failover::standby_takes_over;
use crate::support::{call, during, hook_lines, wait_for, Cluster, HookLine};

fn find<'a>(l: &'a [HookLine], node: &str, what: &str, epoch: u64) -> Option<&'a HookLine> {
    l.iter()
        .find(|x| x.node == node && x.what == what && x.epoch == epoch)
}

/// Shell hooks that log their start and end and sleep in between.
fn timed_hooks(name: &str, log: &Path, promote_secs: f64, demote_secs: f64) -> (String, String) {
    let log = log.display();
    let line = |what: &str, extra: &str| {
        format!("echo $(date +%s%N) {name} {what} $HALE_EPOCH {extra} >> {log}")
    };
    (
        format!(
            "{}; sleep {promote_secs}; {}",
            line("promote", ""),
            line("promoted", "")
        ),
        format!(
            "{}; sleep {demote_secs}; {}",
            line("demote", "$HALE_REASON"),
            line("demoted", "")
        ),
    )
}

/// Every (node, epoch) holding as [promote start, demote end]: for two
/// different nodes they must not overlap.
fn assert_no_overlap(l: &[HookLine]) {
    let mut spans: Vec<(u64, u64, &str, u64)> = l
        .iter()
        .filter(|x| x.what == "promote")
        .map(|p| {
            let end = find(l, &p.node, "demoted", p.epoch).map_or(u64::MAX, |d| d.at);
            (p.at, end, p.node.as_str(), p.epoch)
        })
        .collect();
    spans.sort();
    for w in spans.windows(2) {
        let (a, b) = (w[0], w[1]);
        assert!(
            b.0 >= a.1 || a.2 == b.2,
            "{} (epoch {}) promoted while {} (epoch {}) had not finished demoting: {l:#?}",
            b.2,
            b.3,
            a.2,
            a.3
        );
    }
}

fn local_state(c: &Cluster, i: usize) -> Option<RoleState> {
    Some(c.agents[i].roles()?.local.first()?.state)
}

/// n0's promote hook: logs its start to `log`, then runs `script` (where
/// `{dir}` is the cluster's directory).
fn n0_promote(log: &Path, script: &str) -> String {
    let dir = log.parent().unwrap().display().to_string();
    let script = script.replace("{dir}", &dir);
    format!(
        "echo $(date +%s%N) n0 promote $HALE_EPOCH >> {}; {script}",
        log.display()
    )
}

#[test]
fn a_three_second_promote_hook_neither_flaps_the_role_nor_overlaps_a_handover() {
    let c = Cluster::roles_with(
        "slow-promote",
        3,
        |i, log| Some(timed_hooks(&format!("n{i}"), log, 3.0, 1.0)),
        |_| String::new(),
        |_| {},
    );
    let log = c.path("hooks.log");
    let primary = |i: usize| call(c.agents[i].api().primary("db")).ok().map(|(s, _)| s);
    // While the promote hook runs, the node says `promoting`, then
    // `holder`; load balancers see it as primary only once promoted.
    wait_for(Duration::from_secs(30), "n0 is promoting", || {
        (local_state(&c, 0)? == RoleState::Promoting).then_some(())
    });
    assert_eq!(primary(0), Some(503), "primary while promoting");
    // What the dashboard shows of the holder (its roles panel reads
    // /v1/cluster/roles), and what `hale roles` prints, say so too.
    let cluster = call(c.agents[1].api().cluster_roles()).unwrap();
    let db = cluster.roles.iter().find(|r| r.role == "db").unwrap();
    assert_eq!(db.holder_state, Some(RoleState::Promoting), "{cluster:?}");
    let text = c.agents[0].cli_ok(&["roles"]);
    assert!(text.contains("promoting"), "{text}");
    wait_for(Duration::from_secs(30), "n0 is holder", || {
        (local_state(&c, 0)? == RoleState::Holder).then_some(())
    });
    let (status, v) = call(c.agents[0].api().primary("db")).unwrap();
    assert_eq!(status, 200, "{v:?}");
    assert_eq!(v.state, RoleState::Holder);
    assert!(v.epoch.is_some(), "{v:?}");
    for i in 1..3 {
        assert_eq!(primary(i), Some(503));
        let (status, replica) = call(c.agents[i].api().replica("db")).unwrap();
        assert_eq!(status, 200, "a ready standby: {replica:?}");
    }
    let replica = call(c.agents[0].api().replica("db")).unwrap();
    assert_eq!(replica.0, 503);
    // A role this node is no candidate for: 404, with the error body.
    let err = call(
        c.agents[0]
            .api()
            .get::<serde_json::Value>("/v1/roles/nope/primary"),
    );
    assert_eq!(err.unwrap_err().status(), Some(404));
    let held = c.holder().unwrap();
    let epoch = held.1;
    assert_eq!(held.0, "n0");
    // Twelve seconds of steady state: the lease never moves (before the
    // fix it changed hands 8 times in 12 s with a 3 s promote hook).
    c.assert_holder_stays(Duration::from_secs(12), &held, "in steady state");
    let l = hook_lines(&log);
    assert_eq!(
        l.iter().filter(|x| x.what == "promote").count(),
        1,
        "one promotion only: {l:#?}"
    );
    assert!(!l.iter().any(|x| x.what == "demote"), "{l:#?}");
    // A handover with slow hooks: n0 demotes (1 s) while still holding the
    // lease, and only then may n1's promote hook start.
    c.agents[0].cli_ok(&["roles", "handover", "db", "--to", "n1"]);
    wait_for(Duration::from_secs(30), "n1 finished promoting", || {
        let l = hook_lines(&log);
        find(&l, "n1", "promoted", epoch + 1).map(|_| ())
    });
    let l = hook_lines(&log);
    let demoted = find(&l, "n0", "demoted", epoch).expect("n0 demoted");
    let promote = find(&l, "n1", "promote", epoch + 1).unwrap();
    assert!(promote.at >= demoted.at, "{l:#?}");
    assert_no_overlap(&l);
}

#[test]
fn a_promote_hook_that_hangs_is_killed_with_its_children_and_the_role_moves_on() {
    let c = Cluster::roles_with(
        "slow-hang",
        3,
        |i, log| {
            let name = format!("n{i}");
            let (mut promote, demote) = timed_hooks(&name, log, 0.0, 0.0);
            if i == 0 {
                // Starts a grandchild, notes its pid, and hangs.
                promote = n0_promote(
                    log,
                    "sleep 600 & echo $! > {dir}/grandchild-$HALE_EPOCH; wait",
                );
            }
            Some((promote, demote))
        },
        |i| if i == 0 { "hook_timeout = \"2s\"" } else { "" }.to_owned(),
        |_| {},
    );
    let log = c.path("hooks.log");
    let epoch = wait_for(Duration::from_secs(30), "n0 starts promoting", || {
        let l = hook_lines(&log);
        l.iter()
            .find(|x| x.node == "n0" && x.what == "promote")
            .map(|x| x.epoch)
    });
    let pid: i32 = wait_for(Duration::from_secs(10), "the grandchild's pid", || {
        std::fs::read_to_string(c.path(&format!("grandchild-{epoch}")))
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    // The role moves on to the next candidate.
    let (next, e2) = standby_takes_over(&c, "n0", 30);
    assert_eq!(next, "n1");
    assert!(e2 > epoch);
    // The whole process group went: the grandchild too.
    wait_for(Duration::from_secs(10), "the grandchild is gone", || {
        kill(Pid::from_raw(pid), None).is_err().then_some(())
    });
    let l = hook_lines(&log);
    let demote = find(&l, "n0", "demote", epoch).expect("n0 demoted");
    assert_eq!(demote.reason, "promote-hook-timed-out", "{l:#?}");
    assert!(find(&l, "n0", "promoted", epoch).is_none());
    let promote = find(&l, "n1", "promote", e2).unwrap();
    assert!(promote.at >= find(&l, "n0", "demoted", epoch).unwrap().at);
}

#[test]
fn a_lease_lost_during_a_promotion_kills_the_promote_hook_before_the_demote_starts() {
    let c = Cluster::roles_with(
        "slow-lost",
        3,
        |i, log| {
            let name = format!("n{i}");
            let (mut promote, demote) = timed_hooks(&name, log, 0.0, 0.5);
            if i == 0 {
                // Beats every 50 ms until killed.
                let beat = "while true; do echo $(date +%s%N) >> {dir}/beats; sleep 0.05; done";
                promote = n0_promote(log, beat);
            }
            Some((promote, demote))
        },
        |i| if i == 0 { "hook_timeout = \"60s\"" } else { "" }.to_owned(),
        |_| {},
    );
    let log = c.path("hooks.log");
    let beats = c.path("beats");
    let epoch = wait_for(Duration::from_secs(30), "n0 is promoting", || {
        let l = hook_lines(&log);
        let e = l
            .iter()
            .find(|x| x.node == "n0" && x.what == "promote")?
            .epoch;
        beats.exists().then_some(e)
    });
    // n0 loses the control plane (a drill freeze: every request fails):
    // its lease runs out while the promote hook still runs. It stays cut
    // off until a standby holds db: the standby's grant needs a control
    // plane that commits, and one that stalls past a fixed freeze (every
    // server's `fsync` stopped for 6 s on a loaded host) gives the role
    // back to n0, the best candidate, as soon as it thaws.
    call(
        c.agents[0]
            .api()
            .set_fault(Fault::Freeze, Duration::from_secs(60)),
    )
    .unwrap();
    let (next, e2) = standby_takes_over(&c, "n0", 30);
    call(c.agents[0].api().restore(Some(Fault::Freeze))).unwrap();
    let l = wait_for(Duration::from_secs(10), "n0 demoted", || {
        let l = hook_lines(&log);
        find(&l, "n0", "demote", epoch).is_some().then_some(l)
    });
    let demote = find(&l, "n0", "demote", epoch).unwrap();
    let last_beat: u64 = std::fs::read_to_string(&beats)
        .unwrap()
        .lines()
        .filter_map(|x| x.trim().parse().ok())
        .max()
        .unwrap();
    assert!(
        last_beat < demote.at,
        "the promote hook still ran {} ms after the demote started",
        (last_beat - demote.at) / 1_000_000
    );
    // It stays dead.
    let n = std::fs::read_to_string(&beats).unwrap().lines().count();
    during(Duration::from_secs(1), Duration::from_millis(200), || {
        assert_eq!(std::fs::read_to_string(&beats).unwrap().lines().count(), n);
    });
    // The next holder started only after n0 began to demote.
    let promote = wait_for(Duration::from_secs(10), "the next holder's promote", || {
        find(&hook_lines(&log), &next, "promote", e2).map(|x| x.at)
    });
    assert!(promote > demote.at);
    assert_eq!(
        hook_lines(&log)
            .iter()
            .filter(|x| x.node == "n0" && x.what == "demote" && x.epoch == epoch)
            .count(),
        1,
        "one demote for the lost lease"
    );
}

/// Busy loops on both cores (a loaded host, as in CI), killed by process id
/// when dropped.
struct Busy(Vec<std::process::Child>);

impl Busy {
    fn start() -> Busy {
        Busy(
            (0..2)
                .map(|_| {
                    std::process::Command::new("nice")
                        .args(["-n", "5", "sh", "-c", "while :; do :; done"])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn losing_the_control_plane_leader_costs_a_holder_on_another_host_nothing_on_a_busy_host() {
    let (mut c, log) = n0_holding_with_3_s_promotes("leader-loss");
    let _busy = Busy::start();
    for fault in ["kill", "freeze"] {
        let leader = wait_for(Duration::from_secs(20), "a control-plane leader", || {
            c.agents
                .iter()
                .filter(|a| a.running())
                .find_map(|a| a.roles()?.leader)
        });
        let l = (leader - 1) as usize;
        let (mut holder, _) = c.holder().expect("db is held");
        if holder == format!("n{l}") {
            // The leader's host holds the role: hand it to another node
            // first (planned), so that the fault hits the leader alone.
            let to = format!("n{}", (l + 1) % 3);
            c.agents[l].cli_ok(&["roles", "handover", "db", "--to", &to]);
            wait_for(Duration::from_secs(30), "the handover is done", || {
                let i = (l + 1) % 3;
                (local_state(&c, i)? == RoleState::Holder).then_some(())
            });
            holder = to;
        }
        let before = c.holder().expect("db is held");
        let since = hook_lines(&log).len();
        match fault {
            "kill" => {
                c.agents[l].kill();
                std::thread::sleep(Duration::from_secs(3));
                let a = &c.agents[l];
                let name = a.name.clone();
                let config = c.path(&format!("{name}.toml"));
                c.agents[l] = crate::support::spawn_with_config(
                    c.logs.path(),
                    &name,
                    &config,
                    a.gossip,
                    a.http,
                    None,
                    &[],
                );
            }
            _ => {
                c.signal(l, Signal::SIGSTOP);
                std::thread::sleep(Duration::from_secs(5));
                c.signal(l, Signal::SIGCONT);
            }
        }
        // Whatever the election did, the holder on the other host kept
        // renewing: the same holding, and no hook ran anywhere.
        during(Duration::from_secs(4), Duration::from_millis(250), || {
            if let Some(now) = c.holder() {
                assert_eq!(now, before, "{fault}: db changed holder");
            }
        });
        let after = hook_lines(&log);
        assert!(
            after.len() == since,
            "{fault} of the leader n{l} ran hooks (holder {holder}): {:#?}",
            &after[since..]
        );
    }
}

/// The highest Raft term among the agents that answer.
fn term(c: &Cluster) -> u64 {
    c.agents
        .iter()
        .filter_map(|a| Some(call(a.api().health()).ok()?.control?.term))
        .max()
        .unwrap_or(0)
}

/// The highest index applied to a lease table among the agents that answer.
fn applied(c: &Cluster) -> u64 {
    c.agents
        .iter()
        .filter_map(|a| call(a.api().health()).ok()?.control?.applied_index)
        .max()
        .unwrap_or(0)
}

/// A disk that takes 150 ms over every write, then one that stops for
/// 0.8 s, on every server at once. The defaults are what the suite runs;
/// BENCHMARKS.md's sweep sets `HALE_TEST_SLOW_MS` and `HALE_TEST_STALL_MS`.
///
/// Every disk fault here is a drill, and the servers keep their data on a
/// tmpfs (as every test does, [`crate::support::log_dir`]): a loaded
/// host's own `fsync` stalls (hundreds of milliseconds to seconds while
/// the suite runs beside it) would add to the drill's, past what the lease
/// timing rides out, and the test would measure the host. Each stall starts from a holder whose lease has its
/// full ride-through left ([`renewing_promptly`]), which is what
/// [`LeaseTiming::ride_through`] assumes.
#[test]
fn a_control_plane_disk_slow_or_stalled_on_every_server_keeps_committing_and_costs_the_holder_nothing(
) {
    let (c, log) = n0_holding_with_3_s_promotes("slow-disk");
    let before = c.holder().expect("db is held");
    let since = hook_lines(&log).len();
    // Every durable write of every server's log takes longer than the one
    // heartbeat openraft 0.9 gives an append.
    let ms = |v: u64| Duration::from_millis(v);
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let slow = ms(env("HALE_TEST_SLOW_MS", 150));
    let stall = Duration::from_secs(6);
    for a in &c.agents {
        call(a.api().slow_disk(stall, slow)).unwrap();
    }
    let start = applied(&c);
    during(stall - Duration::from_secs(1), ms(250), || {
        still_held(&c, &before, "on a slow disk");
    });
    let end = applied(&c);
    // Renewals kept committing (the holder owes one about every 250 ms).
    assert!(
        end >= start + 5,
        "the control plane stopped committing on a slow disk: index {start} -> {end}"
    );
    wait_for(Duration::from_secs(5), "slow-disk reverts", || {
        c.agents
            .iter()
            .all(|a| call(a.api().drill()).is_ok_and(|d| d.active.is_empty()))
            .then_some(())
    });
    // Then every disk stops answering at once, for a moment. Not before
    // the writes queued on the slow disks are through: a renewal still
    // waiting for one would be lost in the stall with the leader that
    // took it, and the stall would start a slow commit (0.4 s on a loaded
    // host) after the last renewal that got through.
    renewing_promptly(&c, "n0 renews promptly after the slow disk");
    let stall = ms(env("HALE_TEST_STALL_MS", 800));
    for a in &c.agents {
        call(a.api().set_fault(Fault::DiskStall, stall)).unwrap();
    }
    during(Duration::from_secs(4), ms(250), || {
        still_held(&c, &before, "after a disk stall");
    });
    // And the leader's disk alone stops for longer than a lease: the
    // others elect a leader among themselves and the holder renews there.
    let leader = wait_for(Duration::from_secs(20), "a control-plane leader", || {
        c.agents.iter().find_map(|a| a.roles()?.leader)
    });
    let l = (leader - 1) as usize;
    let term_before = term(&c);
    renewing_promptly(&c, "n0 renews promptly before the leader's stall");
    call(c.agents[l].api().set_fault(Fault::DiskStall, ms(3000))).unwrap();
    during(Duration::from_secs(5), ms(250), || {
        still_held(&c, &before, &format!("when n{l}'s disk stalled"));
    });
    assert!(
        term(&c) > term_before,
        "the stalled leader n{l} was never replaced"
    );
    let after = hook_lines(&log);
    assert!(
        after.len() == since,
        "a slow disk ran hooks: {:#?}",
        &after[since..]
    );
}

/// Asserts that `db` is still held as `before` says, in the table (when a
/// server answers) and by n0 itself, at the same epoch: a lease n0 lost
/// shows there at once, in the table only at the next grant, seconds later.
fn still_held(c: &Cluster, before: &(String, u64), when: &str) {
    if let Some(now) = c.holder() {
        assert_eq!(&now, before, "db changed holder {when}");
    }
    if let Ok((_, v)) = call(c.agents[0].api().primary("db")) {
        let held = (v.state, v.epoch);
        assert_eq!(
            held,
            (RoleState::Holder, Some(before.1)),
            "n0 lost db {when}"
        );
    }
}

/// Waits until n0's lease has its full ride-through left: its last renewal
/// that got through was sent at most `renew_every` ago, as the lease
/// timing assumes of a holder when the control plane stops answering
/// ([`LeaseTiming::ride_through`]). A deadline, not a delay: steady, it
/// holds within a renewal or two.
fn renewing_promptly(c: &Cluster, what: &str) {
    let ride_through = LeaseTiming::default().ride_through();
    wait_for(Duration::from_secs(10), what, || {
        let (_, v) = call(c.agents[0].api().primary("db")).ok()?;
        (Duration::from_millis(v.lease_left_ms?) >= ride_through).then_some(())
    });
}

/// Three agents whose promote hooks take 3 s, once `n0` holds `db`; and
/// their hook log.
fn n0_holding_with_3_s_promotes(test: &str) -> (Cluster, PathBuf) {
    let c = Cluster::roles_with(
        test,
        3,
        |i, log| Some(timed_hooks(&format!("n{i}"), log, 3.0, 0.0)),
        |_| String::new(),
        |_| {},
    );
    let log = c.path("hooks.log");
    wait_for(Duration::from_secs(30), "n0 is holder", || {
        (local_state(&c, 0)? == RoleState::Holder).then_some(())
    });
    (c, log)
}
