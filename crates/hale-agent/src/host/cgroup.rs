//! Where the agent's processes live when its service manager delegated it
//! a cgroup (the unit's `Delegate=yes`, with `HALE_CGROUP=delegated` in its
//! environment, see `dist/hale.service`).
//!
//! The unit's cgroup gets three leaves (cgroup v2 lets only leaves hold
//! processes once controllers are enabled below a group):
//!
//! * `agent`: the agent itself, and the hooks it runs (its children);
//! * `watchdog`: its fencing watchdog, and the fences that one runs;
//! * `services`: the PostgreSQL servers hale starts
//!   (`hale_postgres::place_servers_in`).
//!
//! With `KillMode=process` systemd signals only the agent when the unit
//! stops or restarts, so the watchdog fences a dead agent's holdings and the
//! services outlive a restart; the leaves keep them apart, so that a new
//! run can wait for its predecessor's watchdog (see [`Layout::leftover`])
//! and each can later get its own weights and limits.
//!
//! Nothing happens without `HALE_CGROUP=delegated`: an agent run by hand,
//! or by a test as root, never moves itself.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable that says the agent's cgroup is delegated to it.
pub const ENV: &str = "HALE_CGROUP";

/// The environment variable that names, to a process the agent starts,
/// the leaf (a directory) it moves itself into first thing
/// ([`enter_named_leaf`]): the fencing watchdog, so that it is in its
/// leaf before it reads an order and starts a fence.
pub const LEAF_ENV: &str = "HALE_CGROUP_LEAF";

/// Moves this process into the leaf [`LEAF_ENV`] names, if it names one.
pub fn enter_named_leaf() -> Result<(), PlaceError> {
    let Some(leaf) = std::env::var_os(LEAF_ENV) else {
        return Ok(());
    };
    let path = PathBuf::from(leaf).join("cgroup.procs");
    std::fs::write(&path, std::process::id().to_string())
        .map_err(|source| PlaceError::Write { path, source })
}

/// The leaves the agent makes in its delegated cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaf {
    /// The agent and its hooks.
    Agent,
    /// The fencing watchdog and its fences.
    Watchdog,
    /// The services hale starts (PostgreSQL).
    Services,
}

impl Leaf {
    /// Every leaf.
    pub const ALL: [Leaf; 3] = [Leaf::Agent, Leaf::Watchdog, Leaf::Services];

    /// Its directory's name.
    pub fn name(self) -> &'static str {
        match self {
            Leaf::Agent => "agent",
            Leaf::Watchdog => "watchdog",
            Leaf::Services => "services",
        }
    }
}

/// Why the agent could not place itself; it then runs where it was started.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// `/proc/self/cgroup` or `/proc/self/mountinfo` could not be read.
    #[error("reading {0}: {1}")]
    Proc(&'static str, std::io::Error),
    /// No unified (v2) hierarchy holds this process.
    #[error("no cgroup v2 hierarchy is mounted for this process")]
    NoUnified,
    /// A leaf could not be made, or a process moved into it.
    #[error("{path}: {source} (is the unit's cgroup delegated: Delegate=yes?)")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The delegated cgroup and its leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The unit's cgroup (a directory under the cgroup2 mount).
    root: PathBuf,
}

impl Layout {
    /// The layout rooted at the cgroup `own` holds this process: its
    /// parent when `own` is one of the leaves already (a process placed
    /// before), else `own`.
    pub fn around(own: &Path) -> Layout {
        let placed = own
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| Leaf::ALL.iter().any(|l| l.name() == n));
        let root = match own.parent() {
            Some(parent) if placed => parent.to_path_buf(),
            _ => own.to_path_buf(),
        };
        Layout { root }
    }

    /// The directory of `leaf`.
    pub fn leaf(&self, leaf: Leaf) -> PathBuf {
        self.root.join(leaf.name())
    }

    /// Moves process `pid` (all its threads) into `leaf`.
    pub fn join(&self, leaf: Leaf, pid: u32) -> Result<(), PlaceError> {
        let path = self.leaf(leaf).join("cgroup.procs");
        std::fs::write(&path, pid.to_string()).map_err(|source| PlaceError::Write { path, source })
    }

    /// The processes in `leaf` now (none if it cannot be read): at start,
    /// what a previous run left there.
    pub fn leftover(&self, leaf: Leaf) -> Vec<u32> {
        std::fs::read_to_string(self.leaf(leaf).join("cgroup.procs"))
            .map(|t| procs(&t))
            .unwrap_or_default()
    }
}

/// The pids listed in a `cgroup.procs` file.
pub fn procs(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// The cgroup v2 path of this process in `/proc/self/cgroup`'s text (the
/// `0::` line, also present on a hybrid host), relative to the mount.
pub fn unified_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}

/// Where the cgroup v2 hierarchy is mounted, from `/proc/self/mountinfo`'s
/// text (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host).
pub fn unified_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        let (mount, fs) = l.split_once(" - ")?;
        (fs.split_whitespace().next()? == "cgroup2").then_some(())?;
        // id parent major:minor root mount-point ...
        mount.split_whitespace().nth(4).map(PathBuf::from)
    })
}

