//! Passwords (SCRAM) read from files: every connection hale makes or causes
//! authenticates, and the password shows nowhere: not in hale's logs, its
//! errors or `Debug` output, the servers' logs, `postgresql.auto.conf`, nor
//! the command line or environment of any process.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hale_postgres::{
    promote, rejoin, standing, start_standby, ConnectError, CredentialsError, RejoinError,
    RejoinStep, Rejoined, Standing, StandingError, StartError,
};

use crate::fixture::{eventually, Lab, Node, Opts};

/// A password no other text has: any occurrence is a leak.
const PASSWORD: &str = "Hale-test-S3cret-q7Zx";

/// Watches every process's command line and environment while it lives:
/// the ones that held `needle`, and the PostgreSQL programs it saw run
/// (to know it looked while they ran).
struct ProcWatch {
    stop: Arc<AtomicBool>,
    found: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Vec<String>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProcWatch {
    fn start(needle: &'static str) -> ProcWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let found = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let thread = std::thread::spawn({
            let (stop, found, seen) = (stop.clone(), found.clone(), seen.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    scan(needle, &found, &seen);
                    std::thread::sleep(std::time::Duration::from_millis(3));
                }
            }
        });
        ProcWatch {
            stop,
            found,
            seen,
            thread: Some(thread),
        }
    }

    /// Stops watching: the leaks found, and the programs seen.
    fn finish(mut self) -> (Vec<String>, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the /proc watcher");
        }
        let found = std::mem::take(&mut *self.found.lock().unwrap());
        let seen = std::mem::take(&mut *self.seen.lock().unwrap());
        (found, seen)
    }
}

impl Drop for ProcWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One look at every process's `cmdline` and `environ`.
fn scan(needle: &str, found: &Mutex<Vec<String>>, seen: &Mutex<Vec<String>>) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        for tool in ["pg_basebackup", "pg_rewind", "walreceiver"] {
            if cmd.contains(tool) {
                let mut seen = seen.lock().unwrap();
                if !seen.iter().any(|s| s == tool) {
                    seen.push(tool.to_owned());
                }
            }
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        for (what, bytes) in [("cmdline", &cmdline), ("environ", &environ)] {
            if String::from_utf8_lossy(bytes).contains(needle) {
                found
                    .lock()
                    .unwrap()
                    .push(format!("{}/{what}: {cmd}", entry.path().display()));
            }
        }
    }
}

/// What hale logs (every level, every target) on this thread, kept.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// Every file under `dir` whose name ends with `suffix`, with its text.
fn files_ending(dir: &Path, suffix: &str) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.to_string_lossy().ends_with(suffix) {
                let text =
                    String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
                out.push((path, text));
            }
        }
    }
    out
}

/// `node`'s configuration with hale's own sessions over TCP (SCRAM), not
/// the trusted unix socket.
fn over_tcp(node: &Node) -> hale_postgres::PostgresConfig {
    let mut cfg = node.cfg.clone();
    cfg.host = "127.0.0.1".into();
    cfg
}

