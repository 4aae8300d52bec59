//! A smoke run of the nemesis harness: two short schedules (20 s of faults
//! each, seeds 1 and 2, run in parallel) against real agents in network
//! namespaces, checked. Needs root, `ip`, `nft`, `mount` and libfaketime,
//! and the `hale` binary built beside this one (`cargo test --workspace`
//! builds it); skipped, with a printed reason, otherwise.
//!
//! Every fault family is drawn, as in the long run (`bench/nemesis.sh`):
//! process and clock faults joined once the holes they found were closed (a
//! holder whose watchdog was killed never demoted; clock steps locked
//! members out).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The fault families of the smoke run (see the module's documentation).
const SMOKE_FAMILIES: &str = "process,host,partition,loss,clock,disk,hooks,delay";

/// Skips, saying why; fails instead where `.ci/run` asks that nothing be
/// skipped (`HALE_TESTS_SKIP_NOTHING`).
fn skip(why: &str) {
    assert!(
        std::env::var_os("HALE_TESTS_SKIP_NOTHING").is_none(),
        "cannot run here (HALE_TESTS_SKIP_NOTHING is set): {why}"
    );
    println!("SKIPPED: {why}");
}

#[test]
fn two_short_random_schedules_break_no_invariant() {
    if let Some(why) = hale_nemesis::lab::unsupported() {
        skip(&format!(
            "the nemesis smoke run needs root, ip, nft, mount and faketime: {why}"
        ));
        return;
    }
    let me = PathBuf::from(env!("CARGO_BIN_EXE_hale-nemesis"));
    let hale = std::env::var_os("HALE_BIN")
        .map(PathBuf::from)
        .or_else(|| me.parent().map(|d| d.join("hale")))
        .filter(|p| p.exists());
    let Some(hale) = hale else {
        skip(&format!(
            "no hale binary beside {} (cargo build -p hale) and no HALE_BIN",
            me.display()
        ));
        return;
    };
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("nemesis-smoke");
    let runs: Vec<_> = [1u64, 2]
        .iter()
        .map(|seed| {
            Command::new(&me)
                .args(["run", "--length", "20", "--seed", &seed.to_string()])
                .args(["--faults", SMOKE_FAMILIES])
                .arg("--hale-bin")
                .arg(&hale)
                .arg("--out")
                .arg(&out)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map(|c| (*seed, c))
        })
        .collect();
    for r in runs {
        let (seed, child) = r.expect("hale-nemesis starts");
        let o = child.wait_with_output().expect("hale-nemesis runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        println!("seed {seed}:\n{text}");
        assert!(
            o.status.success(),
            "seed {seed} failed (results in {}):\n{text}",
            out.display()
        );
    }
}
