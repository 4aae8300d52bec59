//! The wire format: versioned, compact, total decoding.
//!
//! Every datagram and stream frame starts with a header:
//!
//! ```text
//! version 2: magic "HL" | version u8 | cluster id u64 LE | sender Identity
//!   | sender incarnation varint | sender local health u8
//!   | sender generation varint | sent (sender's clock, ms) varint
//!   | message count u8
//! version 3: magic "HL" | version u8 | cluster id u64 LE | sender Identity
//!   | speaks min u8 | speaks max u8
//!   | (the rest as in version 2)
//! ```
//!
//! **Versions.** A build speaks a range of versions ([`SPOKEN`]): it decodes
//! every one of them and sends the one its cluster negotiated (the highest
//! that every live member speaks; see [`negotiate`]). Version 3 adds the
//! sender's own range to the header. Every version from 3 on starts with
//! the same prefix, `magic | version | cluster | sender | speaks min | speaks
//! max`, whatever follows it, so a build that cannot decode a newer
//! version still reads who sent it and what that member speaks
//! ([`peek`]), and reports it instead of dropping it silently. (Version 2
//! has the prefix up to the sender.)
//!
//! The generation and the send time let a receiver reject replays (see
//! `Config::replay_window`); the whole packet is sealed by the agent, so
//! they are authenticated with it.
//!
//! followed by `count` messages, each a tag byte and its fields. Integers
//! are LEB128 varints unless noted. Decoding never panics and never
//! allocates more than a small multiple of the input's length: every count
//! is checked against the bytes that remain before anything is reserved.

use crate::identity::Identity;

/// First two bytes of every packet.
pub const MAGIC: [u8; 2] = *b"HL";
/// The newest wire version this build speaks.
pub const VERSION: u8 = 3;
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
        let r = r.unwrap_or(Versions {
            min: OLDEST,
            max: OLDEST,
        });
        match own.intersect(r) {
            Some(both) => speak = Some(speak.map_or(both.max, |s| s.min(both.max))),
            None => strangers.push((k, r)),
        }
    }
    (speak.unwrap_or(own.min), strangers)
}
/// Largest datagram hale ever sends (fits a 1280-byte IPv6 minimum MTU with
/// headers to spare).
pub const MAX_DATAGRAM: usize = 1200;
/// Largest user metadata a member may carry.
pub const MAX_META: usize = 512;
/// Largest stream frame accepted (a full-state sync of a very large cluster).
pub const MAX_STREAM_FRAME: usize = 32 * 1024 * 1024;
/// Most messages in one packet.
pub const MAX_MESSAGES: usize = 255;

/// Why bytes could not be decoded. Nothing is changed by a failed decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ended inside a field.
    #[error("packet truncated")]
    Truncated,
    /// The first bytes were not hale's magic.
    #[error("not a hale packet (bad magic)")]
    BadMagic,
    /// The packet speaks a wire version this build does not.
    #[error("unsupported wire version {0}")]
    Version(u8),
    /// The packet belongs to another cluster.
    #[error("packet from another cluster")]
    ForeignCluster,
    /// A field held a value outside its range.
    #[error("invalid field: {0}")]
    Invalid(&'static str),
    /// The packet was larger than allowed for its channel.
    #[error("packet of {0} bytes exceeds the limit")]
    Oversize(usize),
    /// Bytes were left over after the last message.
    #[error("trailing bytes after the last message")]
    Trailing,
}

/// A cursor over input bytes; every read is bounds-checked.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let (&b, rest) = self.buf.split_first().ok_or(DecodeError::Truncated)?;
        self.buf = rest;
        Ok(b)
    }
    /// Reads `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.buf.len() {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    /// Reads a fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let b = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }
    /// Reads a LEB128 varint of at most 64 bits.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                if shift == 63 && b > 1 {
                    return Err(DecodeError::Invalid("varint overflow"));
                }
                if b == 0 && shift > 0 {
                    // Canonical encoding only: every value has exactly one form.
                    return Err(DecodeError::Invalid("overlong varint"));
                }
                return Ok(out);
            }
        }
        Err(DecodeError::Invalid("varint too long"))
    }
    /// Reads a varint that must fit a `u32`.
    pub fn varint32(&mut self) -> Result<u32, DecodeError> {
        u32::try_from(self.varint()?).map_err(|_| DecodeError::Invalid("varint exceeds u32"))
    }
}

/// Appends a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes `put_varint` writes for `v`.
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - v.max(1).leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// What every packet says about its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header<I> {
    /// The wire version the packet is written in (one of [`SPOKEN`]).
    pub version: u8,
    /// The versions its sender speaks (written from version 3 on; `None`
    /// in a version 2 packet).
    pub speaks: Option<Versions>,
    /// The cluster the packet belongs to.
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

