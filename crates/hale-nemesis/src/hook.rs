//! The role's hooks (`hale-nemesis hook promote|demote`), run by the agent
//! (and by its watchdog, for the fence) inside the host's namespace, always
//! through `env -u LD_PRELOAD` so that libfaketime never touches them.
//!
//! Each appends `start` and `end` lines to `<dir>/hooks.log` (JSON lines,
//! shared-clock times), a demote also `fenced` once its fence took effect. Promote: start, take `promote_ms` (plus any extra
//! delay the nemesis wrote to `<dir>/hook-delay-ms`), make the local
//! register primary at `HALE_EPOCH`, end. Demote: start, fence the local
//! register at once, take `demote_ms` (plus the extra delay), end.
//! With `HALE_PLANTED_BUG=skip-demote` (planted bug) a demote does nothing.
//!
//! A hook fault the nemesis wrote to `<dir>/hook-fault` ([`HookFault`])
//! makes the chosen hooks fail: exit 1 before their work, hang before it
//! (past `hook_timeout`), kill themselves half-way through their length
//! (a promote before promoting, a demote after fencing), or fail like exit
//! 1 until the n-th try (counted in `<dir>/hook-tries-<kind>`). A hook
//! that fails so logs a `failed` line first.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::clock::now_ns;
use crate::register::EpochBody;
pub use crate::schedule::{HookFailure, HookFault, HookSel};

/// What can make a hook fail.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// `HALE_EPOCH` is missing or not a number.
    #[error("HALE_EPOCH is missing or malformed")]
    NoEpoch,
    /// The hook log could not be written.
    #[error("hook log: {0}")]
    Log(#[from] std::io::Error),
    /// The register refused or never answered.
    #[error("register at {0} refused or did not answer")]
    Register(SocketAddr),
    /// A nemesis hook fault made it fail.
    #[error("failed on purpose: {0}")]
    Injected(String),
}

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum HookKind {
    /// The promote hook.
    Promote,
    /// The demote hook (also the watchdog's fence).
    Demote,
}

/// Start or end of a hook run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// It began.
    Start,
    /// It finished its work.
    End,
    /// A demote's fence took effect (the register answered, or was found
    /// down), before the rest of the demote's length.
    Fenced,
    /// It gives up or is about to be killed by its own signal (a nemesis
    /// hook fault): what it did before is in the register's log.
    Failed,
}

impl HookSel {
    /// Whether it hits hooks of `kind`.
    pub fn hits(self, kind: HookKind) -> bool {
        match self {
            HookSel::Both => true,
            HookSel::Promote => kind == HookKind::Promote,
            HookSel::Demote => kind == HookKind::Demote,
        }
    }
}

/// The file a host's hook fault is written to.
pub const FAULT_FILE: &str = "hook-fault";

/// The file counting a host's tries of `kind` under [`HookFailure::NthTry`].
pub fn tries_file(kind: HookKind) -> &'static str {
    match kind {
        HookKind::Promote => "hook-tries-promote",
        HookKind::Demote => "hook-tries-demote",
    }
}

/// One line of `hooks.log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookLine {
    /// Shared-clock time, ns.
    pub t: u64,
    /// The node.
    pub node: String,
    /// Which hook.
    pub kind: HookKind,
    /// Start or end.
    pub phase: Phase,
    /// `HALE_EPOCH`.
    pub epoch: u64,
    /// `HALE_REASON`, if set.
    pub reason: Option<String>,
}

/// How a hook runs (the arguments of `hale-nemesis hook`). Its host's
/// directory holds `hooks.log` and `hook-delay-ms`.
#[derive(Debug, Clone, clap::Args)]
pub struct HookConfig {
    /// Which hook.
    pub kind: HookKind,
    /// The node.
    #[arg(long)]
    pub node: String,
    /// The host's directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// The local register.
    #[arg(long)]
    pub register: SocketAddr,
    /// Base duration, ms.
    #[arg(long, default_value_t = 1000)]
    pub ms: u64,
}

fn log(cfg: &HookConfig, phase: Phase, epoch: u64) -> Result<(), HookError> {
    let line = HookLine {
        t: now_ns(),
        node: cfg.node.clone(),
        kind: cfg.kind,
        phase,
        epoch,
        reason: std::env::var("HALE_REASON").ok(),
    };
    let mut text = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(cfg.dir.join("hooks.log"))?;
    f.write_all(&text)?;
    f.sync_data()?;
    Ok(())
}

