//! Running PostgreSQL's programs (as the OS user that owns the cluster, under
//! hard timeouts), finding and killing the postmaster, and writing files the
//! server will read.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::{Gid, Pid, Uid, User};

use crate::config::PostgresConfig;

/// Why one of PostgreSQL's programs did not do its job.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// `os_user` is not a user of this host.
    #[error("no OS user {user:?} to run PostgreSQL's programs as{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    NoOsUser {
        /// The configured user.
        user: String,
        /// The lookup's error, if it failed rather than found nobody.
        reason: Option<String>,
    },
    /// The program could not be started (missing, not executable).
    #[error("cannot run {tool}: {source}")]
    Spawn {
        /// The program's path.
        tool: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The program did not finish in time; it was killed.
    #[error("{tool} did not finish within {after:?} and was killed")]
    TimedOut {
        /// The program's path.
        tool: PathBuf,
        /// The time it had.
        after: Duration,
    },
    /// The program exited with an error.
    #[error("{tool} failed ({status}): {output}")]
    Failed {
        /// The program's path.
        tool: PathBuf,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The end (600 bytes) of what it wrote, standard error first.
        output: String,
    },
    /// A file the step needs could not be written or removed (the server
    /// was not started).
    #[error("cannot change {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The OS user the programs run as and the files are owned by; `None` when
/// hale does not run as root (then everything is hale's own user's).
#[derive(Debug, Clone)]
pub(crate) struct OsUser {
    /// The user's id.
    pub(crate) uid: Uid,
    /// The user's primary group.
    pub(crate) gid: Gid,
    home: PathBuf,
    /// Its other groups (`/etc/group`): Debian's `postgres` reads the
    /// package's TLS key through `ssl-cert`.
    groups: Vec<Gid>,
}

impl OsUser {
    /// Looks up `cfg.os_user` when running as root.
    pub(crate) fn resolve(cfg: &PostgresConfig) -> Result<Option<OsUser>, ToolError> {
        if !Uid::effective().is_root() {
            return Ok(None);
        }
        match User::from_name(&cfg.os_user) {
            Ok(Some(user)) => {
                let groups = std::ffi::CString::new(user.name.as_bytes())
                    .ok()
                    .and_then(|name| nix::unistd::getgrouplist(&name, user.gid).ok())
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|g| *g != user.gid)
                    .collect();
                Ok(Some(OsUser {
                    uid: user.uid,
                    gid: user.gid,
                    home: user.dir,
                    groups,
                }))
            }
            found => Err(ToolError::NoOsUser {
                user: cfg.os_user.clone(),
                reason: found.err().map(|err| err.to_string()),
            }),
        }
    }
}

/// Runs PostgreSQL's programs from `cfg.bin_dir` as the cluster's OS user.
#[derive(Debug, Clone)]
pub(crate) struct Tools<'a> {
    cfg: &'a PostgresConfig,
    user: Option<OsUser>,
}

impl<'a> Tools<'a> {
    pub(crate) fn new(cfg: &'a PostgresConfig) -> Result<Self, ToolError> {
        Ok(Self {
            cfg,
            user: OsUser::resolve(cfg)?,
        })
    }

    pub(crate) fn user(&self) -> Option<&OsUser> {
        self.user.as_ref()
    }

