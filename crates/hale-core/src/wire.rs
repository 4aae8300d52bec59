//! The wire format: versioned, compact, total decoding.
//!
//! Every datagram and stream frame is a header and its messages:
//!
//! ```text
//! version 2: magic "HL" | version u8 = 2 | cluster id u64 LE
//!   | sender Identity
//!   | sender incarnation varint | sender local health u8
//!   | sender generation varint | sent (sender's clock, ms) varint
//!   | message count u8 | that many messages
//! version 3: magic "HL" | version u8 = 3 | cluster id u32 LE
//!   | sender Identity | speaks min u8 | speaks max u8
//!   | sender incarnation varint | sender local health u8
//!   | sender generation varint | sent (sender's clock, ms) varint
//!   | messages to the end of the packet (at most [`MAX_MESSAGES`])
//! version 4: as version 3
//! ```
//!
//! Each message is a tag byte and its fields. Integers are LEB128 varints
//! unless noted. Version 3 differs from version 2 in what it saves
//! (issue 23), and in the sender's range:
//!
//! * the cluster id is 4 bytes, the low half of [`cluster_id`] (a foreign
//!   cluster's packet passes with odds of one in four billion, and sealed
//!   packets are bound to the cluster's keys too); version 2 carries all 8
//!   and is checked on all 8 ([`same_cluster`]);
//! * no message count: the packet's length bounds its messages (a
//!   datagram arrives whole or not at all, a stream frame has its length);
//! * a ping names its target by a 4-byte tag ([`target_tag`], the high half
//!   of its ring position: [`PingTarget::Tag`]) rather than its identity;
//! * [`Message::Summary`] (tag 12), the view's hash, opens the periodic
//!   sync; [`Message::Heartbeat`] (tag 13, the tag alone) is a ring
//!   neighbour's unanswered proof of life, and [`Message::Corroborate`]
//!   (tag 14, an identity) asks a second observer to probe a member that
//!   went quiet; a version 2 packet carries none of them.
//!
//! Version 4 has version 3's header and messages, and two more, for the
//! periodic sync of a large cluster (`sync.rs`): [`Message::Buckets`]
//! (tag 15, 64 sums of 8 bytes LE), the answer to a summary that differs,
//! and [`Message::DigestPart`] (tag 16, stream only: a flags byte, a
//! 64-bit bucket mask LE, then records as in a digest push/pull).
//!
//! Every other message is the same in all versions. A node writes a
//! [`Summary`] or a tagged ping only to members it writes version 3 or
//! later to, and buckets or a digest part only to those it writes version
//! 4 to (`versions.rs`): a message that does not fit its packet's version ([`Message::fits`])
//! does not decode back to itself.
//!
//! **Versions.** A build speaks a range of versions ([`SPOKEN`]): it decodes
//! every one of them and sends the one its cluster negotiated (the highest
//! that every live member speaks; see [`negotiate`]). Every version from 3
//! on starts with the same prefix,
//!
//! ```text
//! magic "HL" | version u8 | cluster id u32 LE | sender Identity
//!   | speaks min u8 | speaks max u8
//! ```
//!
//! whatever follows it, so that a build that cannot decode a newer version
//! still reads who sent it and what that member speaks ([`peek`]), and
//! reports it instead of dropping it silently. Version 2 has the prefix up
//! to the sender, with its 8-byte cluster id.
//!
//! The generation and the send time let a receiver reject replays (see
//! `Config::replay_window`); the whole packet is sealed by the agent, so
//! they are authenticated with it.
//!
//! Decoding never panics and never allocates more than a small multiple of
//! the input's length: every count is checked against the bytes that remain
//! before anything is reserved, a message takes at least one byte, and a
//! packet holds at most [`MAX_MESSAGES`].
//!
//! [`Summary`]: Message::Summary

pub(crate) mod codec;
mod message;

pub use codec::{
    put_varint, varint_len, DecodeError, Reader, MAX_DATAGRAM, MAX_MESSAGES, MAX_META,
    MAX_STREAM_FRAME,
};
pub use message::{MemberRecord, Message, PingTarget, WireState, BUCKETS};

use crate::identity::{Identity, SinkId};
use codec::{Len, Sink};

/// First two bytes of every packet.
pub const MAGIC: [u8; 2] = *b"HL";
/// The newest wire version this build speaks.
pub const VERSION: u8 = 4;
/// The oldest wire version any hale build ever spoke: what a member that
/// advertises no range (a release before 0.2.0) is taken to speak.
pub const OLDEST: u8 = 2;
/// The wire versions this build decodes and may send.
pub const SPOKEN: Versions = Versions {
    min: OLDEST,
    max: VERSION,
};

