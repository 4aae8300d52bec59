//! `hale members`, `hale join`, `hale leave`, `hale events`: clients of a
//! running agent's HTTP API.

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use futures_util::StreamExt;

use hale_agent::{EventView, MemberView};

/// Where the agent's API is.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// The agent's HTTP address.
    #[arg(
        long,
        global = true,
        env = "HALE_HTTP_ADDR",
        default_value = "127.0.0.1:7947"
    )]
    pub http: String,
    /// API token for mutating endpoints.
    #[arg(long, global = true, env = "HALE_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl ApiArgs {
    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.http, path)
    }
}

fn client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .build()
        .context("building the HTTP client")
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// GETs `path` from the agent as JSON.
pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
    api: &ApiArgs,
    path: &str,
) -> anyhow::Result<T> {
    let r = client()?
        .get(api.url(path))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .with_context(|| {
            format!(
                "cannot reach the agent at {} (is `hale agent` running?)",
                api.http
            )
        })?;
    let status = r.status();
    if !status.is_success() {
        bail!(
            "agent answered {status}: {}",
            r.text().await.unwrap_or_default()
        );
    }
    Ok(r.json().await?)
}

/// Arguments of `hale members`.
#[derive(Debug, Args)]
pub struct MembersArgs {
    /// Print JSON (the `Member` schema of /v1/openapi.json).
    #[arg(long)]
    pub json: bool,
    /// Refresh every second until interrupted.
    #[arg(long)]
    pub watch: bool,
}

/// `hale members`.
pub fn members(api: &ApiArgs, args: &MembersArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        loop {
            let list: Vec<MemberView> = get_json(api, "/v1/members").await?;
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
    })
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

/// POSTs `body` to the agent (with the token, if any); 4xx/5xx become errors
/// carrying the agent's message.
pub(crate) async fn post(
    api: &ApiArgs,
    path: &str,
    body: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    let mut req = client()?
        .post(api.url(path))
        .json(&body)
        .timeout(Duration::from_secs(10));
    if let Some(t) = &api.token {
        req = req.bearer_auth(t);
    }
    let r = req
        .send()
        .await
        .with_context(|| format!("cannot reach the agent at {}", api.http))?;
    let status = r.status();
    let v: serde_json::Value = r.json().await.unwrap_or_default();
    if !status.is_success() {
        bail!(
            "agent answered {status}: {}",
            v["error"].as_str().unwrap_or("no detail")
        );
    }
    Ok(v)
}

/// `hale join ADDR...`.
pub fn join(api: &ApiArgs, addrs: &[String]) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        post(api, "/v1/join", serde_json::json!({ "addrs": addrs })).await?;
        println!("joining through {}", addrs.join(", "));
        Ok(())
    })
}

/// `hale leave`.
pub fn leave(api: &ApiArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        post(api, "/v1/leave", serde_json::json!({})).await?;
        println!("left the cluster");
        Ok(())
    })
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
}

fn event_line(e: &EventView, json: bool) -> String {
    if json {
        return serde_json::to_string(e).unwrap_or_default();
    }
    let detail = e
        .detail
        .as_ref()
        .map(|d| format!(" {d}"))
        .unwrap_or_default();
    format!(
        "#{:<5} {} {:<14} {:<16} inc={}{}",
        e.seq,
        e.observer,
        e.kind,
        e.member.as_deref().unwrap_or("(self)"),
        e.incarnation.map_or("-".into(), |i| i.to_string()),
        detail
    )
}

/// `hale events`.
pub fn events(api: &ApiArgs, args: &EventsArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let past: Vec<EventView> = get_json(api, "/v1/events").await?;
        for e in &past {
            println!("{}", event_line(e, args.json));
        }
        if !args.follow {
            return Ok(());
        }
        let r = client()?
            .get(api.url("/v1/events/stream"))
            .send()
            .await
            .with_context(|| format!("cannot reach the agent at {}", api.http))?;
        let mut body = r.bytes_stream();
        let mut buf = String::new();
        while let Some(chunk) = body.next().await {
            buf.push_str(&String::from_utf8_lossy(&chunk?));
            while let Some(end) = buf.find("\n\n") {
                let block: String = buf.drain(..end + 2).collect();
                for line in block.lines() {
                    if let Some(data) = line.strip_prefix("data:") {
                        if let Ok(e) = serde_json::from_str::<EventView>(data.trim()) {
                            println!("{}", event_line(&e, args.json));
                        }
                    }
                }
            }
        }
        Ok(())
    })
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
    use super::display_meta;

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
