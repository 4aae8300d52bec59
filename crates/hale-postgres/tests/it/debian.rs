//! hale on clusters of Debian's own `postgresql-15` package: made by
//! `pg_createcluster` (configuration in `/etc/postgresql/15/NAME`, data in
//! `/var/lib/postgresql/15/NAME`, socket and pid file in
//! `/var/run/postgresql`), started as the distribution does
//! (`pg_ctlcluster`), told apart by `pg_lsclusters`. Each test's clusters
//! are named after the test process and the test (`hale<pid>_<test>_<node>`)
//! and dropped (`pg_dropcluster --stop`) when the test ends, failed or not;
//! no other cluster is touched. Without `postgresql-common` they are
//! skipped, saying so, unless `HALE_TESTS_SKIP_NOTHING` is set (then they
//! fail).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use hale_postgres::{
    fence, promote, rejoin, start_standby, Fenced, LayoutError, PostgresConfig, PromoteError,
    Promotion, RejoinStep, Rejoined, Standing, StartError, StartedStandby,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::fixture::{eventually, free_port, Lab, Node, Opts};
use crate::rejoin::rejoined_by;

/// The package's major version.
const VERSION: &str = "15";

/// Clusters made by `pg_createcluster` for one test, dropped on drop.
struct Packaged {
    /// `hale<pid>_<test>_`: every cluster's name starts with it.
    prefix: String,
    /// The clusters made (or being made), by name.
    made: Mutex<Vec<String>>,
}

