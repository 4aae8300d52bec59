//! The wire format: what a sealed request and a sealed answer are bound to.

use hale_keyring::{sealed_nonce, Keyring, OpenError, NONCE};
use serde::{Deserialize, Serialize};

// The wire's words: changing them changes every seal (a later issue
// versions them); they name the control plane for history's sake.
const REQUEST_AAD: &[u8] = b"hale control request v1\0";
const RESPONSE_AAD: &[u8] = b"hale control response v1\0";
/// The content type of a sealed refusal for a timestamp out of the window.
pub(crate) const STALE_CONTENT_TYPE: &str = "application/x-hale-stale";

/// The associated data of a request to server `target`, `method path`.
pub(crate) fn request_aad(target: u64, method: &str, path: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(REQUEST_AAD.len() + 10 + method.len() + path.len());
    aad.extend_from_slice(REQUEST_AAD);
    aad.extend_from_slice(&target.to_be_bytes());
    aad.extend_from_slice(method.as_bytes());
    aad.push(0);
    aad.extend_from_slice(path.as_bytes());
    aad
}

/// The associated data of the answer to the request sealed with `nonce`.
pub(crate) fn response_aad(nonce: &[u8; NONCE]) -> Vec<u8> {
    [RESPONSE_AAD, nonce.as_slice()].concat()
}

/// A request sealed for one server; keeps what opens its response.
#[derive(Debug, Clone)]
pub struct SealedRequest {
    /// The body to send.
    pub body: Vec<u8>,
    pub(crate) nonce: [u8; NONCE],
}

/// Seals `payload` as a request to server `target`, `method path`, stamped
/// `unix_ms` (tests pass other times to show what a server refuses).
pub fn seal_request(
    keys: &Keyring,
    target: u64,
    method: &str,
    path: &str,
    unix_ms: u64,
    payload: &[u8],
) -> SealedRequest {
    let mut plain = Vec::with_capacity(8 + payload.len());
    plain.extend_from_slice(&unix_ms.to_be_bytes());
    plain.extend_from_slice(payload);
    let body = keys.seal_with(&request_aad(target, method, path), &plain);
    let nonce = sealed_nonce(&body).expect("a fresh seal has a nonce");
    SealedRequest { body, nonce }
}

/// Opens the response to `req`: fails unless it was sealed by a key of the
/// ring for this very request.
pub fn open_response(
    keys: &Keyring,
    req: &SealedRequest,
    sealed: &[u8],
) -> Result<Vec<u8>, OpenError> {
    keys.open_with(&response_aad(&req.nonce), sealed)
}

/// A server's answer to an authentic request whose timestamp was out of
/// the window: its wall-clock time (sealed to the request's nonce).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StaleAnswer {
    #[serde(rename = "clock_refusal_server_ms")]
    pub(crate) server_ms: u64,
}
