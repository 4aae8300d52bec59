//! `hale agent` and `hale keygen`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use hale_agent::{ConfigSource, Key, LoadedConfig};

/// Where `hale agent` looks for its configuration when given none.
pub const DEFAULT_CONFIG: &str = "/etc/hale/hale.toml";

/// How the agent writes its log (to standard error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for journald, Loki, Elasticsearch...).
    Json,
}

/// Arguments of `hale agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Configuration file (hale.toml). Without one, /etc/hale/hale.toml if
    /// it exists, else a single-node cluster on loopback with defaults.
    /// `HALE_*` environment variables override it.
    #[arg(long, short, env = "HALE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Log format; the level comes from `HALE_LOG` (e.g. `info`, `hale_agent=debug`).
    #[arg(long, value_enum, default_value = "text", env = "HALE_LOG_FORMAT")]
    pub log_format: LogFormat,
}

/// Runs the agent until SIGTERM or Ctrl-C, then leaves gracefully; SIGHUP
/// reloads its configuration file.
pub fn run(args: &AgentArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let default = std::path::Path::new(DEFAULT_CONFIG);
    let path = args
        .config
        .clone()
        .or_else(|| default.exists().then(|| default.to_path_buf()));
    if let Some(p) = &path {
        tracing::info!(config = %p.display(), "reading the configuration");
    }
    // SIGHUP and `hale reload` read the file again, with the same overrides.
    let vars = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let source = ConfigSource::new(path).with_env(vars);
    let file = source.read()?;
    #[cfg_attr(not(feature = "planted-bugs"), allow(unused_mut))] // Set only by a planted bug.
    let mut cfg = file.validate()?;
    // A [role.postgres] secret file that is missing, or that others may
    // read, stops the agent here, before it joins anything: every
    // connection to the server would fail on it.
    for role in &cfg.roles {
        if let Some(pg) = &role.postgres {
            pg.check_secret_files()
                .map_err(|e| anyhow::anyhow!("role {}: {e}", role.name))?;
        }
    }
    // Test builds only (see `hale_control::planted`): one observer's failed
    // probe convicts, without corroboration.
    #[cfg(feature = "planted-bugs")]
    if hale_control::planted::active("one-observer-convicts") {
        cfg.core.fault = Some(hale_core::config::Fault::ConvictAlone);
    }
    if cfg.ephemeral_key {
        tracing::warn!(
            "no cluster key configured: using a random one, so no other agent can join; \
             run `hale keygen` and set [cluster] keys in every agent's hale.toml"
        );
    }
    if cfg.keyring.is_none() {
        tracing::warn!(
            "insecure_plaintext = true: cluster traffic is NOT encrypted and the control plane \
             accepts requests from ANYONE who can reach it"
        );
    }
    // Before any other thread: the agent's threads run above the processes
    // it starts (hale_agent::priority).
    match hale_agent::priority::install(cfg.priority_boost, cfg.realtime) {
        hale_agent::priority::Boost::Raised {
            agent,
            children,
            realtime,
        } => {
            tracing::info!(
                agent,
                children,
                realtime = matches!(realtime, hale_agent::priority::RealTime::On),
                "the agent runs at nice {agent}{}, the hooks, checks and tools it starts at {children}",
                if realtime == hale_agent::priority::RealTime::On {
                    " and real-time (SCHED_RR 1)"
                } else {
                    ""
                }
            );
            if let hale_agent::priority::RealTime::Refused(why) = realtime {
                tracing::warn!(
                    why,
                    "cannot run the agent real-time (a cgroup without a real-time budget, or \
                     no CAP_SYS_NICE): a burst of processes at its nice value can still delay \
                     its heartbeats and renewals; set [agent] realtime = false to silence this"
                );
            }
        }
        hale_agent::priority::Boost::Off => {}
        hale_agent::priority::Boost::Refused { nice } => tracing::warn!(
            nice,
            "cannot raise the agent above the processes it starts (needs CAP_SYS_NICE or root): \
             on a host busy with hooks its heartbeats and renewals compete with them; set \
             [agent] priority_boost = 0 to silence this"
        ),
    }
    // Several worker threads, never one: a task that blocks for a moment
    // (a hook's or a watchdog's fork and exec, a redb commit's fsync) must
    // not stop the membership node's timers, the control plane's
    // heartbeats or the holders' renewals with it.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 4));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("hale-agent")
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        // A [role.postgres] configuration directory that names another data
        // directory, or a packaged cluster the distribution starts at boot
        // (where a primary that went down with its host would come back
        // writable before hale fenced it), stops the agent here too.
        for role in &cfg.roles {
            if let Some(pg) = &role.postgres {
                pg.check_layout()
                    .await
                    .map_err(|e| anyhow::anyhow!("role {}: {e}", role.name))?;
            }
        }
        // The handlers are installed before the agent starts (and tells a
        // service manager it is ready): a SIGTERM right after readiness
        // still makes it leave gracefully.
        let shutdown = shutdown_signal().context("installing signal handlers")?;
        hale_agent::run(LoadedConfig { file, agent: cfg }, source, shutdown).await?;
        Ok::<(), anyhow::Error>(())
    })
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HALE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => fmt.try_init(),
        LogFormat::Json => fmt.json().try_init(),
    };
}

/// Resolves on SIGTERM or SIGINT; the handlers are installed at once.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// `hale keygen`: prints a new random cluster key.
pub fn keygen() {
    println!("{}", Key::generate().to_base64());
}
