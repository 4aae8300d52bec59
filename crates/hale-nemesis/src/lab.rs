//! The network: `n` hosts, each in its own network namespace, joined by
//! veth pairs to a bridge in one more namespace (as in
//! `crates/hale/tests/it/netns.rs`). The bridge itself has an address, and
//! the harness's own thread talks to the hosts from inside the bridge
//! namespace ([`Lab::enter_bridge`]), so that no traffic leaves the
//! namespaces this run made. Names hold the process id, so parallel runs
//! coexist. Each host also gets a small tmpfs (its agent's `data_dir` and
//! `state_dir`, its register's log) that a nemesis can fill.
//!
//! Dropping the lab (also on panic) kills every process in its namespaces
//! by id (`ip netns pids`), deletes the namespaces and unmounts the tmpfs.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// What went wrong building or changing the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its standard error.
        stderr: String,
    },
    /// A file or directory could not be made.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Entering the bridge namespace failed.
    #[error("setns into {0}: {1}")]
    Setns(String, nix::Error),
}

/// The nftables table the harness owns in every host namespace.
const TABLE: &str = "nemesis";

/// The namespaces, addresses and directories of one run.
#[derive(Debug)]
pub struct Lab {
    /// The bridge's namespace.
    pub bridge: String,
    /// Each host's namespace.
    pub hosts: Vec<String>,
    /// Each host's address.
    pub ips: Vec<Ipv4Addr>,
    /// The bridge's own address (the harness talks from it).
    pub bridge_ip: Ipv4Addr,
    /// Each host's directory (logs, configs, hook log).
    pub dirs: Vec<PathBuf>,
    /// Each host's tmpfs (data, state, register log).
    pub disks: Vec<PathBuf>,
    mounted: Vec<PathBuf>,
}

/// The rate of a delayed host's link (kbit/s); its fillers send 5% more.
pub const FILL_KBIT: u32 = 2_000;
/// The UDP port fillers send to (dropped by the receiving host's rules).
pub const FILL_PORT: u16 = 9;

