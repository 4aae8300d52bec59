//! `hale agent` and `hale keygen`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use hale_agent::{FileConfig, Key};

/// Arguments of `hale agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Configuration file (hale.toml). Without one, a single-node cluster on
    /// loopback with defaults. `HALE_*` environment variables override it.
    #[arg(long, short, env = "HALE_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Runs the agent until SIGTERM or Ctrl-C, then leaves gracefully.
pub fn run(args: &AgentArgs) -> anyhow::Result<()> {
    init_logging();
    let mut file = match &args.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    file.apply_env(|k| std::env::var(k).ok());
    let cfg = file.validate()?;
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        hale_agent::run(cfg, shutdown_signal()).await?;
        Ok::<(), anyhow::Error>(())
    })
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HALE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `hale keygen`: prints a new random cluster key.
pub fn keygen() {
    println!("{}", Key::generate().to_base64());
}