/// A state of a member as carried in a full-state sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WireState {
    /// Alive.
    Alive = 0,
    /// Suspected.
    Suspect = 1,
    /// Declared dead.
    Dead = 2,
    /// Left gracefully.
    Left = 3,
}

/// One member in a full-state sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord<I> {
    /// The member.
    pub id: I,
    /// Its incarnation.
    pub incarnation: u32,
    /// Its state in the sender's view.
    pub state: WireState,
    /// Its metadata.
    pub meta: Vec<u8>,
}

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<I> {
    /// Are you alive? `suspected` carries the buddy-system notice: the prober
    /// suspects the target at that incarnation, so it can refute at once.
    Ping {
        /// Sequence number echoed by the ack.
        seq: u32,
        /// Who the ping is for (a misdirected ping is ignored).
        target: I,
        /// The incarnation at which the prober suspects the target.
        suspected: Option<u32>,
    },
    /// Answer to a ping (possibly forwarded by an indirect prober).
    Ack {
        /// Sequence number of the ping.
        seq: u32,
    },
    /// An indirect prober could not reach the target in time.
    Nack {
        /// Sequence number of the ping-req.
        seq: u32,
    },
    /// Please ping `target` for me and forward its ack.
    PingReq {
        /// Sequence number to answer with.
        seq: u32,
        /// Who to ping.
        target: I,
        /// Buddy-system notice passed on to the target.
        suspected: Option<u32>,
    },
    /// A member is alive at an incarnation, with its metadata.
    Alive {
        /// The member.
        member: I,
        /// Its incarnation.
        incarnation: u32,
        /// Its metadata.
        meta: Vec<u8>,
    },
    /// `accuser` suspects `member`.
    Suspect {
        /// The suspected member.
        member: I,
        /// Its incarnation as the accuser knows it.
        incarnation: u32,
        /// Who suspects it.
        accuser: I,
        /// The accuser's local health when it accused.
        accuser_health: u8,
    },
    /// `declarer` reached a death verdict on evidence from `accusers` healthy observers.
    Dead {
        /// The dead member.
        member: I,
        /// Its incarnation.
        incarnation: u32,
        /// Who reached the verdict.
        declarer: I,
        /// How many independent healthy accusers the verdict rested on.
        accusers: u8,
    },
    /// A member left gracefully.
    Left {
        /// The member.
        member: I,
        /// Its final incarnation.
        incarnation: u32,
    },
    /// `accuser`'s probe of `member` found its port closed (ICMP port
    /// unreachable, connection refused): its host answers and its process is
    /// gone. Positive evidence of a crash, which a stalled or frozen process
    /// never produces. Sent to the prober by an indirect prober instead of a
    /// nack, and gossiped like a suspicion.
    Closed {
        /// The member whose port is closed.
        member: I,
        /// Its incarnation as the accuser knows it.
        incarnation: u32,
        /// Who found it closed.
        accuser: I,
    },
    /// "Your packets carry an older generation than `known`, which I have
    /// heard from you": sent to a sender whose packet was dropped as a
    /// replay. A member restarted with its wall clock set back (its
    /// generation is that clock) starts again above `known` instead of
    /// being locked out until its clock catches up. Raising a generation
    /// is always safe, so a replayed notice changes nothing that matters.
    Superseded {
        /// The newest generation the sender of the notice heard from the
        /// receiver.
        known: u64,
    },
    /// Full-state sync (stream only).
    PushPull {
        /// The sender is joining and wants the state back even if rate limited.
        join: bool,
        /// The receiver should answer with its own state.
        reply: bool,
        /// The records carry no metadata (none is on the wire): a digest of
        /// what the sender knows, answered with the full records the
        /// receiver knows better (see `sync.rs`).
        digest: bool,
        /// The sender's member list (whole, unless it answers a digest).
        members: Vec<MemberRecord<I>>,
    },
}

/// A message's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Tag {
    Ping = 1,
    Ack,
    Nack,
    PingReq,
    Alive,
    Suspect,
    Dead,
    Left,
    PushPull,
    Closed,
    Superseded,
}

impl Tag {
    /// The tag `b` stands for.
    fn of(b: u8) -> Option<Tag> {
        use Tag::*;
        [
            Ping, Ack, Nack, PingReq, Alive, Suspect, Dead, Left, PushPull, Closed, Superseded,
        ]
        .into_iter()
        .find(|t| *t as u8 == b)
    }
}

/// Where a packet is written: a buffer ([`Message::encode`]), or [`Len`],
/// which only counts the bytes ([`Message::encoded_len`]), so that the
/// length always agrees with the encoding.
trait Sink {
    fn bytes(&mut self, b: &[u8]);
    fn byte(&mut self, b: u8) {
        self.bytes(&[b]);
    }
    fn varint(&mut self, v: u64);
    fn id<I: Identity>(&mut self, id: &I);
}

