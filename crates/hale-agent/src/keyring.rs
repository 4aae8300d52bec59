//! Encryption and authentication of every cluster packet (ChaCha20-Poly1305).
//!
//! Sealed form: `version (1) | nonce (12) | ciphertext | tag (16)`. The
//! primary key seals; every key in the ring is tried to open, so keys can be
//! rotated without downtime: add the new key everywhere, make it primary
//! everywhere, then remove the old one.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};

const SEAL_VERSION: u8 = 1;
const NONCE: usize = 12;
const TAG: usize = 16;
/// Bytes sealing adds to a packet.
pub const OVERHEAD: usize = 1 + NONCE + TAG;
const AAD: &[u8] = b"hale cluster v1";

/// A 32-byte cluster key.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// Why a key could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not base64.
    #[error("not valid base64")]
    Base64,
    /// Not 32 bytes.
    #[error("a key is 32 bytes, this one is {0}")]
    Length(usize),
}

impl Key {
    /// A new random key from the operating system's generator.
    pub fn generate() -> Key {
        Key(ChaCha20Poly1305::generate_key(&mut OsRng).into())
    }

    /// Reads a base64 key.
    pub fn from_base64(s: &str) -> Result<Key, KeyError> {
        let bytes = STANDARD.decode(s.trim()).map_err(|_| KeyError::Base64)?;
        let arr: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| KeyError::Length(bytes.len()))?;
        Ok(Key(arr))
    }

    /// The key in base64.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(self.0)
    }
}

/// Why a sealed packet could not be opened. It is dropped and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Too short to be a sealed packet, or an unknown seal version.
    #[error("not a sealed packet")]
    Malformed,
    /// No key in the ring authenticates it.
    #[error("authentication failed")]
    Auth,
}

/// The primary key and the extra keys accepted for rotation.
#[derive(Clone)]
pub struct Keyring {
    primary: ChaCha20Poly1305,
    primary_key: Key,
    all: Vec<ChaCha20Poly1305>,
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keyring({} keys)", self.all.len())
    }
}

impl Keyring {
    /// A ring sealing with `primary` and opening with it and `extra`.
    pub fn new(primary: Key, extra: Vec<Key>) -> Keyring {
        let p = ChaCha20Poly1305::new((&primary.0).into());
        let mut all = vec![p.clone()];
        all.extend(extra.iter().map(|k| ChaCha20Poly1305::new((&k.0).into())));
        Keyring {
            primary: p,
            primary_key: primary,
            all,
        }
    }

    /// The primary key (to hand to processes this agent starts, e.g. the demo).
    pub fn primary(&self) -> &Key {
        &self.primary_key
    }

    /// Encrypts and authenticates `plain`.
    pub fn seal(&self, plain: &[u8]) -> Vec<u8> {
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let mut out = Vec::with_capacity(plain.len() + OVERHEAD);
        out.push(SEAL_VERSION);
        out.extend_from_slice(&nonce);
        let sealed = self
            .primary
            .encrypt(
                &nonce,
                Payload {
                    msg: plain,
                    aad: AAD,
                },
            )
            .expect("ChaCha20-Poly1305 encryption cannot fail for in-memory buffers");
        out.extend_from_slice(&sealed);
        out
    }

    /// Authenticates and decrypts a sealed packet with any key of the ring.
    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
        if sealed.len() < OVERHEAD || sealed[0] != SEAL_VERSION {
            return Err(OpenError::Malformed);
        }
        let nonce = Nonce::from_slice(&sealed[1..1 + NONCE]);
        let body = &sealed[1 + NONCE..];
        self.all
            .iter()
            .find_map(|k| {
                k.decrypt(
                    nonce,
                    Payload {
                        msg: body,
                        aad: AAD,
                    },
                )
                .ok()
            })
            .ok_or(OpenError::Auth)
    }
}