    /// Runs `tool` with `args`, killing it if it has not exited after
    /// `timeout`. Its output is collected, so a program that leaves a daemon
    /// behind must redirect the daemon's output (`pg_ctl start -l`).
    pub(crate) async fn run<I, S>(
        &self,
        tool: &str,
        args: I,
        timeout: Duration,
    ) -> Result<Output, ToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let path = self.cfg.bin_dir.join(tool);
        let mut cmd = self.command(&path);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The OS user may not enter hale's working directory.
            .current_dir("/")
            // Messages hale logs stay readable whatever the host's locale.
            .env("LC_ALL", "C")
            .kill_on_drop(true);
        if let Some(user) = &self.user {
            cmd.env("HOME", &user.home);
        }
        tracing::debug!(tool = %path.display(), "running");
        let spawned = match SPAWNER.get() {
            Some(spawn) => spawn(cmd).await,
            None => cmd.spawn(),
        };
        let child = spawned.map_err(|source| ToolError::Spawn {
            tool: path.clone(),
            source,
        })?;
        // On timeout the future, and with it the child, is dropped: killed.
        match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Err(_) => Err(ToolError::TimedOut {
                tool: path,
                after: timeout,
            }),
            Ok(Err(source)) => Err(ToolError::Spawn { tool: path, source }),
            Ok(Ok(output)) if output.status.success() => Ok(output),
            Ok(Ok(output)) => {
                // pg_ctl explains itself on standard output.
                let text = [&output.stderr, &output.stdout]
                    .iter()
                    .map(|bytes| String::from_utf8_lossy(bytes).trim().to_owned())
                    .filter(|text| !text.is_empty())
                    .collect::<Vec<_>>()
                    .join(" / ");
                let start = text.len().saturating_sub(600);
                let start = (start..text.len())
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(text.len());
                Err(ToolError::Failed {
                    tool: path,
                    status: output.status,
                    output: text[start..].to_owned(),
                })
            }
        }
    }

    /// A command that runs `program` as the OS user, with its groups:
    /// through `setpriv` when the user has groups besides its primary one
    /// (a process started with only a uid and a gid has no other group:
    /// Debian's `postgres` could not read the package's TLS key, and the
    /// server would not start), else (or without `setpriv`, then with no
    /// other group) started as that user directly. As hale's own user when
    /// it does not run as root.
    fn command(&self, program: &Path) -> tokio::process::Command {
        let Some(user) = &self.user else {
            return tokio::process::Command::new(program);
        };
        if user.groups.is_empty() || !Path::new(SETPRIV).is_file() {
            let mut cmd = tokio::process::Command::new(program);
            cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
            return cmd;
        }
        let groups = std::iter::once(user.gid)
            .chain(user.groups.iter().copied())
            .map(|g| g.as_raw().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = tokio::process::Command::new(SETPRIV);
        cmd.arg(format!("--reuid={}", user.uid.as_raw()))
            .arg(format!("--regid={}", user.gid.as_raw()))
            .arg(format!("--groups={groups}"))
            .arg("--")
            .arg(program);
        cmd
    }

    /// `pg_ctl ACTION -D data_dir`, then `extra`, then `-w -t` with
    /// `timeout` in whole seconds (the hard limit is a little longer).
    pub(crate) async fn pg_ctl(
        &self,
        action: &str,
        extra: &[&OsStr],
        timeout: Duration,
    ) -> Result<(), ToolError> {
        self.pg_ctl_in(&self.cfg.data_dir, action, extra, timeout)
            .await
    }

    /// `pg_ctl ACTION -D dir ...`, as [`Tools::pg_ctl`].
    async fn pg_ctl_in(
        &self,
        dir: &Path,
        action: &str,
        extra: &[&OsStr],
        timeout: Duration,
    ) -> Result<(), ToolError> {
        // pg_ctl's own -t: whole seconds, at least 1.
        let secs = timeout.as_secs().max(1).to_string();
        let mut args: Vec<&OsStr> = vec![action.as_ref(), "-D".as_ref(), dir.as_ref()];
        args.extend(extra);
        args.extend([OsStr::new("-w"), OsStr::new("-t"), OsStr::new(&secs)]);
        self.run("pg_ctl", args, timeout + Duration::from_secs(1))
            .await
            .map(drop)
    }

    /// `pg_ctl start -w`: waits until the server accepts connections (as a
    /// primary, or as a hot standby once consistent). `options` go to
    /// `postgres` (`-o`). Started from `config_dir` when set (PostgreSQL
    /// reads `postgresql.conf` there and finds the data directory by its
    /// `data_directory`, as for a server `pg_ctlcluster` starts), else from
    /// `data_dir`; stopped, promoted and found by `data_dir` (its
    /// `postmaster.pid`) either way.
    pub(crate) async fn start(
        &self,
        timeout: Duration,
        options: Option<&str>,
    ) -> Result<(), ToolError> {
        let log = self.cfg.log_file();
        let mut extra: Vec<&OsStr> = vec!["-l".as_ref(), log.as_ref()];
        if let Some(options) = options {
            extra.extend([OsStr::new("-o"), OsStr::new(options)]);
        }
        self.pg_ctl_in(self.cfg.start_dir(), "start", &extra, timeout)
            .await?;
        place_server(&self.cfg.data_dir);
        Ok(())
    }

    /// `pg_ctl stop -m MODE -w`.
    pub(crate) async fn stop(&self, mode: &str, timeout: Duration) -> Result<(), ToolError> {
        self.pg_ctl("stop", &["-m".as_ref(), mode.as_ref()], timeout)
            .await
    }
}

