//! Member identities and how they go on the wire.

use std::fmt::Debug;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};

use crate::wire::codec::{DecodeError, Reader, Sink};

/// What names a member: compared for equality, hashed, and carried on the
/// wire. It must hold everything a runtime needs to reach the member (the
/// agent's [`NodeId`] holds a name and an address).
///
/// Encoding must be total: `decode` returns an error, never panics, on any
/// input, and never allocates more than the bytes it was given.
pub trait Identity: Clone + Eq + Hash + Ord + Debug {
    /// Appends the wire form to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads one identity from `r`.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
    /// Bytes `encode` writes.
    fn encoded_len(&self) -> usize;

    /// A small dense index naming this identity, if the type has one (the
    /// simulator numbers its nodes 0, 1, 2, ...). A node stores the members
    /// whose identity has one in a vector at that index, without hashing or
    /// keeping the identity, which makes its member table several times
    /// smaller. Identities without one (the default) are kept in a hash map.
    ///
    /// If it returns `Some(i)`, [`Identity::from_dense_index`] of `i` must
    /// give back an equal identity, and no other identity may return `i`.
    /// Indices of 2^20 and more are accepted but stored like identities
    /// without one, so that a forged index cannot make a node allocate much.
    fn dense_index(&self) -> Option<u32> {
        None
    }

    /// The identity whose [`Identity::dense_index`] is `index`.
    fn from_dense_index(index: u32) -> Option<Self> {
        let _ = index;
        None
    }
}

/// Longest node name accepted.
pub const MAX_NAME_LEN: usize = 64;

/// The agent's identity: a unique node name and the address its gossip
/// socket listens on.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct NodeId {
    name: String,
    addr: SocketAddr,
}

/// Why a [`NodeId`] could not be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NodeIdError {
    /// The name was empty.
    #[error("node name is empty")]
    Empty,
    /// The name was longer than [`MAX_NAME_LEN`] bytes.
    #[error("node name is {0} bytes long, the limit is {MAX_NAME_LEN}")]
    TooLong(usize),
    /// The name had a character outside `[A-Za-z0-9._-]`.
    #[error("node name has {0:?}; only letters, digits, '.', '_' and '-' are allowed")]
    BadChar(char),
}

impl NodeId {
    /// A node id from a name (`[A-Za-z0-9._-]{1,64}`) and an address.
    pub fn new(name: impl Into<String>, addr: SocketAddr) -> Result<NodeId, NodeIdError> {
        let name = name.into();
        validate_name(&name)?;
        Ok(NodeId { name, addr })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The node's gossip address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn validate_name(name: &str) -> Result<(), NodeIdError> {
    if name.is_empty() {
        return Err(NodeIdError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NodeIdError::TooLong(name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(NodeIdError::BadChar(c));
    }
    Ok(())
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.addr)
    }
}

impl Identity for NodeId {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.name.len() as u8);
        out.extend_from_slice(self.name.as_bytes());
        match self.addr.ip() {
            IpAddr::V4(ip) => {
                out.push(4);
                out.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                out.push(6);
                out.extend_from_slice(&ip.octets());
            }
        }
        out.extend_from_slice(&self.addr.port().to_be_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let len = usize::from(r.u8()?);
        if len == 0 || len > MAX_NAME_LEN {
            return Err(DecodeError::Invalid("node name length"));
        }
        let name = std::str::from_utf8(r.bytes(len)?)
            .map_err(|_| DecodeError::Invalid("node name is not UTF-8"))?;
        validate_name(name).map_err(|_| DecodeError::Invalid("node name characters"))?;
        let ip = match r.u8()? {
            4 => IpAddr::from(r.array::<4>()?),
            6 => IpAddr::from(r.array::<16>()?),
            _ => return Err(DecodeError::Invalid("address family")),
        };
        let port = u16::from_be_bytes(r.array()?);
        Ok(NodeId {
            name: name.to_owned(),
            addr: SocketAddr::new(ip, port),
        })
    }

    fn encoded_len(&self) -> usize {
        let ip = if self.addr.is_ipv4() { 4 } else { 16 };
        1 + self.name.len() + 1 + ip + 2
    }
}

/// Writes identities into a [`Sink`]: encoded into a buffer, or counted.
pub(crate) trait SinkId {
    /// Writes `id` (or counts its bytes).
    fn id<I: Identity>(&mut self, id: &I);
}

impl<S: Sink> SinkId for S {
    fn id<I: Identity>(&mut self, id: &I) {
        self.encoded(|| id.encoded_len(), |out| id.encode(out));
    }
}
