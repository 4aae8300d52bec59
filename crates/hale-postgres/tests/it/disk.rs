//! A disk of a test's own: a loop-mounted ext4 that holds a server's WAL
//! or data directory, to freeze or fill.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixture::{Lab, Node};

/// How long a frozen disk stays frozen at most.
const THAW_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// A small ext4 filesystem in a file, loop-mounted, holding `node`'s
/// `pg_wal` or its whole data directory (moved there with the server
/// stopped, linked back): a disk of its own that a test can freeze
/// (`fsfreeze`) or fill. Thawed and lazily unmounted on drop, whatever
/// happened (drop it before the lab, which stops the server: declare it
/// after).
pub struct Disk {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl Disk {
    /// `what` of `node`'s (`"pg_wal"`, or `""` for the whole data
    /// directory) on a disk of `megabytes`.
    pub async fn holding(lab: &Lab, node: &Node, megabytes: u32, what: &str) -> Disk {
        let dir = tempfile::Builder::new()
            .prefix("hale-wal-disk-")
            .tempdir()
            .expect("temp dir");
        let image = dir.path().join("disk.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).expect("mount point");
        run("truncate", &["-s", &format!("{megabytes}M"), path(&image)]);
        run("mkfs.ext4", &["-q", path(&image)]);
        run("mount", &["-o", "loop", path(&image), path(&mount)]);
        let disk = Disk { mount, _dir: dir };
        node.stop(lab, "fast").await;
        let here = if what.is_empty() {
            node.cfg.data_dir.clone()
        } else {
            node.cfg.data_dir.join(what)
        };
        let moved = disk.mount.join("moved");
        run("cp", &["-a", path(&here), path(&moved)]);
        std::fs::remove_dir_all(&here).expect("remove what moved");
        std::os::unix::fs::symlink(&moved, &here).expect("link it back");
        run("chown", &["-h", "postgres:postgres", path(&here)]);
        run("chown", &["postgres:postgres", path(&disk.mount)]);
        node.start(lab).await;
        disk
    }

    /// Freezes the filesystem: every write waits until [`Disk::thaw`].
    pub fn freeze(&self) {
        run("fsfreeze", &["-f", path(&self.mount)]);
        // A test that hangs (not one that panics) never drops its disk:
        // the disk thaws itself after THAW_AFTER whatever the test does,
        // so that nothing waits on it for ever.
        let mount = self.mount.clone();
        std::thread::spawn(move || {
            std::thread::sleep(THAW_AFTER);
            let _ = Command::new("fsfreeze")
                .arg("-u")
                .arg(&mount)
                .stderr(std::process::Stdio::null())
                .status();
        });
    }

    /// Thaws it.
    pub fn thaw(&self) {
        // "Invalid argument" when not frozen: nothing to say.
        let _ = Command::new("fsfreeze")
            .args(["-u", path(&self.mount)])
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// Fills the filesystem until `left` bytes or fewer are free.
    pub fn fill(&self, left: u64) {
        let fs = nix::sys::statvfs::statvfs(&self.mount).expect("statvfs");
        #[allow(clippy::unnecessary_cast)] // the field types differ by platform
        let free = fs.blocks_available() as u64 * fs.fragment_size() as u64;
        let size = free.saturating_sub(left);
        run(
            "fallocate",
            &["-l", &size.to_string(), path(&self.mount.join("ballast"))],
        );
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        self.thaw();
        // A server still running on this disk (a test that started it again
        // after a fence) would outlive the unmount, and the lab's own sweep
        // could no longer read its pid file: killed here, by process id.
        let mut left = on_this_disk(&self.mount);
        for pid in &left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !left.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            left = on_this_disk(&self.mount);
        }
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// The PostgreSQL processes whose working directory is on `mount` (a
/// server's is its data directory); zombies left out.
fn on_this_disk(mount: &Path) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"));
            comm.trim() == "postgres" && cwd.is_ok_and(|c| c.starts_with(mount))
        })
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
