//! # hale-keyring
//!
//! The cluster keyring: ChaCha20-Poly1305 sealing under the cluster's keys,
//! used by gossip (every packet) and by the control plane (every request
//! and response).
//!
//! Sealed form: `version (1) | nonce (12) | ciphertext | tag (16)`. The
//! primary key seals; every key in the ring is tried to open, so keys can be
//! rotated without downtime: add the new key everywhere, make it primary
//! everywhere, then remove the old one.
//!
//! Every seal is bound to associated data naming its use ([`Keyring::seal`]
//! for gossip packets, [`Keyring::seal_with`] for anything else), so a
//! sealed gossip packet never opens as a control-plane request or the other
//! way round.
//!
//! [`SharedKeyring`] is a cheap handle whose keys can be replaced while
//! everything holding it keeps running (live rotation).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

pub mod file;
pub mod versioned;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Nonce};

const SEAL_VERSION: u8 = 1;
/// Bytes of a seal's nonce.
pub const NONCE: usize = 12;
const TAG: usize = 16;
/// Bytes sealing adds to a packet.
pub const OVERHEAD: usize = 1 + NONCE + TAG;
const AAD: &[u8] = b"hale cluster v1";

/// A 32-byte cluster key.
#[derive(Clone, PartialEq, Eq)]
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

    /// A short public name for the key (16 hex digits): a keyed hash, so it
    /// identifies the key without revealing anything about it.
    pub fn fingerprint(&self) -> String {
        let c = ChaCha20Poly1305::new((&self.0).into());
        let tag = c
            .encrypt(
                Nonce::from_slice(&[0u8; NONCE]),
                Payload {
                    msg: b"",
                    aad: b"hale key fingerprint v1",
                },
            )
            .expect("ChaCha20-Poly1305 encryption cannot fail for in-memory buffers");
        tag[..8].iter().map(|b| format!("{b:02x}")).collect()
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
    /// Every key, the primary first.
    keys: Vec<Key>,
    /// Their ciphers, in the same order (the first seals).
    all: Vec<ChaCha20Poly1305>,
}

/// Why a keyring change was refused. The ring is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringChangeError {
    /// Only an installed key can become the primary.
    #[error("key {0} is not installed: install it first")]
    NotInstalled(String),
    /// The primary key seals everything: make another key primary first.
    #[error("key {0} is the primary key: use another key first")]
    IsPrimary(String),
    /// The new keys could not be saved to the keyring file, so they would
    /// be lost on restart: the change was not made.
    #[error("cannot save the keyring file {path}: {reason}; keys unchanged")]
    Save {
        /// The keyring file.
        path: String,
        /// The I/O error.
        reason: String,
    },
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keyring({} keys)", self.all.len())
    }
}

impl Keyring {
    /// A ring sealing with `primary` and opening with it and `extra`.
    pub fn new(primary: Key, extra: Vec<Key>) -> Keyring {
        let mut keys = vec![primary];
        for k in extra {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let all = keys
            .iter()
            .map(|k| ChaCha20Poly1305::new((&k.0).into()))
            .collect();
        Keyring { keys, all }
    }

    /// The primary key (to hand to processes this agent starts, e.g. the demo).
    pub fn primary(&self) -> &Key {
        &self.keys[0]
    }

    /// Every key, the primary first.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// This ring with `key` added (opening only), if it was not there.
    pub fn installing(&self, key: Key) -> Keyring {
        let mut extra = self.keys[1..].to_vec();
        extra.push(key);
        Keyring::new(self.keys[0].clone(), extra)
    }

    /// This ring with the installed `key` as its primary (the old primary
    /// still opens).
    pub fn using(&self, key: &Key) -> Result<Keyring, KeyringChangeError> {
        if !self.keys.contains(key) {
            return Err(KeyringChangeError::NotInstalled(key.fingerprint()));
        }
        let extra = self.keys.iter().filter(|k| *k != key).cloned().collect();
        Ok(Keyring::new(key.clone(), extra))
    }

    /// This ring without `key` (which must not be the primary).
    pub fn removing(&self, key: &Key) -> Result<Keyring, KeyringChangeError> {
        if &self.keys[0] == key {
            return Err(KeyringChangeError::IsPrimary(key.fingerprint()));
        }
        let extra = self.keys[1..]
            .iter()
            .filter(|k| *k != key)
            .cloned()
            .collect();
        Ok(Keyring::new(self.keys[0].clone(), extra))
    }

    /// How many keys open (the primary and the extra ones).
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// Always false: a ring has at least its primary key.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// Encrypts and authenticates a gossip packet.
    pub fn seal(&self, plain: &[u8]) -> Vec<u8> {
        self.seal_with(AAD, plain)
    }

    /// Authenticates and decrypts a gossip packet with any key of the ring.
    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
        self.open_with(AAD, sealed)
    }

