//! # hale-seal
//!
//! The sealed request/answer layer: HTTP requests and their answers sealed
//! with the cluster keyring (ChaCha20-Poly1305, `hale-keyring`), so that
//! only the cluster speaks to a server and only that server answers. The
//! control plane (`hale-control`: Raft RPCs, lease requests, server
//! changes) and the agents' key operations (`hale-agent`'s `keys_api`) both
//! go through it; it knows neither.
//!
//! A request's body is `seal(aad, unix_ms (8, big-endian) | JSON)` where
//! `aad = "hale control request v1" | target server id | method | path`:
//! it opens only at the server it was addressed to, on the route it was
//! sent to (the associated data's words predate this crate: they are the
//! wire format, not a claim that every user is the control plane). A
//! server admits it when it opens with a key of the ring, its timestamp is
//! within [`REPLAY_WINDOW`] of the server's wall clock, and its nonce was
//! not seen before (a replayed request is refused; nonces are remembered
//! until their timestamp leaves the window). Only then does the request
//! reach the route; anything else is answered 401 and changes nothing.
//!
//! The response is `seal("hale control response v1" | request nonce, JSON)`:
//! bound to the request it answers, so nobody without a key can answer a
//! request, and an old response cannot be passed off as the answer to a
//! new one.
//!
//! Clocks: a request whose timestamp is outside the window but which opens
//! (it was sealed by a cluster key, so it comes from a member whose clock
//! is off) is refused with the server's time, sealed to the request's
//! nonce. The client opens it, learns its offset to that server's clock
//! and stamps its requests to that server in the server's time from then on
//! (and sends the refused one again at once). A host whose wall clock is
//! minutes or hours off therefore keeps renewing and voting; both sides
//! record it ([`clock_report`]) so the agent can name it (event, metric,
//! `hale status`).
//!
//! Bodies are read with a cap (the [`Guard`]'s body limit, by default
//! [`DEFAULT_BODY_LIMIT`]; answers [`RESPONSE_LIMIT`]) before anything else
//! is done with them. The pieces: [`seal_request`] / [`open_response`] (the
//! format), [`Guard`] and the [`authenticate`] middleware (the server's
//! side), [`call`], [`exchange`] (with headers beside the body, and the
//! answer's) and [`read_capped`] (the client's side, errors typed as
//! [`CallError`]), [`clock_report`] (clock offsets). See ARCHITECTURE.md
//! ("Control-plane authentication") for what an attacker on the path can
//! and cannot do.

#![forbid(unsafe_code)]

mod call;
mod clocks;
mod format;
mod guard;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hale_keyring::{Keyring, SharedKeyring};

pub use call::{call, exchange, read_capped, CallError, Reply, Target};
pub use clocks::{clock_report, ClockReport, ServerOffset, StampsRefused};
pub use format::{open_response, seal_request, SealedRequest};
pub use guard::{authenticate, Admitted, Guard, Refusal};

/// How far a request's timestamp may be from the server's wall clock, in
/// either direction. Servers' and clients' clocks must agree within this
/// (or be corrected: see the crate's doc).
pub const REPLAY_WINDOW: Duration = Duration::from_secs(30);
/// The largest request body a [`Guard`] reads unless told otherwise
/// ([`Guard::with_body_limit`]).
pub const DEFAULT_BODY_LIMIT: usize = 64 << 10;
/// The largest answer a client reads (and a server seals).
pub const RESPONSE_LIMIT: usize = 8 << 20;

/// How a server's traffic is authenticated.
#[derive(Debug, Clone)]
pub enum Sealing {
    /// Every request and response sealed with these keys.
    Sealed(SharedKeyring),
    /// Nothing authenticated: anyone who reaches the server's port is
    /// served (`insecure_plaintext = true`).
    InsecurePlaintext,
}

impl Sealing {
    /// Sealed with `ring` (a fresh shared handle).
    pub fn sealed(ring: Keyring) -> Sealing {
        Sealing::Sealed(SharedKeyring::new(ring))
    }
}

/// The wall clock in milliseconds since the Unix epoch (0 before it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
