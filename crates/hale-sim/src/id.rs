//! The simulator's compact member identity.

use hale_core::wire::{DecodeError, Reader};
use hale_core::Identity;

/// A simulated node: an index. On the wire it takes 16 bytes, the size of a
/// typical agent identity (`node-123` at an IPv4 address), so that the byte
/// counts the simulator reports are those a real cluster would see.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct SimId(pub u32);

/// Bytes a [`SimId`] takes on the wire.
pub const SIM_ID_LEN: usize = 16;

impl Identity for SimId {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
        out.extend_from_slice(&[0u8; SIM_ID_LEN - 4]);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let id = u32::from_le_bytes(r.array()?);
        if r.bytes(SIM_ID_LEN - 4)?.iter().any(|b| *b != 0) {
            return Err(DecodeError::Invalid("simulated id padding"));
        }
        Ok(SimId(id))
    }

    fn encoded_len(&self) -> usize {
        SIM_ID_LEN
    }

    /// The node number itself: nodes keep their member tables as vectors
    /// indexed by it (16 bytes a member instead of a hash map entry).
    fn dense_index(&self) -> Option<u32> {
        Some(self.0)
    }

    fn from_dense_index(index: u32) -> Option<Self> {
        Some(SimId(index))
    }
}

impl std::fmt::Display for SimId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "n{}", self.0)
    }
}
