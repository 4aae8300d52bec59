//! A control plane that holds when the host is busy (issue 41), the
//! suite's small version of `bench/roles.py --hook python3 --busy 2`:
//! three agents, twenty roles whose hooks each start a `python3` process
//! (an `sh` one where there is no python3), both cores kept busy by two
//! busy loops: once every role is held, nothing moves.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use hale_agent::view::AgentEvent;

use crate::support::{during, hook_lines, wait_for, Cluster};

/// Busy loops, killed by process id when dropped.
struct Busy(Vec<Child>);

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// How many roles (the cluster's `db` and `r1`..).
const ROLES: usize = 20;

/// A shell script starting one process (python3 if there is one) that
/// appends `<ns> <node> <what> <epoch> <role>` to `log`.
fn script(python: bool, node: usize, what: &str, log: &Path) -> String {
    let line = format!("$(date +%s%N) n{node} {what} $HALE_EPOCH $HALE_ROLE");
    let log = log.display();
    if python {
        format!("python3 -c 'import sys; open(sys.argv[1], \"a\").write(sys.argv[2] + \"\\n\")' {log} \"{line}\"")
    } else {
        format!("sh -c 'echo \"$1\" >> {log}' x \"{line}\"")
    }
}

/// `script` as a TOML array running it with `sh -c`.
fn toml(script: &str) -> String {
    let quoted = script.replace('\\', "\\\\").replace('"', "\\\"");
    format!("[\"sh\", \"-c\", \"{quoted}\"]")
}

/// role → (holder, epoch), as the first agent reads the table.
fn holders(c: &Cluster) -> Option<BTreeMap<String, (Option<String>, u64)>> {
    let leases = c.agents[0].roles()?.leases?;
    Some(
        leases
            .into_iter()
            .map(|(r, l)| (r, (l.holder, l.epoch)))
            .collect(),
    )
}

#[test]
fn twenty_roles_whose_hooks_start_python_hold_still_on_a_host_kept_busy() {
    let python = Command::new("python3")
        .args(["-c", "pass"])
        .status()
        .is_ok_and(|s| s.success());
    // The hook log's path, known once the cluster's directory is made.
    let log: RefCell<Option<PathBuf>> = RefCell::new(None);
    let hooks = |i: usize, path: &Path| {
        *log.borrow_mut() = Some(path.to_owned());
        Some((
            script(python, i, "promote", path),
            script(python, i, "demote", path),
        ))
    };
    // Roles r1.. beside `db`, each preferring one node.
    let extra = |i: usize| -> String {
        let path = log.borrow().clone().unwrap_or_default();
        (1..ROLES)
            .map(|r| {
                let prio = if r % 3 == i { 100 } else { 50 - i as i64 };
                format!(
                    "\n[[role]]\nname = \"r{r}\"\nservice = \"pg\"\npriority = {prio}\npromote = {}\ndemote = {}\n",
                    toml(&script(python, i, "promote", &path)),
                    toml(&script(python, i, "demote", &path)),
                )
            })
            .collect()
    };
    let _busy = Busy(
        (0..2)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let c = Cluster::roles_with("busy_host", 3, hooks, extra, |_| {});
    let path = log.borrow().clone().unwrap();
    // Every role held, and its holder's promote hook run (it writes its
    // line and exits).
    let settled = wait_for(
        Duration::from_secs(120),
        "every role held and promoted",
        || {
            let h = holders(&c)?;
            let lines = hook_lines(&path);
            let promoted = |role: &String, (holder, epoch): &(Option<String>, u64)| {
                lines.iter().any(|l| {
                    l.what == "promote"
                        && Some(&l.node) == holder.as_ref()
                        && l.epoch == *epoch
                        && &l.reason == role
                })
            };
            (h.len() == ROLES && h.iter().all(|(r, v)| promoted(r, v))).then_some(h)
        },
    );
    let start = hook_lines(&path).len();
    during(Duration::from_secs(30), Duration::from_secs(1), || {
        let now = holders(&c).unwrap();
        let moved: Vec<&String> = settled
            .iter()
            .filter(|(r, v)| now.get(*r) != Some(v))
            .map(|(r, _)| r)
            .collect();
        assert!(moved.is_empty(), "roles that changed hands: {moved:?}");
    });
    let hooks_run: Vec<_> = hook_lines(&path).into_iter().skip(start).collect();
    assert!(
        hooks_run.is_empty(),
        "hooks run while steady: {hooks_run:?}"
    );
    // The churn breaker of the leader elected at the start opened with its
    // election and closed two leases later; its agent said both.
    let said = |i: usize| -> Vec<bool> {
        c.agents[i]
            .events()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|e| match e.event {
                AgentEvent::ChurnBreaker { open, .. } => Some(open),
                _ => None,
            })
            .collect()
    };
    let all: Vec<Vec<bool>> = (0..3).map(said).collect();
    assert!(
        all.iter().any(|s| s.starts_with(&[true, false])),
        "no agent said its churn breaker opened then closed: {all:?}"
    );
}
