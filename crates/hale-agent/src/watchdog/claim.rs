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
    let token = TOKEN.get_or_init(crate::seed::fresh_seed);
    let role: String = role
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    claim_dir().join(format!(
        "hale-demote-{agent_pid}-{token:016x}-{role}-{epoch}"
    ))
}

/// Runs `demote` under the claim at `path`: takes the file's exclusive
/// lock (waiting while the other side holds it), runs `demote` unless the
/// file says the demote already ran, then records that it did. If the
/// file cannot be opened or locked, `demote` runs anyway.
pub fn run_claimed(path: &Path, demote: impl FnOnce() -> bool) -> Claimed {
    use std::io::{Read, Seek};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path);
    let mut file = match file {
        Ok(f) if f.lock().is_ok() => f,
        _ => return Claimed::Ran(demote()),
    };
    let mut seen = String::new();
    let _ = file.read_to_string(&mut seen);
    if seen.starts_with(RAN) {
        return Claimed::AlreadyRan;
    }
    let ok = demote();
    // Only a demote that succeeded is recorded: one that failed (its hook
    // killed, timed out or exiting non-zero) leaves the claim open, so the
    // other side, or the next attempt, runs it again. An old primary must
    // not stay unfenced because its first fence failed.
    // Not synced to disk: both sides read it through the same page cache,
    // and a claim outlives neither the boot nor the agent's run.
    if ok {
        let _ = file.rewind();
        let _ = file.write_all(RAN.as_bytes());
    }
    Claimed::Ran(ok)
}

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
