//! `hale members`, `hale join`, `hale leave`, `hale events`: clients of a
//! running agent's HTTP API.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use futures_util::StreamExt;

use hale_agent::{Client, EventView, MemberView};

/// Where the agent's API is: the flags of every command that talks to an
/// agent (and only of those).
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// The agent's HTTP address (the agent's own `agent.http`).
    #[arg(
        long,
        global = true,
        env = "HALE_HTTP",
        default_value = hale_agent::client::DEFAULT_ADDR
    )]
    pub http: String,
    /// API token for mutating endpoints (the agent's `agent.api_token`).
    #[arg(
        long = "api-token",
        alias = "token",
        global = true,
        env = "HALE_API_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

impl ApiArgs {
    /// A client of the agent.
    pub fn client(&self) -> Client {
        Client::new(self.http.clone()).with_token(self.token.clone())
    }
}

/// Runs `f` to completion on a single-threaded runtime: the one place the
/// CLI starts one.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    Ok(rt.block_on(f))
}

/// Calls `probe` every `every` until it gives a value or `deadline`
/// passes (at least once).
pub(crate) async fn until<T>(
    every: Duration,
    deadline: std::time::Instant,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    loop {
        if let Some(v) = probe().await {
            return Some(v);
        }
        if std::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// Arguments of `hale members`.
#[derive(Debug, Args)]
pub struct MembersArgs {
    /// Print JSON (the `Member` schema of /v1/openapi.json).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub api: ApiArgs,
    /// Refresh every second until interrupted.
    #[arg(long)]
    pub watch: bool,
}

/// `hale members`.
pub fn members(args: &MembersArgs) -> anyhow::Result<()> {
    let client = args.api.client();
    block_on(async {
        loop {
            let list = client.members().await?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                if args.watch {
                    print!("\x1b[2J\x1b[H");
                }
                print!("{}", members_table(&list));
            }
            if !args.watch {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })?
}

fn ago(ms: Option<u64>) -> String {
    match ms {
        None => "never".into(),
        Some(ms) if ms < 1000 => format!("{ms}ms"),
        Some(ms) if ms < 120_000 => format!("{:.1}s", ms as f64 / 1000.0),
        Some(ms) => format!("{}m", ms / 60_000),
    }
}

/// The members as a table, with the evidence under each death verdict.
pub fn members_table(list: &[MemberView]) -> String {
    let mut out = String::new();
    let w = list.iter().map(|m| m.name.len()).max().unwrap_or(4).max(4) + 2;
    out.push_str(&format!(
        "{:<w$}{:<24}{:<9}{:>5}{:>8}  {:<12}{}\n",
        "NAME", "ADDRESS", "STATE", "INC", "HEALTH", "LAST HEARD", "META"
    ));
    for m in list {
        let name = if m.is_self {
            format!("{} *", m.name)
        } else {
            m.name.clone()
        };
        out.push_str(&format!(
            "{:<w$}{:<24}{:<9}{:>5}{:>8}  {:<12}{}\n",
            name,
            m.addr,
            m.state,
            m.incarnation,
            m.health,
            if m.is_self {
                "-".into()
            } else {
                ago(m.last_heard_ms_ago)
            },
            display_meta(&m.meta)
        ));
        if let Some(e) = &m.evidence {
            out.push_str(&format!(
                "{:w$}  declared dead by {} on {} healthy accuser(s) [{}]{}{}\n",
                "",
                e.declared_by,
                e.confirmations,
                e.accusers.join(", "),
                e.suspected_ms_before_verdict
                    .map(|s| format!(", suspected {:.1}s before", s as f64 / 1000.0))
                    .unwrap_or_default(),
                e.silent_ms_before_verdict
                    .map(|s| format!(", silent {:.1}s", s as f64 / 1000.0))
                    .unwrap_or_default(),
            ));
        }
    }
    out
}

/// Arguments of `hale join`.
#[derive(Debug, Args)]
pub struct JoinArgs {
    /// Gossip addresses of members (host:port).
    #[arg(required = true)]
    pub addrs: Vec<String>,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `hale join ADDR...`.
pub fn join(args: &JoinArgs) -> anyhow::Result<()> {
    block_on(args.api.client().join(&args.addrs))??;
    println!("joining through {}", args.addrs.join(", "));
    Ok(())
}

/// `hale leave`.
pub fn leave(api: &ApiArgs) -> anyhow::Result<()> {
    block_on(api.client().leave())??;
    println!("left the cluster");
    Ok(())
}

/// Arguments of `hale reload`.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// Print the agent's answer as JSON (the `Reload` or `ReloadRefusal`
    /// schema of /v1/openapi.json).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

/// `hale reload`: what the agent applied, or why it refused (and changed
/// nothing); whether it applied.
pub fn reload(args: &ReloadArgs) -> anyhow::Result<bool> {
    // Retiring a role waits for its manager and keeper to stop.
    let client = args.api.client().with_timeout(Duration::from_secs(30));
    let answer = block_on(client.reload())??;
    match (&answer, args.json) {
        (Ok(v), true) => println!("{}", serde_json::to_string_pretty(v)?),
        (Err(r), true) => println!("{}", serde_json::to_string_pretty(r)?),
        (Ok(v), false) => print!("{}", reload_report(v)),
        (Err(r), false) => eprint!("{}", refusal_report(r)),
    }
    Ok(answer.is_ok())
}

/// What `hale reload` prints when the agent applied the file.
fn reload_report(v: &hale_agent::view::ReloadView) -> String {
    if v.changes.is_empty() {
        return "reloaded: nothing changed\n".to_owned();
    }
    let mut out = format!("reloaded: {} change(s) applied\n", v.changes.len());
    let w = v.changes.iter().map(|c| c.key.len()).max().unwrap_or(0);
    for c in &v.changes {
        out.push_str(&format!("  {:<w$}  {}\n", c.key, c.change));
    }
    out
}

/// What `hale reload` prints when the agent refused the file.
fn refusal_report(r: &hale_agent::view::ReloadRefusal) -> String {
    use hale_agent::view::RefusalReason;
    let why = match r.reason {
        RefusalReason::NoFile => "the agent was started without a configuration file",
        RefusalReason::Unreadable => "the file cannot be read",
        RefusalReason::Invalid => "the file is not a valid configuration",
        RefusalReason::Unreloadable => "keys changed that cannot change while the agent runs",
        RefusalReason::Stopping => "the agent is stopping",
    };
    let mut out = format!("refused, nothing changed: {why}\n");
    for k in &r.keys {
        match k.key.as_str() {
            "" => out.push_str(&format!("  {}\n", k.problem)),
            key => out.push_str(&format!("  {key}: {}\n", k.problem)),
        }
    }
    out
}

/// Arguments of `hale events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Keep printing events as they happen.
    #[arg(long, short)]
    pub follow: bool,
    /// Print JSON lines.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub api: ApiArgs,
}

fn event_line(e: &EventView, json: bool) -> String {
    if json {
        return serde_json::to_string(e).unwrap_or_default();
    }
    // The detail as the API writes it (`{...}` after the kind), if any.
    let detail = e
        .event
        .detail()
        .map(|d| format!(" {d}"))
        .unwrap_or_default();
    format!(
        "#{:<5} {} {:<14} {:<16} inc={}{}",
        e.seq,
        e.observer,
        e.event.kind(),
        e.member.as_deref().unwrap_or("(self)"),
        e.incarnation.map_or("-".into(), |i| i.to_string()),
        detail
    )
}

/// `hale events`.
pub fn events(args: &EventsArgs) -> anyhow::Result<()> {
    let client = args.api.client();
    block_on(async {
        for e in &client.events(0).await? {
            println!("{}", event_line(e, args.json));
        }
        if !args.follow {
            return Ok(());
        }
        let mut live = std::pin::pin!(client.event_stream().await?);
        while let Some(e) = live.next().await {
            println!("{}", event_line(&e?, args.json));
        }
        Ok(())
    })?
}

/// What the META column shows: an agent's own metadata is JSON
/// (`{"meta", "http", "roles"}`); show the operator's part and the roles it
/// is a candidate for, or the raw text from anything else.
fn display_meta(raw: &str) -> String {
    let Some(m) = hale_agent::AgentMeta::parse(raw) else {
        return raw.to_owned();
    };
    let roles: Vec<&str> = m.roles.keys().map(String::as_str).collect();
    match (m.user.is_empty(), roles.is_empty()) {
        (_, true) => m.user,
        (true, false) => format!("roles={}", roles.join(",")),
        (false, false) => format!("{} roles={}", m.user, roles.join(",")),
    }
}

#[cfg(test)]
mod tests {
    use super::{display_meta, members_table, refusal_report, reload_report};
    use hale_agent::view::{
        ChangeKind, ConfigChange, MemberState, MemberView, RefusalReason, RefusedKey,
        ReloadRefusal, ReloadView,
    };

    #[test]
    fn the_members_table_lines_its_columns_up_whatever_the_state() {
        let member = |name: &str, state| MemberView {
            name: name.into(),
            addr: "127.0.0.1:7946".into(),
            state,
            incarnation: 3,
            health: 0,
            last_heard_ms_ago: Some(200),
            state_for_ms: 1000,
            meta: String::new(),
            is_self: false,
            evidence: None,
        };
        let out = members_table(&[
            member("a", MemberState::Alive),
            member("b", MemberState::Suspect),
        ]);
        let inc: Vec<usize> = out
            .lines()
            .skip(1)
            .map(|l| l.find(" 3 ").expect("the incarnation column"))
            .collect();
        assert_eq!(inc.len(), 2, "{out}");
        assert_eq!(inc[0], inc[1], "{out}");
    }

    #[test]
    fn a_reload_report_lists_each_change_and_a_refusal_each_key() {
        let v = ReloadView {
            changes: vec![
                ConfigChange {
                    key: "role[cache]".into(),
                    change: ChangeKind::Added,
                },
                ConfigChange {
                    key: "service[pg].check[ping]".into(),
                    change: ChangeKind::Changed,
                },
            ],
        };
        let out = reload_report(&v);
        assert!(out.starts_with("reloaded: 2 change(s) applied\n"), "{out}");
        assert!(out.contains("  role[cache]              added\n"), "{out}");
        assert_eq!(
            reload_report(&ReloadView::default()),
            "reloaded: nothing changed\n"
        );
        let r = ReloadRefusal {
            error: "cannot apply".into(),
            reason: RefusalReason::Unreloadable,
            keys: vec![RefusedKey {
                key: "agent.bind".into(),
                problem: "read at start only".into(),
            }],
        };
        let out = refusal_report(&r);
        assert!(
            out.starts_with("refused, nothing changed: keys changed"),
            "{out}"
        );
        assert!(out.contains("  agent.bind: read at start only\n"), "{out}");
    }

    #[test]
    fn the_meta_column_shows_the_operators_metadata_and_candidacies() {
        assert_eq!(display_meta("rack=a"), "rack=a");
        assert_eq!(
            display_meta(r#"{"meta":"rack=a","http":"127.0.0.1:1","roles":{}}"#),
            "rack=a"
        );
        assert_eq!(
            display_meta(
                r#"{"meta":"","http":"127.0.0.1:1","roles":{"db":[1,true],"auth":[2,false]}}"#
            ),
            "roles=auth,db"
        );
        assert_eq!(display_meta(r#"{"other":1}"#), r#"{"other":1}"#);
    }
}
