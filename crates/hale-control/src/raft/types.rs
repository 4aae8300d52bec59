//! hale's Raft type configuration, on its own so that the files below the
//! control plane (`store.rs`, `network.rs`, `prevote.rs`) name it without
//! importing `raft/mod.rs`, which imports them.

use openraft::BasicNode;

use crate::lease::{LeaseRequest, LeaseResponse};

openraft::declare_raft_types!(
    /// hale's Raft type configuration.
    pub TypeConfig:
        D = LeaseRequest,
        R = LeaseResponse,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = super::runtime::Runtime,
);
