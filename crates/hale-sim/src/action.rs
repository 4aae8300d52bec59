//! What the simulator can do to the world: node statuses and scheduled actions.

use std::time::Duration;

use hale_core::Time;

/// What a node is doing, as the simulator knows it (the ground truth).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Running.
    Up,
    /// Crashed: gone, silent.
    Crashed,
    /// Frozen until the given time: half-dead, processes nothing (queued input).
    Frozen(Time),
    /// A short stop-the-world stall until the given time: still a healthy
    /// node that must not be declared dead.
    Stalled(Time),
    /// Left gracefully.
    Left,
}

/// A scheduled change to the world.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Crash a node's host: it answers nothing.
    Crash(u32),
    /// Kill a node's process on a live host: its port answers "closed"
    /// (ICMP port unreachable, connection refused) until it restarts.
    Kill(u32),
    /// Freeze a node for a duration (half-dead), then resume it.
    Freeze(u32, Duration),
    /// Stall a node for a duration (stop-the-world pause of a healthy node).
    Stall(u32, Duration),
    /// Delay every packet a node processes by this much (0 to undo).
    Slow(u32, Duration),
    /// Restart a crashed node with fresh state; it rejoins through seeds.
    Restart(u32),
    /// A node leaves gracefully.
    Leave(u32),
    /// A new node joins through random live seeds.
    Join(u32),
    /// Global datagram loss.
    Loss(f64),
    /// Extra ingress loss of one node (flaky node).
    IngressLoss(u32, f64),
    /// Extra egress loss of one node.
    EgressLoss(u32, f64),
    /// Node receives nothing (true) or everything again (false).
    BlockIngress(u32, bool),
    /// Node sends nothing (true) or everything again (false).
    BlockEgress(u32, bool),
    /// Every path to and from the node fails at once (true), or heals (false).
    CutOff(u32, bool),
    /// Split the nodes into groups (nodes not listed stay in group 0).
    Partition(Vec<Vec<u32>>),
    /// Remove every partition, block and extra loss.
    Heal,
    /// Application traffic rate per node (messages per second).
    Traffic(f64),
}
