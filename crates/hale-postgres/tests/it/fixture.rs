//! Real PostgreSQL 15 clusters in a temporary directory: a primary from
//! `initdb`, standbys from `pg_basebackup`, on 127.0.0.1 with free ports and
//! their unix sockets in the directory. Every cluster is stopped when the
//! [`Lab`] is dropped, whatever happened (`pg_ctl stop -m immediate`, then
//! SIGKILL of the pid in `postmaster.pid`).

use std::future::Future;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use hale_postgres::{PostgresConfig, Standing, Upstream};
use nix::sys::signal::{kill, Signal};
use nix::unistd::{Pid, User};
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

/// Where the PostgreSQL 15 programs are.
pub const BIN: &str = "/usr/lib/postgresql/15/bin";

/// Clusters in one temporary directory, stopped on drop.
pub struct Lab {
    started: Mutex<Vec<PathBuf>>,
    pg: User,
    // Dropped last (fields drop in order): after the clusters are stopped.
    dir: tempfile::TempDir,
}

/// How a cluster is set up.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// `wal_log_hints` (without checksums, `pg_rewind` needs it on).
    pub wal_log_hints: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            wal_log_hints: true,
        }
    }
}

/// One cluster.
pub struct Node {
    /// Its name (also its `application_name` as a standby).
    pub name: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// hale's configuration for it (unix socket in the lab's directory).
    pub cfg: PostgresConfig,
}

impl Lab {
    /// A lab; fails the test, saying what to install, when PostgreSQL 15 is
    /// missing.
    pub fn new() -> Lab {
        // The library's own log lines, shown for a failing test (RUST_LOG).
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
        for tool in ["initdb", "pg_ctl", "postgres", "pg_rewind", "pg_basebackup"] {
            let path = Path::new(BIN).join(tool);
            assert!(
                path.is_file(),
                "{} is missing: these tests need PostgreSQL 15's server programs \
                 (Debian/Ubuntu: apt-get install postgresql-15)",
                path.display()
            );
        }
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "these tests run as root (clusters belong to the `postgres` user)"
        );
        let pg = User::from_name("postgres")
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no `postgres` OS user (apt-get install postgresql-15)"));
        let dir = tempfile::Builder::new()
            .prefix("hale-pg-")
            .tempdir()
            .expect("temp dir");
        std::os::unix::fs::chown(dir.path(), Some(pg.uid.as_raw()), Some(pg.gid.as_raw()))
            .expect("chown temp dir");
        Lab {
            started: Mutex::new(Vec::new()),
            pg,
            dir,
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn node(&self, name: &str) -> Node {
        let port = free_port();
        let mut cfg = PostgresConfig::new(self.path().join(name));
        cfg.bin_dir = BIN.into();
        cfg.host = self.path().display().to_string();
        cfg.port = port;
        cfg.connect_timeout = Duration::from_secs(2);
        cfg.rejoin_timeout = Duration::from_secs(60);
        cfg.start_timeout = Duration::from_secs(30);
        cfg.log_file = Some(self.path().join(format!("{name}.log")));
        self.started
            .lock()
            .expect("lock")
            .push(cfg.data_dir.clone());
        Node {
            name: name.to_owned(),
            port,
            cfg,
        }
    }

    /// Runs a PostgreSQL program as `postgres`; panics with its output on
    /// failure.
    pub async fn run(&self, tool: &str, args: &[&str]) {
        if let Err(err) = self.try_run(tool, args).await {
            panic!("{err}");
        }
    }

    /// Runs a PostgreSQL program as `postgres`; its output on failure.
    pub async fn try_run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let output = tokio::process::Command::new(Path::new(BIN).join(tool))
            .args(args)
            .uid(self.pg.uid.as_raw())
            .gid(self.pg.gid.as_raw())
            .current_dir("/")
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .map_err(|err| format!("cannot run {tool}: {err}"))?;
        if output.status.success() {
            return Ok(());
        }
        Err(format!(
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }

    /// Appends the node's own settings to its `postgresql.conf` (dynamic
    /// shared memory in the data directory: a killed server's POSIX
    /// segments were left in /dev/shm).
    fn configure(&self, node: &Node, opts: Opts) {
        let conf = format!(
            "\n# hale-postgres tests\nport = {}\nlisten_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{}'\nwal_level = replica\nmax_wal_senders = 10\n\
             max_replication_slots = 10\nhot_standby = on\nwal_log_hints = {}\n\
             shared_buffers = 16MB\nmax_connections = 30\nfsync = off\n\
             wal_retrieve_retry_interval = '500ms'\nwal_keep_size = '256MB'\n\
             dynamic_shared_memory_type = mmap\n",
            node.port,
            self.path().display(),
            if opts.wal_log_hints { "on" } else { "off" },
        );
        let path = node.cfg.data_dir.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&path).expect("read postgresql.conf");
        text.push_str(&conf);
        std::fs::write(&path, text).expect("write postgresql.conf");
    }

    /// A primary, started.
    pub async fn primary(&self, name: &str, opts: Opts) -> Node {
        let node = self.node(name);
        let data = node.cfg.data_dir.display().to_string();
        self.run(
            "initdb",
            &["-N", "-D", &data, "-U", "postgres", "--auth=trust"],
        )
        .await;
        self.configure(&node, opts);
        node.start(self).await;
        node
    }

    /// A streaming standby of `primary` through the slot named after it,
    /// started and streaming.
    pub async fn standby(&self, name: &str, primary: &Node, opts: Opts) -> Node {
        let node = self.node(name);
        primary
            .sql(&format!(
                "SELECT pg_create_physical_replication_slot('{name}', true)"
            ))
            .await;
        let data = node.cfg.data_dir.display().to_string();
        let port = primary.port.to_string();
        self.run(
            "pg_basebackup",
            &[
                "-D",
                &data,
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-X",
                "stream",
            ],
        )
        .await;
        self.configure(&node, opts);
        let auto = node.cfg.data_dir.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&auto).unwrap_or_default();
        text.push_str(&format!(
            "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={name}'\n\
             primary_slot_name = '{name}'\n",
            primary.port
        ));
        std::fs::write(&auto, text).expect("write postgresql.auto.conf");
        let signal = node.cfg.data_dir.join("standby.signal");
        std::fs::write(&signal, "").expect("standby.signal");
        for file in [&auto, &signal] {
            std::os::unix::fs::chown(file, Some(self.pg.uid.as_raw()), Some(self.pg.gid.as_raw()))
                .expect("chown");
        }
        node.start(self).await;
        let upstream = primary.upstream();
        eventually("the new standby streaming", || async {
            let standing = hale_postgres::standing(&node.cfg).await.ok()?;
            standing
                .streams_from(&upstream.host, upstream.port)
                .then_some(())
        })
        .await;
        node
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let dirs = std::mem::take(&mut *self.started.lock().unwrap_or_else(|e| e.into_inner()));
        for data in dirs {
            let pid = std::fs::read_to_string(data.join("postmaster.pid"))
                .ok()
                .and_then(|text| text.lines().next()?.trim().parse::<i32>().ok());
            let Some(pid) = pid else { continue };
            let pid = Pid::from_raw(pid);
            // A SIGSTOPped postmaster cannot stop by itself.
            let _ = kill(pid, Signal::SIGCONT);
            let _ = std::process::Command::new(Path::new(BIN).join("pg_ctl"))
                .args(["stop", "-m", "immediate", "-w", "-t", "5", "-D"])
                .arg(&data)
                .uid(self.pg.uid.as_raw())
                .gid(self.pg.gid.as_raw())
                .current_dir("/")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
            // Still there (or a stale file naming some other process): kill
            // it only if it is a postgres of this data directory.
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok();
            if cwd.as_deref() == Some(data.as_path()) {
                let _ = kill(pid, Signal::SIGKILL);
            }
        }
    }
}