/// A range of wire versions, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Versions {
    /// The oldest.
    pub min: u8,
    /// The newest.
    pub max: u8,
}

impl Versions {
    /// The range of the one version `v`.
    pub const fn only(v: u8) -> Versions {
        Versions { min: v, max: v }
    }

    /// Whether `v` is in the range.
    pub fn contains(self, v: u8) -> bool {
        self.min <= v && v <= self.max
    }

    /// The versions both ranges hold, if any.
    pub fn intersect(self, other: Versions) -> Option<Versions> {
        let r = Versions {
            min: self.min.max(other.min),
            max: self.max.min(other.max),
        };
        (r.min <= r.max).then_some(r)
    }

    /// Whether this is a range a configuration may ask for: not empty, and
    /// within what this build speaks ([`SPOKEN`]).
    pub fn is_spoken(self) -> bool {
        self.min <= self.max && SPOKEN.contains(self.min) && SPOKEN.contains(self.max)
    }
}

impl std::str::FromStr for Versions {
    type Err = String;

    /// `"3"` or `"2-3"`: the form [`Versions`] displays in.
    fn from_str(s: &str) -> Result<Versions, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<u8>()
                .map_err(|_| format!("{s:?} is not a wire version or range (\"3\", \"2-3\")"))
        };
        let (min, max) = match s.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(s)?, num(s)?),
        };
        if min > max {
            return Err(format!("{s:?}: the range is empty"));
        }
        Ok(Versions { min, max })
    }
}

impl std::fmt::Display for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

/// The version a member speaking `own` sends when the other live members
/// speak `others` (`None`: a member that advertises no range, taken to
/// speak [`OLDEST`] only): the highest version that `own` and every one of
/// them speaks. Members that share no version with `own` cannot be spoken
/// to at all and do not hold the cluster back; they are returned apart so
/// that they can be reported. With no other member known, the lowest of
/// `own`: a node that has not heard its cluster yet must be understood by
/// the oldest member it may meet.
pub fn negotiate<K>(
    own: Versions,
    others: impl IntoIterator<Item = (K, Option<Versions>)>,
) -> (u8, Vec<(K, Versions)>) {
    let mut speak: Option<u8> = None;
    let mut strangers = Vec::new();
    for (k, r) in others {
        let r = r.unwrap_or(Versions::only(OLDEST));
        match own.intersect(r) {
            Some(both) => speak = Some(speak.map_or(both.max, |s| s.min(both.max))),
            None => strangers.push((k, r)),
        }
    }
    (speak.unwrap_or(own.min), strangers)
}

/// What every packet says about its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header<I> {
    /// The wire version the packet is written in (one of [`SPOKEN`]).
    pub version: u8,
    /// The versions its sender speaks (written from version 3 on; `None`
    /// in a version 2 packet).
    pub speaks: Option<Versions>,
    /// The cluster the packet belongs to. Version 2 carries all of it;
    /// versions from 3 on, its low half: a decoded header holds the
    /// receiver's cluster id, which that half matched.
    pub cluster: u64,
    /// Who sent it.
    pub sender: I,
    /// The sender's current incarnation (its own word on its liveness).
    pub incarnation: u32,
    /// The sender's Lifeguard local health score (0 = healthy).
    pub health: u8,
    /// The sender's run: grows each time it starts again.
    pub generation: u64,
    /// When the sender built the packet, in milliseconds of its own clock
    /// (only differences between its packets mean anything).
    pub sent_ms: u64,
}

impl<I: Identity> Header<I> {
    /// Bytes the header takes on the wire (with version 2's message count).
    pub fn encoded_len(&self) -> usize {
        let mut n = Len(0);
        self.write(&mut n, 0);
        n.0
    }

    /// Whether this header's cluster is `cluster`: all 8 bytes in version
    /// 2, the low half from version 3 on (what the wire carries; see
    /// [`same_cluster`]).
    pub fn is_of(&self, cluster: u64) -> bool {
        same_cluster(self.version, self.cluster, cluster)
    }

    /// Writes the header; `count` is the message count, which only version
    /// 2 carries.
    fn write<S: Sink>(&self, out: &mut S, count: u8) {
        out.bytes(&MAGIC);
        out.byte(self.version);
        if self.version >= 3 {
            out.bytes(&(self.cluster as u32).to_le_bytes());
        } else {
            out.bytes(&self.cluster.to_le_bytes());
        }
        out.id(&self.sender);
        if self.version >= 3 {
            let speaks = self.speaks.unwrap_or(Versions::only(self.version));
            out.byte(speaks.min);
            out.byte(speaks.max);
        }
        out.varint(u64::from(self.incarnation));
        out.byte(self.health);
        out.varint(self.generation);
        out.varint(self.sent_ms);
        if self.version < 3 {
            out.byte(count);
        }
    }
}

