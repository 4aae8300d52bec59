//! Real PostgreSQL 15 clusters in a temporary directory: a primary from
//! `initdb`, standbys from `pg_basebackup`, on 127.0.0.1 with free ports and
//! their unix sockets in the directory. Every cluster is stopped when the
//! [`Lab`] is dropped, whatever happened (`pg_ctl stop -m immediate`, then
//! SIGKILL of the pid in `postmaster.pid`).
//!
//! A lab may require passwords ([`Lab::with_scram`]: SCRAM for every TCP
//! connection, replication included; unix sockets trusted for the
//! fixture's own setup) and TLS ([`Lab::with_tls`]: a CA and a server
//! certificate made here, TCP without TLS rejected).

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
    /// The password of `postgres` when TCP connections need one.
    password: Option<String>,
    /// TLS is on (its files in the lab's directory).
    tls: bool,
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
            password: None,
            tls: false,
            dir,
        }
    }

    /// This lab's clusters require `password` (SCRAM) of `postgres` for
    /// every TCP connection, replication included (unix sockets stay
    /// trusted, for the fixture's own setup). hale's configuration of each
    /// node names it in `password_file` (`<lab>/pg-password`, 0600, owned
    /// by `postgres`); the fixture's own standbys read it from
    /// `<lab>/fixture.pgpass`.
    pub fn with_scram(mut self, password: &str) -> Lab {
        self.write_private("pg-password", &format!("{password}\n"));
        self.write_private("fixture.pgpass", &format!("*:*:*:postgres:{password}\n"));
        self.password = Some(password.to_owned());
        self
    }

    /// This lab's clusters serve TLS with a certificate for `names` (host
    /// names or IP addresses) signed by a CA made here (`<lab>/ca.pem`), and
    /// reject TCP connections without TLS. hale's configuration of each node
    /// says `sslmode = verify-full` with that CA.
    pub fn with_tls(mut self, names: &[&str]) -> Lab {
        let (ca, cert, key) = certificates(names);
        std::fs::write(self.path().join("ca.pem"), ca).expect("write ca.pem");
        std::fs::write(self.path().join("server.crt"), cert).expect("write server.crt");
        self.write_private("server.key", &key);
        self.tls = true;
        self
    }

    /// Writes `name` in the lab's directory, mode 0600, owned by `postgres`.
    fn write_private(&self, name: &str, text: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let path = self.path().join(name);
        std::fs::write(&path, text).expect("write a private file");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::os::unix::fs::chown(
            &path,
            Some(self.pg.uid.as_raw()),
            Some(self.pg.gid.as_raw()),
        )
        .expect("chown");
    }

    /// The lab's directory (data directories, logs, secret files).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A node whose data directory does not exist yet (hale clones it).
    pub fn empty(&self, name: &str) -> Node {
        self.node(name)
    }

    /// How the fixture's own libpq clients reach 127.0.0.1:`port` as
    /// `postgres`: with the lab's passfile and TLS settings.
    fn conninfo(&self, port: u16) -> String {
        let mut text = format!("host=127.0.0.1 port={port} user=postgres");
        if self.password.is_some() {
            text.push_str(&format!(
                " passfile={}",
                self.path().join("fixture.pgpass").display()
            ));
        }
        if self.tls {
            text.push_str(&format!(
                " sslmode=verify-full sslrootcert={}",
                self.path().join("ca.pem").display()
            ));
        }
        text
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
        if self.password.is_some() {
            cfg.password_file = Some(self.path().join("pg-password"));
        }
        if self.tls {
            cfg.sslmode = hale_postgres::SslMode::VerifyFull;
            cfg.sslrootcert = Some(self.path().join("ca.pem"));
        }
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
            // libpq looks for client certificates in ~/.postgresql: root's
            // home is closed to postgres.
            .env("HOME", &self.pg.dir)
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
        let mut conf = conf;
        if self.password.is_some() {
            conf.push_str("password_encryption = 'scram-sha-256'\nlog_connections = on\n");
        }
        if self.tls {
            conf.push_str(&format!(
                "ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
                self.path().join("server.crt").display(),
                self.path().join("server.key").display()
            ));
        }
        let path = node.cfg.data_dir.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&path).expect("read postgresql.conf");
        text.push_str(&conf);
        std::fs::write(&path, text).expect("write postgresql.conf");
        if self.password.is_some() || self.tls {
            let method = if self.password.is_some() {
                "scram-sha-256"
            } else {
                "trust"
            };
            let (host, reject) = if self.tls {
                (
                    "hostssl",
                    "hostnossl all all 0.0.0.0/0 reject\nhostnossl replication all 0.0.0.0/0 reject\n",
                )
            } else {
                ("host", "")
            };
            let hba = format!(
                "# hale-postgres tests\nlocal all all trust\nlocal replication all trust\n{reject}\
                 {host} all all 127.0.0.1/32 {method}\n{host} replication all 127.0.0.1/32 {method}\n"
            );
            std::fs::write(node.cfg.data_dir.join("pg_hba.conf"), hba).expect("write pg_hba.conf");
        }
    }

    /// A primary, started.
    pub async fn primary(&self, name: &str, opts: Opts) -> Node {
        let node = self.node(name);
        let data = node.cfg.data_dir.display().to_string();
        let pwfile = self.path().join("pg-password").display().to_string();
        let mut args = vec!["-N", "-D", &data, "-U", "postgres", "--auth=trust"];
        if self.password.is_some() {
            args.extend(["--pwfile", &pwfile]);
        }
        self.run("initdb", &args).await;
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
        let conninfo = self.conninfo(primary.port);
        self.run(
            "pg_basebackup",
            &["-D", &data, "-d", &conninfo, "-X", "stream"],
        )
        .await;
        self.configure(&node, opts);
        let auto = node.cfg.data_dir.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&auto).unwrap_or_default();
        text.push_str(&format!(
            "primary_conninfo = '{} application_name={name}'\n\
             primary_slot_name = '{name}'\n",
            self.conninfo(primary.port)
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
            let Some(pid) = pid_in(&data.join("postmaster.pid")) else {
                continue;
            };
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

    /// Waits (30 s at most) until table `t` on this node has `rows` rows:
    /// a standby has replayed what its primary wrote.
    pub async fn has_rows(&self, rows: i64) {
        eventually(&format!("{} has {rows} rows", self.name), || async {
            let client = self.try_client().await.ok()?;
            let row = client.query_one("SELECT count(*) FROM t", &[]).await.ok()?;
            (row.get::<_, i64>(0) == rows).then_some(())
        })
        .await;
    }

    /// Asserts that a write to this node is refused as read-only (a replica).
    pub async fn refuses_writes(&self) {
        let write = self
            .client()
            .await
            .batch_execute("INSERT INTO t VALUES (5000)")
            .await;
        assert!(write.as_ref().is_err_and(is_read_only), "{write:?}");
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
        pid_in(&self.cfg.data_dir.join("postmaster.pid"))
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

/// A CA (PEM), and a server certificate for `names` signed by it with its
/// key (PEM).
fn certificates(names: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "hale-postgres test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key")).expect("CA");
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut server = CertificateParams::new(names).expect("server parameters");
    server
        .distinguished_name
        .push(DnType::CommonName, "hale-postgres test server");
    let key = KeyPair::generate().expect("server key");
    let cert = server.signed_by(&key, &ca).expect("server certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// A CA unrelated to any lab's (PEM): nothing it signed is served.
pub fn other_ca() -> String {
    certificates(&["localhost"]).0
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// True when the error is PostgreSQL refusing a write on a read-only server.
pub fn is_read_only(err: &tokio_postgres::Error) -> bool {
    err.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION)
}

/// The pid on the first line of a pid file (PostgreSQL's `postmaster.pid`,
/// a cluster's `external_pid_file`), if it has one.
pub fn pid_in(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}