impl Node {
    /// `pg_ctl start -w` as `postgres`.
    pub async fn start(&self, lab: &Lab) {
        let data = self.cfg.data_dir.display().to_string();
        let log = lab
            .path()
            .join(format!("{}.log", self.name))
            .display()
            .to_string();
        let started = lab
            .try_run(
                "pg_ctl",
                &["start", "-w", "-t", "30", "-D", &data, "-l", &log],
            )
            .await;
        if let Err(err) = started {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            panic!(
                "{err}\n--- {} log, last lines first:\n{}",
                self.name,
                tail.join("\n")
            );
        }
    }

    /// `pg_ctl stop -m MODE -w` as `postgres`.
    pub async fn stop(&self, lab: &Lab, mode: &str) {
        let data = self.cfg.data_dir.display().to_string();
        lab.run(
            "pg_ctl",
            &["stop", "-w", "-t", "10", "-m", mode, "-D", &data],
        )
        .await;
    }

    /// A session as `postgres` over the unix socket.
    pub async fn client(&self) -> Client {
        self.try_client()
            .await
            .unwrap_or_else(|err| panic!("connecting to {}: {err}", self.name))
    }

    /// A session as `postgres` over the unix socket, if it answers.
    pub async fn try_client(&self) -> Result<Client, tokio_postgres::Error> {
        let (client, connection) = tokio_postgres::Config::new()
            .host(&self.cfg.host)
            .port(self.port)
            .user("postgres")
            .dbname("postgres")
            .connect_timeout(Duration::from_secs(5))
            .connect(NoTls)
            .await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// Runs SQL statements; panics on error.
    pub async fn sql(&self, sql: &str) {
        self.client()
            .await
            .batch_execute(sql)
            .await
            .unwrap_or_else(|err| panic!("{} on {}: {err}", sql, self.name));
    }

    /// A number from a query (`count(*)` and the like, cast to bigint).
    pub async fn number(&self, sql: &str) -> i64 {
        let row = self.client().await.query_one(sql, &[]).await;
        row.unwrap_or_else(|err| panic!("{} on {}: {err}", sql, self.name))
            .get(0)
    }

    /// This node as an upstream.
    pub fn upstream(&self) -> Upstream {
        Upstream {
            host: "127.0.0.1".into(),
            port: self.port,
        }
    }

    /// Its standing; panics if it cannot be read.
    pub async fn standing(&self) -> Standing {
        hale_postgres::standing(&self.cfg)
            .await
            .unwrap_or_else(|err| panic!("standing of {}: {err}", self.name))
    }

    /// The postmaster's pid, from `postmaster.pid`.
    pub fn postmaster_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.cfg.data_dir.join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// True when its fence marker exists.
    pub fn fenced(&self) -> bool {
        self.cfg.fence_marker().exists()
    }
}

/// Polls `check` every 50 ms until it answers `Some`; panics naming `what`
/// after 30 s.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "waited 30 s for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// True when the error is PostgreSQL refusing a write on a read-only server.
pub fn is_read_only(err: &tokio_postgres::Error) -> bool {
    err.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
}
