//! PostgreSQL under hale (`[role.postgres]`), with real PostgreSQL 15 and
//! three agents. Each host has its own loopback address (127.0.0.2, .3,
//! .4): its agent, and its PostgreSQL on the port every host shares. A
//! host dies as a whole: its agent, the agent's watchdog and hooks, and its
//! PostgreSQL are frozen together, then killed.
//!
//! Needs root (PostgreSQL runs as the `postgres` user); skipped, with a
//! printed reason, when not root; fails, saying what to install, when
//! PostgreSQL 15 is missing.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hale_agent::view::AgentEvent;
use hale_agent::Key;
use hale_control::RoleState;
use hale_postgres::Standing;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::{descendants, free_port, hale_bin, log_dir, spawn_with_config, wait_for};
use crate::support::{wait_until, AgentProc};

/// Disks short of room under three agents.
mod disk;
/// Strict durability under three agents.
mod strict;
/// A role's tags under three agents.
mod tags;

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// One host: its address, its agent's ports and its PostgreSQL.
struct Host {
    name: &'static str,
    ip: Ipv4Addr,
    gossip: SocketAddr,
    http: SocketAddr,
    control: SocketAddr,
    data: PathBuf,
    sock: PathBuf,
    config: PathBuf,
    agent: Option<AgentProc>,
}

/// The three hosts, their directory and PostgreSQL's port; every server
/// is killed on drop, whatever happened.
struct Lab {
    hosts: Vec<Host>,
    port: u16,
    dir: PathBuf,
    /// Agents started so far (each one's log is `<host>-<n>.log`).
    started: usize,
    /// The hosts' own small disks ([`lab_on_disks`]), unmounted once
    /// their servers are killed.
    mounts: Vec<PathBuf>,
    // Dropped after the servers are killed: kept when the test fails.
    _logs: crate::support::LogDir,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for h in &mut self.hosts {
            h.agent.take();
            if let Some(pid) = postmaster(&h.data) {
                kill_tree(pid);
            }
        }
        for m in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}

fn skip_reason() -> Option<&'static str> {
    (!nix::unistd::Uid::effective().is_root()).then_some("not root")
}