/// Sends UDP datagrams of 1,000 bytes to `to` at `kbit` kbit/s from inside
/// namespace `netns`, until killed or until its parent exits: the load
/// that keeps a delayed link's queue full.
pub fn filler(netns: &str, to: std::net::SocketAddr, kbit: u32) -> Result<(), LabError> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| LabError::Setns(netns.to_owned(), e))?;
    let f = std::fs::File::open(format!("/run/netns/{netns}"))?;
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| LabError::Setns(netns.to_owned(), e))?;
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")?;
    let packet = [0u8; 1000];
    let per_s = f64::from(kbit) * 1000.0 / 8.0 / packet.len() as f64;
    let start = std::time::Instant::now();
    let mut sent = 0.0_f64;
    loop {
        let due = start.elapsed().as_secs_f64() * per_s;
        while sent < due {
            // A full queue refuses some; the rate is what matters.
            let _ = sock.send_to(&packet, to);
            sent += 1.0;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Runs a command, failing with its standard error.
pub fn run(args: &[&str]) -> Result<String, LabError> {
    let out = Command::new(args[0]).args(&args[1..]).output()?;
    succeeded(out, || args.join(" "))
}

/// A finished command's standard output, or its standard error as the
/// failure of command `cmd`.
fn succeeded(out: Output, cmd: impl FnOnce() -> String) -> Result<String, LabError> {
    if !out.status.success() {
        return Err(LabError::Command {
            cmd: cmd(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`run`] with the command written as one line of words (none of which
/// holds a space: names and addresses, never a path).
fn run_line(line: &str) -> Result<String, LabError> {
    run(&line.split_whitespace().collect::<Vec<_>>())
}

/// Runs `nft -f -` with `script` inside namespace `ns`.
pub fn nft(ns: &str, script: &str) -> Result<(), LabError> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes())?;
    }
    succeeded(child.wait_with_output()?, || {
        format!("nft in {ns}: {script}")
    })
    .map(drop)
}

/// The process ids in network namespace `ns`.
pub fn ns_pids(ns: &str) -> Vec<i32> {
    run(&["ip", "netns", "pids", ns])
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Whether process `pid` has exited and waits to be reaped (or is gone).
pub fn is_zombie(pid: i32) -> bool {
    // `/proc/PID/stat`: "pid (comm) S ...", comm may hold spaces or ')'.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X')
    })
}

/// A process's command line, words joined by spaces.
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .map(|w| String::from_utf8_lossy(w).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Sends `sig` to processes `pids` (forgetting libfaketime's files of those
/// it kills).
pub fn signal(pids: &[i32], sig: Signal) {
    for &p in pids {
        let _ = kill(Pid::from_raw(p), sig);
        if sig == Signal::SIGKILL {
            forget_faketime(p);
        }
    }
}

/// Removes what libfaketime kept in /dev/shm for process `pid`, killed: it
/// removes its segment and semaphore at exit, which SIGKILL skips.
pub fn forget_faketime(pid: i32) {
    let _ = std::fs::remove_file(format!("/dev/shm/faketime_shm_{pid}"));
    let _ = std::fs::remove_file(format!("/dev/shm/sem.faketime_sem_{pid}"));
}

/// Why the lab cannot run here, if it cannot.
pub fn unsupported() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root".into());
    }
    for tool in [
        ["ip", "-V"],
        ["nft", "--version"],
        ["mount", "--version"],
        ["tc", "-V"],
    ] {
        let ok = Command::new(tool[0])
            .arg(tool[1])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Some(format!("`{}` is missing", tool[0]));
        }
    }
    if crate::cluster::faketime_lib().is_none() {
        return Some("libfaketime is missing (apt-get install faketime)".into());
    }
    None
}

impl Lab {
    /// Builds `n` hosts under `dir`, tagged with this process's id and `tag`.
    pub fn new(dir: &Path, tag: &str, n: usize, disk_mb: u32) -> Result<Lab, LabError> {
        let tag = format!("hn{}-{tag}", std::process::id());
        let mut lab = Lab {
            bridge: format!("{tag}-br"),
            hosts: Vec::new(),
            ips: Vec::new(),
            bridge_ip: Ipv4Addr::new(10, 77, 0, 254),
            dirs: Vec::new(),
            disks: Vec::new(),
            mounted: Vec::new(),
        };
        // Every name is recorded before it is made, so a failure halfway cleans up.
        let br = lab.bridge.clone();
        run_line(&format!("ip netns add {br}"))?;
        run_line(&format!("ip -n {br} link add br0 type bridge"))?;
        run_line(&format!("ip -n {br} addr add 10.77.0.254/24 dev br0"))?;
        run_line(&format!("ip -n {br} link set br0 up"))?;
        run_line(&format!("ip -n {br} link set lo up"))?;
        for i in 0..n {
            let ns = format!("{tag}-h{i}");
            let ip = Ipv4Addr::new(10, 77, 0, i as u8 + 1);
            lab.hosts.push(ns.clone());
            run_line(&format!("ip netns add {ns}"))?;
            lab.ips.push(ip);
            let veth = format!("ip -n {br} link add p{i} type veth peer name eth0 netns {ns}");
            run_line(&veth)?;
            run_line(&format!("ip -n {br} link set p{i} master br0 up"))?;
            run_line(&format!("ip -n {ns} addr add {ip}/24 dev eth0"))?;
            run_line(&format!("ip -n {ns} link set eth0 up"))?;
            run_line(&format!("ip -n {ns} link set lo up"))?;
            let hdir = dir.join(format!("h{i}"));
            let disk = hdir.join("disk");
            std::fs::create_dir_all(&disk)?;
            lab.mounted.push(disk.clone());
            run(&[
                "mount",
                "-t",
                "tmpfs",
                "-o",
                &format!("size={disk_mb}m"),
                "tmpfs",
                &disk.to_string_lossy(),
            ])?;
            lab.dirs.push(hdir);
            lab.disks.push(disk);
        }
        Ok(lab)
    }

    /// Moves the calling thread (and the threads it starts afterwards)
    /// into the bridge namespace.
    pub fn enter_bridge(&self) -> Result<(), LabError> {
        let f = std::fs::File::open(format!("/run/netns/{}", self.bridge))?;
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| LabError::Setns(self.bridge.clone(), e))
    }

    /// Gives host `i`'s link a token-bucket queue of `ms` milliseconds in
    /// each direction (`None`: takes it away). With a [`filler`] keeping it
    /// full, everything the host sends or receives waits about `ms` (the
    /// kernel has no netem here, and nftables cannot delay: a saturated
    /// link is how this lab delays, with the few percent of tail drops a
    /// saturated link has).
    pub fn set_delay(&self, i: usize, ms: Option<u32>) -> Result<(), LabError> {
        let port = format!("p{i}");
        let ends = [(&self.hosts[i], "eth0"), (&self.bridge, port.as_str())];
        for (ns, dev) in ends {
            match ms {
                Some(ms) => {
                    run_line(&format!(
                        "tc -n {ns} qdisc replace dev {dev} root tbf rate {FILL_KBIT}kbit \
                         burst 10kb latency {ms}ms"
                    ))?;
                }
                None => {
                    let _ = run_line(&format!("tc -n {ns} qdisc del dev {dev} root"));
                }
            }
        }
        Ok(())
    }

    /// Starts the two fillers that keep host `i`'s delay queues full: one in
    /// the host sending to the bridge, one in the bridge sending to the host
    /// (to a port nothing listens on). They die with this process.
    pub fn start_fillers(&self, i: usize, nemesis_bin: &Path) -> Result<Vec<Child>, LabError> {
        let kbit = (FILL_KBIT * 21 / 20).to_string();
        let ends = [
            (&self.hosts[i], self.bridge_ip),
            (&self.bridge, self.ips[i]),
        ];
        let mut out = Vec::new();
        for (ns, to) in ends {
            let child = Command::new(nemesis_bin)
                .args(["filler", "--netns", ns, "--kbit", &kbit, "--to"])
                .arg(format!("{to}:{FILL_PORT}"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?;
            out.push(child);
        }
        Ok(out)
    }

    /// Replaces host `i`'s input filter with `rules` (none: no table).
    pub fn set_rules(&self, i: usize, rules: &[String]) -> Result<(), LabError> {
        let ns = &self.hosts[i];
        let _ = nft(ns, &format!("delete table inet {TABLE}\n"));
        if rules.is_empty() {
            return Ok(());
        }
        let body = rules.join("\n    ");
        nft(
            ns,
            &format!(
                "table inet {TABLE} {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    {body}\n  }}\n}}\n"
            ),
        )
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.hosts {
            signal(&ns_pids(ns), Signal::SIGCONT);
            signal(&ns_pids(ns), Signal::SIGKILL);
        }
        // Killed processes leave their namespace once reaped; the namespaces
        // go regardless (a netns lives on until its last process is gone).
        for ns in self.hosts.iter().chain([&self.bridge]) {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
        }
        for m in &self.mounted {
            let _ = Command::new("umount")
                .arg("-l")
                .arg(m)
                .stderr(Stdio::null())
                .status();
        }
    }
}
