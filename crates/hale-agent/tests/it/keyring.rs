//! Sealing: only the keyring's keys open a packet; rotation works.

use hale_agent::keyring::OpenError;
use hale_agent::{Key, Keyring};

#[test]
fn a_sealed_packet_opens_with_the_same_key_only() {
    let k = Key::generate();
    let ring = Keyring::new(k.clone(), vec![]);
    let sealed = ring.seal(b"ping");
    assert_eq!(ring.open(&sealed).unwrap(), b"ping");
    let other = Keyring::new(Key::generate(), vec![]);
    assert_eq!(other.open(&sealed), Err(OpenError::Auth));
}

#[test]
fn a_tampered_packet_fails_authentication() {
    let ring = Keyring::new(Key::generate(), vec![]);
    let mut sealed = ring.seal(b"alive");
    let last = sealed.len() - 1;
    sealed[last] ^= 1;
    assert_eq!(ring.open(&sealed), Err(OpenError::Auth));
    assert_eq!(ring.open(&sealed[..10]), Err(OpenError::Malformed));
}

#[test]
fn an_extra_key_opens_packets_during_rotation() {
    let (old, new) = (Key::generate(), Key::generate());
    let before = Keyring::new(old.clone(), vec![]);
    let during = Keyring::new(new.clone(), vec![old.clone()]);
    assert_eq!(during.open(&before.seal(b"x")).unwrap(), b"x");
    let after = Keyring::new(new, vec![]);
    assert_eq!(after.open(&during.seal(b"y")).unwrap(), b"y");
}

#[test]
fn keys_round_trip_through_base64_and_bad_ones_are_refused() {
    let k = Key::generate();
    let again = Key::from_base64(&k.to_base64()).unwrap();
    let r = Keyring::new(again, vec![]);
    assert_eq!(Keyring::new(k, vec![]).open(&r.seal(b"z")).unwrap(), b"z");
    assert!(Key::from_base64("not base64!").is_err());
    assert!(Key::from_base64("c2hvcnQ=").is_err());
}
