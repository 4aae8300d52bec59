//! The one harness of the real-process tests: start `hale agent`
//! processes (plain loopback clusters, or role clusters with a control
//! plane), kill them by process id whatever happens (with the watchdogs
//! they started), talk to them with the typed client, and poll for
//! conditions with deadlines ([`wait_for`]) or check them throughout a
//! period ([`during`]).

use hale_agent::view::MemberState;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use hale_agent::view::RolesView;
use hale_agent::{AgentEvent, Client, EventView, Key, MemberView};

// By path: the benchmarks include this file from elsewhere.
#[path = "support/roles.rs"]
mod roles;
pub use roles::*;
#[path = "support/previous.rs"]
mod previous;
pub use previous::*;

/// The `hale` binary the agents run: the one under test, unless the agent
/// benchmark (not a test: none is built for it) has set its own first.
pub static HALE_BIN: OnceLock<PathBuf> = OnceLock::new();

/// The `hale` binary the agents run (see [`HALE_BIN`]).
pub fn hale_bin() -> &'static Path {
    HALE_BIN.get_or_init(|| {
        let Some(bin) = option_env!("CARGO_BIN_EXE_hale") else {
            panic!("not a test: set HALE_BIN first");
        };
        PathBuf::from(bin)
    })
}

/// How often the polling helpers look again.
const POLL: Duration = Duration::from_millis(100);

/// A loopback port free for both TCP and UDP, for an agent to bind later
/// (control-plane servers must know each other's addresses before they
/// start, so port 0 will not do). Ports come from below the kernel's
/// ephemeral range (32768 and up), so no port-0 bind or outgoing connection
/// of a concurrent test can take one between now and the agent's bind, and
/// no two callers in this process get the same one.
pub fn free_port() -> u16 {
    use std::net::{TcpListener, UdpSocket};
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    // Concurrent test processes start at different places.
    let base = std::process::id().wrapping_mul(7919) % SPAN;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(
            n < SPAN,
            "every test port below the ephemeral range was handed out"
        );
        let port = (LOW + (base + n) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
        {
            return port;
        }
    }
}

/// Runs `f` (a call of the typed client) to completion, on one runtime
/// shared by every test of the binary.
pub fn call<F: Future>(f: F) -> F::Output {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
    .block_on(f)
}

/// The typed client of the agent whose API is at `http`.
pub fn api(http: SocketAddr) -> Client {
    Client::new(http.to_string())
}

/// The variable that makes a test which cannot run here fail instead of
/// skip: `.ci/run` sets it, so CI never passes a test it did not run.
pub const SKIP_NOTHING: &str = "HALE_TESTS_SKIP_NOTHING";

/// A test that cannot run on this machine says why and is skipped (the
/// caller returns); where [`SKIP_NOTHING`] is set it fails instead.
pub fn skip(why: &str) {
    assert!(
        std::env::var_os(SKIP_NOTHING).is_none(),
        "cannot run here ({SKIP_NOTHING} is set, so nothing is skipped): {why}"
    );
    println!("SKIPPED: {why}");
}

/// Polls `cond` until it holds; panics naming `what` if `deadline` passes first.
pub fn wait_until(deadline: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    wait_for(deadline, what, || cond().then_some(()));
}

/// Polls `f` until it gives a value; panics naming `what` if `deadline` passes first.
pub fn wait_for<T>(deadline: Duration, what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_for_every(POLL, deadline, what, f)
}

/// [`wait_for`], looking again every `poll`.
pub fn wait_for_every<T>(
    poll: Duration,
    deadline: Duration,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for: {what}"
        );
        std::thread::sleep(poll);
    }
}