/// A decoded packet: its header and messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<I> {
    /// Who sent it and in which state.
    pub header: Header<I>,
    /// Its messages, in order.
    pub messages: Vec<Message<I>>,
}

/// Which path a packet travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    /// An unreliable datagram of at most [`MAX_DATAGRAM`] bytes (UDP).
    Datagram,
    /// A reliable stream frame of at most [`MAX_STREAM_FRAME`] bytes (TCP).
    Stream,
}

impl<I: Identity> Packet<I> {
    /// Encodes header and messages (the first [`MAX_MESSAGES`]).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.header
            .write(&mut out, self.messages.len().min(MAX_MESSAGES) as u8);
        for m in self.messages.iter().take(MAX_MESSAGES) {
            m.encode(&mut out);
        }
        out
    }

    /// Bytes `encode` writes.
    pub fn encoded_len(&self) -> usize {
        self.header.encoded_len()
            + self
                .messages
                .iter()
                .take(MAX_MESSAGES)
                .map(Message::encoded_len)
                .sum::<usize>()
    }

    /// Whether `decode(encode())` on `channel` gives this packet back, as
    /// far as the packet itself decides it: at most [`MAX_MESSAGES`]
    /// messages, each fitting the header's version ([`Message::fits`]), no
    /// metadata over [`MAX_META`], no full-state sync in a datagram, and
    /// `len` (its encoded length) within the channel's limit. (A version 3
    /// header's cluster id decodes as the receiver's, which only the
    /// receiver knows: see [`Header::is_of`].)
    /// (The identities' own round trip is [`Identity`]'s contract.)
    pub fn round_trips(&self, channel: Channel, len: usize) -> bool {
        let limit = match channel {
            Channel::Datagram => MAX_DATAGRAM,
            Channel::Stream => MAX_STREAM_FRAME,
        };
        len <= limit
            && SPOKEN.contains(self.header.version)
            && (self.header.version >= 3) == self.header.speaks.is_some()
            && self
                .header
                .speaks
                .is_none_or(|s| s.contains(self.header.version))
            && self.messages.len() <= MAX_MESSAGES
            && self.messages.iter().all(|m| m.fits(self.header.version))
            && self.messages.iter().all(|m| match m {
                Message::Alive { meta, .. } => meta.len() <= MAX_META,
                Message::PushPull {
                    members, digest, ..
                } => {
                    channel == Channel::Stream
                        && (*digest || members.iter().all(|r| r.meta.len() <= MAX_META))
                }
                _ => true,
            })
    }

    /// Decodes a packet received on `channel`, rejecting any cluster but
    /// `cluster` (all 8 bytes of it in version 2, its low half from version
    /// 3 on; the header returned holds `cluster`). Total: any input gives
    /// a packet or an error.
    pub fn decode(bytes: &[u8], channel: Channel, cluster: u64) -> Result<Self, DecodeError> {
        let limit = match channel {
            Channel::Datagram => MAX_DATAGRAM,
            Channel::Stream => MAX_STREAM_FRAME,
        };
        if bytes.len() > limit {
            return Err(DecodeError::Oversize(bytes.len()));
        }
        let mut r = Reader::new(bytes);
        if r.array::<2>()? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = r.u8()?;
        if !SPOKEN.contains(version) {
            return Err(DecodeError::Version(version));
        }
        if !same_cluster(version, read_cluster(&mut r, version)?, cluster) {
            return Err(DecodeError::ForeignCluster);
        }
        let sender = I::decode(&mut r)?;
        let speaks = if version >= 3 {
            Some(read_speaks(&mut r, version)?)
        } else {
            None
        };
        let incarnation = r.varint32()?;
        let health = r.u8()?;
        let generation = r.varint()?;
        let sent_ms = r.varint()?;
        let stream = channel == Channel::Stream;
        let messages = if version >= 3 {
            read_to_end(&mut r, version, stream)?
        } else {
            read_counted(&mut r, version, stream)?
        };
        Ok(Packet {
            header: Header {
                version,
                speaks,
                cluster,
                sender,
                incarnation,
                health,
                generation,
                sent_ms,
            },
            messages,
        })
    }
}

