//! # hale-core
//!
//! A sans-IO SWIM + Lifeguard failure detector and membership protocol.
//!
//! The [`Node`] state machine never reads a clock, opens a socket or asks the
//! operating system for randomness: inputs are `handle_*(now, ..)` calls,
//! outputs are drained with [`Node::poll_transmit`] and [`Node::poll_event`],
//! and [`Node::poll_timeout`] says when to call [`Node::handle_timeout`].
//! This is what lets `hale-sim` run thousands of nodes on virtual time,
//! exactly and reproducibly, and `hale-agent` run the very same code over
//! UDP and TCP.
//!
//! What it guarantees, and how:
//!
//! * **No eviction of a healthy member at any traffic level.** Probing is a
//!   randomized round-robin walk (every live member once per round, by every
//!   node), with ring monitors so that no member is quiet for more than
//!   [`Config::monitor_interval`] without a ping from a neighbour. Traffic
//!   (`note_traffic`, any packet) only *spares* a probe; silence never
//!   accuses by itself.
//! * **Deaths are corroborated.** A verdict needs [`Config::corroboration`]
//!   independent healthy accusers; accusers with poor local health, or that
//!   suspect a large share of the cluster at once, are discounted. A node
//!   that can send but not receive cannot get anyone declared dead.
//! * **Refutation is fast.** Suspicions travel with probes to the suspect
//!   (buddy system) and refutations go first in every packet.
//! * **Every datagram is at most [`wire::MAX_DATAGRAM`] bytes**, and decoding
//!   is total.

#![forbid(unsafe_code)]

/// Declares a field-less enum whose variants each have one fixed name (on
/// the wire, in metrics and in text), and gives it `ALL` (the variants in
/// order), `as_str`, `parse` and a `Display` that writes the name (padded
/// to the width asked for, as `{:<8}`). Defined before the modules, which
/// use it by name; other crates as `hale_core::named_enum!`.
#[doc(hidden)]
#[macro_export]
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident $(= $disc:literal)? => $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant $(= $disc)?, )+
        }

        impl $name {
            /// Every variant, in a fixed order.
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            /// Its name on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The variant with this name, if any.
            pub fn parse(s: &str) -> Option<$name> {
                $name::ALL.into_iter().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

mod admission;
mod broadcast;
pub mod config;
mod digest;
mod direct;
pub mod event;
mod freshness;
mod gossip;
pub mod identity;
mod isolation;
mod local;
pub mod member;
mod monitor;
mod node;
mod probe;
mod ring;
mod shared;
mod state;
pub mod stats;
mod sync;
mod table;
mod targeted;
pub mod time;
pub mod versions;
mod walk;
pub mod wire;

pub use config::{Config, ConfigError, Profile, Tuning};
pub use direct::{Outgoing, Transmit};
pub use event::{DeathEvidence, Event, ProbeVisit};
pub use identity::{Identity, NodeId, NodeIdError};
pub use member::{Member, MemberState};
pub use node::{LeaveError, MetadataError, Node, ReceiveError};
pub use stats::{DropReason, Stats};
pub use sync::SnapshotSums;
pub use time::Time;
pub use wire::{Channel, DecodeError, MemberRecord, Versions};
