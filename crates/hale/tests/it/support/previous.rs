//! The previous release of hale, built from the commit that
//! `dist/previous-release.toml` pins, for mixed-version clusters.
//!
//! Built once per machine: its source is extracted with `git archive`
//! (the repository must hold the commit: a full clone) into
//! `target/previous-release/<commit>/src`, and built there in its own
//! target directory, so later runs find the binary and cost nothing. A
//! missing commit or a failed build fails the test that asked, with the
//! reason: the compatibility promise is not checked by skipping it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What `dist/previous-release.toml` says.
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

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn field(text: &str, key: &str) -> String {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
        .unwrap_or_else(|| panic!("dist/previous-release.toml has no {key}"))
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The previous release, built on first use (several minutes, once per
/// machine; see the module docs).
pub fn previous_release() -> &'static PreviousRelease {
    static BUILT: OnceLock<PreviousRelease> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = repo_root();
        let text = std::fs::read_to_string(root.join("dist/previous-release.toml")).unwrap();
        let (version, commit, wire) = (
            field(&text, "version"),
            field(&text, "commit"),
            field(&text, "wire"),
        );
        let target =
            std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
        let home = target.join("previous-release").join(&commit);
        let exe = home.join("target/debug/hale");
        if !exe.is_file() {
            build(&root, &commit, &home);
        }
        PreviousRelease {
            version,
            commit,
            wire,
            exe,
        }
    })
}

fn build(root: &Path, commit: &str, home: &Path) {
    let src = home.join("src");
    if !src.join("Cargo.toml").is_file() {
        let has = Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            has,
            "the previous release's commit {commit} is not in this repository (a shallow clone?): \
             fetch it (git fetch --unshallow) to run the mixed-version tests"
        );
        let tmp = home.join(format!("src.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        let archive = format!(
            "git -C '{}' archive --format=tar {commit} | tar -x -C '{}'",
            root.display(),
            tmp.display()
        );
        run(
            Command::new("sh").args(["-c", &archive]),
            "extracting the previous release",
        );
        if std::fs::rename(&tmp, &src).is_err() {
            // Another process extracted it meanwhile.
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "building the previous release ({commit}) once, in {}",
        home.display()
    );
    run(
        Command::new(cargo)
            .current_dir(&src)
            .env("CARGO_TARGET_DIR", home.join("target"))
            .env_remove("RUSTFLAGS")
            .args(["build", "--locked", "-p", "hale", "--bin", "hale"]),
        "building the previous release",
    );
}
