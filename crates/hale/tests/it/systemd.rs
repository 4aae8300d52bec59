//! hale under a real systemd: a Debian bookworm root (`dist/systemd-root.sh`,
//! built once into `target/systemd-root`) booted with `systemd-nspawn -b`
//! in a network namespace of its own (loopback only), with the `hale`
//! under test bind-mounted as `/usr/bin/hale` and the unit we ship
//! (`dist/hale.service`, with `dist/hale-postgres.conf` as its drop-in)
//! installed as the Debian package installs it.
//!
//! Three agents, one container: `a` runs as `hale.service` (the holder,
//! and the only host of PostgreSQL role `pg`, a real PostgreSQL 15 that hale
//! starts); `b` and `c` run as transient units (`systemd-run`), candidates
//! for role `db` whose hooks log to one file. The test runs the README's
//! procedure for restarting the holder's agent (pause, `systemctl restart
//! hale`, resume: the postmaster's pid unchanged, no role moved, no hook
//! run), then kills `a`'s main process with SIGSEGV while it holds: its
//! watchdog must fence `db` before `b` or `c` is promoted.
//!
//! Root only; skipped without root, `systemd-nspawn` or `debootstrap` (CI
//! installs them: `.ci/run`). `HALE_IT_SYSTEMD_UNIT=FILE` runs it against
//! another unit file (how the old unit, `KillMode=mixed`, was shown to fail).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hale_agent::view::RolesView;
use hale_agent::Key;
use hale_control::RoleState;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::{hale_bin, hook_lines, log_dir, poll_for, skip, wait_for, HookLine};