#[tokio::test]
async fn a_standby_cloned_and_rejoined_with_scram_passwords_streams_and_no_password_shows_in_ps_or_logs(
) {
    let lab = Lab::new().with_scram(PASSWORD);
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let watch = ProcWatch::start(PASSWORD);
    // What hale says: errors and Debug output, collected as text.
    let mut said = Vec::new();

    let a = lab.primary("a", Opts::default()).await;
    // The passwords are really required over TCP.
    let mut no_password = over_tcp(&a);
    no_password.password_file = None;
    let refused = standing(&no_password).await;
    assert!(
        matches!(
            refused,
            Err(StandingError::Connect(ConnectError::Refused { .. }))
        ),
        "{refused:?}"
    );
    said.push(format!("{:?} / {}", refused, refused.as_ref().unwrap_err()));

    // b (its control file lost) is cloned afresh by hale (pg_basebackup),
    // and streams (primary_conninfo).
    let b = lab.standby("b", &a, Opts::default()).await;
    b.stop(&lab, "fast").await;
    std::fs::remove_file(b.cfg.data_dir.join("global/pg_control")).expect("remove pg_control");
    let mut steps = Vec::new();
    let how = rejoin(&b.cfg, &a.upstream(), "b", "b", |s| steps.push(s)).await;
    said.push(format!("{how:?}"));
    assert_eq!(how.expect("b cloned"), Rejoined::Recloned);
    assert!(b.standing().await.streams_from("127.0.0.1", a.port));
    // hale's own sessions over TCP authenticate with the password.
    let over = standing(&over_tcp(&a))
        .await
        .expect("a's standing over TCP");
    assert!(matches!(over, Standing::Primary { .. }), "{over:?}");
    said.push(format!("{over:?} {:?} {:?}", over_tcp(&a), b.cfg));

    // a fails over to b and rejoins it by pg_rewind.
    a.sql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 100)")
        .await;
    b.has_rows(100).await;
    promote(&b.cfg).await.expect("promote b");
    a.sql("INSERT INTO t SELECT generate_series(1001, 1100); CHECKPOINT")
        .await;
    a.stop(&lab, "immediate").await;
    b.sql("INSERT INTO t SELECT generate_series(201, 300)")
        .await;
    let mut steps = Vec::new();
    let how = rejoin(&over_tcp(&a), &b.upstream(), "a", "a", |s| steps.push(s)).await;
    said.push(format!("{how:?}"));
    assert_eq!(how.expect("a rewound"), Rejoined::Rewound);
    assert_eq!(
        steps,
        [
            RejoinStep::Rejoining,
            RejoinStep::Rewound,
            RejoinStep::Streaming
        ]
    );
    let Standing::Replica { .. } = a.standing().await else {
        panic!("a is no replica")
    };
    eventually("a has b's rows", || async {
        (a.number("SELECT count(*) FROM t").await == 200).then_some(())
    })
    .await;
    // An upstream that is gone: the error says so, and nothing more.
    b.stop(&lab, "fast").await;
    let c = lab.empty("c");
    let gone = rejoin(&c.cfg, &b.upstream(), "c", "c", |_| {}).await;
    assert!(
        matches!(gone, Err(RejoinError::Upstream { .. })),
        "{gone:?}"
    );
    said.push(format!("{gone:?} / {}", gone.as_ref().unwrap_err()));
    let (found, seen) = watch.finish();

    // The passfile hale wrote for libpq: 0600, owned by postgres, named by
    // primary_conninfo; the password in it and nowhere else.
    for node in [&a, &b] {
        let passfile = PathBuf::from(format!("{}.pgpass", node.cfg.data_dir.display()));
        let meta = std::fs::metadata(&passfile).expect("the generated passfile");
        assert_eq!(meta.mode() & 0o777, 0o600, "{}", passfile.display());
        let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
        assert_eq!(meta.uid(), pg.uid.as_raw());
        let auto = std::fs::read_to_string(node.cfg.data_dir.join("postgresql.auto.conf"))
            .expect("postgresql.auto.conf");
        assert!(
            auto.contains(&format!("passfile=''{}''", passfile.display())),
            "{auto}"
        );
    }
    assert!(
        seen.iter().any(|s| s == "pg_basebackup") && seen.iter().any(|s| s == "pg_rewind"),
        "the watcher saw the programs run: {seen:?}"
    );
    assert!(found.is_empty(), "the password in processes: {found:#?}");
    let logs = logs.text();
    assert!(
        logs.contains("running"),
        "hale's logs were captured: {logs}"
    );
    assert!(
        !logs.contains(PASSWORD),
        "the password in hale's logs:\n{logs}"
    );
    for text in &said {
        assert!(!text.contains(PASSWORD), "the password in: {text}");
    }
    let mut server_files = files_ending(lab.path(), ".log");
    server_files.extend(files_ending(lab.path(), ".conf"));
    assert!(server_files.iter().any(|(_, t)| t.contains("authorized")));
    for (path, text) in server_files {
        assert!(
            !text.contains(PASSWORD),
            "the password in {}:\n{text}",
            path.display()
        );
    }
}