/// Polls `f` until it gives a value or `deadline` passes: `None` then (for a
/// caller that says more than [`wait_for`] can when it times out).
pub fn poll_for<T>(deadline: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// Calls `f` every `every` for `length`: for checks that must hold throughout a period.
pub fn during(length: Duration, every: Duration, mut f: impl FnMut()) {
    let start = Instant::now();
    while start.elapsed() < length {
        f();
        std::thread::sleep(every);
    }
}

/// A test's log directory: removed when the test passes, kept (and named)
/// when it fails.
pub struct LogDir(PathBuf);

impl LogDir {
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("HALE_KEEP_LOGS").is_some() {
            eprintln!("agent logs kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
            if let Some(parent) = self.0.parent() {
                let _ = std::fs::remove_dir(parent); // Only once empty.
            }
        }
    }
}

/// A directory for this test's logs and its agents' data: under /dev/shm
/// (a tmpfs) when there is one, else the system temporary directory.
///
/// The suite runs dozens of control-plane servers at once, and their
/// `fsync`s on one shared disk stall each other for seconds (a leader's
/// Raft core was seen blocked 4 s): past what a lease rides out, so a
/// role moved in tests that are not about disks, and they measured the
/// host. What a slow or full disk does is tested by injecting it (the
/// disk drills, `control_storage.rs`), and measured in BENCHMARKS.md
/// ("Roles at scale").
pub fn log_dir(test: &str) -> LogDir {
    let shm = std::path::Path::new("/dev/shm");
    let root = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let d = root
        .join(format!("hale-it-{}", std::process::id()))
        .join(test);
    std::fs::create_dir_all(&d).unwrap();
    LogDir(d)
}

/// A cluster name no other test (or run) uses.
pub fn cluster_name(test: &str) -> String {
    format!("it-{test}-{}", std::process::id())
}

/// How to start one agent.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Node name.
    pub name: String,
    /// Gossip bind address (port 0: any free port).
    pub bind: SocketAddr,
    /// HTTP address (port 0: any free port).
    pub http: SocketAddr,
    /// Addresses to join through.
    pub seeds: Vec<SocketAddr>,
    /// Cluster name.
    pub cluster: String,
    /// Base64 cluster key.
    pub key: String,
    /// Run inside this network namespace (`ip netns exec`).
    pub netns: Option<String>,
    /// Where the agent's log goes.
    pub log: PathBuf,
    /// Its timing profile (`lan`, `wan`, `local`).
    pub profile: String,
    /// More environment for the agent's process (libfaketime, say).
    pub env: Vec<(String, String)>,
    /// Another `hale` executable than the one under test (the previous
    /// release: [`previous_release`]).
    pub exe: Option<PathBuf>,
    /// A configuration file (`-c`), under the environment's overrides.
    pub config: Option<PathBuf>,
}

/// A `lan` agent `name` of cluster `cluster` (key `key`) on loopback with
/// any free ports, joining through `seed`, logging into `dir`.
pub fn loopback_spec(
    name: &str,
    seed: Option<&AgentProc>,
    cluster: &str,
    key: &str,
    dir: &Path,
) -> Spec {
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    Spec {
        name: name.to_owned(),
        bind: any,
        http: any,
        seeds: seed.map(|a| a.gossip).into_iter().collect(),
        cluster: cluster.to_owned(),
        key: key.to_owned(),
        netns: None,
        log: dir.join(format!("{name}.log")),
        profile: "lan".into(),
        env: Vec::new(),
        exe: None,
        config: None,
    }
}

/// A process the test started. Dropping it kills it by its process id
/// (SIGCONT first, in case it was stopped) and reaps it, then kills the
/// processes it had started (an agent's role watchdogs and hooks).
pub struct Proc(pub Child);

impl Proc {
    /// Kills the process (SIGCONT first) and reaps it: the processes it had
    /// started, which live on (none if it was already gone and reaped).
    fn stop(&mut self) -> Vec<i32> {
        if matches!(self.0.try_wait(), Ok(Some(_))) {
            return Vec::new(); // What it started is no longer its.
        }
        let pid = self.0.id() as i32;
        let started = descendants(pid);
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
        started
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        if matches!(self.0.try_wait(), Ok(None)) {
            kill_tree(pid);
        }
        let _ = self.0.wait();
        // Also when a test had already killed it.
        forget_faketime(pid);
    }
}

/// Kills `pid` and every process it started, all frozen first, so that
/// none of them reacts to another's death: a watchdog fences when its
/// agent dies, and its fence (a hook in a process group of its own) wrote
/// to a test's log directory while the directory was being removed, which
/// then stayed behind in /dev/shm.
pub fn kill_tree(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
    let mut tree = Vec::new();
    // Each pass freezes what the last one found; a process started in
    // between is found by the next.
    loop {
        let found = descendants(pid);
        if found == tree {
            break;
        }
        for &p in &found {
            let _ = kill(Pid::from_raw(p), Signal::SIGSTOP);
        }
        tree = found;
    }
    for p in std::iter::once(pid).chain(tree) {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
        forget_faketime(p);
    }
}

