//! The processes of a run: on every host of a [`Lab`], a fenced register
//! (`hale-nemesis register`) and a `hale agent` (the first three are
//! control-plane servers; all are candidates for role `db` with hooks that
//! drive the local register), started with `ip netns exec`, optionally
//! under libfaketime. Processes are found and signalled by process id:
//! our own children, or the processes of a host's namespace.

use std::fs::OpenOptions;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::lab::{cmdline, ns_pids, Lab, LabError};

/// Gossip port of every agent.
pub const GOSSIP_PORT: u16 = 7946;
/// HTTP API port of every agent.
pub const HTTP_PORT: u16 = 7947;
/// Control-plane port of the servers.
pub const CONTROL_PORT: u16 = 7948;
/// The register's port.
pub const REGISTER_PORT: u16 = 7070;
/// How many of the hosts are control-plane servers.
pub const SERVERS: usize = 3;

/// The agents' API token (the API listens on the host's address).
pub const API_TOKEN: &str = "nemesis-token";

/// What can go wrong starting processes.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A process could not be started or a file written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// `hale keygen` failed.
    #[error("`{0} keygen` failed")]
    Keygen(PathBuf),
    /// The lab failed.
    #[error(transparent)]
    Lab(#[from] LabError),
}

/// How an agent's clocks run (libfaketime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockMode {
    /// The true clocks.
    True,
    /// The wall clock stepped by this many seconds; monotonic untouched.
    Step(i64),
    /// Every clock at this many thousandths of true speed.
    Rate(u32),
}

/// The path of libfaketime, if installed.
pub fn faketime_lib() -> Option<PathBuf> {
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// How the cluster is set up.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// The `hale` binary.
    pub hale_bin: PathBuf,
    /// This harness's binary (register and hooks).
    pub nemesis_bin: PathBuf,
    /// Each host's promote hook length (ms).
    pub promote_ms: Vec<u64>,
    /// Each host's demote hook length (ms).
    pub demote_ms: Vec<u64>,
    /// Give agents a `state_dir` (on the host's tmpfs).
    pub state_dir: bool,
    /// `HALE_PLANTED_BUG` for the agents (test builds only).
    pub planted_bug: Option<String>,
    /// The registers skip their epoch checks (planted bug).
    pub register_skips_epoch_check: bool,
    /// The previous release's `hale` (upgrade and downgrade), if built.
    pub previous_bin: Option<PathBuf>,
}

/// The running processes of every host.
pub struct Cluster {
    /// The network.
    pub lab: Lab,
    /// The setup.
    pub cfg: ClusterConfig,
    /// Node names (`h0`...).
    pub names: Vec<String>,
    agents: Vec<Option<Child>>,
    registers: Vec<Option<Child>>,
    /// Each agent's clocks now.
    pub clocks: Vec<ClockMode>,
    /// How many times each agent was started (the events' sequence restarts).
    pub generations: Vec<u64>,
    /// Whether each agent runs the previous release (it restarts so).
    pub previous: Vec<bool>,
    /// The cluster's keys as its configuration names them, the primary first.
    pub keys: Vec<String>,
    /// Each host's priority for role `db`.
    pub priority: Vec<u32>,
    cluster_name: String,
}

/// A new cluster key (`hale keygen`).
pub fn keygen(hale: &Path) -> Result<String, ClusterError> {
    let out = Command::new(hale).arg("keygen").output()?;
    let key = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || key.is_empty() {
        return Err(ClusterError::Keygen(hale.to_owned()));
    }
    Ok(key)
}

/// An agent's HTTP API address.
pub fn api_addr(ip: Ipv4Addr) -> SocketAddr {
    SocketAddr::from((ip, HTTP_PORT))
}

/// A register's address.
pub fn register_addr(ip: Ipv4Addr) -> SocketAddr {
    SocketAddr::from((ip, REGISTER_PORT))
}

fn q(p: &Path) -> String {
    format!("{:?}", p.to_string_lossy())
}

impl Cluster {
    /// Writes every host's configuration; starts nothing yet.
    pub fn new(lab: Lab, cfg: ClusterConfig, cluster_name: &str) -> Result<Cluster, ClusterError> {
        let key = keygen(&cfg.hale_bin)?;
        let n = lab.hosts.len();
        let names: Vec<String> = (0..n).map(|i| format!("h{i}")).collect();
        let c = Cluster {
            agents: (0..n).map(|_| None).collect(),
            registers: (0..n).map(|_| None).collect(),
            clocks: vec![ClockMode::True; n],
            generations: vec![0; n],
            previous: vec![false; n],
            keys: vec![key],
            priority: vec![10; n],
            cluster_name: cluster_name.to_owned(),
            names,
            lab,
            cfg,
        };
        for i in 0..n {
            c.write_config(i, false)?;
        }
        Ok(c)
    }