/// util-linux's `setpriv`, which starts a program as another user with
/// that user's groups (`Command` sets only a uid and a gid).
const SETPRIV: &str = "/usr/bin/setpriv";

/// How a tool's process is started ([`spawn_tools_with`]).
pub type Spawner = fn(
    tokio::process::Command,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = io::Result<tokio::process::Child>> + Send>,
>;

/// The spawner set by [`spawn_tools_with`].
static SPAWNER: std::sync::OnceLock<Spawner> = std::sync::OnceLock::new();

/// Every tool this process runs from now on (`pg_ctl`, `pg_rewind`,
/// `pg_basebackup`..., and so the servers `pg_ctl start` leaves behind) is
/// started by `spawner` instead of here: the agent's, which starts them at
/// the priority the agent was started with, below its own (see
/// `hale_agent::priority`). Set once; later calls change nothing.
pub fn spawn_tools_with(spawner: Spawner) {
    let _ = SPAWNER.set(spawner);
}

/// The cgroup the servers hale starts are moved into ([`place_servers_in`]).
static SERVERS_CGROUP: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Every server this process starts from now on (`pg_ctl start`) is moved,
/// once it accepts connections, into the cgroup `dir` (a directory of the
/// cgroup v2 hierarchy): the agent's delegated `services` leaf, so that
/// restarting the agent's unit leaves it running and apart from the
/// agent's own processes. Set once; later calls change nothing. A server
/// that cannot be moved is logged and stays where `pg_ctl` left it.
pub fn place_servers_in(dir: PathBuf) {
    let _ = SERVERS_CGROUP.set(dir);
}

/// Moves the postmaster of `data_dir` into the servers' cgroup (if one was
/// set), then its children: the postmaster first, so that whatever it
/// forks after its move is born there, then everything it had forked before.
fn place_server(data_dir: &Path) {
    let (Some(dir), Some(pid)) = (SERVERS_CGROUP.get(), postmaster(data_dir)) else {
        return;
    };
    let procs = dir.join("cgroup.procs");
    let pids = std::iter::once(pid.as_raw()).chain(children(pid.as_raw()).into_iter().rev());
    for (i, p) in pids.enumerate() {
        if let Err(e) = std::fs::write(&procs, p.to_string()) {
            // A child that exited meanwhile is no failure.
            if i == 0 || Path::new(&format!("/proc/{p}")).exists() {
                tracing::warn!(pid = p, cgroup = %dir.display(), "cannot move the server's process into its cgroup: {e}");
            }
        }
    }
}

/// The postmaster of `data_dir`, when one runs: the pid in `postmaster.pid`,
/// checked to be a live process whose working directory is `data_dir` (a
/// stale file's pid may have been reused by anything).
pub(crate) fn postmaster(data_dir: &Path) -> Option<Pid> {
    let text = std::fs::read_to_string(data_dir.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    if pid <= 0 {
        return None;
    }
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let ours = std::fs::canonicalize(data_dir).ok()? == cwd;
    (ours && !matches!(process_state(pid), None | Some('Z') | Some('X')))
        .then(|| Pid::from_raw(pid))
}

/// The fields of `/proc/PID/stat` after the command name (`S ppid ...`);
/// `None` when the process does not exist.
fn stat_fields(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
    Some(stat.get(stat.rfind(')')? + 1..)?.to_owned())
}

/// The one-letter state of a process (`R`, `S`, `D`, `T` stopped, `Z`...), from
/// `/proc/PID/stat`; `None` when it does not exist.
pub(crate) fn process_state(pid: i32) -> Option<char> {
    stat_fields(pid)?.split_whitespace().next()?.chars().next()
}

/// The processes whose parent is `pid`.
fn children(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&child| {
            let ppid = stat_fields(child).and_then(|s| s.split_whitespace().nth(1)?.parse().ok());
            ppid == Some(pid)
        })
        .collect()
}

/// Kills a postmaster that does not stop: stops it (so it forks nothing more),
/// kills its children (backends may still be committing), then kills it.
/// Answers the processes killed, the postmaster first.
pub(crate) fn kill_postmaster(pid: Pid) -> Vec<Pid> {
    let _ = kill(pid, Signal::SIGSTOP);
    let mut killed = vec![pid];
    for child in children(pid.as_raw()) {
        let child = Pid::from_raw(child);
        let _ = kill(child, Signal::SIGKILL);
        killed.push(child);
    }
    let _ = kill(pid, Signal::SIGKILL);
    killed
}

/// Removes the lock files of a postmaster that was killed (`pid`, now dead
/// or a zombie): `postmaster.pid` and the lock of the unix socket it names,
/// each only if it names `pid`.
pub(crate) async fn remove_dead_locks(
    data_dir: &Path,
    pid: Pid,
) -> Result<(), (PathBuf, io::Error)> {
    let pid_file = data_dir.join("postmaster.pid");
    let Ok(text) = tokio::fs::read_to_string(&pid_file).await else {
        return Ok(());
    };
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let names_it = |line: Option<&&str>| line.is_some_and(|l| *l == pid.as_raw().to_string());
    if !names_it(lines.first()) {
        return Ok(());
    }
    // postmaster.pid: pid, data directory, start time, port, socket directory...
    if let (Some(port), Some(dir)) = (lines.get(3), lines.get(4)) {
        if !dir.is_empty() {
            let lock = Path::new(dir).join(format!(".s.PGSQL.{port}.lock"));
            if let Ok(lock_text) = tokio::fs::read_to_string(&lock).await {
                if names_it(lock_text.lines().map(str::trim).collect::<Vec<_>>().first()) {
                    remove_synced(&lock)
                        .await
                        .map_err(|err| (lock.clone(), err))?;
                }
            }
        }
    }
    remove_synced(&pid_file)
        .await
        .map_err(|err| (pid_file.clone(), err))
}

/// Removes the lock files of a server that is not running: call it only
/// when [`postmaster`] finds no live server of `data_dir` (a server
/// killed while its disk stalled leaves them, and PostgreSQL refuses to
/// start while the pid they name is alive: a zombie, or another process
/// that took the pid since).
pub(crate) async fn remove_stale_locks(data_dir: &Path) -> Result<(), (PathBuf, io::Error)> {
    let pid_file = data_dir.join("postmaster.pid");
    let Ok(text) = tokio::fs::read_to_string(&pid_file).await else {
        return Ok(());
    };
    let Some(pid) = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<i32>().ok())
    else {
        return Ok(());
    };
    if pid <= 0 || postmaster(data_dir).is_some() {
        return Ok(());
    }
    remove_dead_locks(data_dir, Pid::from_raw(pid)).await
}

