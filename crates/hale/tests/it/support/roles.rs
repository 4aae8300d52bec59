//! Role clusters: agents with a control plane, candidates for role `db`,
//! and the hook logs their promote and demote hooks write.

use std::net::SocketAddr;
use std::path::Path;

use hale_control::{HookEvent, HookKind};

use super::*;

/// Where one agent of a role cluster (see [`start_role_cluster`]) listens and runs.
#[derive(Debug, Clone)]
pub struct RoleNode {
    /// `n0`, `n1`, ... (`h0`, ... in network namespaces).
    pub name: String,
    /// Its gossip address.
    pub gossip: SocketAddr,
    /// Its HTTP API address.
    pub http: SocketAddr,
    /// Its control-plane address (the first three nodes serve one).
    pub control: SocketAddr,
    /// The network namespace it runs in, if any.
    pub netns: Option<String>,
    /// More environment for its agent (libfaketime, say).
    pub env: Vec<(String, String)>,
    /// Another `hale` than the one under test, for the agent and its
    /// watchdogs (the previous release).
    pub exe: Option<std::path::PathBuf>,
}

impl RoleNode {
    /// `n` agents on loopback (`n0`, `n1`, ...), on free ports.
    pub fn loopback(n: usize) -> Vec<RoleNode> {
        let port = || SocketAddr::from(([127, 0, 0, 1], free_port()));
        (0..n)
            .map(|i| RoleNode {
                name: format!("n{i}"),
                gossip: port(),
                http: port(),
                control: port(),
                netns: None,
                env: Vec::new(),
                exe: None,
            })
            .collect()
    }
}

/// Priorities of the first three nodes for role `db` in [`start_role_cluster`].
const ROLE_PRIORITIES: [i64; 3] = [100, 50, 10];

/// Writes `<name>.toml` into `dir` for each of `nodes`, agents of cluster
/// `cluster` with key `key`, runs `prepare(dir)`, then starts them all
/// (control-plane servers start together): the first three are
/// control-plane servers (the first bootstraps), the others use them;
/// each joins through the first and is a candidate for role `db`
/// (priorities [`ROLE_PRIORITIES`], then 5) backed by an essential service
/// `pg` whose check passes while the file `healthy-<name>` exists.
/// `hooks(i, log)` gives node `i`'s `(promote, demote)` shell scripts (run
/// with `sh -c`), or `None` for instant hooks that append
/// `<unix ns> <name> promote|demote <epoch> <reason>` to `log`
/// (`hooks.log`); `extra(i)` is appended to node `i`'s config.
pub fn start_role_cluster(
    dir: &Path,
    cluster: &str,
    key: &str,
    nodes: &[RoleNode],
    hooks: impl Fn(usize, &Path) -> Option<(String, String)>,
    extra: impl Fn(usize) -> String,
    prepare: impl FnOnce(&Path),
) -> Vec<AgentProc> {
    let servers: Vec<String> = nodes
        .iter()
        .take(3)
        .enumerate()
        .map(|(i, n)| format!("\"{}={}\"", i + 1, n.control))
        .collect();
    let log = dir.join("hooks.log");
    let mut configs = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let name = &node.name;
        let healthy = dir.join(format!("healthy-{name}"));
        std::fs::write(&healthy, "").unwrap();
        let hook = |kind: &str| {
            format!(
                "[\"sh\", \"-c\", \"echo $(date +%s%N) {name} {kind} $HALE_EPOCH $HALE_REASON >> {}\"]",
                log.display()
            )
        };
        let custom = hooks(i, &log);
        let seeds = if i == 0 {
            String::new()
        } else {
            format!("seeds = [\"{}\"]", nodes[0].gossip)
        };
        let cfg = format!(
            r#"
[agent]
name = "{name}"
bind = "{gossip}"
http = "{http}"
{seeds}
watchdog = "{hale}"
[cluster]
name = "{cluster}"
keys = ["{key}"]
[control]
{control_section}
[[service]]
name = "pg"
essential = true
[[service.check]]
command = ["test", "-f", "{healthy}"]
interval = "200ms"
timeout = "1s"
[[role]]
name = "db"
service = "pg"
priority = {prio}
promote = {promote}
demote = {demote}
fail_after = "1s"
{extra}
"#,
            gossip = node.gossip,
            http = node.http,
            hale = node.exe.as_deref().unwrap_or(hale_bin()).display(),
            control_section = if i < 3 {
                format!(
                    "id = {}\nbind = \"{}\"\nservers = [{}]\nbootstrap = {}\ndata_dir = \"{}\"",
                    i + 1,
                    node.control,
                    servers.join(", "),
                    i == 0,
                    dir.join(format!("data-{name}")).display()
                )
            } else {
                format!("servers = [{}]", servers.join(", "))
            },
            healthy = healthy.display(),
            prio = ROLE_PRIORITIES.get(i).copied().unwrap_or(5),
            promote = custom
                .as_ref()
                .map_or_else(|| hook("promote"), |h| toml_sh(&h.0)),
            demote = custom
                .as_ref()
                .map_or_else(|| hook("demote"), |h| toml_sh(&h.1)),
            extra = extra(i),
        );
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, cfg).unwrap();
        configs.push(config);
    }
    prepare(dir);
    nodes
        .iter()
        .zip(configs)
        .map(|(n, config)| {
            spawn_exe_with_config(
                n.exe.as_deref().unwrap_or(hale_bin()),
                dir,
                &n.name,
                &config,
                n.gossip,
                n.http,
                n.netns.as_deref(),
                &n.env,
            )
        })
        .collect()
}

