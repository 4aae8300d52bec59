//! `hale demo`: a five-node cluster of real agent processes on loopback.
//! Three of them run the control plane and every node is a candidate for
//! role `db` (trivial hooks); the killed node holds it. One node is frozen
//! (SIGSTOP, a half-dead host) and another killed (SIGKILL, a crashed host);
//! the demo shows who noticed what and when, the failover of `db`, then
//! resumes the frozen node and shows it refute and rejoin. The dashboard of
//! the first agent shows it all live. Exit status 0 when everything went as
//! expected.

use hale_agent::view::MemberState;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use hale_agent::{Client, Key, MemberView};

use crate::client_cmd::{members_table, until};

/// Arguments of `hale demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Number of agents (at least 4).
    #[arg(long, default_value_t = 5)]
    pub nodes: usize,
    /// Keep the agents' logs in this directory (default: a temporary one).
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Seconds to wait before the faults and to keep the cluster up at the
    /// end, to watch it on the dashboard (default on a terminal: 5 before,
    /// 30 after; otherwise 0).
    #[arg(long, value_name = "SECS")]
    pub hold: Option<u64>,
}

/// The role that fails over, and each node's priority for it (the last
/// node, which is killed, holds it first).
const ROLE: &str = "db";
/// How often the scenario polls the agents while it waits.
const POLL: Duration = Duration::from_millis(200);
/// Control-plane servers: the first three nodes (never faulted).
const SERVERS: usize = 3;

fn priority(i: usize, n: usize) -> i64 {
    if i == n - 1 {
        100
    } else {
        50 - 10 * i as i64
    }
}

/// The roles part of one agent's configuration.
fn role_config(i: usize, n: usize, control: &[SocketAddr], logs: &std::path::Path) -> String {
    let servers: Vec<String> = control
        .iter()
        .enumerate()
        .map(|(id, a)| format!("\"{}={a}\"", id + 1))
        .collect();
    let server = if i < SERVERS {
        format!(
            "id = {}\nbind = \"{}\"\nbootstrap = {}\n",
            i + 1,
            control[i],
            i == 0
        )
    } else {
        String::new()
    };
    format!(
        "[control]\n{server}servers = [{servers}]\ndata_dir = \"{data}\"\n\n\
         [[service]]\nname = \"{ROLE}\"\nessential = true\n\
         [[service.check]]\ncommand = [\"true\"]\ninterval = \"1s\"\n\n\
         [[role]]\nname = \"{ROLE}\"\nservice = \"{ROLE}\"\npriority = {prio}\n\
         promote = [\"true\"]\ndemote = [\"true\"]\n",
        servers = servers.join(", "),
        data = logs.join(format!("data-{i}")).display(),
        prio = priority(i, n),
    )
}

/// Kills every agent it started, whatever happens.
#[derive(Default)]
struct Cluster {
    children: Vec<Child>,
    http: Vec<SocketAddr>,
    names: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGCONT);
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A free port on loopback for both UDP and TCP, for an agent to bind a
/// moment later (control-plane servers must know each other's addresses
/// before they start). Taken from below the kernel's usual ephemeral range
/// (32768 and up), where no other program's port-0 bind or outgoing
/// connection can take it in the meantime; never the same one twice.
fn free_port() -> anyhow::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let base = std::process::id().wrapping_mul(7919) % SPAN;
    for _ in 0..1000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + (base + n) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
        {
            return Ok(port);
        }
    }
    bail!("no free port on 127.0.0.1 between {LOW} and {}", LOW + SPAN)
}

fn signal(child: &Child, sig: Signal) -> anyhow::Result<()> {
    kill(Pid::from_raw(child.id() as i32), sig).with_context(|| format!("sending {sig}"))
}

async fn members(client: &Client, http: SocketAddr) -> Option<Vec<MemberView>> {
    client.at(http.to_string()).members().await.ok()
}

