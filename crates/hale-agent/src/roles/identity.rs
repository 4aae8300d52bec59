//! This node's identity beyond its name, for keep and adopt: a paused role
//! kept by a stopping agent is adopted only by a later run that shows the
//! same identity (`hale_control::LeaseRequest::Adopt`).
//!
//! It names the machine (`/etc/machine-id`, else the host name) and where
//! this agent keeps its state (`[agent] state_dir`, else its working
//! directory), so that a restart of the same agent adopts the role and
//! another machine given the same node name, or an agent started from
//! somewhere else on the same machine (a rebuilt installation), does not.

use std::path::Path;

/// The identity of the agent named `node` whose state lives in
/// `state_dir` (its working directory when `None`).
pub fn node_identity(node: &str, state_dir: Option<&Path>) -> String {
    let machine = [
        "/etc/machine-id",
        "/var/lib/dbus/machine-id",
        "/proc/sys/kernel/hostname",
    ]
    .iter()
    .filter_map(|p| std::fs::read_to_string(p).ok())
    .map(|s| s.trim().to_owned())
    .find(|s| !s.is_empty())
    .unwrap_or_default();
    let place = state_dir
        .map(Path::to_path_buf)
        .or_else(|| std::env::current_dir().ok())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    format!("{node}@{machine}:{place}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_agent_shows_the_same_identity_and_another_state_dir_another() {
        let a = node_identity("n0", Some(Path::new("/var/lib/hale-a")));
        assert_eq!(a, node_identity("n0", Some(Path::new("/var/lib/hale-a"))));
        assert_ne!(a, node_identity("n0", Some(Path::new("/var/lib/hale-b"))));
        assert_ne!(a, node_identity("n1", Some(Path::new("/var/lib/hale-a"))));
    }
}