    /// Encrypts `plain` with the primary key, authenticating it together
    /// with `aad` (which is not sent: the opener must supply the same).
    pub fn seal_with(&self, aad: &[u8], plain: &[u8]) -> Vec<u8> {
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let mut out = Vec::with_capacity(plain.len() + OVERHEAD);
        out.push(SEAL_VERSION);
        out.extend_from_slice(&nonce);
        let sealed = self.all[0]
            .encrypt(&nonce, Payload { msg: plain, aad })
            .expect("ChaCha20-Poly1305 encryption cannot fail for in-memory buffers");
        out.extend_from_slice(&sealed);
        out
    }

    /// Authenticates (with `aad`) and decrypts `sealed` with any key of the
    /// ring. Costs one Poly1305 pass over `sealed` per key that fails.
    pub fn open_with(&self, aad: &[u8], sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
        let nonce = sealed_nonce(sealed).ok_or(OpenError::Malformed)?;
        let nonce = Nonce::from_slice(&nonce);
        let body = &sealed[1 + NONCE..];
        self.all
            .iter()
            .find_map(|k| k.decrypt(nonce, Payload { msg: body, aad }).ok())
            .ok_or(OpenError::Auth)
    }
}

/// The random nonce of a sealed message (unique per seal: a message's
/// identity), or None if `sealed` is not shaped like one. Says nothing about
/// whether it is authentic.
pub fn sealed_nonce(sealed: &[u8]) -> Option<[u8; NONCE]> {
    if sealed.len() < OVERHEAD || sealed[0] != SEAL_VERSION {
        return None;
    }
    sealed[1..1 + NONCE].try_into().ok()
}

/// A handle to a keyring shared by everything that seals or opens, whose
/// keys can be replaced while they run (live rotation). Cloning it is
/// cheap; every clone sees a replacement at once.
#[derive(Clone)]
pub struct SharedKeyring(Arc<RwLock<Arc<Keyring>>>, Option<Arc<PathBuf>>);

impl std::fmt::Debug for SharedKeyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedKeyring({:?})", self.current())
    }
}

impl SharedKeyring {
    /// A handle holding `ring`.
    pub fn new(ring: Keyring) -> SharedKeyring {
        SharedKeyring(Arc::new(RwLock::new(Arc::new(ring))), None)
    }

    /// A handle holding `ring` that saves every change made with
    /// [`SharedKeyring::update`] to the keyring file `path` (see [`mod@file`]).
    pub fn saved_to(ring: Keyring, path: PathBuf) -> SharedKeyring {
        SharedKeyring(Arc::new(RwLock::new(Arc::new(ring))), Some(Arc::new(path)))
    }

    /// The keys in force now (held for one seal or open; a replacement
    /// meanwhile applies to the next one).
    pub fn current(&self) -> Arc<Keyring> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the keys for every holder of this handle.
    pub fn replace(&self, ring: Keyring) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(ring);
    }

    /// Replaces the keys with `change(current)`, atomically, and saves them
    /// to the keyring file if there is one; on an error (of the change or
    /// of the save) nothing changes.
    pub fn update(
        &self,
        change: impl FnOnce(&Keyring) -> Result<Keyring, KeyringChangeError>,
    ) -> Result<(), KeyringChangeError> {
        let mut g = self.0.write().unwrap_or_else(|e| e.into_inner());
        let next = change(&g)?;
        if let Some(path) = &self.1 {
            file::save(path, &next).map_err(|e| KeyringChangeError::Save {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
        }
        *g = Arc::new(next);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_seal_opens_only_with_the_same_associated_data() {
        let ring = Keyring::new(Key::generate(), vec![]);
        let s = ring.seal_with(b"control request", b"grant");
        assert_eq!(ring.open_with(b"control request", &s).unwrap(), b"grant");
        assert_eq!(
            ring.open_with(b"control response", &s),
            Err(OpenError::Auth)
        );
        assert_eq!(ring.open(&s), Err(OpenError::Auth));
        assert_eq!(
            ring.open_with(b"control request", &ring.seal(b"gossip")),
            Err(OpenError::Auth)
        );
    }

    #[test]
    fn every_seal_has_its_own_nonce() {
        let ring = Keyring::new(Key::generate(), vec![]);
        let (a, b) = (ring.seal(b"x"), ring.seal(b"x"));
        assert_ne!(sealed_nonce(&a).unwrap(), sealed_nonce(&b).unwrap());
        assert_eq!(sealed_nonce(&a[..5]), None);
    }

    #[test]
    fn a_replaced_shared_keyring_applies_to_every_clone() {
        let (old, new) = (Key::generate(), Key::generate());
        let shared = SharedKeyring::new(Keyring::new(old.clone(), vec![]));
        let other = shared.clone();
        let sealed_old = shared.current().seal(b"a");
        other.replace(Keyring::new(new.clone(), vec![]));
        assert_eq!(shared.current().open(&sealed_old), Err(OpenError::Auth));
        assert_eq!(shared.current().primary(), &new);
        assert_eq!(shared.current().len(), 1);
    }
}
