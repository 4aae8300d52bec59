//! Protocol messages and member records: their wire forms, written
//! through [`Sink`] (so that a length always agrees with its encoding) and
//! read totally, per the packet's version.

use super::codec::{DecodeError, Len, Reader, Sink, MAX_META};
use crate::identity::{Identity, SinkId};

/// Buckets a view is summed in (`Message::Buckets`), one bit each in a
/// [`Message::DigestPart`]'s mask: a member's bucket is the top six bits of
/// a mixed FNV-1a hash of its identity's wire form.
pub const BUCKETS: usize = 64;

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
    pub meta: Box<[u8]>,
}

/// Whom a ping is for: the receiver ignores a ping meant for another
/// member (one restarted under another identity at the same address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PingTarget<I> {
    /// Its whole identity: how version 2 names it.
    Id(I),
    /// Its tag ([`super::target_tag`]: the high half of its ring
    /// position), 4 bytes: how versions from 3 on name it. Enough to tell
    /// a misdirected ping from one meant for the receiver.
    Tag(u32),
}

impl<I: Identity> PingTarget<I> {
    /// Whether `version` names a ping's target this way.
    pub fn fits(&self, version: u8) -> bool {
        match self {
            PingTarget::Id(_) => version < 3,
            PingTarget::Tag(_) => version >= 3,
        }
    }
}

/// One protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<I> {
    /// Are you alive? `suspected` carries the buddy-system notice: the prober
    /// suspects the target at that incarnation, so it can refute at once.
    Ping {
        /// Sequence number echoed by the ack.
        seq: u32,
        /// Who the ping is for (a misdirected ping is ignored): its
        /// identity in version 2, its tag from version 3 on.
        target: PingTarget<I>,
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
        meta: Box<[u8]>,
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
    /// "My view of the cluster hashes to `hash`" (`Node::view_hash`): the
    /// periodic sync's first step, in a datagram (version 3 on). A
    /// receiver whose own view hashes the same does nothing; otherwise it
    /// answers with its [`Message::Buckets`] (version 4, large clusters)
    /// or starts a digest push/pull with the sender. A cluster in agreement
    /// syncs with one small datagram per period instead of a stream
    /// exchange of two digests.
    Summary {
        /// The sender's view hash.
        hash: u64,
    },
    /// "I am alive", answered by nothing (version 3 on): a ring neighbour's
    /// proof of life to the member that watches it (`monitor.rs`). Half an
    /// exchange: the watcher pings only when these stop. Carried in a
    /// packet whose header already names the sender; the tag is all there
    /// is of it.
    Heartbeat,
    /// "I am probing `target`, which went quiet: probe it too" (version 3
    /// on). Sent by a ring watcher as its probe starts, to a second
    /// observer, so that the `corroboration` a verdict needs runs from the
    /// same moment as the first accusation (a member has one ring watcher
    /// with heartbeats). The receiver probes as it would on its own; it
    /// accuses only if its own probe fails.
    Corroborate {
        /// The member to probe.
        target: I,
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
    /// "My view sums to these, bucket by bucket" (version 4 on): the
    /// answer to a [`Message::Summary`] whose hash differs from the
    /// receiver's, in a cluster large enough that a whole digest costs
    /// more than this. The summary's sender compares the sums with its own
    /// and opens a digest exchange of only the buckets that differ
    /// ([`Message::DigestPart`]): a member missed by gossip costs a
    /// sixty-fourth of a digest to repair.
    Buckets {
        /// The sender's sum of record shares in each bucket.
        sums: Box<[u64; BUCKETS]>,
    },
    /// A digest of the members in some buckets only (version 4 on, stream
    /// only): like a digest [`Message::PushPull`], but members outside
    /// `buckets` are neither sent nor taken to be unknown to the sender.
    DigestPart {
        /// The buckets covered, one bit each (bit `b` for bucket `b`).
        buckets: u64,
        /// The receiver should answer with its own digest of the same
        /// buckets.
        reply: bool,
        /// The sender's records in those buckets, without metadata.
        members: Box<[MemberRecord<I>]>,
    },
}

/// Declares `Tag` and its decoding from one list, so that the two cannot
/// disagree.
macro_rules! tags {
    ($($tag:ident = $byte:literal),* $(,)?) => {
        /// A message's first byte.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        enum Tag {
            $($tag = $byte),*
        }

        impl Tag {
            /// The tag `b` stands for.
            fn of(b: u8) -> Option<Tag> {
                match b {
                    $($byte => Some(Tag::$tag),)*
                    _ => None,
                }
            }
        }
    };
}