impl Packaged {
    /// The clusters of test `test` (a short tag); `None` (skipped, saying
    /// why) when `postgresql-common` is missing and nothing is to be
    /// skipped is not asked for.
    fn new(test: &str) -> Option<Packaged> {
        let missing: Vec<&str> = [
            "pg_createcluster",
            "pg_ctlcluster",
            "pg_lsclusters",
            "pg_dropcluster",
        ]
        .into_iter()
        .filter(|tool| !Path::new("/usr/bin").join(tool).is_file())
        .collect();
        if !missing.is_empty() {
            let why = format!(
                "{missing:?} missing: these tests need Debian's packaged PostgreSQL \
                 (apt-get install postgresql-15 postgresql-common)"
            );
            assert!(
                std::env::var_os("HALE_TESTS_SKIP_NOTHING").is_none(),
                "{why} (HALE_TESTS_SKIP_NOTHING is set)"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        // The checks of the other tests: PostgreSQL 15, root, its OS user.
        drop(Lab::new());
        Some(Packaged {
            prefix: format!("hale{}_{test}_", std::process::id()),
            made: Mutex::new(Vec::new()),
        })
    }

    /// A cluster `<prefix><node>` made by `pg_createcluster` on a free port
    /// with `start_conf` (`auto`, `manual`, `disabled`), configured for
    /// replication on 127.0.0.1 (`conf.d/hale-tests.conf`) with `trust`
    /// for the tests' own sessions, not started; hale's configuration of it
    /// names its directories as an operator would.
    async fn create(&self, node: &str, start_conf: &str) -> Node {
        let name = format!("{}{node}", self.prefix);
        self.made.lock().unwrap().push(name.clone());
        let port = free_port();
        let port_text = port.to_string();
        run(
            "pg_createcluster",
            &["--start-conf", start_conf, "-p", &port_text, VERSION, &name],
        )
        .await;
        let config_dir = PathBuf::from(format!("/etc/postgresql/{VERSION}/{name}"));
        std::fs::write(
            config_dir.join("conf.d/hale-tests.conf"),
            "listen_addresses = '127.0.0.1'\nwal_log_hints = on\nshared_buffers = 16MB\n\
             fsync = off\nwal_retrieve_retry_interval = '500ms'\n\
             wal_keep_size = '256MB'\ndynamic_shared_memory_type = mmap\n",
        )
        .expect("write conf.d/hale-tests.conf");
        std::fs::write(
            config_dir.join("pg_hba.conf"),
            "# hale-postgres tests\nlocal all all trust\nlocal replication all trust\n\
             host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n",
        )
        .expect("write pg_hba.conf");
        let mut cfg = PostgresConfig::new(format!("/var/lib/postgresql/{VERSION}/{name}"));
        cfg.config_dir = Some(config_dir);
        cfg.port = port;
        cfg.log_file = Some(format!("/var/log/postgresql/postgresql-{VERSION}-{name}.log").into());
        cfg.connect_timeout = Duration::from_secs(2);
        cfg.rejoin_timeout = Duration::from_secs(60);
        cfg.start_timeout = Duration::from_secs(30);
        Node { name, port, cfg }
    }

    /// `pg_ctlcluster 15 NAME action`, as the distribution starts and stops
    /// its clusters.
    async fn ctl(&self, node: &Node, action: &str) {
        run("pg_ctlcluster", &[VERSION, &node.name, action]).await;
    }
}

impl Drop for Packaged {
    fn drop(&mut self) {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|e| e.into_inner()));
        for name in made {
            let drop_it = || {
                std::process::Command::new("pg_dropcluster")
                    .args(["--stop", VERSION, &name])
                    .current_dir("/")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if drop_it() {
                continue;
            }
            // A server that would not stop: killed if it is this cluster's
            // (its working directory is the data directory), then dropped.
            let data = PathBuf::from(format!("/var/lib/postgresql/{VERSION}/{name}"));
            let pid = std::fs::read_to_string(data.join("postmaster.pid"))
                .ok()
                .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok());
            if let Some(pid) = pid {
                let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
                if cwd.as_deref() == Some(data.as_path()) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            let _ = drop_it();
        }
    }
}

/// A file this test made, removed when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs one of `postgresql-common`'s programs as root (they run
/// PostgreSQL's as the cluster's owner); panics with its output on failure.
async fn run(tool: &str, args: &[&str]) -> String {
    let out = tokio::process::Command::new(tool)
        .args(args)
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap_or_else(|err| panic!("cannot run {tool}: {err}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// What `pg_lsclusters` says of the cluster: `online`, `online,recovery`
/// or `down`.
async fn listed(node: &Node) -> String {
    let line = run("pg_lsclusters", &["-h", VERSION, &node.name]).await;
    line.split_whitespace()
        .nth(3)
        .unwrap_or_else(|| panic!("pg_lsclusters: {line:?}"))
        .to_owned()
}

/// The pid in the cluster's `external_pid_file`, the one the distribution's
/// tools and unit read (`/var/run/postgresql/15-NAME.pid`).
fn external_pid(node: &Node) -> Option<i32> {
    crate::fixture::pid_in(Path::new(&format!(
        "/var/run/postgresql/{VERSION}-{}.pid",
        node.name
    )))
}

/// The distribution's tools see the server hale runs: `pg_lsclusters` says
/// `status`, and the pid file they read names the postmaster of the data
/// directory.
async fn seen_as(node: &Node, status: &str) {
    assert_eq!(listed(node).await, status, "pg_lsclusters of {}", node.name);
    let pid = node.postmaster_pid().expect("postmaster.pid");
    assert_eq!(
        external_pid(node),
        Some(pid),
        "{}'s external pid file",
        node.name
    );
}

/// The last lines of the server's log, last first.
fn log_tail(node: &Node) -> String {
    let log = std::fs::read_to_string(node.cfg.log_file()).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(15).collect();
    format!(
        "--- {} log, last lines first:\n{}",
        node.name,
        tail.join("\n")
    )
}

/// The configuration files a cluster keeps in its configuration directory,
/// with their contents.
fn config_files(node: &Node) -> Vec<(String, Vec<u8>)> {
    let dir = node.cfg.config_dir.as_ref().expect("config_dir");
    [
        "postgresql.conf",
        "pg_hba.conf",
        "pg_ident.conf",
        "start.conf",
    ]
    .into_iter()
    .map(|f| {
        (
            f.to_owned(),
            std::fs::read(dir.join(f)).expect("read a config file"),
        )
    })
    .collect()
}

/// Asserts the data directory holds no configuration file but
/// `postgresql.auto.conf`.
fn only_data(node: &Node) {
    for file in ["postgresql.conf", "pg_hba.conf", "pg_ident.conf"] {
        assert!(
            !node.cfg.data_dir.join(file).exists(),
            "{file} in {}'s data directory",
            node.name
        );
    }
}

/// Empties a data directory (hale clones into it).
fn empty(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("read the data directory") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).expect("remove");
        } else {
            std::fs::remove_file(&path).expect("remove");
        }
    }
}

#[tokio::test]
async fn packaged_clusters_are_cloned_fenced_promoted_and_rewound_by_hale_as_pg_lsclusters_sees_them(
) {
    let Some(debian) = Packaged::new("failover") else {
        return;
    };
    let a = debian.create("a", "manual").await;
    let b = debian.create("b", "manual").await;
    let (a_config, b_config) = (config_files(&a), config_files(&b));
    debian.ctl(&a, "start").await;
    seen_as(&a, "online").await;
    a.sql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100)")
        .await;