impl Sink for Vec<u8> {
    fn bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn varint(&mut self, v: u64) {
        put_varint(self, v);
    }
    fn id<I: Identity>(&mut self, id: &I) {
        id.encode(self);
    }
}

/// A [`Sink`] that counts.
struct Len(usize);

impl Sink for Len {
    fn bytes(&mut self, b: &[u8]) {
        self.0 += b.len();
    }
    fn varint(&mut self, v: u64) {
        self.0 += varint_len(v);
    }
    fn id<I: Identity>(&mut self, id: &I) {
        self.0 += id.encoded_len();
    }
}

impl<I: Identity> Message<I> {
    /// Appends the wire form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.write(out);
    }

    /// Bytes `encode` writes.
    pub fn encoded_len(&self) -> usize {
        let mut n = Len(0);
        self.write(&mut n);
        n.0
    }

    fn write<S: Sink>(&self, out: &mut S) {
        match self {
            Message::Ping {
                seq,
                target,
                suspected,
            }
            | Message::PingReq {
                seq,
                target,
                suspected,
            } => {
                let ping = matches!(self, Message::Ping { .. });
                out.byte(if ping { Tag::Ping } else { Tag::PingReq } as u8);
                out.varint(u64::from(*seq));
                out.id(target);
                match suspected {
                    None => out.byte(0),
                    Some(inc) => {
                        out.byte(1);
                        out.varint(u64::from(*inc));
                    }
                }
            }
            Message::Ack { seq } | Message::Nack { seq } => {
                let ack = matches!(self, Message::Ack { .. });
                out.byte(if ack { Tag::Ack } else { Tag::Nack } as u8);
                out.varint(u64::from(*seq));
            }
            Message::Alive {
                member,
                incarnation,
                meta,
            } => {
                out.byte(Tag::Alive as u8);
                out.id(member);
                out.varint(u64::from(*incarnation));
                out.varint(meta.len() as u64);
                out.bytes(meta);
            }
            Message::Suspect {
                member,
                incarnation,
                accuser,
                accuser_health,
            } => {
                out.byte(Tag::Suspect as u8);
                out.id(member);
                out.varint(u64::from(*incarnation));
                out.id(accuser);
                out.byte(*accuser_health);
            }
            Message::Dead {
                member,
                incarnation,
                declarer,
                accusers,
            } => {
                out.byte(Tag::Dead as u8);
                out.id(member);
                out.varint(u64::from(*incarnation));
                out.id(declarer);
                out.byte(*accusers);
            }
            Message::Left {
                member,
                incarnation,
            } => {
                out.byte(Tag::Left as u8);
                out.id(member);
                out.varint(u64::from(*incarnation));
            }
            Message::Closed {
                member,
                incarnation,
                accuser,
            } => {
                out.byte(Tag::Closed as u8);
                out.id(member);
                out.varint(u64::from(*incarnation));
                out.id(accuser);
            }
            Message::Superseded { known } => {
                out.byte(Tag::Superseded as u8);
                out.varint(*known);
            }
            Message::PushPull {
                join,
                reply,
                digest,
                members,
            } => {
                out.byte(Tag::PushPull as u8);
                out.byte(u8::from(*join) | (u8::from(*reply) << 1) | (u8::from(*digest) << 2));
                out.varint(members.len() as u64);
                for m in members {
                    out.id(&m.id);
                    out.varint(u64::from(m.incarnation));
                    out.byte(m.state as u8);
                    if !*digest {
                        out.varint(m.meta.len() as u64);
                        out.bytes(&m.meta);
                    }
                }
            }
        }
    }

    fn decode(r: &mut Reader<'_>, stream: bool) -> Result<Self, DecodeError> {
        let Some(tag) = Tag::of(r.u8()?) else {
            return Err(DecodeError::Invalid("message tag"));
        };
        Ok(match tag {
            Tag::Ping | Tag::PingReq => {
                let seq = r.varint32()?;
                let target = I::decode(r)?;
                let suspected = match r.u8()? {
                    0 => None,
                    1 => Some(r.varint32()?),
                    _ => return Err(DecodeError::Invalid("suspected flag")),
                };
                if tag == Tag::Ping {
                    Message::Ping {
                        seq,
                        target,
                        suspected,
                    }
                } else {
                    Message::PingReq {
                        seq,
                        target,
                        suspected,
                    }
                }
            }
            Tag::Ack => Message::Ack { seq: r.varint32()? },
            Tag::Nack => Message::Nack { seq: r.varint32()? },
            Tag::Superseded => Message::Superseded { known: r.varint()? },
            Tag::Alive => Message::Alive {
                member: I::decode(r)?,
                incarnation: r.varint32()?,
                meta: read_meta(r)?,
            },
            Tag::Suspect => Message::Suspect {
                member: I::decode(r)?,
                incarnation: r.varint32()?,
                accuser: I::decode(r)?,
                accuser_health: r.u8()?,
            },
            Tag::Dead => Message::Dead {
                member: I::decode(r)?,
                incarnation: r.varint32()?,
                declarer: I::decode(r)?,
                accusers: r.u8()?,
            },
            Tag::Left => Message::Left {
                member: I::decode(r)?,
                incarnation: r.varint32()?,
            },
            Tag::Closed => Message::Closed {
                member: I::decode(r)?,
                incarnation: r.varint32()?,
                accuser: I::decode(r)?,
            },
            Tag::PushPull if stream => {
                let flags = r.u8()?;
                if flags > 7 {
                    return Err(DecodeError::Invalid("push-pull flags"));
                }
                let digest = flags & 4 != 0;
                let count = r.varint()?;
                // Each record takes at least 3 bytes (a digest's: identity,
                // incarnation, state): never reserve more than the input could hold.
                if count > (r.remaining() / 3) as u64 {
                    return Err(DecodeError::Invalid("member count exceeds packet"));
                }
                let mut members = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    let id = I::decode(r)?;
                    let incarnation = r.varint32()?;
                    let state = match r.u8()? {
                        0 => WireState::Alive,
                        1 => WireState::Suspect,
                        2 => WireState::Dead,
                        3 => WireState::Left,
                        _ => return Err(DecodeError::Invalid("member state")),
                    };
                    let meta = if digest { Vec::new() } else { read_meta(r)? };
                    members.push(MemberRecord {
                        id,
                        incarnation,
                        state,
                        meta,
                    });
                }
                Message::PushPull {
                    join: flags & 1 != 0,
                    reply: flags & 2 != 0,
                    digest,
                    members,
                }
            }
            Tag::PushPull => return Err(DecodeError::Invalid("push-pull in a datagram")),
        })
    }
}