/// Version 2's messages: a count, that many, and nothing after them.
fn read_counted<I: Identity>(
    r: &mut Reader<'_>,
    version: u8,
    stream: bool,
) -> Result<Vec<Message<I>>, DecodeError> {
    let count = usize::from(r.u8()?);
    // A message takes at least two bytes: bound the allocation by the input.
    if count > r.remaining() / 2 + 1 {
        return Err(DecodeError::Invalid("message count exceeds packet"));
    }
    let mut messages = Vec::with_capacity(count);
    for _ in 0..count {
        messages.push(Message::decode(r, version, stream)?);
    }
    if r.remaining() != 0 {
        return Err(DecodeError::Trailing);
    }
    Ok(messages)
}

/// Messages to the end of the packet (version 3 on), at most
/// [`MAX_MESSAGES`]. Each takes at least two bytes, so the vector never
/// holds more than the input could.
fn read_to_end<I: Identity>(
    r: &mut Reader<'_>,
    version: u8,
    stream: bool,
) -> Result<Vec<Message<I>>, DecodeError> {
    let mut messages = Vec::new();
    while r.remaining() > 0 {
        if messages.len() == MAX_MESSAGES {
            return Err(DecodeError::Invalid("more than MAX_MESSAGES messages"));
        }
        messages.push(Message::decode(r, version, stream)?);
    }
    Ok(messages)
}

/// The cluster id a header of `version` carries: all 8 bytes in version 2,
/// the low 4 from version 3 on.
fn read_cluster(r: &mut Reader<'_>, version: u8) -> Result<u64, DecodeError> {
    Ok(if version >= 3 {
        u64::from(u32::from_le_bytes(r.array()?))
    } else {
        u64::from_le_bytes(r.array()?)
    })
}

/// Whether a packet of `version` whose header holds the cluster id
/// `theirs` belongs to the cluster `ours`: all 8 bytes must match in
/// version 2, the low 4 (all the header carries) from version 3 on.
pub fn same_cluster(version: u8, theirs: u64, ours: u64) -> bool {
    if version >= 3 {
        theirs as u32 == ours as u32
    } else {
        theirs == ours
    }
}

/// The tag a ping to `id` carries in `cluster` from version 3 on
/// ([`PingTarget::Tag`]): the high half of `id`'s ring position.
pub fn target_tag<I: Identity>(cluster: u64, id: &I) -> u32 {
    crate::ring::tag(crate::ring::ring_position(cluster, id, &mut Vec::new()))
}

/// The sender's range in a header of version 3 or later: it must hold
/// the version the packet is written in.
fn read_speaks(r: &mut Reader<'_>, version: u8) -> Result<Versions, DecodeError> {
    let speaks = Versions {
        min: r.u8()?,
        max: r.u8()?,
    };
    if !speaks.contains(version) {
        return Err(DecodeError::Invalid(
            "sender's versions exclude the packet's",
        ));
    }
    Ok(speaks)
}

/// What can be read of a packet in a version this build may not decode:
/// the prefix that every version from 3 on keeps, `magic | version |
/// cluster id u32 LE | sender | speaks min | speaks max` (version 2's is
/// its header up to the sender, with an 8-byte cluster id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peek<I> {
    /// The packet's version.
    pub version: u8,
    /// Its sender (versions 2 and later).
    pub sender: Option<I>,
    /// The versions its sender speaks (versions 3 and later).
    pub speaks: Option<Versions>,
}

/// Reads the prefix of a packet of any version: `None` unless it is a
/// hale packet of `cluster` (checked as [`same_cluster`] does; a version
/// before 2 has no cluster to check: only its version is read). Total,
/// like [`Packet::decode`].
pub fn peek<I: Identity>(bytes: &[u8], cluster: u64) -> Option<Peek<I>> {
    let mut r = Reader::new(bytes);
    if r.array::<2>().ok()? != MAGIC {
        return None;
    }
    let version = r.u8().ok()?;
    let mut peek = Peek {
        version,
        sender: None,
        speaks: None,
    };
    if version < OLDEST {
        return Some(peek);
    }
    if !same_cluster(version, read_cluster(&mut r, version).ok()?, cluster) {
        return None;
    }
    peek.sender = I::decode(&mut r).ok();
    if version >= 3 && peek.sender.is_some() {
        peek.speaks = read_speaks(&mut r, version).ok();
    }
    Some(peek)
}

/// The cluster identifier for a cluster name: FNV-1a 64, stable across
/// builds and platforms.
pub fn cluster_id(name: &str) -> u64 {
    fnv1a(name.as_bytes())
}

pub use crate::ring::fnv1a;