    /// Host `i`'s `agent.toml` (and `agent-previous.toml`, the same with the
    /// previous release's watchdog, when there is one) as they stand:
    /// the keys and the role's priority now; `invalid`: with a key no
    /// release knows (a reload must refuse it).
    pub fn write_config(&self, i: usize, invalid: bool) -> Result<(), ClusterError> {
        let dir = &self.lab.dirs[i];
        std::fs::write(
            dir.join("agent.toml"),
            self.config_text(i, &self.cfg.hale_bin, invalid),
        )?;
        if let Some(prev) = &self.cfg.previous_bin {
            std::fs::write(
                dir.join("agent-previous.toml"),
                self.config_text(i, prev, invalid),
            )?;
        }
        Ok(())
    }

    fn config_text(&self, i: usize, hale: &Path, invalid: bool) -> String {
        let (lab, cfg, name) = (&self.lab, &self.cfg, &self.names[i]);
        let n = lab.hosts.len();
        let servers: Vec<String> = (0..SERVERS.min(n))
            .map(|s| format!("\"{}={}:{CONTROL_PORT}\"", s + 1, lab.ips[s]))
            .collect();
        let (ip, dir, disk) = (lab.ips[i], &lab.dirs[i], &lab.disks[i]);
        let seeds: Vec<String> = (0..2.min(n))
            .filter(|&s| s != i)
            .map(|s| format!("\"{}:{GOSSIP_PORT}\"", lab.ips[s]))
            .collect();
        let hook = |kind: &str, ms: u64| {
            format!(
                "[\"env\", \"-u\", \"LD_PRELOAD\", {nem}, \"hook\", \"{kind}\", \"--node\", \"{name}\", \"--dir\", {dir}, \"--register\", \"{reg}\", \"--ms\", \"{ms}\"]",
                nem = q(&cfg.nemesis_bin),
                dir = q(dir),
                reg = register_addr(ip),
            )
        };
        let control = if i < SERVERS {
            format!(
                "id = {}\nbind = \"{ip}:{CONTROL_PORT}\"\nservers = [{}]\nbootstrap = {}\ndata_dir = {}",
                i + 1,
                servers.join(", "),
                i == 0,
                q(&disk.join("data"))
            )
        } else {
            format!("servers = [{}]", servers.join(", "))
        };
        let state_dir = if cfg.state_dir {
            format!("state_dir = {}", q(&disk.join("state")))
        } else {
            String::new()
        };
        let keys: Vec<String> = self.keys.iter().map(|k| format!("\"{k}\"")).collect();
        format!(
            r#"[agent]
name = "{name}"
bind = "{ip}:{GOSSIP_PORT}"
http = "{ip}:{HTTP_PORT}"
api_token = "{API_TOKEN}"
seeds = [{seeds}]
watchdog = {hale}
{state_dir}
{invalid}
[cluster]
name = "{cluster_name}"
keys = [{keys}]
[control]
{control}
[[service]]
name = "store"
essential = true
[[service.check]]
command = ["true"]
interval = "500ms"
timeout = "1s"
[[role]]
name = "db"
service = "store"
priority = {priority}
promote = {promote}
demote = {demote}
hook_timeout = "10s"
"#,
            seeds = seeds.join(", "),
            hale = q(hale),
            invalid = if invalid { "no_such_key = true" } else { "" },
            cluster_name = self.cluster_name,
            keys = keys.join(", "),
            priority = self.priority[i],
            promote = hook("promote", cfg.promote_ms[i]),
            demote = hook("demote", cfg.demote_ms[i]),
        )
    }