tags! {
    Ping = 1,
    Ack = 2,
    Nack = 3,
    PingReq = 4,
    Alive = 5,
    Suspect = 6,
    Dead = 7,
    Left = 8,
    PushPull = 9,
    Closed = 10,
    Superseded = 11,
    Summary = 12,
    Heartbeat = 13,
    Corroborate = 14,
    Buckets = 15,
    DigestPart = 16,
}

impl<I: Identity> Message<I> {
    /// Whether a packet of `version` carries this message as it is: a
    /// ping's target named as `version` names it ([`PingTarget::fits`]),
    /// a [`Message::Summary`], [`Message::Heartbeat`] or
    /// [`Message::Corroborate`] only from version 3 on, and a
    /// [`Message::Buckets`] or [`Message::DigestPart`] from version 4 on. A message that
    /// does not fit its packet's version is still encoded, as its form
    /// says, but does not decode back to itself.
    pub fn fits(&self, version: u8) -> bool {
        match self {
            Message::Ping { target, .. } => target.fits(version),
            Message::Summary { .. } | Message::Heartbeat | Message::Corroborate { .. } => {
                version >= 3
            }
            Message::Buckets { .. } | Message::DigestPart { .. } => version >= 4,
            _ => true,
        }
    }

    /// Appends the wire form to `out`. The form does not depend on the
    /// packet's version: a ping's target is written as it is named, a
    /// whole identity or a 4-byte tag (see [`Message::fits`]).
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
            } => {
                out.byte(Tag::Ping as u8);
                out.varint(u64::from(*seq));
                match target {
                    PingTarget::Id(id) => out.id(id),
                    PingTarget::Tag(tag) => out.bytes(&tag.to_le_bytes()),
                }
                write_suspected(out, *suspected);
            }
            Message::PingReq {
                seq,
                target,
                suspected,
            } => {
                out.byte(Tag::PingReq as u8);
                out.varint(u64::from(*seq));
                out.id(target);
                write_suspected(out, *suspected);
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
            Message::Summary { hash } => {
                out.byte(Tag::Summary as u8);
                out.bytes(&hash.to_le_bytes());
            }
            Message::Heartbeat => out.byte(Tag::Heartbeat as u8),
            Message::Corroborate { target } => {
                out.byte(Tag::Corroborate as u8);
                out.id(target);
            }
            Message::PushPull {
                join,
                reply,
                digest,
                members,
            } => {
                out.byte(Tag::PushPull as u8);
                out.byte(u8::from(*join) | (u8::from(*reply) << 1) | (u8::from(*digest) << 2));
                write_records(out, members, !*digest);
            }
            Message::Buckets { sums } => {
                out.byte(Tag::Buckets as u8);
                for s in sums.iter() {
                    out.bytes(&s.to_le_bytes());
                }
            }
            Message::DigestPart {
                buckets,
                reply,
                members,
            } => {
                out.byte(Tag::DigestPart as u8);
                out.byte(u8::from(*reply));
                out.bytes(&buckets.to_le_bytes());
                write_records(out, members, false);
            }
        }
    }

    /// Reads one message of a packet of `version` (one this build speaks)
    /// received on a stream (`stream`) or in a datagram.
    pub(super) fn decode(
        r: &mut Reader<'_>,
        version: u8,
        stream: bool,
    ) -> Result<Self, DecodeError> {
        let Some(tag) = Tag::of(r.u8()?) else {
            return Err(DecodeError::Invalid("message tag"));
        };
        Ok(match tag {
            Tag::Ping => Message::Ping {
                seq: r.varint32()?,
                target: if version >= 3 {
                    PingTarget::Tag(u32::from_le_bytes(r.array()?))
                } else {
                    PingTarget::Id(I::decode(r)?)
                },
                suspected: read_suspected(r)?,
            },
            Tag::PingReq => Message::PingReq {
                seq: r.varint32()?,
                target: I::decode(r)?,
                suspected: read_suspected(r)?,
            },
            Tag::Ack => Message::Ack { seq: r.varint32()? },
            Tag::Nack => Message::Nack { seq: r.varint32()? },
            Tag::Superseded => Message::Superseded { known: r.varint()? },
            Tag::Summary if version >= 3 => Message::Summary {
                hash: u64::from_le_bytes(r.array()?),
            },
            Tag::Heartbeat if version >= 3 => Message::Heartbeat,
            Tag::Corroborate if version >= 3 => Message::Corroborate {
                target: I::decode(r)?,
            },
            Tag::Summary | Tag::Heartbeat | Tag::Corroborate => {
                return Err(DecodeError::Invalid("message tag"))
            }
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
                Message::PushPull {
                    join: flags & 1 != 0,
                    reply: flags & 2 != 0,
                    digest,
                    members: read_records(r, !digest)?,
                }
            }
            Tag::Buckets | Tag::DigestPart if version < 4 => {
                return Err(DecodeError::Invalid("message tag"))
            }
            Tag::Buckets => {
                let mut sums = Box::new([0u64; BUCKETS]);
                for s in sums.iter_mut() {
                    *s = u64::from_le_bytes(r.array()?);
                }
                Message::Buckets { sums }
            }
            Tag::DigestPart if stream => {
                let reply = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(DecodeError::Invalid("digest part flags")),
                };
                Message::DigestPart {
                    reply,
                    buckets: u64::from_le_bytes(r.array()?),
                    members: read_records(r, false)?.into(),
                }
            }
            Tag::DigestPart => return Err(DecodeError::Invalid("digest part in a datagram")),
            Tag::PushPull => return Err(DecodeError::Invalid("push-pull in a datagram")),
        })
    }
}

