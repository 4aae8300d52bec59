//! An agent started on the state the previous release left (its keyring
//! file, generation file and control-plane store, as that release wrote
//! them: hale-control's `tests/fixtures/previous-release`) reads every
//! file, migrates each to this build's format and logs it; a file of a
//! future format keeps it from starting, with an error naming the file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hale_agent::config::ControlSection;
use hale_agent::generation::{GenerationError, GENERATION_FILE};
use hale_agent::{Agent, Key, StartError, KEYRING_FILE};

use crate::support::{loopback_file, wait_until};

/// The previous release's files, from hale-control's fixtures.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hale-control/tests/fixtures/previous-release")
        .join(name)
}

/// Lays the previous release's state out as an agent keeps it: the keyring
/// and generation files in `state`, the control-plane store in `data`.
fn previous_release_state(state: &Path, data: &Path) {
    std::fs::create_dir_all(state).unwrap();
    std::fs::create_dir_all(data).unwrap();
    for f in [KEYRING_FILE, GENERATION_FILE] {
        std::fs::copy(fixture(f), state.join(f)).unwrap();
    }
    let mut raw = Vec::new();
    let gz = std::fs::File::open(fixture("control.redb.gz")).unwrap();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut raw)
        .unwrap();
    std::fs::write(data.join("control.redb"), raw).unwrap();
}

/// What the current thread logs, kept (the agent's start runs on it).
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<u8>>>);

impl Write for Logged {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logged {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A loopback agent keeping its state in `state`, running control-plane
/// server 1 (alone) on the store in `data`.
fn config(state: &Path, data: &Path) -> hale_agent::FileConfig {
    let key = Key::generate().to_base64();
    let mut f = loopback_file("formats", "n1", &key);
    f.agent.state_dir = Some(state.to_owned());
    f.control = Some(ControlSection {
        id: Some(1),
        bind: Some("127.0.0.1:0".into()),
        bootstrap: true,
        data_dir: Some(data.to_owned()),
        ..Default::default()
    });
    f
}

// One thread: the agent's start, which logs the migrations, runs on the
// thread whose logs are captured.
#[tokio::test(flavor = "current_thread")]
async fn an_agent_on_the_previous_releases_state_migrates_each_file_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (state, data) = (dir.path().join("state"), dir.path().join("data"));
    previous_release_state(&state, &data);
    let cfg = config(&state, &data).validate().unwrap();
    assert!(cfg.keys_from_state, "the saved keyring is the one in force");
    let logged = Logged::default();
    let writer = logged.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let agent = Agent::start(cfg).await.unwrap();
    drop(guard);
    let log = logged.text();
    for file in [
        state.join(KEYRING_FILE),
        state.join(GENERATION_FILE),
        data.join("control.redb"),
    ] {
        let line = format!("migrated {} from format 1 to 2", file.display());
        assert!(log.contains(&line), "no {line:?} in:\n{log}");
    }
    // The files say their format now, and keep what they held.
    let keyring = std::fs::read_to_string(state.join(KEYRING_FILE)).unwrap();
    assert_eq!(keyring.lines().next(), Some("# hale keyring, format 2"));
    assert_eq!(
        keyring,
        format!(
            "# hale keyring, format 2\n{}",
            std::fs::read_to_string(fixture(KEYRING_FILE)).unwrap()
        )
    );
    let generation = std::fs::read_to_string(state.join(GENERATION_FILE)).unwrap();
    let mut lines = generation.lines();
    assert_eq!(lines.next(), Some("# hale generation, format 2"));
    let g: u64 = lines.next().unwrap().parse().unwrap();
    assert!(g > 1_764_000_000_000, "{g}: after the last run's");
    // The store's lease table is there: the server leads it again.
    let api = agent.client();
    wait_until(
        "the old roles are back",
        Duration::from_secs(15),
        || async {
            let Ok(roles) = api.roles().await else {
                return false;
            };
            let leases = roles.leases.unwrap_or_default();
            let db = leases.get("db");
            db.is_some_and(|l| l.holder.as_deref() == Some("node-a") && l.epoch == 1)
                && leases.get("web").is_some_and(|l| l.paused)
        },
    )
    .await;
    let health = api.health().await.unwrap();
    assert_eq!(health.control.unwrap().protocol, hale_control::PROTOCOL);
    agent.shutdown().await;
}

#[tokio::test]
async fn an_agent_does_not_start_on_a_state_file_of_a_future_format_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (state, data) = (dir.path().join("state"), dir.path().join("data"));
    previous_release_state(&state, &data);
    let generation = state.join(GENERATION_FILE);
    std::fs::write(&generation, "# hale generation, format 3\n1\n").unwrap();
    let cfg = config(&state, &data).validate().unwrap();
    let e = Agent::start(cfg).await.err().unwrap();
    assert!(
        matches!(
            &e,
            StartError::Generation(GenerationError::Future {
                found: 3,
                supported: 2,
                ..
            })
        ),
        "{e:?}"
    );
    let words = e.to_string();
    assert!(words.contains(&generation.display().to_string()), "{words}");
    // A keyring file of a future format: refused with the configuration.
    std::fs::copy(fixture(GENERATION_FILE), &generation).unwrap();
    let keyring = state.join(KEYRING_FILE);
    let key = Key::generate().to_base64();
    std::fs::write(&keyring, format!("# hale keyring, format 3\n{key}\n")).unwrap();
    let e = config(&state, &data).validate().unwrap_err().to_string();
    assert!(e.contains(&keyring.display().to_string()), "{e}");
    assert!(e.contains("format 3") && e.contains("up to 2"), "{e}");
}