    /// Spawns `cmd` with no input, its output appended to host `i`'s `file`.
    fn spawn(&self, i: usize, cmd: &mut Command, file: &str) -> Result<Child, ClusterError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.lab.dirs[i].join(file))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(child)
    }

    /// Starts host `i`'s register.
    pub fn start_register(&mut self, i: usize) -> Result<(), ClusterError> {
        if let Some(mut c) = self.registers[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let n = self.names.len();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.lab.hosts[i]])
            .arg(&self.cfg.nemesis_bin)
            .args(["register", "--node", &self.names[i]])
            .arg("--listen")
            .arg(register_addr(self.lab.ips[i]).to_string())
            .arg("--log")
            .arg(self.lab.disks[i].join("register.log"));
        for k in 1..n {
            let p = (i + k) % n;
            cmd.arg("--peer").arg(format!(
                "{}={}",
                self.names[p],
                register_addr(self.lab.ips[p])
            ));
        }
        if self.cfg.register_skips_epoch_check {
            cmd.arg("--skip-epoch-check");
        }
        self.registers[i] = Some(self.spawn(i, &mut cmd, "register.out")?);
        Ok(())
    }

    /// Starts host `i`'s agent with `clock`.
    pub fn start_agent(&mut self, i: usize, clock: ClockMode) -> Result<(), ClusterError> {
        self.kill_agent(i);
        let (bin, config) = match (&self.cfg.previous_bin, self.previous[i]) {
            (Some(prev), true) => (prev, "agent-previous.toml"),
            _ => (&self.cfg.hale_bin, "agent.toml"),
        };
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.lab.hosts[i]])
            .arg(bin)
            .arg("agent")
            .arg("--config")
            .arg(self.lab.dirs[i].join(config))
            .env_remove("LD_PRELOAD")
            .env_remove("FAKETIME")
            // HALE_NEMESIS_AGENT_LOG: the agents' log filter for a replay
            // that needs more (`debug,openraft=warn`).
            .env(
                "HALE_LOG",
                std::env::var("HALE_NEMESIS_AGENT_LOG")
                    .unwrap_or_else(|_| "info,openraft=warn".to_owned()),
            );
        if let Some(bug) = &self.cfg.planted_bug {
            cmd.env("HALE_PLANTED_BUG", bug);
        }
        if let (Some(lib), true) = (faketime_lib(), clock != ClockMode::True) {
            cmd.env("LD_PRELOAD", lib).env("FAKETIME_NO_CACHE", "1");
            match clock {
                ClockMode::Step(s) => {
                    cmd.env("FAKETIME", format!("{s:+}"))
                        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                }
                ClockMode::Rate(pm) => {
                    cmd.env("FAKETIME", format!("+0 x{}", f64::from(pm) / 1000.0));
                }
                ClockMode::True => {}
            }
        }
        self.agents[i] = Some(self.spawn(i, &mut cmd, "agent.log")?);
        self.clocks[i] = clock;
        self.generations[i] += 1;
        Ok(())
    }

    /// Host `i`'s agent's process id, if it runs.
    pub fn agent_pid(&mut self, i: usize) -> Option<i32> {
        let c = self.agents[i].as_mut()?;
        matches!(c.try_wait(), Ok(None)).then(|| c.id() as i32)
    }

    /// Sends SIGTERM to host `i`'s agent (it stops as under `systemctl
    /// stop`): false if it does not run.
    pub fn sigterm_agent(&mut self, i: usize) -> bool {
        let Some(pid) = self.agent_pid(i) else {
            return false;
        };
        kill(Pid::from_raw(pid), Signal::SIGTERM).is_ok()
    }

    /// Whether host `i`'s register runs.
    pub fn register_runs(&mut self, i: usize) -> bool {
        self.registers[i]
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGKILLs host `i`'s register (an operator stopping the service).
    pub fn kill_register(&mut self, i: usize) {
        if let Some(mut c) = self.registers[i].take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `hale ARGS` run inside host `i`'s namespace against its agent's API
    /// (with the token), as an operator on that host would: the CLI of the
    /// release the host runs; output piped.
    pub fn hale_command(&self, i: usize, args: &[String]) -> Command {
        let bin = match (&self.cfg.previous_bin, self.previous[i]) {
            (Some(prev), true) => prev,
            _ => &self.cfg.hale_bin,
        };
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.lab.hosts[i]])
            .arg(bin)
            .args(args)
            .env("HALE_HTTP", api_addr(self.lab.ips[i]).to_string())
            .env("HALE_API_TOKEN", API_TOKEN)
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// SIGKILLs host `i`'s agent and reaps it (its watchdog lives on and fences).
    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut c) = self.agents[i].take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
            crate::lab::forget_faketime(c.id() as i32);
        }
    }

    /// Restarts host `i`'s agent with `clock` (killing it first if it runs).
    pub fn restart_agent(&mut self, i: usize, clock: ClockMode) -> Result<(), ClusterError> {
        self.kill_agent(i);
        self.start_agent(i, clock)
    }

    /// SIGKILLs every process of host `i` and reaps our children.
    pub fn kill_host(&mut self, i: usize) {
        // As a host dies: everything at once, a frozen host without a
        // moment of life first (SIGKILL reaches stopped processes). It was
        // resumed, then killed from a second reading of its processes: in
        // between, its agent and watchdog both started a demote, and the
        // hooks, started after that reading, outlived their "dead" host, one
        // unguarded by the claim its killed parent had held (seed 60005).
        // Read again until nothing is left (a process may fork between a
        // reading and the kill).
        for _ in 0..20 {
            let left: Vec<i32> = ns_pids(&self.lab.hosts[i])
                .into_iter()
                .filter(|&p| !crate::lab::is_zombie(p))
                .collect();
            if left.is_empty() {
                break;
            }
            crate::lab::signal(&left, Signal::SIGKILL);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        for mut c in [self.agents[i].take(), self.registers[i].take()]
            .into_iter()
            .flatten()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Restarts host `i` after [`Cluster::kill_host`]: register, then agent (same clocks).
    pub fn restart_host(&mut self, i: usize) -> Result<(), ClusterError> {
        self.start_register(i)?;
        self.start_agent(i, self.clocks[i])
    }

    /// The processes of host `i` whose command is `what` (`argv[1]`:
    /// `watchdog` for `hale watchdog`, `hook` for the hooks). Matching
    /// words, not text: a watchdog's command line holds the fence command.
    pub fn host_pids(&self, i: usize, what: &str) -> Vec<i32> {
        ns_pids(&self.lab.hosts[i])
            .into_iter()
            .filter(|&p| cmdline(p).split(' ').nth(1) == Some(what))
            .collect()
    }

    /// Stops everything (every process of every host), reaping our children.
    pub fn stop_all(&mut self) {
        for i in 0..self.names.len() {
            self.kill_host(i);
        }
    }
}
