//! Headless Chromium for tests and benchmarks, driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`, through `fantoccini`).
//! Dropping a [`Browser`] ends the session, kills chromedriver and every
//! browser process using this browser's profile, and removes the profile,
//! also when a test fails.
//! Shared by the `it` tests and `examples/dashboard_bench.rs` (with the
//! polling helpers of `support.rs`).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};

use crate::support::{free_port, wait_for, wait_until};

/// Where Debian puts the browser and its driver.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// Flags for Chromium as root on a machine with no route to Google's hosts.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
];

/// A headless Chromium session.
pub struct Browser {
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    driver: Child,
    profile: PathBuf,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session.
    pub fn start() -> Browser {
        for (bin, pkg) in [(CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")] {
            assert!(
                Path::new(bin).exists(),
                "{bin} is missing: the dashboard tests need headless Chromium. Install it with \
                 `apt-get install -y chromium chromium-driver` (package {pkg}; .ci/run installs it)"
            );
        }
        let profile = std::env::temp_dir().join(format!(
            "hale-chromium-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&profile).expect("creating the browser profile directory");
        let port = free_port();
        let log = std::fs::File::create(profile.join("chromedriver.log")).expect("driver log");
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("driver log"))
            .stderr(log)
            .spawn()
            .expect("starting chromedriver");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let mut b = Browser {
            rt,
            client: None,
            driver,
            profile,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_until(Duration::from_secs(20), "chromedriver to listen", || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        });
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!(
            "--user-data-dir={}",
            b.profile.join("data").display()
        ));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": CHROMIUM, "args": args }),
        );
        let client =
            b.rt.block_on(
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(caps)
                    .connect(&format!("http://{addr}")),
            )
            .expect("a Chromium session through chromedriver");
        b.client = Some(client);
        b
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a session")
    }

    /// Opens `url` and waits for its load event.
    pub fn goto(&self, url: &str) {
        self.rt
            .block_on(self.client().goto(url))
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// Runs `body` (a function body: `return ...`) in the page; its result as JSON.
    pub fn eval(&self, body: &str) -> serde_json::Value {
        self.rt
            .block_on(self.client().execute(body, Vec::new()))
            .unwrap_or_else(|e| panic!("running script in the page: {e}\n{body}"))
    }

    /// Polls `body` every 100 ms until it returns something other than
    /// null or false; panics naming `what` after `deadline`.
    pub fn wait_js(&self, deadline: Duration, what: &str, body: &str) -> serde_json::Value {
        wait_for(deadline, &format!("the page to show: {what}"), || {
            let v = self.eval(body);
            (!v.is_null() && v != serde_json::Value::Bool(false)).then_some(v)
        })
    }

    /// Saves a PNG of the page as `dir/name.png` and returns its path.
    pub fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let png = self
            .rt
            .block_on(self.client().screenshot())
            .expect("a screenshot");
        std::fs::create_dir_all(dir).expect("the screenshot directory");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("writing the screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(5), c.close()).await });
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        // Browser processes left behind: exactly those using this profile.
        let marker = self.profile.display().to_string();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmd).contains(&marker) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.profile.join("chromedriver.log"));
            let log = log.unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            eprintln!("---- chromedriver log (last lines) ----");
            for l in tail.iter().rev() {
                eprintln!("{l}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Where tests and benchmarks save screenshots: `target/test-artifacts/dashboard/`.
pub fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("test-artifacts").join("dashboard")
}