/// One line of a hook log: `<unix ns> <node> <what> <epoch> [reason]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookLine {
    /// When it was written, in Unix nanoseconds.
    pub at: u64,
    /// The node whose hook wrote it.
    pub node: String,
    /// `promote`, `demote`, or what a test's own hooks write.
    pub what: String,
    /// The fencing epoch.
    pub epoch: u64,
    /// The demote reason, if logged.
    pub reason: String,
}

/// The lines of the hook log at `path`.
pub fn hook_lines(path: &Path) -> Vec<HookLine> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(HookLine {
                at: f.first()?.parse().ok()?,
                node: (*f.get(1)?).to_owned(),
                what: (*f.get(2)?).to_owned(),
                epoch: f.get(3)?.parse().ok()?,
                reason: f.get(4).map(|s| (*s).to_owned()).unwrap_or_default(),
            })
        })
        .collect()
}

/// The promote and demote hook runs of role `db` in the hook log at
/// `path`, for the history checker.
pub fn hook_history(path: &Path) -> Vec<HookEvent> {
    hook_lines(path)
        .into_iter()
        .filter_map(|l| {
            Some(HookEvent {
                at_nanos: l.at,
                node: l.node,
                role: "db".into(),
                epoch: l.epoch,
                kind: match l.what.as_str() {
                    "promote" => HookKind::Promote,
                    "demote" => HookKind::Demote,
                    _ => return None,
                },
            })
        })
        .collect()
}

/// A shell script as a TOML `["sh", "-c", script]` array.
fn toml_sh(script: &str) -> String {
    let q = |x: &str| format!("{:?}", x);
    format!("[\"sh\", \"-c\", {}]", q(script))
}

/// The demote claim of agent `pid`'s holding of `db` at `epoch`, if its
/// file exists.
pub fn demote_claim(pid: u32, epoch: u64) -> Option<std::path::PathBuf> {
    let (start, end) = (format!("hale-demote-{pid}-"), format!("-db-{epoch}"));
    std::fs::read_dir(hale_agent::watchdog::claim_dir())
        .ok()?
        .map_while(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with(&start) && name.ends_with(&end)
        })
}
