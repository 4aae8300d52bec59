//! Only the cluster speaks to the control plane: every Raft RPC and
//! control request goes through the sealed request/answer layer,
//! [`hale_seal`] (the format, the server's guard, the client's `call`,
//! clock offsets). What is the control plane's own is here: its name for
//! the sealing ([`ControlAuth`]), and its body limits ([`body_limit`]).

use hale_keyring::SharedKeyring;
use hale_seal::Guard;

/// How the control plane authenticates its traffic: sealed with the
/// cluster keyring, or (`insecure_plaintext = true`) not at all.
pub use hale_seal::Sealing as ControlAuth;

/// The largest Raft RPC body read (`/raft/...`; snapshots travel in chunks
/// well below it).
pub const RAFT_BODY_LIMIT: usize = 8 << 20;
/// The largest body read on `/control/...` routes.
pub const CONTROL_BODY_LIMIT: usize = hale_seal::DEFAULT_BODY_LIMIT;

/// The largest request body a control-plane server reads on `path`
/// (413 beyond, unread).
pub fn body_limit(path: &str) -> usize {
    if path.starts_with("/raft/") {
        RAFT_BODY_LIMIT
    } else {
        CONTROL_BODY_LIMIT
    }
}

/// The guard in front of server `id`'s routes.
pub(crate) fn guard(id: u64, keys: SharedKeyring) -> Guard {
    Guard::new(id, keys).with_body_limit(body_limit)
}
