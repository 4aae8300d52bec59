//! A control-plane server whose disk fills up: its Raft stops on the failed
//! write, it says so (event, health, metrics), the other servers elect a
//! leader without it, and the role stays held. Needs root (a tmpfs mount).

use hale_control::raft::ControlState;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use hale_agent::view::HealthView;
use hale_agent::AgentEvent;

use crate::failover::first_holder;
use crate::support::{call, wait_for, Cluster};

/// A small tmpfs, unmounted (lazily) and removed on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .status()
            .unwrap()
            .success();
        assert!(ok, "cannot mount a tmpfs at {} (run as root)", at.display());
        Tmpfs(at)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn health(c: &Cluster, i: usize) -> Option<HealthView> {
    call(c.agents[i].api().health()).ok()
}

#[test]
fn a_control_plane_server_whose_disk_fills_stops_says_so_and_the_others_carry_on() {
    let mut disk: Option<Tmpfs> = None;
    let c = Cluster::roles_with(
        "disk-full",
        3,
        |_, _| None,
        |_| String::new(),
        |dir| disk = Some(Tmpfs::mount(dir.join("data-n0"), "4m")),
    );
    let (holder, _) = first_holder(&c);
    assert_eq!(holder, "n0");
    let h = health(&c, 0).unwrap();
    assert_eq!(h.status, hale_agent::view::HealthStatus::Ok, "{h:?}");
    assert_eq!(h.control.unwrap().storage_error, None);
    // Fill n0's data filesystem.
    let dir = &disk.as_ref().unwrap().0;
    let _ = std::fs::write(dir.join("filler"), vec![0u8; 8 << 20]);
    // Its next log writes fail: its Raft stops and it says so.
    let h = wait_for(Duration::from_secs(60), "n0 reports degraded", || {
        health(&c, 0).filter(|h| h.status == hale_agent::view::HealthStatus::Degraded)
    });
    let control = h.control.unwrap();
    assert_eq!(control.state, ControlState::Stopped, "{control:?}");
    let err = control.storage_error.unwrap();
    assert!(err.contains("No space left"), "{err}");
    let metrics = c.agents[0].metrics().unwrap();
    assert!(
        metrics.contains("hale_control_storage_failed{node=\"n0\",server=\"1\"} 1"),
        "{metrics}"
    );
    let events = c.agents[0].events().unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e.event, AgentEvent::ControlStopped { .. })),
        "{events:?}"
    );
    // The other servers elect a leader without it.
    wait_for(Duration::from_secs(30), "n1 or n2 leads", || {
        (1..3)
            .any(|i| {
                health(&c, i)
                    .is_some_and(|h| h.control.is_some_and(|c| c.state == ControlState::Leader))
            })
            .then_some(())
    });
    // And the role stays held, renewed through the live servers. A holder
    // may lose its lease during the election: a leader whose disk fails
    // stops committing at once but its Raft stops only at the failed write
    // (up to a second), and the election takes about one more. It is then
    // granted again. What must hold: once its holder has renewed through
    // the new leader, the role does not move.
    let renewals = |i: usize| {
        let roles = c.agents[i].roles()?;
        roles
            .local
            .iter()
            .find(|r| r.role == "db")
            .map(|r| r.renewals)
    };
    let before: Vec<u64> = (0..3).map(|i| renewals(i).unwrap_or(0)).collect();
    let held = wait_for(
        Duration::from_secs(30),
        "db renewed through the new leader",
        || {
            let held = c.holder()?;
            let i = c.index(&held.0);
            (renewals(i)? >= before[i] + 2).then_some(held)
        },
    );
    c.assert_holder_stays(Duration::from_secs(3), &held, "while n0's disk was full");
    let status = c.agents[0].cli(&["status"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("STORAGE FAILED"), "{text}");
    // Unmounted first: the test's directory cannot be removed around a
    // mount point (it was left in /dev/shm).
    drop(disk.take());
    drop(c);
}