/// Posts `epoch` to the register at `addr` (`/{path}`) every 100 ms until
/// `ended` says how the hook's request ended, or for up to 30 s (false).
async fn tell(
    addr: SocketAddr,
    path: &str,
    epoch: u64,
    ended: fn(&reqwest::Result<reqwest::Response>) -> Option<bool>,
) -> bool {
    let Ok(http) = reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
    else {
        return false;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sent = http
            .post(format!("http://{addr}/{path}"))
            .json(&EpochBody { epoch })
            .send()
            .await;
        if let Some(done) = ended(&sent) {
            return done;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Promotes the register at `addr`: true once it accepts, false on a
/// refusal (a stale epoch: it will not change) or after 30 s.
async fn promote(addr: SocketAddr, epoch: u64) -> bool {
    tell(addr, "promote", epoch, |sent| match sent {
        Ok(r) if r.status().is_success() => Some(true),
        Ok(r) if r.status().as_u16() == 409 => Some(false),
        _ => None,
    })
    .await
}

/// Fences the register at `addr`: true once it answered, or once it is
/// found down (connection refused); retries every 100 ms otherwise, for up
/// to 30 s.
async fn fence(addr: SocketAddr, epoch: u64) -> bool {
    tell(addr, "fence", epoch, |sent| match sent {
        Ok(r) if r.status().is_success() => Some(true),
        Err(e) if e.is_connect() && !e.is_timeout() => Some(true),
        _ => None,
    })
    .await
}

/// Runs one hook to completion.
pub async fn run(cfg: &HookConfig) -> Result<(), HookError> {
    let epoch: u64 = std::env::var("HALE_EPOCH")
        .ok()
        .and_then(|e| e.parse().ok())
        .ok_or(HookError::NoEpoch)?;
    if cfg.kind == HookKind::Demote
        && std::env::var("HALE_PLANTED_BUG").is_ok_and(|b| b == "skip-demote")
    {
        return Ok(());
    }
    let extra: u64 = std::fs::read_to_string(cfg.dir.join("hook-delay-ms"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let took = Duration::from_millis(cfg.ms + extra);
    log(cfg, Phase::Start, epoch)?;
    let fault = std::fs::read(cfg.dir.join(FAULT_FILE))
        .ok()
        .and_then(|t| serde_json::from_slice::<HookFault>(&t).ok())
        .filter(|f| f.hook.hits(cfg.kind))
        .map(|f| f.how);
    let crash = match fault {
        None => false,
        Some(HookFailure::Crash) => true,
        Some(HookFailure::Exit) => return fail(cfg, epoch, "exit 1"),
        Some(HookFailure::Hang) => {
            log(cfg, Phase::Failed, epoch)?;
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return Err(HookError::Injected("hung for an hour".into()));
        }
        Some(HookFailure::NthTry(n)) => {
            let tries = cfg.dir.join(tries_file(cfg.kind));
            let try_now = std::fs::read_to_string(&tries)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
                .unwrap_or(0)
                + 1;
            if try_now < n {
                std::fs::write(&tries, try_now.to_string())?;
                return fail(cfg, epoch, &format!("try {try_now} of {n}"));
            }
            std::fs::write(&tries, "0")?;
            false
        }
    };
    // A crash comes half-way through the hook's length.
    let first = if crash { took / 2 } else { took };
    match cfg.kind {
        HookKind::Promote => {
            tokio::time::sleep(first).await;
            if crash {
                return die(cfg, epoch);
            }
            if !promote(cfg.register, epoch).await {
                return Err(HookError::Register(cfg.register));
            }
        }
        HookKind::Demote => {
            // A register that is down (nothing listens: its host was killed)
            // needs no fence: it starts as no primary. One that does not
            // answer is asked again until it does: a fence hook that gives
            // up and exits 0 would tell hale a fence happened that did not
            // (hale's hook timeout ends it otherwise, as a failure).
            if !fence(cfg.register, epoch).await {
                return Err(HookError::Register(cfg.register));
            }
            log(cfg, Phase::Fenced, epoch)?;
            tokio::time::sleep(first).await;
            if crash {
                return die(cfg, epoch);
            }
        }
    }
    log(cfg, Phase::End, epoch)
}

/// Logs `failed` and fails (a hook fault).
fn fail(cfg: &HookConfig, epoch: u64, why: &str) -> Result<(), HookError> {
    log(cfg, Phase::Failed, epoch)?;
    Err(HookError::Injected(why.to_owned()))
}

/// Logs `failed` and kills itself.
fn die(cfg: &HookConfig, epoch: u64) -> Result<(), HookError> {
    log(cfg, Phase::Failed, epoch)?;
    let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    Err(HookError::Injected("SIGKILL did not kill it".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_fault_hits_only_the_hooks_it_names() {
        assert!(HookSel::Promote.hits(HookKind::Promote));
        assert!(!HookSel::Promote.hits(HookKind::Demote));
        assert!(HookSel::Demote.hits(HookKind::Demote));
        assert!(!HookSel::Demote.hits(HookKind::Promote));
        assert!(HookSel::Both.hits(HookKind::Promote) && HookSel::Both.hits(HookKind::Demote));
    }

    #[test]
    fn the_hook_fault_file_reads_back_as_written() {
        let f = HookFault {
            hook: HookSel::Demote,
            how: HookFailure::NthTry(3),
        };
        let text = serde_json::to_string(&f).expect("serializes");
        assert_eq!(serde_json::from_str::<HookFault>(&text).ok(), Some(f));
    }
}
