//! Readiness for systemd (`Type=notify`): the agent tells the service
//! manager it is ready once its sockets are bound and its tasks started,
//! and that it is stopping when it leaves. Speaks the `sd_notify` protocol
//! (one datagram to the socket named by `NOTIFY_SOCKET`, a path or an
//! abstract name starting with `@`); does nothing when the variable is
//! unset, as when the agent is not run by systemd.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. `READY=1`, `STOPPING=1`, `STATUS=...`, newline
/// separated) to the service manager. True if it was sent.
pub fn notify(state: &str) -> bool {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return false;
    };
    let bytes = path.as_encoded_bytes();
    let sent = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
        }
        None => sock.send_to(state.as_bytes(), &path),
    };
    sent.inspect_err(|e| tracing::warn!("cannot notify systemd through NOTIFY_SOCKET: {e}"))
        .is_ok()
}
