//! Any bytes decode to a packet or an error, on both channels; a packet that
//! decodes re-encodes to the same bytes. The prefix reader of packets in
//! versions this build does not speak (`peek`) is total too, and agrees
//! with a full decode on the version and sender.
#![no_main]

use hale_core::wire::{cluster_id, peek, Packet};
use hale_core::{Channel, NodeId};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cluster = cluster_id("hale");
    let peeked = peek::<NodeId>(data, cluster);
    for channel in [Channel::Datagram, Channel::Stream] {
        if let Ok(p) = Packet::<NodeId>::decode(data, channel, cluster) {
            assert_eq!(p.encode(), data, "decode then encode is the identity");
            let peeked = peeked.as_ref().expect("a decoded packet has a prefix");
            assert_eq!(peeked.version, p.header.version);
            assert_eq!(peeked.sender.as_ref(), Some(&p.header.sender));
            assert_eq!(peeked.speaks, p.header.speaks);
        }
    }
});