fn read_meta(r: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    let len = r.varint()?;
    if len > MAX_META as u64 {
        return Err(DecodeError::Invalid("metadata too long"));
    }
    Ok(r.bytes(len as usize)?.to_vec())
}

impl<I: Identity> Header<I> {
    /// Bytes the header takes on the wire.
    pub fn encoded_len(&self) -> usize {
        let mut n = Len(0);
        self.write(&mut n, 0);
        n.0
    }

    fn write<S: Sink>(&self, out: &mut S, count: u8) {
        out.bytes(&MAGIC);
        out.byte(self.version);
        out.bytes(&self.cluster.to_le_bytes());
        out.id(&self.sender);
        if self.version >= 3 {
            let speaks = self.speaks.unwrap_or(Versions {
                min: self.version,
                max: self.version,
            });
            out.byte(speaks.min);
            out.byte(speaks.max);
        }
        out.varint(u64::from(self.incarnation));
        out.byte(self.health);
        out.varint(self.generation);
        out.varint(self.sent_ms);
        out.byte(count);
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
    /// Encodes header and messages.
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
                .map(Message::encoded_len)
                .sum::<usize>()
    }

    /// Whether `decode(encode())` on `channel` gives this packet back, as
    /// far as the packet itself decides it: at most [`MAX_MESSAGES`]
    /// messages, no metadata over [`MAX_META`], no full-state sync in a
    /// datagram, and `len` (its encoded length) within the channel's limit.
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
    /// `cluster`. Total: any input gives a packet or an error.
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
        let their_cluster = u64::from_le_bytes(r.array()?);
        if their_cluster != cluster {
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
        let count = usize::from(r.u8()?);
        // A message takes at least two bytes: bound the allocation by the input.
        if count > r.remaining() / 2 + 1 {
            return Err(DecodeError::Invalid("message count exceeds packet"));
        }
        let mut messages = Vec::with_capacity(count);
        let stream = channel == Channel::Stream;
        for _ in 0..count {
            messages.push(Message::decode(&mut r, stream)?);
        }
        if r.remaining() != 0 {
            return Err(DecodeError::Trailing);
        }
        Ok(Packet {
            header: Header {
                version,
                speaks,
                cluster: their_cluster,
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
/// the prefix that every version keeps (see the module docs).
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
/// hale packet of `cluster` (a version before 2 has no cluster to check:
/// only its version is read). Total, like [`Packet::decode`].
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
    if u64::from_le_bytes(r.array().ok()?) != cluster {
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

/// FNV-1a 64 over `bytes`; stable, used where a hash must agree across nodes
/// (and, being `const`, for hashes computed at compile time).
pub const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        h ^= bytes[i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}
