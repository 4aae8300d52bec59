//! Sentry envelopes: validation of what clients send, and building the ones
//! hale sends itself (events from the reporter, `/store/` payloads, client
//! reports).
//!
//! An envelope is a JSON header line followed by items, each a JSON header
//! line (`type`, optional `length`) and a payload of `length` bytes, or up
//! to the next newline when there is no length.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use bytes::Bytes;
use serde::Deserialize;
use tokio::time::Instant;

use crate::counters::Category;

/// What is wrong with an envelope. It was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The body is empty.
    #[error("empty body")]
    Empty,
    /// The envelope header is not a JSON object.
    #[error("the envelope header is not a JSON object: {0}")]
    Header(String),
    /// An item header is not a JSON object with a string `type`.
    #[error("item {index}: bad item header: {reason}")]
    ItemHeader {
        /// The item's position, from 0.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// An item's `length` runs past the end of the body.
    #[error("item {index}: length {length} runs past the end of the body")]
    Truncated {
        /// The item's position, from 0.
        index: usize,
        /// The declared length.
        length: u64,
    },
    /// There is no item at all.
    #[error("the envelope has no items")]
    NoItems,
    /// A `/store/` body is not a JSON object.
    #[error("the event is not a JSON object: {0}")]
    Event(String),
}

#[derive(Deserialize)]
struct EnvelopeHeader {
    event_id: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ItemHeader {
    #[serde(rename = "type")]
    ty: String,
    length: Option<u64>,
}

/// What validation learned about an envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// The envelope's event id, if it names one.
    pub event_id: Option<String>,
    /// The category the envelope is counted under.
    pub category: Category,
    /// Number of items.
    pub items: usize,
}

pub(crate) fn line(buf: &[u8]) -> (&[u8], &[u8]) {
    match buf.iter().position(|&b| b == b'\n') {
        Some(i) => (&buf[..i], &buf[i + 1..]),
        None => (buf, &[]),
    }
}

/// Validates an envelope's framing and headers (payloads are not parsed).
pub fn parse_envelope(body: &[u8]) -> Result<Parsed, EnvelopeError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(EnvelopeError::Empty);
    }
    let (head, mut rest) = line(body);
    let header: EnvelopeHeader =
        serde_json::from_slice(head).map_err(|e| EnvelopeError::Header(e.to_string()))?;
    let event_id = match header.event_id {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(_) => return Err(EnvelopeError::Header("event_id is not a string".into())),
    };
    let mut category = None;
    let mut items = 0;
    loop {
        // Blank lines between items are tolerated, as Sentry does.
        while let [b'\n' | b'\r', tail @ ..] = rest {
            rest = tail;
        }
        if rest.is_empty() {
            break;
        }
        let index = items;
        let (h, after) = line(rest);
        let ih: ItemHeader = serde_json::from_slice(h).map_err(|e| EnvelopeError::ItemHeader {
            index,
            reason: e.to_string(),
        })?;
        rest = match ih.length {
            Some(length) => {
                let n = usize::try_from(length)
                    .ok()
                    .filter(|n| *n <= after.len())
                    .ok_or(EnvelopeError::Truncated { index, length })?;
                &after[n..]
            }
            None => line(after).1,
        };
        let c = Category::of_item_type(&ih.ty);
        category = match (category, c) {
            (None, c) => Some(c),
            (Some(Category::Internal | Category::Attachment | Category::Default), c)
                if c == Category::Error || c == Category::Transaction =>
            {
                Some(c)
            }
            (keep, _) => keep,
        };
        items += 1;
    }
    Ok(Parsed {
        event_id,
        category: category.ok_or(EnvelopeError::NoItems)?,
        items,
    })
}

/// Wraps a `/store/` event (a JSON object) in an envelope. Returns the
/// envelope and the event id (the payload's, or a new one).
pub fn store_to_envelope(body: &[u8]) -> Result<(Vec<u8>, String), EnvelopeError> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| EnvelopeError::Event(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| EnvelopeError::Event("not an object".into()))?;
    let id = match obj.get("event_id").and_then(|v| v.as_str()) {
        Some(s) => s.to_owned(),
        None => new_event_id(),
    };
    let ty = if obj.get("type").and_then(|t| t.as_str()) == Some("transaction") {
        "transaction"
    } else {
        "event"
    };
    Ok((build(&id, ty, body), id))
}

/// An envelope with one item of type `ty`.
pub(crate) fn build(event_id: &str, ty: &str, payload: &[u8]) -> Vec<u8> {
    let header = if event_id.is_empty() {
        "{}".to_owned()
    } else {
        serde_json::json!({ "event_id": event_id }).to_string()
    };
    let item = format!("{{\"type\":\"{ty}\",\"length\":{}}}", payload.len());
    let mut out = format!("{header}\n{item}\n").into_bytes();
    out.reserve_exact(payload.len() + 1);
    out.extend_from_slice(payload);
    out.push(b'\n');
    out
}

/// A new event id: 32 lowercase hex digits, random per process and unique
/// within it.
pub fn new_event_id() -> String {
    static SEED: OnceLock<(u64, u64)> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (a, b) = *SEED.get_or_init(|| {
        let s = RandomState::new();
        let mut h = s.build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        let a = h.finish();
        h.write_u64(std::process::id().into());
        (a, h.finish())
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:016x}{:016x}",
        splitmix(a ^ n),
        splitmix(b.wrapping_add(n))
    )
}

pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One envelope on its way upstream: the serialised bytes and what they
/// count as.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The serialised envelope.
    pub(crate) body: Bytes,
    /// What it counts as.
    pub(crate) category: Category,
    /// When it was accepted (for the maximum age in memory).
    pub(crate) since: Instant,
    /// Requests already tried with it.
    pub(crate) attempts: u8,
    /// Whether it came from the spool (and is still there, to delete once
    /// delivered): the spool file's name.
    pub(crate) spool_name: Option<String>,
}

impl Envelope {
    /// An envelope accepted now.
    pub fn new(body: Bytes, category: Category) -> Envelope {
        Envelope {
            body,
            category,
            since: Instant::now(),
            attempts: 0,
            spool_name: None,
        }
    }

    /// The serialised envelope.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// What it counts as.
    pub fn category(&self) -> Category {
        self.category
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;

    #[test]
    fn framing() {
        let env = b"{\"event_id\":\"abc\"}\n{\"type\":\"event\",\"length\":2}\n{}\n{\"type\":\"attachment\"}\nhello\n";
        let p = parse_envelope(env).unwrap();
        assert_eq!(p.event_id.as_deref(), Some("abc"));
        assert_eq!(p.category, Category::Error);
        assert_eq!(p.items, 2);
        assert_eq!(parse_envelope(b"{}\n").unwrap_err(), EnvelopeError::NoItems);
        assert!(matches!(
            parse_envelope(b"{}\n{\"type\":\"event\",\"length\":99}\n{}"),
            Err(EnvelopeError::Truncated {
                index: 0,
                length: 99
            })
        ));
        assert!(matches!(
            parse_envelope(b"nope\n"),
            Err(EnvelopeError::Header(_))
        ));
        let (e, id) = store_to_envelope(b"{\"message\":\"x\"}").unwrap();
        assert_eq!(id.len(), 32);
        assert_eq!(parse_envelope(&e).unwrap().event_id.unwrap(), id);
        assert_ne!(new_event_id(), new_event_id());
    }
}