/// Removes what libfaketime kept in /dev/shm for process `pid`, killed:
/// it removes its segment and semaphore at exit, which SIGKILL skips (a
/// full run of the suite left hundreds).
pub fn forget_faketime(pid: i32) {
    let _ = std::fs::remove_file(format!("/dev/shm/faketime_shm_{pid}"));
    let _ = std::fs::remove_file(format!("/dev/shm/sem.faketime_sem_{pid}"));
}

/// A running agent process, killed on drop (see [`Proc`]).
pub struct AgentProc {
    proc: Option<Proc>,
    /// What it had started when [`AgentProc::kill`] crashed it (its
    /// watchdogs fence on their own), killed by id on drop.
    orphans: Vec<i32>,
    /// Node name.
    pub name: String,
    /// Gossip address, as bound.
    pub gossip: SocketAddr,
    /// HTTP address, as bound.
    pub http: SocketAddr,
    /// The network namespace it runs in, if any.
    pub netns: Option<String>,
    /// Its log file.
    pub log: PathBuf,
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if std::thread::panicking() && self.proc.is_some() {
            eprintln!("---- last lines of {} ----", self.log.display());
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            for l in &lines[lines.len().saturating_sub(20)..] {
                eprintln!("{l}");
            }
        }
        self.proc.take();
        for p in std::mem::take(&mut self.orphans) {
            kill_tree(p);
        }
    }
}

/// Every process descended from `pid` (by the parent ids in `/proc`).
pub fn descendants(pid: i32) -> Vec<i32> {
    let parent_of = |p: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces, not `)`.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let all: Vec<i32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(all.iter().filter(|&&c| parent_of(c) == Some(p)));
        i += 1;
    }
    out.remove(0);
    out
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The value of `key=` on the "hale agent running" line of an agent's log.
fn logged_addr(log: &Path, key: &str) -> Option<SocketAddr> {
    let text = strip_ansi(&std::fs::read_to_string(log).ok()?);
    let line = text.lines().find(|l| l.contains("hale agent running"))?;
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..].split_whitespace().next()?.parse().ok()
}

/// A `hale` command, run inside network namespace `netns` if given.
fn hale(netns: Option<&str>) -> Command {
    hale_exe(hale_bin(), netns)
}

/// Executable `exe` (a `hale`), run inside network namespace `netns` if given.
fn hale_exe(exe: &Path, netns: Option<&str>) -> Command {
    let Some(ns) = netns else {
        return Command::new(exe);
    };
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(exe);
    c
}

/// Starts an agent and waits until it logs the addresses it bound.
pub fn spawn(spec: &Spec) -> AgentProc {
    let log = std::fs::File::create(&spec.log).unwrap();
    let mut cmd = hale_exe(
        spec.exe.as_deref().unwrap_or(hale_bin()),
        spec.netns.as_deref(),
    );
    cmd.arg("agent");
    if let Some(c) = &spec.config {
        cmd.arg("-c").arg(c);
    }
    for (k, _) in std::env::vars() {
        if k.starts_with("HALE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HALE_NAME", &spec.name)
        .env("HALE_BIND", spec.bind.to_string())
        .env("HALE_HTTP", spec.http.to_string())
        .env("HALE_CLUSTER", &spec.cluster)
        .env("HALE_KEYS", &spec.key)
        .env("HALE_PROFILE", &spec.profile)
        .env("HALE_LOG", "info")
        .env("NO_COLOR", "1")
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    if !spec.seeds.is_empty() {
        let s: Vec<String> = spec.seeds.iter().map(ToString::to_string).collect();
        cmd.env("HALE_SEEDS", s.join(","));
    }
    let mut child = cmd.spawn().unwrap();
    let started = wait_for(Duration::from_secs(20), "the agent to start", || {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&spec.log).unwrap_or_default();
            panic!("agent {} exited with {status} at start:\n{text}", spec.name);
        }
        Some((
            logged_addr(&spec.log, "gossip")?,
            logged_addr(&spec.log, "http")?,
        ))
    });
    AgentProc {
        proc: Some(Proc(child)),
        orphans: Vec::new(),
        name: spec.name.clone(),
        gossip: started.0,
        http: started.1,
        netns: spec.netns.clone(),
        log: spec.log.clone(),
    }
}