/// A sync's records: identity, incarnation, state, and (`with_meta`)
/// metadata.
fn write_records<S: Sink, I: Identity>(out: &mut S, members: &[MemberRecord<I>], with_meta: bool) {
    out.varint(members.len() as u64);
    for m in members {
        out.id(&m.id);
        out.varint(u64::from(m.incarnation));
        out.byte(m.state as u8);
        if with_meta {
            out.varint(m.meta.len() as u64);
            out.bytes(&m.meta);
        }
    }
}

/// Reads what [`write_records`] wrote.
fn read_records<I: Identity>(
    r: &mut Reader<'_>,
    with_meta: bool,
) -> Result<Vec<MemberRecord<I>>, DecodeError> {
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
        let meta = if with_meta {
            read_meta(r)?
        } else {
            Box::default()
        };
        members.push(MemberRecord {
            id,
            incarnation,
            state,
            meta,
        });
    }
    Ok(members)
}

fn write_suspected<S: Sink>(out: &mut S, suspected: Option<u32>) {
    match suspected {
        None => out.byte(0),
        Some(inc) => {
            out.byte(1);
            out.varint(u64::from(inc));
        }
    }
}

fn read_suspected(r: &mut Reader<'_>) -> Result<Option<u32>, DecodeError> {
    match r.u8()? {
        0 => Ok(None),
        1 => Ok(Some(r.varint32()?)),
        _ => Err(DecodeError::Invalid("suspected flag")),
    }
}

fn read_meta(r: &mut Reader<'_>) -> Result<Box<[u8]>, DecodeError> {
    let len = r.varint()?;
    if len > MAX_META as u64 {
        return Err(DecodeError::Invalid("metadata too long"));
    }
    Ok(r.bytes(len as usize)?.into())
}
