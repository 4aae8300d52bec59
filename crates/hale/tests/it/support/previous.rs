//! The previous release of hale, pinned by `dist/previous-release.toml`,
//! for mixed-version clusters.
//!
//! Built once per machine by `dist/build-previous-release.sh` (its source
//! from `git archive` of the pinned commit, built in its own target
//! directory under `target/previous-release/`; CI runs the script before
//! the tests), so later runs find the binary and cost nothing. A missing
//! commit or a failed build fails the test that asked, with the reason:
//! the compatibility promise is not checked by skipping it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What `dist/previous-release.toml` says, and the built executable.
#[derive(Debug, Clone)]
pub struct PreviousRelease {
    /// Its version (`0.1.0`).
    pub version: String,
    /// The commit it was released from.
    pub commit: String,
    /// The wire versions it speaks.
    pub wire: String,
    /// Its `hale` executable.
    pub exe: PathBuf,
}

fn field(text: &str, key: &str) -> String {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
        .unwrap_or_else(|| panic!("dist/previous-release.toml has no {key}"))
}

/// The previous release, built on first use (minutes, once per machine).
pub fn previous_release() -> &'static PreviousRelease {
    static BUILT: OnceLock<PreviousRelease> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let text = std::fs::read_to_string(root.join("dist/previous-release.toml")).unwrap();
        let mut cmd = Command::new(root.join("dist/build-previous-release.sh"));
        if let Some(cargo) = std::env::var_os("CARGO") {
            // The cargo that runs these tests builds it too.
            let dir = Path::new(&cargo).parent().map(Path::to_path_buf);
            if let Some(dir) = dir {
                let path = std::env::var_os("PATH").unwrap_or_default();
                let mut paths = vec![dir];
                paths.extend(std::env::split_paths(&path));
                cmd.env("PATH", std::env::join_paths(paths).unwrap());
            }
        }
        let out = cmd.output().expect("dist/build-previous-release.sh runs");
        assert!(
            out.status.success(),
            "building the previous release failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let exe = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(exe.is_file(), "no executable at {}", exe.display());
        PreviousRelease {
            version: field(&text, "version"),
            commit: field(&text, "commit"),
            wire: field(&text, "wire"),
            exe,
        }
    })
}