#[tokio::test]
async fn a_password_file_readable_by_others_is_refused_and_nothing_is_started() {
    let lab = Lab::new().with_scram(PASSWORD);
    let a = lab.primary("a", Opts::default()).await;
    let c = lab.standby("c", &a, Opts::default()).await;
    c.stop(&lab, "fast").await;
    let exposed = lab.path().join("exposed-password");
    std::fs::write(&exposed, format!("{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o644)).unwrap();

    // A clone: refused before the data directory is made or a slot taken.
    let mut b = lab.empty("b").cfg;
    b.password_file = Some(exposed.clone());
    let err = rejoin(&b, &a.upstream(), "b", "b", |_| {})
        .await
        .expect_err("an exposed password file");
    assert!(
        matches!(
            &err,
            RejoinError::Credentials(CredentialsError::Exposed { mode: 0o644, .. })
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("password_file") && text.contains("chmod 600"),
        "{text}"
    );
    assert!(!text.contains(PASSWORD) && !format!("{err:?}").contains(PASSWORD));
    assert!(!b.data_dir.exists(), "the data directory was made");
    assert!(
        !Path::new(&format!("{}.pgpass", b.data_dir.display())).exists(),
        "a passfile was written"
    );
    assert_eq!(
        a.number("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'b'")
            .await,
        0,
        "a slot was taken on the upstream"
    );

    // A stopped standby: not started.
    let mut stopped = c.cfg.clone();
    stopped.password_file = Some(exposed.clone());
    let err = start_standby(&stopped).await.expect_err("refused");
    assert!(
        matches!(
            err,
            StartError::Credentials(CredentialsError::Exposed { .. })
        ),
        "{err:?}"
    );
    assert_eq!(c.postmaster_pid(), None, "c was started");
    assert!(matches!(
        stopped.check_secret_files(),
        Err(CredentialsError::Exposed { .. })
    ));

    // A session: not opened.
    let mut session = over_tcp(&a);
    session.password_file = Some(exposed.clone());
    let err = standing(&session).await.expect_err("refused");
    assert!(
        matches!(
            err,
            StandingError::Connect(ConnectError::Credentials(CredentialsError::Exposed { .. }))
        ),
        "{err:?}"
    );

    // A passfile libpq could not read as postgres (root's) is refused too.
    let passfile = lab.path().join("roots.pgpass");
    std::fs::write(&passfile, format!("*:*:*:postgres:{PASSWORD}\n")).unwrap();
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut by_root = c.cfg.clone();
    by_root.password_file = None;
    by_root.passfile = Some(passfile.clone());
    let err = start_standby(&by_root).await.expect_err("refused");
    assert!(
        matches!(
            err,
            StartError::Credentials(CredentialsError::NotOwned { .. })
        ),
        "{err:?}"
    );
    assert_eq!(c.postmaster_pid(), None, "c was started");

    // Made private (and owned by postgres), the same files work.
    std::fs::set_permissions(&exposed, std::fs::Permissions::from_mode(0o600)).unwrap();
    let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
    std::os::unix::fs::chown(&passfile, Some(pg.uid.as_raw()), Some(pg.gid.as_raw())).unwrap();
    by_root.check_secret_files().expect("a private passfile");
    assert!(matches!(
        standing(&session).await,
        Ok(Standing::Primary { .. })
    ));
    // hale's sessions find their password in the passfile alone, too.
    let mut from_passfile = over_tcp(&a);
    from_passfile.password_file = None;
    from_passfile.passfile = Some(passfile);
    assert!(matches!(
        standing(&from_passfile).await,
        Ok(Standing::Primary { .. })
    ));
}
