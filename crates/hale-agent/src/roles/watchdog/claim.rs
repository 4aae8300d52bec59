//! The claim a holding's demote runs under, shared by the agent's own
//! demote (`hale demote-once`) and its watchdog's fence, so that the demote
//! runs once (see the parent module); and the sweep that removes claims
//! their agents left behind.
//!
//! A claim lives as long as its holding: the watchdog removes it when the
//! holding ends (a `stop` or `keep` order, or its exit after fencing).
//! An agent killed together with its watchdog (SIGKILL of the whole
//! service, a test's teardown) leaves its claims behind, one tmpfs page
//! each until reboot: the next agent to start on the host removes them
//! ([`sweep_stale_claims`]).

use std::io::Write;
use std::path::{Path, PathBuf};

/// What a claimed run came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// This side ran the demote: whether it succeeded.
    Ran(bool),
    /// The other side had already run it: nothing was run.
    AlreadyRan,
}

/// The claim file of one holding's demote, shared by the agent (pid
/// `agent_pid`) and its watchdog for `role` at `epoch` (it is handed the
/// path). The name holds a random number drawn once per agent process:
/// the directory is shared, and another local user who could guess the
/// name could create the file first, saying the demote ran, and so stop
/// both the demote and the fence.
///
/// The directory is `/dev/shm` (memory) where there is one, else the
/// temporary directory: a claim only matters between two processes of one
/// boot, and at 1,000 roles a storm of demotes creating, writing and
/// removing files on the disk slowed the control plane's own commits.
pub fn claim_path(agent_pid: u32, role: &str, epoch: u64) -> PathBuf {
    static TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let token = TOKEN.get_or_init(crate::membership::seed::fresh_seed);
    let role: String = role
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    claim_dir().join(format!(
        "hale-demote-{agent_pid}-{token:016x}-{role}-{epoch}"
    ))
}

/// How a claimed run takes its claim.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Taking {
    /// Write this process's group into the claim while the demote runs
    /// (`running <pgid>`), so that a fence past the lease's end can kill
    /// it: only a process that leads its own group says so (`hale
    /// demote-once`, as the agent and the watchdog start it), lest a kill
    /// of the group reach whoever started it.
    pub announce_group: bool,
    /// From this instant on the shared clock ([`super::shared_clock_ns`]),
    /// a demote still running under the claim is killed (its announced
    /// process group) rather than waited for: the lease's end, for the
    /// watchdog's fence. A demote that has not finished when the lease
    /// ends cannot be waited for, since the next holder may be promoted a
    /// drift margin later (nemesis seed 80154: the agent's hung demote held
    /// the claim, and with it the fence, for its whole hook timeout while
    /// the next holder ran).
    pub preempt_at: Option<u64>,
}

/// Runs `demote` under the claim at `path` as the agent's demote does
/// (waiting for the other side, announcing nothing): see [`run_claimed_with`].
pub fn run_claimed(path: &Path, demote: impl FnOnce() -> bool) -> Claimed {
    run_claimed_with(path, Taking::default(), demote)
}

/// Runs `demote` under the claim at `path`: takes the file's exclusive
/// lock (waiting while the other side holds it, or, past
/// [`Taking::preempt_at`], killing the other side's demote), runs
/// `demote` unless the file says the demote already ran, then records
/// that it did. If the file cannot be opened or locked, `demote` runs
/// anyway.
pub fn run_claimed_with(path: &Path, taking: Taking, demote: impl FnOnce() -> bool) -> Claimed {
    use std::io::{Read, Seek};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path);
    let mut file = match file {
        Ok(f) if take_lock(&f, taking.preempt_at).is_ok() => f,
        _ => return Claimed::Ran(demote()),
    };
    let mut seen = String::new();
    let _ = file.read_to_string(&mut seen);
    if seen.starts_with(RAN) {
        return Claimed::AlreadyRan;
    }
    let announced = taking.announce_group && leads_own_group();
    if announced {
        let pgid = nix::unistd::getpgrp();
        rewrite(&mut file, &format!("{RUNNING}{pgid}\n"));
    }
    let ok = demote();
    // Only a demote that succeeded is recorded: one that failed (its hook
    // killed, timed out or exiting non-zero) leaves the claim open, so the
    // other side, or the next attempt, runs it again. An old primary must
    // not stay unfenced because its first fence failed.
    // Not synced to disk: both sides read it through the same page cache,
    // and a claim outlives neither the boot nor the agent's run.
    if ok {
        rewrite(&mut file, RAN);
    } else if announced {
        rewrite(&mut file, "");
    }
    let _ = file.rewind();
    Claimed::Ran(ok)
}

/// Replaces the claim file's content with `text`.
fn rewrite(file: &mut std::fs::File, text: &str) {
    use std::io::Seek;
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = file.write_all(text.as_bytes());
}

/// Whether this process leads its process group.
fn leads_own_group() -> bool {
    nix::unistd::getpgrp() == nix::unistd::getpid()
}

/// Takes `file`'s exclusive lock: waits for it, or with `preempt_at`,
/// waits until then and afterwards kills the process group the holder
/// announced (`running <pgid>`) until the lock is free. A holder that
/// announced nothing (the previous release's, or not a group leader) is
/// waited for.
fn take_lock(file: &std::fs::File, preempt_at: Option<u64>) -> std::io::Result<()> {
    let Some(at) = preempt_at else {
        return file.lock();
    };
    let own = nix::unistd::getpgrp().as_raw();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        if super::shared_clock_ns() >= at {
            match running_group(file) {
                Some(pgid) if i32::try_from(pgid).is_ok_and(|p| p != own) => {
                    super::kill_group(pgid);
                }
                _ => {}
            }
        }
        std::thread::sleep(LOCK_POLL);
    }
}