/// Runs a PostgreSQL program as `postgres`; its standard output, or a
/// panic with what it said.
fn pg(tool: &str, args: &[&str]) -> String {
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(Path::new(BIN).join(tool))
        .args(args)
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `sql` on host `h`'s server, as `postgres`: the rows, or why not.
fn psql(lab: &Lab, h: usize, sql: &str) -> Result<String, String> {
    let (sock, port) = (
        lab.hosts[h].sock.display().to_string(),
        lab.port.to_string(),
    );
    let out = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(Path::new(BIN).join("psql"))
        .args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1"])
        .args(["-h", &sock, "-p", &port, "-d", "postgres", "-c", sql])
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn postmaster(data: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// SIGKILLs `pid` and every process below it.
fn kill_tree(pid: i32) {
    let all: Vec<i32> = std::iter::once(pid).chain(descendants(pid)).collect();
    for p in &all {
        let _ = kill(Pid::from_raw(*p), Signal::SIGSTOP);
    }
    for p in all {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
}

/// The settings every server shares, then host `ip`'s own.
/// Dynamic shared memory lives in the data directory (`mmap`): a killed
/// server's POSIX segments were left in /dev/shm, hundreds a run.
fn server_conf(port: u16, ip: Ipv4Addr, sock: &Path) -> String {
    format!(
        "\n# hale tests\nport = {port}\nlisten_addresses = '{ip}'\n\
         unix_socket_directories = '{}'\nwal_level = replica\nmax_wal_senders = 10\n\
         max_replication_slots = 10\nhot_standby = on\nwal_log_hints = on\n\
         shared_buffers = 16MB\nmax_connections = 30\nfsync = off\n\
         wal_retrieve_retry_interval = '500ms'\nwal_keep_size = '256MB'\n\
         dynamic_shared_memory_type = mmap\n",
        sock.display()
    )
}

/// Unix sockets trusted (the test's own psql); every TCP connection, hale's
/// sessions to the holder, pg_rewind, pg_basebackup and streaming, with a
/// SCRAM password (`PASSWORD`, in each agent's `password_file`).
const HBA: &str = "local all all trust\nlocal replication all trust\n\
                   host all all 127.0.0.0/8 scram-sha-256\n\
                   host replication all 127.0.0.0/8 scram-sha-256\n";

/// The password of `postgres`.
const PASSWORD: &str = "hale-it-S3cret";

/// Host `a` with a primary from `initdb`; hosts `b` and `c` with a data
/// directory holding only their own configuration (hale clones them).
fn lab(test: &str) -> Lab {
    lab_with(test, None)
}

/// [`lab`] with each host's data directory on a disk of its own: a tmpfs
/// of `mb` megabytes (`<dir>/pg/disk-<host>`), so that a test can fill one
/// host's disk and not the others'.
fn lab_on_disks(test: &str, mb: u64) -> Lab {
    lab_with(test, Some(mb))
}

fn lab_with(test: &str, disk_mb: Option<u64>) -> Lab {
    for tool in [
        "initdb",
        "pg_ctl",
        "postgres",
        "pg_rewind",
        "pg_basebackup",
        "psql",
    ] {
        let path = Path::new(BIN).join(tool);
        assert!(
            path.is_file(),
            "{} is missing: this test needs PostgreSQL 15 (apt-get install postgresql-15)",
            path.display()
        );
    }
    let logs = log_dir(test);
    let dir = logs.path().to_owned();
    let pgdir = dir.join("pg");
    std::fs::create_dir_all(&pgdir).unwrap();
    let chown = |p: &Path| {
        let ok = Command::new("chown")
            .arg("postgres:postgres")
            .arg(p)
            .status()
            .unwrap();
        assert!(ok.success());
    };
    // PostgreSQL (as `postgres`) must reach its directories.
    let mut up = Some(pgdir.as_path());
    while let Some(p) = up {
        if p == Path::new("/") {
            break;
        }
        let mode = std::fs::metadata(p).unwrap().permissions();
        if std::os::unix::fs::PermissionsExt::mode(&mode) & 0o005 != 0o005 {
            std::fs::set_permissions(
                p,
                std::os::unix::fs::PermissionsExt::from_mode(
                    std::os::unix::fs::PermissionsExt::mode(&mode) | 0o755,
                ),
            )
            .unwrap();
        }
        up = p.parent();
    }
    chown(&pgdir);
    let port = free_port();
    let names = ["a", "b", "c"];
    let mut mounts = Vec::new();
    let mut data_dir = |name: &str| match disk_mb {
        None => pgdir.join(name),
        Some(mb) => {
            let disk = pgdir.join(format!("disk-{name}"));
            std::fs::create_dir_all(&disk).unwrap();
            let ok = Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={mb}m,mode=0755"),
                    "tmpfs",
                ])
                .arg(&disk)
                .status()
                .unwrap();
            assert!(ok.success(), "mount a tmpfs on {}", disk.display());
            mounts.push(disk.clone());
            chown(&disk);
            disk.join("data")
        }
    };
    let data: Vec<PathBuf> = names.iter().map(|n| data_dir(n)).collect();
    let hosts: Vec<Host> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let ip = Ipv4Addr::new(127, 0, 0, 2 + i as u8);
            let at = |p: u16| SocketAddr::from((ip, p));
            let sock = pgdir.join(format!("sock-{name}"));
            std::fs::create_dir_all(&sock).unwrap();
            chown(&sock);
            Host {
                name,
                ip,
                gossip: at(free_port()),
                http: at(free_port()),
                control: at(free_port()),
                data: data[i].clone(),
                sock,
                config: dir.join(format!("{name}.toml")),
                agent: None,
            }
        })
        .collect();
    let lab = Lab {
        hosts,
        port,
        dir,
        started: 0,
        mounts,
        _logs: logs,
    };
    let a = &lab.hosts[0];
    let data = a.data.display().to_string();
    // 0600, owned by postgres: initdb reads it, and hale's password_file.
    let password = pgdir.join("password");
    std::fs::write(&password, format!("{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(
        &password,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    chown(&password);
    let pwfile = format!("--pwfile={}", password.display());
    pg(
        "initdb",
        &[
            "-N",
            "-D",
            &data,
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            &pwfile,
        ],
    );
    let defaults = std::fs::read_to_string(a.data.join("postgresql.conf")).unwrap();
    for h in &lab.hosts {
        if h.name != "a" {
            std::fs::create_dir_all(&h.data).unwrap();
            std::fs::set_permissions(&h.data, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .unwrap();
        }
        let conf = defaults.clone() + &server_conf(port, h.ip, &h.sock);
        std::fs::write(h.data.join("postgresql.conf"), conf).unwrap();
        std::fs::write(h.data.join("pg_hba.conf"), HBA).unwrap();
        let ok = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&h.data)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let log = lab.dir.join("pg/a.log").display().to_string();
    pg(
        "pg_ctl",
        &["start", "-D", &data, "-l", &log, "-w", "-t", "30"],
    );
    psql(
        &lab,
        0,
        "CREATE TABLE logins (id bigserial PRIMARY KEY, pad text NOT NULL)",
    )
    .unwrap();
    lab
}

/// Writes host `i`'s agent configuration: a control-plane server (a
/// bootstraps), a candidate for role `db` backed by its PostgreSQL.
fn write_config(lab: &Lab, i: usize, key: &str) {
    write_config_with(lab, i, key, "");
}

/// [`write_config`], `extra` lines appended to `[role.postgres]`.
fn write_config_with(lab: &Lab, i: usize, key: &str, extra: &str) {
    write_config_tagged(lab, i, key, "", extra);
}

/// [`write_config_with`], `role` lines added to `[[role]]` (its tags, say).
fn write_config_tagged(lab: &Lab, i: usize, key: &str, role: &str, extra: &str) {
    let h = &lab.hosts[i];
    let servers: Vec<String> = lab
        .hosts
        .iter()
        .enumerate()
        .map(|(j, h)| format!("\"{}={}\"", j + 1, h.control))
        .collect();
    let seeds: Vec<String> = lab
        .hosts
        .iter()
        .filter(|o| o.name != h.name)
        .map(|o| format!("\"{}\"", o.gossip))
        .collect();
    let cfg = format!(
        r#"
[agent]
name = "{name}"
bind = "{gossip}"
http = "{http}"
seeds = [{seeds}]
watchdog = "{hale}"
[cluster]
name = "pg-{pid}"
keys = ["{key}"]
[control]
id = {id}
bind = "{control}"
servers = [{servers}]
bootstrap = {bootstrap}
data_dir = "{dir}/control-{name}"
[[service]]
name = "postgres"
essential = true
[[service.check]]
command = ["{bin}/pg_isready", "-q", "-h", "{sock}", "-p", "{port}", "-t", "1"]
interval = "300ms"
timeout = "2s"
[[role]]
name = "db"
service = "postgres"
priority = {priority}
hook_timeout = "40s"
fail_after = "2s"
{role}
[role.postgres]
data_dir = "{data}"
bin_dir = "{bin}"
host = "{sock}"
port = {port}
max_lag_on_failover = 1048576
rejoin_timeout = "60s"
start_timeout = "30s"
log_file = "{dir}/pg/{name}.log"
password_file = "{dir}/pg/password"
{extra}
"#,
        name = h.name,
        gossip = h.gossip,
        http = h.http,
        seeds = seeds.join(", "),
        hale = hale_bin().display(),
        pid = std::process::id(),
        id = i + 1,
        control = h.control,
        servers = servers.join(", "),
        bootstrap = i == 0,
        dir = lab.dir.display(),
        bin = BIN,
        sock = h.sock.display(),
        port = lab.port,
        priority = [100, 50, 10][i],
        data = h.data.display(),
    );
    std::fs::write(&h.config, cfg).unwrap();
}

fn start_agent(lab: &mut Lab, i: usize) {
    lab.started += 1;
    let h = &lab.hosts[i];
    let name = format!("{}-{}", h.name, lab.started);
    let agent = spawn_with_config(&lab.dir, &name, &h.config, h.gossip, h.http, None, &[]);
    lab.hosts[i].agent = Some(agent);
}

/// Freezes (SIGSTOP) or thaws (SIGCONT) host `i`'s PostgreSQL: its
/// postmaster and every backend.
fn signal_server(lab: &Lab, i: usize, sig: Signal) {
    let pid = postmaster(&lab.hosts[i].data).expect("the server runs");
    for p in std::iter::once(pid).chain(descendants(pid)) {
        let _ = kill(Pid::from_raw(p), sig);
    }
}

/// Host `i` dies: its agent, everything the agent started and its
/// PostgreSQL, frozen together, then killed.
fn kill_host(lab: &mut Lab, i: usize) {
    let h = &mut lab.hosts[i];
    let mut pids = Vec::new();
    if let Some(a) = &h.agent {
        let pid = a.pid().as_raw();
        pids.push(pid);
        pids.extend(descendants(pid));
    }
    if let Some(pid) = postmaster(&h.data) {
        pids.push(pid);
        pids.extend(descendants(pid));
    }
    for p in &pids {
        let _ = kill(Pid::from_raw(*p), Signal::SIGSTOP);
    }
    for p in &pids {
        let _ = kill(Pid::from_raw(*p), Signal::SIGKILL);
    }
    if let Some(mut a) = h.agent.take() {
        a.kill();
    }
}

fn agent(lab: &Lab, i: usize) -> &AgentProc {
    lab.hosts[i].agent.as_ref().expect("the host is up")
}

/// Host `i`'s view of role `db`: its state and its PostgreSQL view.
fn db(lab: &Lab, i: usize) -> Option<hale_agent::view::RoleView> {
    let roles = agent(lab, i).roles()?;
    roles.local.into_iter().find(|r| r.role == "db")
}

/// The holder of `db` as host `i`'s control-plane server's table says.
fn holder(lab: &Lab, i: usize) -> Option<String> {
    let roles = agent(lab, i).roles()?;
    roles.leases?.get("db")?.holder.clone()
}

/// Whether host `i`'s server streams from host `from`'s (its address).
fn streams_from(lab: &Lab, i: usize, from: usize) -> bool {
    let ip = lab.hosts[from].ip.to_string();
    db(lab, i)
        .and_then(|r| r.postgres)
        .is_some_and(|pg| {
            !pg.fenced
                && matches!(pg.standing, Some(Standing::Replica { streaming: true, upstream: Some(u), .. }) if u == ip)
        })
}

/// Starts the three agents of a new cluster and waits until it is formed:
/// a (initdb'd, running as primary) takes the role; b and c, empty but for
/// their own settings, are cloned from it and stream; once a's renewals
/// have named them in the lease table, a waits for one flush of either
/// (quorum commit).
fn formed(lab: &mut Lab) {
    for i in 0..3 {
        start_agent(lab, i);
    }
    let minute = Duration::from_secs(60);
    wait_until(minute, "a holding db", || {
        db(lab, 0).is_some_and(|r| r.state == RoleState::Holder)
    });
    wait_until(Duration::from_secs(90), "b and c streaming from a", || {
        streams_from(lab, 1, 0) && streams_from(lab, 2, 0)
    });
    wait_until(minute, "a's quorum of b and c", || {
        psql(lab, 0, "SHOW synchronous_standby_names").is_ok_and(|v| v == r#"ANY 1 ("b", "c")"#)
    });
}

fn kinds(lab: &Lab, i: usize) -> Vec<String> {
    agent(lab, i)
        .events()
        .unwrap_or_default()
        .into_iter()
        .map(|e| e.event.kind())
        .collect()
}

fn position(lab: &Lab, i: usize) -> Option<u64> {
    match db(lab, i)?.postgres?.standing? {
        Standing::Primary { lsn, .. } => Some(lsn),
        Standing::Replica { replay_lsn, .. } => Some(replay_lsn),
        Standing::Down => None,
    }
}

#[test]
fn a_failed_primary_comes_back_as_a_replica_and_a_lagging_standby_is_never_promoted() {
    if let Some(why) = skip_reason() {
        crate::support::skip(&format!("PostgreSQL under hale needs root: {why}"));
        return;
    }
    let mut lab = lab("postgres-rejoin");
    let key = Key::generate().to_base64();
    for i in 0..3 {
        write_config(&lab, i, &key);
    }
    formed(&mut lab);
    let minute = Duration::from_secs(60);
    // Load balancers' /sync and /async: b and c are synchronous standbys, a
    // (the primary) neither.
    let sync = |i: usize, synchronous: bool| {
        crate::support::call(agent(&lab, i).api().synchronous("db", synchronous))
            .unwrap()
            .0
    };
    wait_until(minute, "b and c answering /sync", || {
        sync(1, true) == 200 && sync(2, true) == 200
    });
    assert_eq!(
        (sync(1, false), sync(0, true), sync(0, false)),
        (503, 503, 503)
    );
    for i in [1, 2] {
        let k = kinds(&lab, i);
        assert!(
            k.contains(&"recloned".to_owned()) && k.contains(&"streaming".to_owned()),
            "host {i} was cloned: {k:?}"
        );
    }
    psql(
        &lab,
        0,
        "INSERT INTO logins (pad) SELECT 'before' FROM generate_series(1, 100)",
    )
    .unwrap();

    // c falls behind: its WAL receiver stopped (SIGSTOP: it still shows as
    // streaming) while a writes some 8 MB of WAL. (A paused replay, or a
    // replay delay, holds back only the replay: the copy is there, received
    // and flushed, and a promotion would apply it at once: a copy is the
    // furthest of what a standby received and replayed.)
    let receiver: i32 = psql(&lab, 2, "SELECT pid FROM pg_stat_wal_receiver")
        .unwrap()
        .parse()
        .unwrap();
    let _ = kill(Pid::from_raw(receiver), Signal::SIGSTOP);
    psql(
        &lab,
        0,
        "INSERT INTO logins (pad) SELECT md5(random()::text) FROM generate_series(1, 60000)",
    )
    .unwrap();
    let target: u64 = psql(
        &lab,
        0,
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
    )
    .unwrap()
    .parse()
    .unwrap();
    wait_until(minute, "b replaying a's writes, c not", || {
        position(&lab, 1).is_some_and(|p| p >= target)
            && position(&lab, 2).is_some_and(|p| p + (2 << 20) < target)
    });
    // a's renewals carry its position to the control plane.
    let renewals = db(&lab, 0).unwrap().renewals;
    wait_until(minute, "a renewing its mark", || {
        db(&lab, 0).is_some_and(|r| r.renewals >= renewals + 4)
    });
    // Load balancers' checks: b takes reads within 1 MB of the primary, c
    // only reads that may be stale; a, the primary, is no replica.
    let lb = |i: usize, within: bool| {
        let api = agent(&lab, i).api();
        let (status, view) = if within {
            crate::support::call(api.replica_within("db", 1 << 20)).unwrap()
        } else {
            crate::support::call(api.read_only("db")).unwrap()
        };
        (status, view.lag)
    };
    wait_until(minute, "the replica checks seeing a's mark", || {
        lb(1, true).0 == 200 && lb(2, true).0 == 503
    });
    assert!(
        lb(2, true).1.is_some_and(|l| l > (2 << 20)),
        "{:?}",
        lb(2, true)
    );
    assert_eq!(
        (lb(0, true).0, lb(0, false).0, lb(2, false).0),
        (503, 200, 200)
    );

    // a's host dies and b's database hangs: c, far behind, must not take
    // the role (b's agent, a control-plane server, lives on).
    signal_server(&lab, 1, Signal::SIGSTOP);
    kill_host(&mut lab, 0);
    wait_until(minute, "c refused db for its lag", || {
        db(&lab, 2).is_some_and(|r| r.lagging.is_some_and(|l| l.lag > (2 << 20)))
    });
    let refused = agent(&lab, 2)
        .events()
        .unwrap_or_default()
        .into_iter()
        .find_map(|e| match e.event {
            AgentEvent::NotEligible { role, lag, max_lag } => Some((role, lag, max_lag)),
            _ => None,
        });
    assert!(
        matches!(&refused, Some((r, lag, 1048576)) if r == "db" && *lag > (2 << 20)),
        "{refused:?}"
    );
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let r = db(&lab, 2).unwrap();
        assert!(
            matches!(r.state, RoleState::Standby | RoleState::Ineligible),
            "a lagging standby never takes the role: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // b's database recovers: b, level with a's last mark, takes the role.
    signal_server(&lab, 1, Signal::SIGCONT);
    wait_until(minute, "b holding db", || {
        db(&lab, 1).is_some_and(|r| r.state == RoleState::Holder)
    });
    assert_eq!(holder(&lab, 1).as_deref(), Some("b"));
    assert!(
        !kinds(&lab, 2).contains(&"promoting".to_owned()),
        "c was never granted the role"
    );
    psql(
        &lab,
        1,
        "INSERT INTO logins (pad) VALUES ('after-failover')",
    )
    .unwrap();

    // a's host comes back: its server, a primary that went down with the
    // host, rejoins b by itself and streams what b wrote since.
    start_agent(&mut lab, 0);
    wait_until(Duration::from_secs(90), "a streaming from b", || {
        streams_from(&lab, 0, 1)
    });
    let k = kinds(&lab, 0);
    let rejoining = k.iter().position(|x| x == "rejoining");
    let streaming = k.iter().position(|x| x == "streaming");
    assert!(
        rejoining.is_some() && streaming > rejoining,
        "a's rejoin, step by step: {k:?}"
    );
    let seen = wait_for(minute, "b's write on a", || {
        psql(
            &lab,
            0,
            "SELECT count(*) FROM logins WHERE pad = 'after-failover'",
        )
        .ok()
        .filter(|n| n == "1")
    });
    assert_eq!(seen, "1");
    let refused = psql(&lab, 0, "INSERT INTO logins (pad) VALUES ('on a replica')");
    assert!(
        refused.as_ref().is_err_and(|e| e.contains("read-only")),
        "a rejoined server takes no writes: {refused:?}"
    );
    assert_eq!(holder(&lab, 0).as_deref(), Some("b"));

    // A switchover asked of a member that does not hold the role: to c,
    // whose receiver was stopped far behind, it is refused with the
    // reason and nothing changes.
    let refused = crate::support::call(agent(&lab, 0).api().switchover("db", Some("c"), None));
    let message = match &refused {
        Err(hale_agent::client::ClientError::Status {
            status: 409,
            message,
            ..
        }) => message.clone(),
        other => panic!("a switchover to a lagging copy is refused: {other:?}"),
    };
    // (c, its receiver stopped, lags b; whether its receiver has found b
    // yet, or its rejoin is still under way, it is not a copy to switch
    // over to.)
    assert!(
        message.contains("c's copy lags")
            || message.contains("c's PostgreSQL does not stream")
            || message.contains("c's PostgreSQL is fenced: it is rejoining"),
        "{message}"
    );
    let lease = agent(&lab, 0).roles().unwrap().leases.unwrap()["db"].clone();
    assert_eq!(
        (lease.holder.as_deref(), lease.switchover),
        (Some("b"), None)
    );

    // To a, streaming from b: b waits for a to catch up, steps down, and a
    // is promoted with every row b committed, the last one just before.
    psql(
        &lab,
        1,
        "INSERT INTO logins (pad) VALUES ('before-switchover')",
    )
    .unwrap();
    let ordered = crate::support::call(agent(&lab, 2).api().switchover("db", Some("a"), None))
        .expect("a switchover to a streaming replica is ordered");
    assert_eq!(
        (ordered.from.as_str(), ordered.to.as_deref()),
        ("b", Some("a"))
    );
    wait_until(minute, "a holding db after the switchover", || {
        db(&lab, 0).is_some_and(|r| r.state == RoleState::Holder)
    });
    let k = kinds(&lab, 1);
    assert!(
        k.contains(&"switchover".to_owned()),
        "b says it hands over: {k:?}"
    );
    assert_eq!(
        psql(
            &lab,
            0,
            "SELECT count(*) FROM logins WHERE pad IN ('after-failover', 'before-switchover')"
        )
        .unwrap(),
        "2",
        "nothing committed on b is lost"
    );
    psql(
        &lab,
        0,
        "INSERT INTO logins (pad) VALUES ('after-switchover')",
    )
    .unwrap();
    wait_until(Duration::from_secs(90), "b streaming from a", || {
        streams_from(&lab, 1, 0)
    });
    assert!(
        !kinds(&lab, 2).contains(&"promoting".to_owned()),
        "c, lagging, was never granted the role"
    );
    // Every connection above used the password; none of the agents' logs,
    // settings or the servers' logs and configuration holds it.
    let mut dirs = vec![lab.dir.clone()];
    let mut looked = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = path.to_string_lossy().into_owned();
            if path.is_dir() {
                dirs.push(path);
            } else if [".log", ".conf", ".toml", ".json"]
                .iter()
                .any(|ext| name.ends_with(ext))
            {
                let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
                assert!(!text.contains(PASSWORD), "the password in {name}");
                looked += 1;
            }
        }
    }
    assert!(looked > 6, "{looked} files looked at");
}
