//! etcd members on loopback, each in a directory of its own, killed by
//! process id when dropped (whatever the test did).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hale_etcd::{EtcdConfig, EtcdLeases};

/// The etcd server binary the tests run.
const ETCD: &str = "/usr/bin/etcd";

/// Why the tests cannot run here, if they cannot: with
/// `HALE_TESTS_SKIP_NOTHING` set (CI) that is a failure, not a skip.
pub fn skip_reason() -> Option<String> {
    if std::path::Path::new(ETCD).is_file() {
        return None;
    }
    let why = format!("{ETCD} is missing (apt-get install etcd-server)");
    assert!(
        std::env::var_os("HALE_TESTS_SKIP_NOTHING").is_none(),
        "cannot run here (HALE_TESTS_SKIP_NOTHING is set): {why}"
    );
    println!("SKIPPED: {why}");
    Some(why)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One member.
pub struct Member {
    pub client: String,
    child: Option<Child>,
}

/// An etcd cluster of N members.
pub struct Etcd {
    pub members: Vec<Member>,
    _dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts `n` members and waits until the cluster answers.
    pub async fn start(n: usize) -> Etcd {
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let initial: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect();
        let token = format!("hale-test-{}-{}", std::process::id(), free_port());
        let mut members = Vec::new();
        for (i, (client, peer)) in ports.iter().enumerate() {
            let name = format!("m{i}");
            let data = dir.path().join(&name);
            let log = std::fs::File::create(dir.path().join(format!("{name}.log"))).unwrap();
            let client_url = format!("http://127.0.0.1:{client}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let child = Command::new(ETCD)
                .args(["--name", &name, "--data-dir"])
                .arg(&data)
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &initial.join(",")])
                .args(["--initial-cluster-token", &token])
                .args(["--initial-cluster-state", "new"])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            members.push(Member {
                client: client_url,
                child: Some(child),
            });
        }
        let etcd = Etcd { members, _dir: dir };
        etcd.wait_ready().await;
        etcd
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    /// Waits until a leader is elected and a write commits.
    async fn wait_ready(&self) {
        let start = Instant::now();
        loop {
            let ok = match etcd_client::Client::connect(self.endpoints(), None).await {
                Ok(mut c) => c.put("/hale-test/ready", "1", None).await.is_ok(),
                Err(_) => false,
            };
            if ok {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "etcd did not start in 30 s: see {}/m*.log",
                self._dir.path().display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The member that leads, by index.
    pub async fn leader(&self) -> Option<usize> {
        for m in &self.members {
            let Ok(mut c) = etcd_client::Client::connect([m.client.as_str()], None).await else {
                continue;
            };
            let Ok(s) = c.status().await else { continue };
            let leader = s.leader();
            for (j, o) in self.members.iter().enumerate() {
                let Ok(mut oc) = etcd_client::Client::connect([o.client.as_str()], None).await
                else {
                    continue;
                };
                if let Ok(os) = oc.status().await {
                    if os.header().map(|h| h.member_id()) == Some(leader) {
                        return Some(j);
                    }
                }
            }
        }
        None
    }

    /// Kills member `i` (SIGKILL, by its process id).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A leases store on this cluster under `prefix`, leases of `lease`.
    pub async fn store(&self, prefix: &str, lease: Duration) -> EtcdLeases {
        EtcdLeases::connect(EtcdConfig {
            endpoints: self.endpoints(),
            prefix: prefix.to_owned(),
            lease,
            timeout: Duration::from_secs(2),
        })
        .await
        .unwrap()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
