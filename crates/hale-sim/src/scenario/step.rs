//! One timed fault step of a scenario.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{invalid, Dur, ScenarioError};

hale_core::named_enum! {
    /// What a step does.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum StepKind {
        /// Crash the target nodes (all at once: one host going down; it answers nothing).
        Crash => "crash",
        /// Kill the targets' processes on live hosts: their ports answer
        /// "closed" (ICMP port unreachable, connection refused).
        Kill => "kill",
        /// Freeze the targets for `duration` (half-dead: alive but processing nothing).
        Freeze => "freeze",
        /// Stop-the-world stall of `duration` (a healthy node that must not be declared dead).
        Stall => "stall",
        /// Delay every packet the targets process by `delay` (for `duration`, if given).
        Slow => "slow",
        /// Restart crashed targets with fresh state (random ones: among the crashed).
        Restart => "restart",
        /// The targets leave gracefully.
        Leave => "leave",
        /// A wave of `count` new nodes joins.
        Join => "join",
        /// Global datagram loss becomes `value` (for `duration`, if given).
        Loss => "loss",
        /// The targets lose `value` of the datagrams they receive.
        IngressLoss => "ingress_loss",
        /// The targets lose `value` of the datagrams they send.
        EgressLoss => "egress_loss",
        /// The targets receive nothing (one-way isolation).
        BlockIngress => "block_ingress",
        /// The targets send nothing.
        BlockEgress => "block_egress",
        /// Every path to and from the targets fails at once (correlated path failure).
        CutOff => "cut_off",
        /// Split the cluster into `groups` (explicit ids) or `sides` random
        /// groups, or cut off one random group of `count` (or `share`) nodes
        /// together: they still reach each other, and nobody else.
        Partition => "partition",
        /// Remove every partition, block and per-node loss.
        Heal => "heal",
    }
}

impl StepKind {
    fn targets_nodes(self) -> bool {
        !matches!(
            self,
            StepKind::Join | StepKind::Loss | StepKind::Partition | StepKind::Heal
        )
    }
}

/// A timed step. Node steps name their targets with exactly one of `node`,
/// `nodes`, `count` (that many random nodes) or `share` (that fraction of
/// the nodes, at least one); random targets are drawn from the seed among
/// the nodes that are up and not already the target of another fault.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// When (from the start of the run; within the chaos phase).
    pub at: Dur,
    /// What.
    pub action: StepKind,
    /// One explicit target.
    pub node: Option<u32>,
    /// Explicit targets.
    pub nodes: Option<Vec<u32>>,
    /// That many random targets (or, for `join`, that many new nodes; for
    /// `partition`, the size of one random group cut off together).
    pub count: Option<u32>,
    /// That fraction of the cluster, picked at random (for `partition`: one
    /// random group of that share, cut off together).
    pub share: Option<f64>,
    /// How long the fault lasts (freeze, stall; optional for slow, loss,
    /// ingress/egress loss, blocks, cut-off and partition, which are undone after it).
    pub duration: Option<Dur>,
    /// Packet delay (slow).
    pub delay: Option<Dur>,
    /// A loss probability (loss, ingress_loss, egress_loss).
    pub value: Option<f64>,
    /// Repeat a freeze or stall: each target does it again about this often
    /// (first at a random offset within one period, then every 0.5x to 1.5x
    /// of it), until `until` or the end of the chaos phase.
    pub every: Option<Dur>,
    /// End of the repetition.
    pub until: Option<Dur>,
    /// Partition groups by node id (nodes not listed stay in a group of their own: group 0).
    pub groups: Option<Vec<Vec<u32>>>,
    /// Partition into this many random groups of equal size.
    pub sides: Option<u32>,
}

