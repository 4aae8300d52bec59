//! `hale demo`, as a newcomer runs it (without a terminal: no pauses).

use std::process::Command;

use crate::support::hale_bin;

#[test]
fn the_demo_prints_its_dashboard_detects_the_faults_fails_the_role_over_and_exits_0() {
    let logs = tempfile::tempdir().unwrap();
    let out = Command::new(hale_bin())
        .args(["demo", "--hold", "0", "--logs"])
        .arg(logs.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("Dashboard (live; open it now): http://127.0.0.1:"),
        "{text}"
    );
    assert!(
        text.contains("Role db failed over from demo-4 to"),
        "{text}"
    );
    assert!(text.contains("rejoined"), "{text}");
}