/// Starts `hale agent -c <config>` (in `netns`, if given) with its output
/// in `<dir>/<name>.log`, without waiting for it: control-plane servers
/// start together.
pub fn spawn_with_config(
    dir: &Path,
    name: &str,
    config: &Path,
    gossip: SocketAddr,
    http: SocketAddr,
    netns: Option<&str>,
    env: &[(String, String)],
) -> AgentProc {
    spawn_exe_with_config(hale_bin(), dir, name, config, gossip, http, netns, env)
}

/// [`spawn_with_config`] of another `hale` executable (the previous release).
#[allow(clippy::too_many_arguments)] // spawn_with_config's, and the executable.
pub fn spawn_exe_with_config(
    exe: &Path,
    dir: &Path,
    name: &str,
    config: &Path,
    gossip: SocketAddr,
    http: SocketAddr,
    netns: Option<&str>,
    env: &[(String, String)],
) -> AgentProc {
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let child = hale_exe(exe, netns)
        .args(["agent", "-c"])
        .arg(config)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("HALE_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    AgentProc {
        proc: Some(Proc(child)),
        orphans: Vec::new(),
        name: name.to_owned(),
        gossip,
        http,
        netns: netns.map(str::to_owned),
        log,
    }
}

impl AgentProc {
    /// The agent's process id.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.proc.as_ref().expect("the agent was killed").0.id() as i32)
    }

    /// Whether it still runs (it was not killed by the test).
    pub fn running(&self) -> bool {
        self.proc.is_some()
    }

    /// Sends `sig` to the agent.
    pub fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).unwrap();
    }

    /// Crashes the agent (SIGKILL, by process id) and reaps it. What it
    /// started lives on, as after a real crash (a role's watchdog fences
    /// on its own), and is killed when this drops.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            self.orphans.extend(p.stop());
        }
    }

    /// Whether the process has exited (and reaps it).
    pub fn exited(&mut self) -> bool {
        self.proc
            .as_mut()
            .is_none_or(|p| p.0.try_wait().unwrap().is_some())
    }

    /// Runs `hale ARGS --http <api>` next to the agent (in its namespace).
    pub fn cli(&self, args: &[&str]) -> Output {
        let http = self.http.to_string();
        let mut cmd = hale(self.netns.as_deref());
        cmd.args(args).args(["--http", &http]).output().unwrap()
    }

    /// [`AgentProc::cli`], which must succeed: its standard output.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(out.status.success(), "hale {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// The typed client of its API (loopback agents only).
    pub fn api(&self) -> Client {
        api(self.http)
    }

    /// The agent's member list, or None if it does not answer.
    pub fn members(&self) -> Option<Vec<MemberView>> {
        self.ask(&["members", "--json"], |api| call(api.members()).ok())
    }

    /// `hale ARGS`'s JSON in a namespace (loopback: `typed` on the client).
    fn ask<T: serde::de::DeserializeOwned>(
        &self,
        args: &[&str],
        typed: impl FnOnce(Client) -> Option<T>,
    ) -> Option<T> {
        match self.netns {
            Some(_) => serde_json::from_slice(&self.cli(args).stdout).ok(),
            None => typed(self.api()),
        }
    }

    /// The agent's event history, or None if it does not answer.
    pub fn events(&self) -> Option<Vec<EventView>> {
        if self.netns.is_some() {
            let out = self.cli(&["events", "--json"]);
            if !out.status.success() {
                return None;
            }
            return String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).ok())
                .collect();
        }
        call(self.api().events(0)).ok()
    }

    /// Its `/v1/roles`, or None if it does not answer.
    pub fn roles(&self) -> Option<RolesView> {
        self.ask(&["roles", "--json"], |api| call(api.roles()).ok())
    }

    /// The state this agent gives `name`, if it knows it.
    pub fn state_of(&self, name: &str) -> Option<MemberState> {
        self.members()?
            .into_iter()
            .find(|m| m.name == name)
            .map(|m| m.state)
    }

    /// The agent's `/metrics` text (loopback agents only).
    pub fn metrics(&self) -> Option<String> {
        call(self.api().metrics()).ok()
    }

    /// Resident memory of the agent in KiB (VmRSS).
    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