fn state_of<'a>(list: &'a [MemberView], name: &str) -> Option<&'a MemberView> {
    list.iter().find(|m| m.name == name)
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> anyhow::Result<bool> {
    if args.nodes < 4 {
        bail!("--nodes must be at least 4");
    }
    let exe = std::env::current_exe().context("locating the hale binary")?;
    let logs = match &args.logs {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("hale-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&logs)?;
    let tty = std::io::stdout().is_terminal();
    let hold = Duration::from_secs(args.hold.unwrap_or(if tty { 5 } else { 0 }));
    let linger = Duration::from_secs(args.hold.unwrap_or(if tty { 30 } else { 0 }));
    let control: Vec<SocketAddr> = (0..SERVERS)
        .map(|_| free_port().map(|p| SocketAddr::from(([127, 0, 0, 1], p))))
        .collect::<anyhow::Result<_>>()?;
    let key = Key::generate().to_base64();
    let mut cluster = Cluster::default();
    let mut seed: Option<SocketAddr> = None;
    println!(
        "Starting {} hale agents on 127.0.0.1 (logs in {}) ...",
        args.nodes,
        logs.display()
    );
    for i in 0..args.nodes {
        let gossip = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let http = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let name = format!("demo-{i}");
        let log = std::fs::File::create(logs.join(format!("{name}.log")))?;
        let config = logs.join(format!("{name}.toml"));
        std::fs::write(&config, role_config(i, args.nodes, &control, &logs))?;
        let mut cmd = Command::new(&exe);
        cmd.arg("agent")
            .arg("--config")
            .arg(&config)
            .env_remove("HALE_CONFIG")
            .env("HALE_NAME", &name)
            .env("HALE_BIND", gossip.to_string())
            .env("HALE_HTTP", http.to_string())
            .env("HALE_CLUSTER", "demo")
            .env("HALE_KEYS", &key)
            .env("HALE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        match seed {
            Some(s) => cmd.env("HALE_SEEDS", s.to_string()),
            None => cmd.env_remove("HALE_SEEDS"),
        };
        cluster
            .children
            .push(cmd.spawn().context("starting an agent")?);
        cluster.http.push(http);
        cluster.names.push(name);
        seed.get_or_insert(gossip);
    }
    println!("Dashboard (live; open it now): http://{}/", cluster.http[0]);
    crate::client_cmd::block_on(scenario(&cluster, hold, linger))?
}

/// Who holds the role, and the fencing epoch, as `http`'s agent sees it.
async fn holder(client: &Client, http: SocketAddr) -> Option<(String, u64)> {
    let v = client.at(http.to_string()).roles().await.ok()?;
    let l = v.leases?.remove(ROLE)?;
    Some((l.holder?, l.epoch))
}

async fn scenario(c: &Cluster, hold: Duration, linger: Duration) -> anyhow::Result<bool> {
    let client =
        Client::new(hale_agent::client::DEFAULT_ADDR).with_timeout(Duration::from_millis(800));
    let n = c.names.len();
    let start = Instant::now();
    // 1. Everyone sees everyone.
    let twenty = Duration::from_secs(20);
    until(POLL, start + twenty, async || {
        for &h in &c.http {
            let alive = members(&client, h).await;
            let alive = alive.map_or(0, |l| {
                l.iter().filter(|m| m.state == MemberState::Alive).count()
            });
            (alive == n).then_some(())?;
        }
        Some(())
    })
    .await
    .context("the cluster did not form within 20 s")?;
    println!(
        "\nCluster formed in {:.1}s. As {} sees it:\n",
        start.elapsed().as_secs_f64(),
        c.names[0]
    );
    if let Some(l) = members(&client, c.http[0]).await {
        print!("{}", members_table(&l));
    }
    let (frozen, killed) = (n - 2, n - 1);
    let observers: Vec<usize> = (0..n - 2).collect();
    let granted = async || {
        let (h, e) = holder(&client, c.http[0]).await?;
        (h == c.names[killed]).then_some((h, e))
    };
    let first = until(POLL, Instant::now() + twenty, granted)
        .await
        .with_context(|| {
            format!(
                "role {ROLE} was not granted to {} within 20 s",
                c.names[killed]
            )
        })?;
    // Candidacies become eligible as checks pass, each a metadata update
    // (a new incarnation): let those settle everywhere before the faults.
    until(POLL, Instant::now() + twenty, async || {
        let mut views = Vec::new();
        for &h in &c.http {
            views.push(members(&client, h).await.unwrap_or_default());
        }
        views
            .iter()
            .all(|l| {
                l.len() == n
                    && l.iter().all(|m| {
                        hale_agent::AgentMeta::parse(&m.meta).is_some_and(|p| {
                            !p.roles.is_empty() && p.roles.values().all(|c| c.eligible)
                        })
                    })
                    && l.iter().all(|m| {
                        let first = views[0].iter().find(|f| f.name == m.name);
                        first.map(|f| f.incarnation) == Some(m.incarnation)
                    })
            })
            .then_some(())
    })
    .await
    .context("the candidacies did not settle within 20 s")?;
    println!(
        "\n{} holds role {ROLE} (fencing epoch {}); the others are standbys.",
        first.0, first.1
    );
    if !hold.is_zero() {
        println!("Faults in {} s: watch the dashboard.", hold.as_secs());
        tokio::time::sleep(hold).await;
    }
    println!(
        "\nFreezing {} (SIGSTOP: a half-dead host) and killing {} (SIGKILL: a crashed host) ...",
        c.names[frozen], c.names[killed]
    );
    signal(&c.children[frozen], Signal::SIGSTOP)?;
    signal(&c.children[killed], Signal::SIGKILL)?;
    let t0 = Instant::now();
    let mut seen: BTreeMap<(usize, usize, &str), f64> = BTreeMap::new();
    let mut all_dead = false;
    let mut failover: Option<(String, u64, f64)> = None;
    while t0.elapsed() < Duration::from_secs(20) {
        if failover.is_none() {
            if let Some((h, e)) = holder(&client, c.http[0]).await {
                if h != first.0 && e > first.1 {
                    failover = Some((h, e, t0.elapsed().as_secs_f64()));
                }
            }
        }
        for &o in &observers {
            let Some(list) = members(&client, c.http[o]).await else {
                continue;
            };
            for target in [frozen, killed] {
                if let Some(m) = state_of(&list, &c.names[target]) {
                    for st in [MemberState::Suspect, MemberState::Dead] {
                        if m.state == st
                            || (st == MemberState::Suspect && m.state == MemberState::Dead)
                        {
                            seen.entry((o, target, st.as_str()))
                                .or_insert(t0.elapsed().as_secs_f64());
                        }
                    }
                }
            }
        }
        all_dead = observers.iter().all(|&o| {
            seen.contains_key(&(o, frozen, "dead")) && seen.contains_key(&(o, killed, "dead"))
        });
        if all_dead && failover.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("\nWho noticed what, and when (seconds after the faults, polled every 100 ms):\n");
    for target in [frozen, killed] {
        for &o in &observers {
            let s = seen
                .get(&(o, target, "suspect"))
                .map_or("-".into(), |t| format!("{t:.1}s"));
            let d = seen
                .get(&(o, target, "dead"))
                .map_or("never".into(), |t| format!("{t:.1}s"));
            println!(
                "  {:<8} saw {:<8} suspect at {:>6}, dead at {:>6}",
                c.names[o], c.names[target], s, d
            );
        }
    }
    if let Some(l) = members(&client, c.http[0]).await {
        println!("\nAs {} sees it now:\n", c.names[0]);
        print!("{}", members_table(&l));
    }
    match &failover {
        Some((h, e, at)) => println!(
            "\nRole {ROLE} failed over from {} to {h} (epoch {} -> {e}) {at:.1}s after the crash.",
            first.0, first.1
        ),
        None => println!("\nFAILED: role {ROLE} did not fail over within 20 s"),
    }
    if !all_dead {
        println!("\nFAILED: not every observer declared both nodes dead within 20 s");
        return Ok(false);
    }
    println!("\nResuming {} (SIGCONT) ...", c.names[frozen]);
    signal(&c.children[frozen], Signal::SIGCONT)?;
    let t1 = Instant::now();
    let back = until(Duration::from_millis(100), t1 + twenty, async || {
        for &o in &observers {
            let l = members(&client, c.http[o]).await?;
            let m = state_of(&l, &c.names[frozen])?;
            (m.state == MemberState::Alive && m.incarnation > 0).then_some(())?;
        }
        Some(())
    })
    .await
    .is_some();
    let inc = members(&client, c.http[frozen])
        .await
        .and_then(|l| l.first().map(|m| m.incarnation));
    if back {
        println!(
            "{} learned it had been declared dead, refuted with incarnation {} and rejoined: \
             every observer sees it alive again after {:.1}s.",
            c.names[frozen],
            inc.unwrap_or(0),
            t1.elapsed().as_secs_f64()
        );
    } else {
        println!("FAILED: {} did not rejoin within 20 s", c.names[frozen]);
    }
    if let Some(l) = members(&client, c.http[0]).await {
        println!("\nFinal view from {}:\n", c.names[0]);
        print!("{}", members_table(&l));
    }
    println!("\nDemo finished in {:.1}s.", start.elapsed().as_secs_f64());
    if !linger.is_zero() {
        println!(
            "The cluster stays up {} s more (Ctrl-C ends it): http://{}/",
            linger.as_secs(),
            c.http[0]
        );
        tokio::time::sleep(linger).await;
    }
    Ok(back && failover.is_some())
}