/// How often a preempting claim looks at the lock and its holder.
const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// The process group a claim's holder announced, if any.
fn running_group(file: &std::fs::File) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 32];
    let n = file.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.strip_prefix(RUNNING)?.trim_end().parse().ok()
}

/// What a claim file holds while an announced demote runs, before its group.
const RUNNING: &str = "running ";

/// What a claim file holds once its demote ran.
const RAN: &str = "ran\n";

/// The start of every claim file's name.
const PREFIX: &str = "hale-demote-";

/// Where claims live: `/dev/shm` (memory) where there is one, else the
/// temporary directory.
pub fn claim_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// Removes from `dir` the claims of agents that no longer run (no process
/// has the agent's id, and it is not `own_pid`) and that nobody holds
/// locked: a fence that the dead agent's watchdog still runs holds its
/// claim's lock, and its claim stays. Returns how many were removed.
///
/// Removing a claim never makes a demote run twice: its agent is gone, so
/// only that agent's watchdog could still use it, and the watchdog reads
/// a claim only under its lock, which the sweep holds while it removes it.
/// (A claim whose agent's id was reused by another process stays until
/// that process ends too.) Anything else in `dir` is left alone, regular
/// files only are opened, and a file that cannot be opened or locked is
/// kept.
pub fn sweep_stale_claims(dir: &Path, own_pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.map_while(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(claim_pid) else {
            continue;
        };
        if pid == own_pid || runs(pid) {
            continue;
        }
        let path = entry.path();
        if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file()) {
            continue;
        }
        let Ok(file) = std::fs::File::open(&path) else {
            continue;
        };
        if file.try_lock().is_ok() && std::fs::remove_file(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The agent's process id in a claim file's name, if it is one.
fn claim_pid(name: &str) -> Option<u32> {
    let (pid, rest) = name.strip_prefix(PREFIX)?.split_once('-')?;
    // Token, role and epoch follow.
    (rest.matches('-').count() >= 2).then_some(())?;
    pid.parse().ok()
}

/// Whether a process with id `pid` exists (one this process may not
/// signal exists too).
fn runs(pid: u32) -> bool {
    use nix::errno::Errno;
    use nix::sys::signal::kill;
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    !matches!(
        kill(nix::unistd::Pid::from_raw(pid), None),
        Err(Errno::ESRCH)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_demote_that_failed_leaves_the_claim_open_and_one_that_succeeded_closes_it() {
        let path = std::env::temp_dir().join(format!("hale-claim-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        assert_eq!(run_claimed(&path, || false), Claimed::Ran(false));
        assert_eq!(run_claimed(&path, || true), Claimed::Ran(true), "run again");
        assert_eq!(run_claimed(&path, || true), Claimed::AlreadyRan);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_claims_name_cannot_be_guessed_from_pid_role_and_epoch() {
        let a = claim_path(42, "db", 7);
        assert_eq!(a, claim_path(42, "db", 7), "stable within the agent");
        let name = a
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        assert_ne!(name, "hale-demote-42-db-7");
        assert!(
            name.starts_with("hale-demote-42-") && name.ends_with("-db-7"),
            "{name}"
        );
        assert_eq!(name.len(), "hale-demote-42--db-7".len() + 16);
    }

    /// The id of a process that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("true runs");
        let pid = child.id();
        child.wait().expect("reaped");
        pid
    }

    #[test]
    fn claims_of_agents_that_are_gone_are_swept_and_every_other_file_is_kept() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dead = dead_pid();
        let parent = std::os::unix::process::parent_id();
        let own = std::process::id();
        let name = |pid: u32, role: &str| format!("hale-demote-{pid}-00000000000000ab-{role}-3");
        let files = [
            (name(dead, "db"), "ran\n", false),
            (name(dead, "cache"), "", false),
            (name(parent, "db"), "ran\n", true),
            (name(own, "db"), "", true),
            (format!("hale-demote-{dead}"), "", true),
            ("PostgreSQL.1234".to_owned(), "", true),
        ];
        for (f, text, _) in &files {
            std::fs::write(dir.path().join(f), text).expect("written");
        }
        // A dead agent's claim whose fence still runs (its watchdog holds
        // the lock): kept.
        let fencing = dir.path().join(name(dead, "queue"));
        let held = std::fs::File::create(&fencing).expect("created");
        held.lock().expect("locked");
        // Not a regular file: kept, never opened.
        std::fs::create_dir(dir.path().join(name(dead, "dir"))).expect("a directory");
        // A stranger's link named like a claim, to a file of ours: both kept.
        let target = dir.path().join("precious");
        std::fs::write(&target, "keep me").expect("written");
        let link = dir.path().join(name(dead, "link"));
        std::os::unix::fs::symlink(&target, &link).expect("a link");

        assert_eq!(sweep_stale_claims(dir.path(), own), 2);
        for (f, _, kept) in &files {
            assert_eq!(dir.path().join(f).exists(), *kept, "{f}");
        }
        assert!(fencing.exists(), "a claim under its lock");
        assert!(dir.path().join(name(dead, "dir")).exists());
        assert!(link.symlink_metadata().is_ok(), "the link is kept");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep me");
        drop(held);
        assert_eq!(sweep_stale_claims(dir.path(), own), 1, "its fence ended");
        assert!(!fencing.exists());
    }

    #[test]
    fn a_claim_is_named_after_its_agent_and_read_back_by_the_sweep() {
        let path = claim_path(4242, "db/main", 7);
        let name = path
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned();
        assert_eq!(claim_pid(&name), Some(4242));
        assert_eq!(claim_pid("hale-demote-4242"), None);
        assert_eq!(claim_pid("hale-demote-x-ab-db-1"), None);
        assert_eq!(claim_pid("PostgreSQL.4242"), None);
    }
}