/// Sum of the samples of metric `name` whose labels contain every `label="value"` in `labels`.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Agents started together, with their shared key and cluster name: a
/// plain loopback cluster ([`Cluster::start`]) or a role cluster
/// ([`Cluster::roles`]). Dropping it kills every agent (and what they
/// started) by process id.
pub struct Cluster {
    /// The agents; dropping the cluster kills them all.
    pub agents: Vec<AgentProc>,
    /// The shared base64 key.
    pub key: String,
    /// The cluster name.
    pub cluster: String,
    /// Where the logs go (declared last: dropped after the agents).
    pub logs: LogDir,
}

impl Cluster {
    /// Starts `n` agents on loopback with any free ports, each joining
    /// through the first, and waits (30 s at most) until every agent sees
    /// every agent alive.
    pub fn start(test: &str, n: usize) -> Cluster {
        Cluster::start_bound(test, n, false)
    }

    /// [`Cluster::start`] with gossip ports from [`free_port`], below the
    /// kernel's ephemeral range, for a test that restarts agents on their
    /// old ports: a port-0 bind's port can be taken, while its agent is
    /// down, by any outgoing connection on the machine (a concurrent test
    /// failed to restart an agent on "Address already in use").
    pub fn start_restartable(test: &str, n: usize) -> Cluster {
        Cluster::start_bound(test, n, true)
    }

    fn start_bound(test: &str, n: usize, fixed_ports: bool) -> Cluster {
        let mut c = Cluster {
            agents: Vec::new(),
            key: Key::generate().to_base64(),
            cluster: cluster_name(test),
            logs: log_dir(test),
        };
        for i in 0..n {
            let name = format!("n{i}");
            let mut spec = c.spec(&name);
            if fixed_ports {
                spec.bind = SocketAddr::from(([127, 0, 0, 1], free_port()));
            }
            c.agents.push(spawn(&spec));
        }
        c.wait_formed(Duration::from_secs(30));
        c
    }

    /// A spec for one more loopback agent of this cluster, seeded with the first.
    pub fn spec(&self, name: &str) -> Spec {
        let (first, dir) = (self.agents.first(), self.logs.path());
        loopback_spec(name, first, &self.cluster, &self.key, dir)
    }

    /// Names of every agent.
    pub fn names(&self) -> Vec<String> {
        self.agents.iter().map(|a| a.name.clone()).collect()
    }

    /// Waits until every agent sees every agent (itself included) alive.
    pub fn wait_formed(&self, deadline: Duration) {
        wait_all_alive(
            &self.agents,
            deadline,
            "every agent to see every agent alive",
        );
    }

    /// Three agents on loopback, each a control-plane server and a
    /// candidate for role `db` (see [`start_role_cluster`]), with `extra`
    /// appended to every configuration.
    pub fn roles(test: &str, extra: &str) -> Cluster {
        Cluster::roles_with(test, 3, |_, _| None, |_| extra.to_owned(), |_| {})
    }

    /// A role cluster of `n` agents on loopback (the first three
    /// control-plane servers) with hook scripts and settings of the test's
    /// own (see [`start_role_cluster`]); `prepare(dir)` runs once the
    /// configurations are written, before any agent starts.
    pub fn roles_with(
        test: &str,
        n: usize,
        hooks: impl Fn(usize, &Path) -> Option<(String, String)>,
        extra: impl Fn(usize) -> String,
        prepare: impl FnOnce(&Path),
    ) -> Cluster {
        Cluster::roles_on(test, RoleNode::loopback(n), hooks, extra, prepare)
    }

    /// A role cluster (see [`Cluster::roles`]) of `n` agents on loopback,
    /// every one (and its watchdogs) run by executable `exe`: the previous
    /// release, say.
    pub fn roles_of(test: &str, n: usize, exe: &Path) -> Cluster {
        let mut nodes = RoleNode::loopback(n);
        for node in &mut nodes {
            node.exe = Some(exe.to_owned());
        }
        Cluster::roles_on(test, nodes, |_, _| None, |_| String::new(), |_| {})
    }

    /// A role cluster of `n` agents on loopback with instant hooks, agent
    /// `i` run with the extra environment `env(i)` (libfaketime, say).
    pub fn roles_with_env(
        test: &str,
        n: usize,
        env: impl Fn(usize) -> Vec<(String, String)>,
    ) -> Cluster {
        let mut nodes = RoleNode::loopback(n);
        for (i, node) in nodes.iter_mut().enumerate() {
            node.env = env(i);
        }
        Cluster::roles_on(test, nodes, |_, _| None, |_| String::new(), |_| {})
    }