impl Step {
    /// Checks what this kind of step needs and allows. `key` is its path in
    /// the file, e.g. `step[3]`.
    pub fn validate(&self, key: &str, chaos_end: Duration) -> Result<(), ScenarioError> {
        let kind = self.action;
        let name = kind.as_str();
        let k = |field: &str| format!("{key}.{field}");
        let forbid = |field: &str, present: bool| {
            if present {
                Err(invalid(k(field), format!("does not apply to {name}")))
            } else {
                Ok(())
            }
        };
        if self.at.get() > chaos_end {
            return Err(invalid(
                k("at"),
                format!(
                    "{} is after the end of the chaos phase ({})",
                    self.at,
                    Dur(chaos_end)
                ),
            ));
        }
        let targets = [
            self.node.is_some(),
            self.nodes.is_some(),
            self.count.is_some(),
            self.share.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if kind.targets_nodes() {
            if targets != 1 {
                return Err(invalid(
                    k("node"),
                    format!("{name} needs exactly one of `node`, `nodes`, `count` or `share`"),
                ));
            }
        } else if kind == StepKind::Join {
            forbid("node", self.node.is_some())?;
            forbid("nodes", self.nodes.is_some())?;
            forbid("share", self.share.is_some())?;
        } else if kind == StepKind::Partition {
            // `count` or `share`: one random group, cut off together from the rest.
            forbid("node", self.node.is_some())?;
            forbid("nodes", self.nodes.is_some())?;
            if self.count.is_some() && self.share.is_some() {
                return Err(invalid(
                    k("count"),
                    "partition takes `count` or `share`, not both",
                ));
            }
        } else {
            forbid("node", self.node.is_some())?;
            forbid("nodes", self.nodes.is_some())?;
            forbid("count", self.count.is_some())?;
            forbid("share", self.share.is_some())?;
        }
        if let Some(s) = self.share {
            if !(s > 0.0 && s <= 1.0) {
                return Err(invalid(
                    k("share"),
                    format!("{s} is not a fraction in (0, 1]"),
                ));
            }
        }
        if self.count == Some(0) {
            return Err(invalid(k("count"), "must be at least 1"));
        }
        if matches!(&self.nodes, Some(v) if v.is_empty()) {
            return Err(invalid(k("nodes"), "must list at least one node"));
        }
        let needs_duration = matches!(kind, StepKind::Freeze | StepKind::Stall);
        let may_have_duration = needs_duration
            || matches!(
                kind,
                StepKind::Slow
                    | StepKind::Loss
                    | StepKind::IngressLoss
                    | StepKind::EgressLoss
                    | StepKind::BlockIngress
                    | StepKind::BlockEgress
                    | StepKind::CutOff
                    | StepKind::Partition
            );
        match self.duration {
            None if needs_duration => {
                return Err(invalid(k("duration"), format!("required for {name}")))
            }
            Some(_) if !may_have_duration => forbid("duration", true)?,
            Some(d) if d.get().is_zero() => {
                return Err(invalid(k("duration"), "must be greater than zero"))
            }
            _ => {}
        }
        match (kind, self.delay) {
            (StepKind::Slow, None) => return Err(invalid(k("delay"), "required for slow")),
            (StepKind::Slow, Some(_)) => {}
            (_, d) => forbid("delay", d.is_some())?,
        }
        let lossy = matches!(
            kind,
            StepKind::Loss | StepKind::IngressLoss | StepKind::EgressLoss
        );
        match self.value {
            None if lossy => return Err(invalid(k("value"), format!("required for {name}"))),
            Some(v) if lossy && !(0.0..=1.0).contains(&v) => {
                return Err(invalid(
                    k("value"),
                    format!("{v} is not a probability in [0, 1]"),
                ))
            }
            Some(_) if !lossy => forbid("value", true)?,
            _ => {}
        }
        let repeats = matches!(kind, StepKind::Freeze | StepKind::Stall);
        if !repeats {
            forbid("every", self.every.is_some())?;
        }
        if self.every.is_none() {
            forbid("until", self.until.is_some())?;
        }
        if let (Some(e), Some(d)) = (self.every, self.duration) {
            if e.get() <= d.get() * 2 {
                return Err(invalid(
                    k("every"),
                    format!("{e} must be more than twice the duration ({d})"),
                ));
            }
        }
        if let Some(u) = self.until {
            if u.get() <= self.at.get() {
                return Err(invalid(k("until"), "must be after `at`"));
            }
        }
        if kind == StepKind::Partition {
            let random_group = self.count.is_some() || self.share.is_some();
            match (&self.groups, self.sides) {
                (Some(g), None) if !g.is_empty() && !random_group => {}
                (None, Some(s)) if s >= 2 && !random_group => {}
                (None, Some(s)) if s < 2 && !random_group => {
                    return Err(invalid(k("sides"), "must be at least 2"))
                }
                (None, None) if random_group => {}
                _ => {
                    return Err(invalid(
                        k("groups"),
                        "partition needs exactly one of `groups` (non-empty), `sides`, \
                         or `count`/`share` (one random group cut off together)",
                    ))
                }
            }
        } else {
            forbid("groups", self.groups.is_some())?;
            forbid("sides", self.sides.is_some())?;
        }
        Ok(())
    }
}
