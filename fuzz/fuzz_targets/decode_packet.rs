//! Any bytes decode to a packet or an error, on both channels; a packet that
//! decodes re-encodes to the same bytes.
#![no_main]

use hale_core::wire::{cluster_id, Packet};
use hale_core::{Channel, NodeId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for channel in [Channel::Datagram, Channel::Stream] {
        if let Ok(p) = Packet::<NodeId>::decode(data, channel, cluster_id("hale")) {
            assert_eq!(p.encode(), data, "decode then encode is the identity");
        }
    }
});