    /// A role cluster of `nodes` (their executables, environments and
    /// addresses) with hooks and settings of the test's own (see
    /// [`Cluster::roles_with`]).
    pub fn roles_on(
        test: &str,
        nodes: Vec<RoleNode>,
        hooks: impl Fn(usize, &Path) -> Option<(String, String)>,
        extra: impl Fn(usize) -> String,
        prepare: impl FnOnce(&Path),
    ) -> Cluster {
        let c = Cluster {
            agents: Vec::new(),
            key: Key::generate().to_base64(),
            cluster: cluster_name(test),
            logs: log_dir(test),
        };
        let agents = start_role_cluster(
            c.logs.path(),
            &c.cluster,
            &c.key,
            &nodes,
            hooks,
            extra,
            prepare,
        );
        let c = Cluster { agents, ..c };
        // Formed before the test acts: a member's first join can find its
        // seed not yet listening and retry seconds later, and a test that
        // killed it meanwhile waited for a death nobody could see.
        c.wait_formed(Duration::from_secs(30));
        c
    }

    /// Asserts every 250 ms for `length` that `db` stays with `held`
    /// (whenever a control-plane server answers); `when` ends the message.
    pub fn assert_holder_stays(&self, length: Duration, held: &(String, u64), when: &str) {
        during(length, Duration::from_millis(250), || {
            if let Some(now) = self.holder() {
                assert_eq!(&now, held, "the role moved {when}");
            }
        });
    }

    /// A file in the cluster's directory (`hooks.log`, `n0.toml`, ...).
    pub fn path(&self, f: &str) -> PathBuf {
        self.logs.path().join(f)
    }

    /// The index of the agent named `name`.
    pub fn index(&self, name: &str) -> usize {
        self.agents.iter().position(|a| a.name == name).unwrap()
    }

    /// Sends `sig` to agent `i`.
    pub fn signal(&self, i: usize, sig: Signal) {
        self.agents[i].signal(sig);
    }

    /// The holder and epoch of `db`, as the first running control-plane
    /// server that answers sees it.
    pub fn holder(&self) -> Option<(String, u64)> {
        let servers = self.agents.iter().take(3);
        servers.filter(|a| a.running()).find_map(db_holder)
    }
}

/// The holder and epoch of `db` as agent `a` sees it.
pub fn db_holder(a: &AgentProc) -> Option<(String, u64)> {
    let l = a.roles()?.leases?.remove("db")?;
    Some((l.holder?, l.epoch))
}

/// How many members `a` sees alive (itself included).
pub fn alive_count(a: &AgentProc) -> Option<usize> {
    Some(
        a.members()?
            .iter()
            .filter(|m| m.state == MemberState::Alive)
            .count(),
    )
}

/// Waits until every agent of `agents` sees every one of them (itself
/// included) alive; panics naming `what` if `deadline` passes first.
pub fn wait_all_alive(agents: &[AgentProc], deadline: Duration, what: &str) {
    let alive = |v: &HashMap<String, MemberState>, b: &AgentProc| {
        v.get(&b.name) == Some(&MemberState::Alive)
    };
    wait_until(deadline, what, || {
        (agents.iter()).all(|a| view(a).is_some_and(|v| agents.iter().all(|b| alive(&v, b))))
    });
}

/// Whether every agent of `agents` gives `name` the state `state`.
pub fn all_see(agents: &[AgentProc], name: &str, state: MemberState) -> bool {
    agents.iter().all(|a| a.state_of(name) == Some(state))
}

/// `name -> state` as agent `a` sees it.
pub fn view(a: &AgentProc) -> Option<HashMap<String, MemberState>> {
    Some(
        a.members()?
            .into_iter()
            .map(|m| (m.name, m.state))
            .collect(),
    )
}

/// The `dead` events in `a`'s history.
pub fn dead_events(a: &AgentProc) -> Vec<EventView> {
    a.events()
        .unwrap_or_default()
        .into_iter()
        .filter(|e| matches!(e.event, AgentEvent::Dead(_)))
        .collect()
}