/// The workspace's root (this crate is `crates/hale`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A booted container, killed (its whole pid namespace, by its init's pid)
/// on drop, whatever happened.
struct Container {
    nspawn: Child,
    /// The container's init (systemd), as the host sees it.
    leader: i32,
    /// Where the journals and the hook log go when the test fails.
    logs: PathBuf,
}

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() && self.leader > 0 {
            for unit in ["hale", "hale-b", "hale-c"] {
                let _ = std::fs::write(
                    self.logs.join(format!("journal-{unit}.txt")),
                    self.journal(unit),
                );
            }
            let _ = std::fs::copy(
                self.path(&format!("{DIR}/hooks.log")),
                self.logs.join("hooks.log"),
            );
        }
        // Killing the namespace's init kills every process in it (none
        // was found: nspawn alone is killed below).
        if self.leader > 0 {
            let _ = kill(Pid::from_raw(self.leader), Signal::SIGKILL);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

impl Container {
    /// Runs `script` with `sh -c` inside the container (every namespace).
    fn sh(&self, script: &str) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// [`Container::sh`], which must succeed: its standard output.
    fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "in the container: {script}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A file of the container, as the host reaches it.
    fn path(&self, inside: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{inside}", self.leader))
    }

    /// `hale roles --json` of the agent whose API is on `port`.
    fn roles(&self, port: u16) -> Option<RolesView> {
        let out = self.sh(&format!("hale roles --json --http 127.0.0.1:{port}"));
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The journal of `unit` (for a failure's message).
    fn journal(&self, unit: &str) -> String {
        let out = self.sh(&format!("journalctl -u {unit} --no-pager -o short-precise"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Boots `root` with `unit` as the shipped unit; the container once its
/// systemd says it is running.
fn boot(root: &Path, unit: &Path, log: &Path) -> Container {
    let bind = |from: &Path, to: &str| format!("--bind-ro={}:{to}", from.display());
    let nspawn = Command::new("systemd-nspawn")
        .arg("-D")
        .arg(root)
        .args(["-b", "--register=no", "--keep-unit", "--console=passive"])
        .args(["--volatile=overlay", "--private-network"])
        .arg(bind(hale_bin(), "/usr/bin/hale"))
        .arg(bind(unit, "/lib/systemd/system/hale.service"))
        .arg(bind(
            &workspace().join("dist/hale.toml"),
            "/usr/share/hale-test/hale.toml",
        ))
        .arg(bind(
            &workspace().join("dist/hale-postgres.conf"),
            "/usr/share/hale-test/postgres.conf",
        ))
        .arg(bind(
            &workspace().join("dist/debian/postinst"),
            "/usr/share/hale-test/postinst",
        ))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(Stdio::from(
            std::fs::File::create(log.with_extension("err")).unwrap(),
        ))
        .spawn()
        .unwrap();
    let nspawn_pid = nspawn.id();
    let mut c = Container {
        nspawn,
        leader: 0,
        logs: log.parent().unwrap().to_owned(),
    };
    c.leader = wait_for(Duration::from_secs(20), "the container's init", || {
        container_init(nspawn_pid)
    });
    let mut last = String::new();
    let running = poll_for(Duration::from_secs(60), || {
        let out = c.sh("systemctl is-system-running");
        last = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        (last == "running" || last == "degraded").then_some(())
    });
    if running.is_none() {
        let jobs = c.sh("systemctl list-jobs --no-pager");
        panic!(
            "the container's systemd (pid {}) not running after 60 s: last said {last:?}; jobs:\n{}",
            c.leader,
            String::from_utf8_lossy(&jobs.stdout)
        );
    }
    c
}

/// The container's init among `nspawn`'s children: the one that is pid 1 in
/// its own pid namespace. nspawn's first child is a short-lived helper that
/// only creates the init (as nspawn's child) and exits: taking the first
/// child found was a race (CI: every `nsenter` into the dead helper failed
/// for a minute), and killing it on drop could hit a reused pid.
fn container_init(nspawn: u32) -> Option<i32> {
    let kids = std::fs::read_to_string(format!("/proc/{nspawn}/task/{nspawn}/children")).ok()?;
    kids.split_whitespace().find_map(|kid| {
        let status = std::fs::read_to_string(format!("/proc/{kid}/status")).ok()?;
        let nspid = status.lines().find(|l| l.starts_with("NSpid:"))?;
        let ids: Vec<&str> = nspid.split_whitespace().skip(1).collect();
        (ids.len() == 2 && ids[1] == "1").then(|| ids[0].parse().ok())?
    })
}

const BIN: &str = "/usr/lib/postgresql/15/bin";
const DATA: &str = "/var/lib/postgresql/hale";
const DIR: &str = "/srv/hale-test";

/// Agent `name`'s configuration (`a`, `b`, `c`: ports 79x6..79x8 with x
/// 4, 5, 6); `a` also runs PostgreSQL role `pg`.
fn config(name: &str, key: &str) -> String {
    let i = match name {
        "a" => 0,
        "b" => 1,
        _ => 2,
    };
    let port = |base: u16, j: usize| base + 10 * j as u16;
    let seeds: Vec<String> = (0..3)
        .filter(|j| *j != i)
        .map(|j| format!("\"127.0.0.1:{}\"", port(7946, j)))
        .collect();
    let servers: Vec<String> = (0..3)
        .map(|j| format!("\"{}=127.0.0.1:{}\"", j + 1, port(7948, j)))
        .collect();
    let state = if name == "a" {
        "/var/lib/hale".to_owned()
    } else {
        format!("{DIR}/{name}")
    };
    let hook = |kind: &str| {
        format!("[\"sh\", \"-c\", \"echo $(date +%s%N) {name} {kind} $HALE_EPOCH $HALE_REASON >> {DIR}/hooks.log\"]")
    };
    let mut cfg = format!(
        r#"
[agent]
name = "{name}"
bind = "127.0.0.1:{gossip}"
http = "127.0.0.1:{http}"
seeds = [{seeds}]
state_dir = "{state}"
[cluster]
name = "systemd-test"
keys = ["{key}"]
[control]
id = {id}
bind = "127.0.0.1:{control}"
servers = [{servers}]
bootstrap = {bootstrap}
data_dir = "{state}/control"
[[service]]
name = "flag"
essential = true
[[service.check]]
command = ["test", "-f", "{DIR}/healthy"]
interval = "200ms"
timeout = "1s"
[[role]]
name = "db"
service = "flag"
priority = {priority}
promote = {promote}
demote = {demote}
fail_after = "1s"
"#,
        gossip = port(7946, i),
        http = port(7947, i),
        control = port(7948, i),
        seeds = seeds.join(", "),
        id = i + 1,
        servers = servers.join(", "),
        bootstrap = i == 0,
        priority = [100, 50, 10][i],
        promote = hook("promote"),
        demote = hook("demote"),
    );
    if name == "a" {
        cfg += &format!(
            r#"
[[service]]
name = "postgres"
essential = true
[[service.check]]
command = ["{BIN}/pg_isready", "-q", "-h", "/var/run/postgresql", "-p", "5432", "-t", "1"]
interval = "300ms"
timeout = "2s"
[[role]]
name = "pg"
service = "postgres"
priority = 100
hook_timeout = "40s"
fail_after = "2s"
[role.postgres]
data_dir = "{DATA}"
bin_dir = "{BIN}"
host = "/var/run/postgresql"
port = 5432
start_timeout = "30s"
log_file = "/var/log/postgresql/hale.log"
"#
        );
    }
    cfg
}

/// Sets the container up as the Debian package would (the unit, its
/// PostgreSQL drop-in, the `hale` user), with a PostgreSQL cluster from
/// `initdb` (stopped: hale starts it) and a drop-in that lets the test's
/// hooks write their log; starts `a` (`systemctl start hale`), then `b` and
/// `c` as transient units.
fn install(c: &Container, key: &str) {
    c.ok(&format!(
        "mkdir -p /etc/hale {DIR}/b {DIR}/c /etc/systemd/system/hale.service.d && \
         cp /usr/share/hale-test/hale.toml /etc/hale/hale.toml && \
         sh /usr/share/hale-test/postinst configure && \
         cp /usr/share/hale-test/postgres.conf /etc/systemd/system/hale.service.d/postgres.conf && \
         printf '[Service]\\nReadWritePaths={DIR}\\n' > /etc/systemd/system/hale.service.d/test.conf && \
         chmod 1777 {DIR} && touch {DIR}/hooks.log {DIR}/healthy && chmod 666 {DIR}/hooks.log && \
         mkdir -p {DATA} && chown postgres:postgres {DATA} && \
         runuser -u postgres -- {BIN}/initdb -N -D {DATA} -U postgres --auth=trust >/dev/null && \
         printf \"port = 5432\\nlisten_addresses = ''\\nunix_socket_directories = '/var/run/postgresql'\\n\
wal_level = replica\\nhot_standby = on\\nwal_log_hints = on\\nshared_buffers = 16MB\\nfsync = off\\n\" \
           >> {DATA}/postgresql.conf && \
         mkdir -p /var/run/postgresql /var/log/postgresql && \
         chown postgres:postgres /var/run/postgresql /var/log/postgresql"
    ));
    for name in ["a", "b", "c"] {
        let at = if name == "a" {
            "/etc/hale/hale.toml".to_owned()
        } else {
            format!("{DIR}/{name}.toml")
        };
        std::fs::write(c.path(&at), config(name, key)).unwrap();
    }
    c.ok("systemctl daemon-reload && systemctl start hale");
    for name in ["b", "c"] {
        c.ok(&format!(
            "systemd-run --unit=hale-{name} --property=Type=notify \
             --setenv=HALE_LOG=info /usr/bin/hale agent --config {DIR}/{name}.toml"
        ));
    }
}

/// `a`'s holding of `role` in its view `v`: its epoch and whether it is paused.
fn a_holds(v: &RolesView, role: &str) -> Option<(u64, bool)> {
    let r = v.local.iter().find(|r| r.role == role)?;
    (r.state == RoleState::Holder).then_some((r.epoch?, r.paused))
}

/// The postmaster's pid (in the container) and its cgroup.
fn postmaster(c: &Container) -> Option<(i32, String)> {
    let text = std::fs::read_to_string(c.path(&format!("{DATA}/postmaster.pid"))).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    let out = c.sh(&format!("cat /proc/{pid}/cgroup"));
    let cg = String::from_utf8_lossy(&out.stdout);
    let unified = cg.lines().find_map(|l| l.strip_prefix("0::"))?.to_owned();
    Some((pid, unified))
}

/// `hale.service`'s main pid.
fn main_pid(c: &Container) -> i32 {
    c.ok("systemctl show -p MainPID --value hale")
        .parse()
        .unwrap()
}

#[test]
fn under_systemd_a_restarted_holder_keeps_postgres_and_a_crashed_one_is_fenced_first() {
    if !nix::unistd::Uid::effective().is_root() {
        return skip("not root (systemd-nspawn)");
    }
    for tool in ["systemd-nspawn", "debootstrap", "nsenter"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return skip(&format!(
                "no {tool} (apt-get install systemd-container debootstrap)"
            ));
        }
    }
    let started = Instant::now();
    let root = workspace().join("target/systemd-root");
    let built = Command::new(workspace().join("dist/systemd-root.sh"))
        .arg(&root)
        .status()
        .unwrap();
    assert!(built.success(), "dist/systemd-root.sh failed");
    println!("root ready after {:.1?}", started.elapsed());
    let unit = std::env::var_os("HALE_IT_SYSTEMD_UNIT")
        .map_or_else(|| workspace().join("dist/hale.service"), PathBuf::from);
    let logs = log_dir("systemd");
    let c = boot(&root, &unit, &logs.path().join("nspawn.log"));
    println!("booted after {:.1?}", started.elapsed());
    let key = Key::generate().to_base64();
    install(&c, &key);
    let hooks = || hook_lines(&c.path(&format!("{DIR}/hooks.log")));
    let (db, pg) = wait_for(Duration::from_secs(90), "a holding db and pg", || {
        let v = c.roles(7947)?;
        Some((a_holds(&v, "db")?, a_holds(&v, "pg")?))
    });
    let (pid, cgroup) = postmaster(&c).expect("a's PostgreSQL runs");
    let agent_cgroup =
        c.ok("cat /proc/$(systemctl show -p MainPID --value hale)/cgroup | sed -n 's/^0:://p'");
    println!(
        "a holds db at {db:?}, pg at {pg:?}; postmaster {pid} in {cgroup}, agent in {agent_cgroup}"
    );
    let mut problems = Vec::new();
    if cgroup == agent_cgroup {
        problems.push(format!(
            "PostgreSQL runs in the agent's own cgroup {agent_cgroup}"
        ));
    }
    // a's watchdog (it guards db and pg) moved itself into its own leaf
    // (the host may be hybrid: the v2 path is /proc's `0::` line).
    let watchdogs = c.ok("for p in /proc/[0-9]*; do \
           if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^/usr/bin/hale watchdog'; then \
             sed -n 's/^0:://p' $p/cgroup; fi; done");
    if !watchdogs
        .lines()
        .any(|l| l == "/system.slice/hale.service/watchdog")
    {
        problems.push(format!(
            "a's watchdog is not in hale.service's watchdog leaf: {watchdogs:?}"
        ));
    }

    // The README's procedure ("Restarting or upgrading the holder's agent").
    let before = hooks();
    let old_main = main_pid(&c);
    c.ok("hale roles pause db && hale roles pause pg");
    wait_for(Duration::from_secs(20), "a's roles paused", || {
        let v = c.roles(7947)?;
        (a_holds(&v, "db")?.1 && a_holds(&v, "pg")?.1).then_some(())
    });
    c.ok("systemctl restart hale");
    let adopted = wait_for(Duration::from_secs(60), "a adopting db and pg", || {
        let v = c.roles(7947)?;
        if main_pid(&c) == old_main {
            return None;
        }
        Some((a_holds(&v, "db")?, a_holds(&v, "pg")?))
    });
    c.ok("hale roles resume db && hale roles resume pg");
    wait_for(Duration::from_secs(20), "a's db resumed", || {
        (!a_holds(&c.roles(7947)?, "db")?.1).then_some(())
    });
    if adopted.0 .0 != db.0 || adopted.1 .0 != pg.0 {
        problems.push(format!(
            "a role moved over the restart: db {db:?} -> {:?}, pg {pg:?} -> {:?}",
            adopted.0, adopted.1
        ));
    }
    match postmaster(&c) {
        Some((p, _)) if p == pid => {}
        other => problems.push(format!(
            "the postmaster changed over `systemctl restart hale`: {pid} -> {other:?}"
        )),
    }
    let after = hooks();
    if after != before {
        problems.push(format!(
            "hooks ran over the restart: {:?}",
            &after[before.len()..]
        ));
    }
    println!("restart checked after {:.1?}", started.elapsed());

    // The holder's agent dies of SIGSEGV.
    let db_epoch = adopted.0 .0;
    let marks = hooks().len();
    // Rust's runtime catches a SIGSEGV to report stack overflows; one that
    // is not a stack overflow restores the default action and returns, so a
    // SIGSEGV sent (not a real fault, which faults again) kills at the
    // second: sent until the process is gone.
    let crashed = main_pid(&c);
    wait_for(
        Duration::from_secs(10),
        "a's main process killed by SIGSEGV",
        || {
            if c.sh(&format!("test -d /proc/{crashed}")).status.success() {
                c.sh("systemctl kill -s SEGV --kill-whom=main hale");
                return None;
            }
            Some(())
        },
    );
    let promoted: HookLine = wait_for(Duration::from_secs(30), "b or c promoted for db", || {
        hooks()
            .into_iter()
            .skip(marks)
            .find(|l| l.what == "promote" && l.epoch > db_epoch)
    });
    let lines = hooks();
    let fenced = lines
        .iter()
        .skip(marks)
        .position(|l| l.node == "a" && l.what == "demote" && l.epoch == db_epoch);
    let promoted_at = lines.iter().skip(marks).position(|l| *l == promoted);
    match (fenced, promoted_at) {
        (Some(f), Some(p)) if f < p => {}
        _ => problems.push(format!(
            "a's holding of db (epoch {db_epoch}) was not fenced before {} was promoted: {:?}",
            promoted.node,
            &lines[marks..]
        )),
    }
    for l in &lines[marks..] {
        println!(
            "  hook: {} {} {} epoch {} {}",
            l.at, l.node, l.what, l.epoch, l.reason
        );
    }
    println!("crash checked after {:.1?}", started.elapsed());
    assert!(problems.is_empty(), "under systemd: {problems:#?}");
}