static PLACED: OnceLock<Layout> = OnceLock::new();

/// The layout this process placed itself in, if it did ([`place`]).
pub fn placed() -> Option<&'static Layout> {
    PLACED.get()
}

/// Makes the leaves in this process's (delegated) cgroup and moves this
/// process into `agent`. Called once, first thing, by `hale agent` when
/// [`ENV`] says `delegated`.
pub fn place() -> Result<&'static Layout, PlaceError> {
    if let Some(l) = PLACED.get() {
        return Ok(l);
    }
    let read = |p: &'static str| std::fs::read_to_string(p).map_err(|e| PlaceError::Proc(p, e));
    let own = read("/proc/self/cgroup")?;
    let own = unified_path(&own).ok_or(PlaceError::NoUnified)?;
    let mount = unified_mount(&read("/proc/self/mountinfo")?).ok_or(PlaceError::NoUnified)?;
    let layout = Layout::around(&mount.join(own.trim_start_matches('/')));
    for leaf in Leaf::ALL {
        let path = layout.leaf(leaf);
        match std::fs::create_dir(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(PlaceError::Write { path, source: e });
            }
            _ => {}
        }
    }
    layout.join(Leaf::Agent, std::process::id())?;
    Ok(PLACED.get_or_init(|| layout))
}

/// How long a new run waits for its predecessor's watchdog to finish
/// fencing before it starts its roles.
pub const PREDECESSOR_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What `hale agent` does first when [`ENV`] says `delegated`: [`place`]s
/// itself, sends the PostgreSQL servers it starts to `services`, and waits
/// (at most [`PREDECESSOR_WAIT`]) until no watchdog of a previous run is
/// left in `watchdog`: after a crash, `Restart=` starts the agent again
/// while the old watchdog may still fence its holdings, and a role must not
/// be promoted here again before its fence ran. A failure is logged; the
/// agent then runs where systemd put it.
pub async fn settle() {
    let layout = match place() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!("{ENV}=delegated, but the agent stays in its cgroup: {e}");
            return;
        }
    };
    tracing::info!(cgroup = %layout.root.display(), "placed in the delegated cgroup's leaves");
    hale_postgres::place_servers_in(layout.leaf(Leaf::Services));
    let deadline = tokio::time::Instant::now() + PREDECESSOR_WAIT;
    let mut told = false;
    loop {
        let left = layout.leftover(Leaf::Watchdog);
        if left.is_empty() {
            return;
        }
        if !told {
            tracing::warn!(pids = ?left, "a previous run's watchdog is still fencing: waiting for it");
            told = true;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::error!(pids = ?left, "a previous run's watchdog still runs after {PREDECESSOR_WAIT:?}: starting anyway");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    const MOUNTINFO_V2: &str = "\
22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
";
    const MOUNTINFO_HYBRID: &str = "\
30 22 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid - cgroup cgroup rw,name=systemd
";

    #[test]
    fn the_unified_hierarchy_is_found_on_a_v2_and_on_a_hybrid_host() {
        assert_eq!(
            unified_mount(MOUNTINFO_V2),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(
            unified_mount(MOUNTINFO_HYBRID),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        // A host with only v1 hierarchies has none: the agent stays put.
        let v1 = "32 30 0:28 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n";
        assert_eq!(unified_mount(v1), None);
    }

    #[test]
    fn the_process_cgroup_is_its_v2_line() {
        let hybrid = "1:name=systemd:/system.slice/hale.service\n\
                      0::/system.slice/hale.service\n";
        assert_eq!(unified_path(hybrid), Some("/system.slice/hale.service"));
        assert_eq!(unified_path("4:memory:/x\n1:cpu:/\n"), None);
    }

    #[test]
    fn the_layout_is_the_units_cgroup_whether_or_not_the_process_sits_in_a_leaf() {
        let unit = Path::new("/sys/fs/cgroup/system.slice/hale.service");
        let fresh = Layout::around(unit);
        assert_eq!(fresh.leaf(Leaf::Watchdog), unit.join("watchdog"));
        // A process already in a leaf (placed before) finds the same layout.
        assert_eq!(Layout::around(&unit.join("agent")), fresh);
        assert_eq!(Layout::around(&unit.join("services")), fresh);
        // Any other sub-cgroup is a root of its own.
        let other = unit.join("elsewhere");
        assert_eq!(
            Layout::around(&other).leaf(Leaf::Agent),
            other.join("agent")
        );
    }

    #[test]
    fn leftover_processes_are_read_from_the_leafs_procs() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::around(dir.path());
        assert!(layout.leftover(Leaf::Watchdog).is_empty());
        std::fs::create_dir(layout.leaf(Leaf::Watchdog)).unwrap();
        std::fs::write(
            layout.leaf(Leaf::Watchdog).join("cgroup.procs"),
            "812\n813\n",
        )
        .unwrap();
        assert_eq!(layout.leftover(Leaf::Watchdog), vec![812, 813]);
        assert_eq!(procs(""), Vec::<u32>::new());
    }
}
