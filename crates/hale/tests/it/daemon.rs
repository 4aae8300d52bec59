//! `hale agent` as a service manager runs it: readiness and stopping told
//! over `NOTIFY_SOCKET` (systemd `Type=notify`), JSON logs on request.

use std::io::Read;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::{free_port, hale_bin};

/// The next datagram on `sock`, waiting at most `limit`.
fn next(sock: &UnixDatagram, limit: Duration) -> Option<String> {
    sock.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    let n = sock.recv(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[test]
fn the_agent_tells_systemd_when_it_is_ready_and_when_it_stops_and_logs_json_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&socket).unwrap();
    let mut child = Command::new(hale_bin())
        .args(["agent", "--log-format", "json"])
        .env("HALE_NAME", "svc")
        .env("HALE_BIND", format!("127.0.0.1:{}", free_port()))
        .env("HALE_HTTP", format!("127.0.0.1:{}", free_port()))
        .env("HALE_LOG", "info")
        .env("NOTIFY_SOCKET", &socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(child.id() as i32);
    let started = Instant::now();
    let ready = next(&sock, Duration::from_secs(30));
    let stopping = ready.as_ref().and_then(|_| {
        kill(pid, Signal::SIGTERM).unwrap();
        next(&sock, Duration::from_secs(30))
    });
    if stopping.is_none() {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let ready = ready.unwrap_or_else(|| panic!("no READY=1 within 30 s; log:\n{err}"));
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(ready.contains("STATUS=member svc"), "{ready}");
    let stopping = stopping.unwrap_or_else(|| panic!("no STOPPING=1 after SIGTERM; log:\n{err}"));
    assert!(stopping.starts_with("STOPPING=1"), "{stopping}");
    assert!(status.success(), "{status:?}: {err}");
    assert!(started.elapsed() < Duration::from_secs(60));
    // Every log line is one JSON object with a level and a message.
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for l in lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{l}"
        );
    }
}
