//! Disks running short of room, with real PostgreSQL under three agents,
//! each host's data on a disk of its own: a primary short of disk keeps the
//! role while no node has room (a role nobody may hold helps nobody), and
//! hands it over as a switchover does once a standby has room again.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use hale_agent::view::{AgentEvent, CheckFailure};
use hale_agent::Key;
use hale_control::RoleState;

use super::{agent, db, formed, lab_on_disks, skip_reason, write_config_with};
use crate::support::{call, during, wait_until};

/// What a filler leaves free on a host's disk: below `min_free_bytes`
/// (64 MiB by default), above what PostgreSQL needs meanwhile.
const LEFT_FREE: u64 = 32 << 20;

/// Fills host `i`'s disk until [`LEFT_FREE`] bytes are free.
fn fill(lab: &super::Lab, i: usize) {
    let disk = lab.hosts[i].data.parent().unwrap();
    let st = nix::sys::statvfs::statvfs(disk).unwrap();
    let free = st.blocks_available() * st.fragment_size();
    let take = free.saturating_sub(LEFT_FREE);
    let file = disk.join("filler");
    let ok = Command::new("fallocate")
        .args(["-l", &take.to_string()])
        .arg(&file)
        .status()
        .unwrap();
    assert!(ok.success(), "fallocate {}", file.display());
}

/// Frees what [`fill`] took on host `i`'s disk.
fn unfill(lab: &super::Lab, i: usize) {
    let disk: &Path = lab.hosts[i].data.parent().unwrap();
    std::fs::remove_file(disk.join("filler")).unwrap();
}

/// Whether host `i`'s postgres check last failed short of disk.
fn short_of_disk(lab: &super::Lab, i: usize) -> bool {
    let Ok(services) = call(agent(lab, i).api().services()) else {
        return false;
    };
    services.iter().flat_map(|s| &s.checks).any(|c| {
        c.recent
            .last()
            .is_some_and(|r| r.failure == Some(CheckFailure::ShortOfDisk))
    })
}

#[test]
fn a_primary_short_of_disk_keeps_the_role_while_no_standby_has_room_then_hands_it_to_one_that_has()
{
    if let Some(why) = skip_reason() {
        crate::support::skip(&format!("PostgreSQL under hale needs root: {why}"));
        return;
    }
    let mut lab = lab_on_disks("postgres-disk-short", 320);
    let key = Key::generate().to_base64();
    for i in 0..3 {
        // The check that proves the server does its job, disk room included.
        write_config_with(&lab, i, &key, "");
        let config = &lab.hosts[i].config;
        let text = std::fs::read_to_string(config).unwrap();
        let check =
            "[[service.check]]\npostgres = \"db\"\ninterval = \"250ms\"\ntimeout = \"2s\"\n";
        let text = text.replacen("[[role]]", &format!("{check}[[role]]"), 1);
        std::fs::write(config, text).unwrap();
    }
    formed(&mut lab);
    let minute = Duration::from_secs(60);
    // Every disk runs short: the standbys first, then the primary's.
    fill(&lab, 1);
    fill(&lab, 2);
    wait_until(minute, "b and c short of disk", || {
        short_of_disk(&lab, 1) && short_of_disk(&lab, 2)
    });
    fill(&lab, 0);
    wait_until(minute, "a short of disk", || short_of_disk(&lab, 0));
    wait_until(minute, "a saying why it keeps the role", || {
        db(&lab, 0).is_some_and(|r| r.handover_waits.is_some())
    });
    // Three times `fail_after` (2 s): a keeps the role and says why.
    during(Duration::from_secs(6), Duration::from_millis(200), || {
        let a = db(&lab, 0).unwrap();
        assert_eq!(a.state, RoleState::Holder, "{a:?}");
        let why = a.handover_waits.unwrap_or_default();
        assert!(why.contains("short of room"), "{why}");
    });
    // c has room again: a hands the role over to it, as a switchover.
    unfill(&lab, 2);
    wait_until(minute, "c holding db", || {
        db(&lab, 2).is_some_and(|r| r.state == RoleState::Holder)
    });
    let a = agent(&lab, 0).events().unwrap_or_default();
    let handed = a.iter().any(|e| {
        matches!(&e.event, AgentEvent::Switchover { to, reason: Some(r), .. }
            if to == "c" && r.contains("short of room"))
    });
    assert!(handed, "a handed the role to c, saying why: {a:?}");
}