    // b, its data directory emptied, is cloned by hale: only data comes,
    // and its own configuration (its port) stays.
    empty(&b.cfg.data_dir);
    rejoined_by(
        &b,
        &a,
        Rejoined::Recloned,
        &[
            RejoinStep::Rejoining,
            RejoinStep::Recloned,
            RejoinStep::Streaming,
        ],
    )
    .await;
    b.has_rows(100).await;
    seen_as(&b, "online,recovery").await;
    only_data(&b);

    // Split brain: b is promoted while a still takes writes; then a is
    // fenced, as its demote hook does.
    assert_eq!(
        promote(&b.cfg).await.expect("promote b"),
        Promotion::Promoted { started: false }
    );
    a.sql("INSERT INTO t SELECT generate_series(1001, 1100); CHECKPOINT")
        .await;
    assert_eq!(fence(&a.cfg).await.expect("fence a"), Fenced::StoppedFast);
    // Stopped, and it would boot as a standby.
    assert_eq!(listed(&a).await, "down,recovery");
    assert!(a.fenced() && a.cfg.data_dir.join("standby.signal").exists());
    let refused = promote(&a.cfg).await;
    assert!(
        matches!(refused, Err(PromoteError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(
        listed(&a).await,
        "down,recovery",
        "a refused promotion starts nothing"
    );
    seen_as(&b, "online").await;
    b.sql("INSERT INTO t SELECT generate_series(201, 300)")
        .await;

    // a is rewound onto b's timeline and streams from it, its split-brain
    // rows gone.
    rejoined_by(
        &a,
        &b,
        Rejoined::Rewound,
        &[
            RejoinStep::Rejoining,
            RejoinStep::Rewound,
            RejoinStep::Streaming,
        ],
    )
    .await;
    assert!(a.standing().await.streams_from("127.0.0.1", b.port));
    a.has_rows(200).await;
    assert_eq!(a.number("SELECT count(*) FROM t WHERE id > 1000").await, 0);
    assert!(!a.fenced());
    a.refuses_writes().await;
    seen_as(&a, "online,recovery").await;
    only_data(&a);
    assert_eq!(config_files(&a), a_config, "a's configuration untouched");
    assert_eq!(config_files(&b), b_config, "b's configuration untouched");

    // The operator's tools keep working on the servers hale runs: stopped
    // and started by pg_ctlcluster, a comes back a streaming standby.
    debian.ctl(&a, "stop").await;
    assert_eq!(a.standing().await, Standing::Down);
    assert_eq!(listed(&a).await, "down,recovery");
    debian.ctl(&a, "start").await;
    let upstream = b.upstream();
    eventually("a streaming again", || async {
        let now = hale_postgres::standing(&a.cfg).await.ok()?;
        now.streams_from(&upstream.host, upstream.port)
            .then_some(())
    })
    .await;
    b.sql("INSERT INTO t SELECT generate_series(301, 310)")
        .await;
    a.has_rows(210).await;
}

#[tokio::test]
async fn a_packaged_cluster_the_distribution_starts_at_boot_or_of_another_data_directory_is_left_as_it_was(
) {
    let Some(debian) = Packaged::new("boot") else {
        return;
    };
    // Debian's default: the postgresql service starts it at boot.
    let a = debian.create("a", "auto").await;
    let start_conf = a
        .cfg
        .config_dir
        .as_ref()
        .expect("config_dir")
        .join("start.conf");
    let before = std::fs::read(&start_conf).expect("read start.conf");
    let refused = promote(&a.cfg).await;
    let Err(PromoteError::Layout(LayoutError::StartsAtBoot { fix, .. })) = &refused else {
        panic!("{refused:?}")
    };
    assert!(
        fix.contains(&format!("write manual in {}", start_conf.display())),
        "{fix}"
    );
    let refused = start_standby(&a.cfg).await;
    assert!(
        matches!(
            refused,
            Err(StartError::Layout(LayoutError::StartsAtBoot { .. }))
        ),
        "{refused:?}"
    );
    let refused = rejoin(&a.cfg, &a.upstream(), "x", "x", |_| {}).await;
    assert!(
        matches!(refused, Err(hale_postgres::RejoinError::Layout(_))),
        "{refused:?}"
    );
    assert_eq!(listed(&a).await, "down", "nothing started");
    assert!(!a.fenced() && !a.cfg.data_dir.join("standby.signal").exists());
    assert_eq!(
        std::fs::read(&start_conf).expect("read"),
        before,
        "start.conf untouched"
    );

    // start.conf manual, but its unit enabled: systemd starts it at boot.
    std::fs::write(&start_conf, "manual\n").expect("write start.conf");
    let wants = Path::new("/etc/systemd/system/multi-user.target.wants");
    if wants.is_dir() {
        let unit = format!("postgresql@{VERSION}-{}", a.name);
        let link = Removed(wants.join(format!("{unit}.service")));
        std::os::unix::fs::symlink("/lib/systemd/system/postgresql@.service", &link.0)
            .expect("enable the unit");
        let refused = start_standby(&a.cfg).await;
        let Err(StartError::Layout(LayoutError::StartsAtBoot { fix, .. })) = &refused else {
            panic!("{refused:?}")
        };
        assert!(fix.contains(&format!("systemctl disable {unit}")), "{fix}");
        assert_eq!(listed(&a).await, "down", "nothing started");
    } else {
        eprintln!("no {}: an enabled unit is not tried", wants.display());
    }

    // hale's data_dir is another cluster's, not the one a's configuration
    // names: hale would start a's server, and check and fence c's directory.
    let c = debian.create("c", "manual").await;
    let mut crossed = a.cfg.clone();
    crossed.data_dir = c.cfg.data_dir.clone();
    let refused = start_standby(&crossed).await;
    assert!(
        matches!(
            refused,
            Err(StartError::Layout(LayoutError::OtherDataDir { .. }))
        ),
        "{refused:?}"
    );
    assert_eq!(listed(&a).await, "down", "nothing started");
    assert_eq!(listed(&c).await, "down", "nothing started");

    // start.conf manual: hale starts it, as a standby, from its
    // configuration directory.
    let started = start_standby(&a.cfg).await;
    assert!(
        matches!(started, Ok(StartedStandby::Started)),
        "{started:?}\n{}",
        log_tail(&a)
    );
    seen_as(&a, "online,recovery").await;
}

#[tokio::test]
async fn a_packaged_cluster_cloned_from_a_primary_that_keeps_its_configuration_in_its_data_directory_keeps_only_data(
) {
    let Some(debian) = Packaged::new("mixed") else {
        return;
    };
    let lab = Lab::new();
    let p = lab.primary("p", Opts::default()).await;
    p.sql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 10)")
        .await;
    let b = debian.create("b", "manual").await;
    let b_config = config_files(&b);
    empty(&b.cfg.data_dir);

    rejoined_by(
        &b,
        &p,
        Rejoined::Recloned,
        &[
            RejoinStep::Rejoining,
            RejoinStep::Recloned,
            RejoinStep::Streaming,
        ],
    )
    .await;
    b.has_rows(10).await;
    only_data(&b);
    assert_eq!(config_files(&b), b_config);
    seen_as(&b, "online,recovery").await;
}