/// Whether process `pid` is gone (or a zombie).
pub(crate) fn gone(pid: Pid) -> bool {
    matches!(process_state(pid.as_raw()), None | Some('Z') | Some('X'))
}

/// Whether process `pid` has SIGKILL pending (waiting in the kernel, it
/// dies when its call returns, before it runs again), from the pending
/// masks of `/proc/PID/status`.
pub(crate) fn kill_pending(pid: Pid) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", pid.as_raw())) else {
        return false;
    };
    status.lines().any(|line| {
        let mask = line
            .strip_prefix("SigPnd:")
            .or_else(|| line.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & (1 << (Signal::SIGKILL as u64 - 1)) != 0)
    })
}

/// Writes `contents` to `path` (through a temporary file and a rename, then
/// synced with its directory) with mode 0600, owned by the OS user.
pub(crate) async fn write_owned(
    path: &Path,
    contents: Vec<u8>,
    user: Option<&OsUser>,
) -> io::Result<()> {
    let path = path.to_owned();
    let owner = user.map(|u| (u.uid.as_raw(), u.gid.as_raw()));
    run_blocking(move || {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut tmp_name = path.clone().into_os_string();
        tmp_name.push(".hale-tmp");
        let tmp = PathBuf::from(tmp_name);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&contents)?;
        file.sync_all()?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&tmp, Some(uid), Some(gid))?;
        }
        std::fs::rename(&tmp, &path)?;
        sync_parent(&path)
    })
    .await
}

/// Removes `path` if it exists, and syncs its directory.
pub(crate) async fn remove_synced(path: &Path) -> io::Result<()> {
    let path = path.to_owned();
    run_blocking(move || match std::fs::remove_file(&path) {
        Ok(()) => sync_parent(&path),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    })
    .await
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Runs blocking file work off the async threads.
pub(crate) async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(io::Error::other)?
}
