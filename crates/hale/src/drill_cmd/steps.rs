//! The steps of each drill.

use hale_agent::view::BreakerState;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hale_agent::view::Fault;
use hale_agent::{AgentEvent, MemberView};
use hale_control::RoleState;

use super::{check, names_or_none, none_check, preflight, secs, Drill, DrillKind, TICK};
use crate::client_cmd::until;
use crate::cluster::{self, NodeState};
use crate::drill_report::Outcome;

impl Drill {
    /// Runs the whole drill: preflight, fault windows, restore, verdicts.
    pub(super) async fn run(&mut self, members: Vec<MemberView>) -> anyhow::Result<()> {
        // Past every agent's history: only what happens from now on goes
        // on the timeline.
        self.poll_events().await;
        self.report().timeline.clear();
        let step = self.step_start("preflight: the cluster is healthy");
        let nodes = self.agents.survey().await;
        for c in preflight(&self.args.kind, &members, &nodes) {
            self.add(step, c);
        }
        if let DrillKind::NodeFreeze { node } = &self.args.kind {
            let holds = held_by(&nodes, node);
            if !holds.is_empty() {
                self.check(
                    step,
                    "the freeze outlasts the promote target",
                    self.args.duration >= self.args.promote_target,
                    format!(
                        "{node} holds {}: freezing it {} against a target of {}",
                        names_or_none(holds.keys()),
                        secs(self.args.duration),
                        secs(self.args.promote_target)
                    ),
                );
            }
        }
        self.step_end(step);
        let refused = !self.report().steps[step].passed();
        if refused {
            self.report().outcome = Outcome::Refused;
            return Ok(());
        }
        match self.args.kind.clone() {
            DrillKind::SinkBlackhole => self.sink_blackhole(&nodes).await,
            DrillKind::NodeFreeze { node } => self.node_freeze(&node, &nodes).await,
            DrillKind::Handover { role } => self.handover(&role, &nodes, &members).await,
            DrillKind::Quiet => self.quiet().await,
        }
        // Agents publish some changes (breakers) on their next sample:
        // give them one, so the timeline ends with the cluster as it is.
        tokio::time::sleep(TICK).await;
        self.poll_events().await;
        Ok(())
    }

    fn fault_step(&self, what: String) -> usize {
        self.step_start(&format!("{what} for {}", secs(self.args.duration)))
    }

    async fn sink_blackhole(&mut self, nodes: &[NodeState]) {
        let Some(relay_node) = nodes
            .iter()
            .filter(|n| n.relay.is_some())
            .min_by_key(|n| n.name != self.agents.local)
        else {
            return;
        };
        let node = relay_node.name.clone();
        let project = relay_node
            .relay
            .as_ref()
            .and_then(|r| r.upstreams.first())
            .and_then(|u| {
                u.target
                    .rsplit('/')
                    .find(|s| !s.is_empty())
                    .map(str::to_owned)
            })
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            .unwrap_or_else(|| "1".to_owned());
        let path = format!("{}/api/{project}/store/", self.args.relay_prefix);
        let step = self.fault_step(format!("the relay on {node} sends to a black hole"));
        match self.set_fault(&node, Fault::Blackhole).await {
            Ok(()) => {
                let (seen, events) = self
                    .watch(
                        self.args.duration,
                        None,
                        Some((&node, &path)),
                        &BTreeMap::new(),
                    )
                    .await;
                let n = seen.probes.len();
                let ok = seen.probes.iter().filter(|p| p.1 == 200).count();
                let mut lat: Vec<Duration> = seen.probes.iter().map(|p| p.0).collect();
                lat.sort();
                let max = lat.last().copied().unwrap_or_default();
                let p50 = lat.get(n / 2).copied().unwrap_or_default();
                let statuses: Vec<String> = seen
                    .probes
                    .iter()
                    .filter(|p| p.1 != 200)
                    .map(|p| p.1.to_string())
                    .collect();
                self.check(
                    step,
                    "the relay kept accepting events",
                    n > 0 && ok == n,
                    if ok == n {
                        format!("{ok} of {n} test events answered 200")
                    } else {
                        format!(
                            "{ok} of {n} test events answered 200; others: {} (0: no answer)",
                            statuses.join(", ")
                        )
                    },
                );
                self.check(
                    step,
                    format!(
                        "the relay answered within {}ms",
                        self.args.accept_target.as_millis()
                    ),
                    n > 0 && max <= self.args.accept_target,
                    format!(
                        "p50 {:.1}ms, max {:.1}ms over {n} events",
                        p50.as_secs_f64() * 1000.0,
                        if max == Duration::MAX {
                            f64::INFINITY
                        } else {
                            max.as_secs_f64() * 1000.0
                        }
                    ),
                );
                self.check(
                    step,
                    "the relay's breaker opened on the dead upstream",
                    seen.breaker_open_at.is_some(),
                    match seen.breaker_open_at {
                        Some(t) => format!("open {} after the black hole", secs(t)),
                        None => {
                            "stayed closed: the relay kept waiting on a dead upstream".to_owned()
                        }
                    },
                );
                self.window_checks(step, &seen, &events, None);
                self.add(step, slowdown(nodes, &seen));
            }
            Err(e) => self.check(step, "the fault was set", false, format!("{e:#}")),
        }
        self.step_end(step);
        let step = self.step_start("restore: the relay sends upstream again");
        self.restore_and_verify(step).await;
        // Test events drive the half-open probes that close the breaker.
        let start = Instant::now();
        let mut last = String::from("no answer");
        let key = self.args.sentry_key.as_deref();
        let closed = match self.agents.client(&node) {
            Ok(c) => until(TICK, start + self.args.recover_timeout, async || {
                let _ = c.relay_probe(&path, key).await;
                let v = c.relay().await.ok().flatten()?;
                // The primary delivers again; a standby left half-open
                // (no traffic reaches it while the primary works) is fine.
                last = v
                    .upstreams
                    .iter()
                    .map(|u| format!("{} {}", u.role, u.breaker))
                    .collect::<Vec<_>>()
                    .join(", ");
                (v.upstreams
                    .first()
                    .is_some_and(|u| u.breaker == BreakerState::Closed)
                    && v.upstreams.iter().all(|u| u.breaker != BreakerState::Open))
                .then_some(())
            })
            .await
            .is_some(),
            Err(_) => false,
        };
        self.poll_events().await;
        self.check(
            step,
            "the relay delivers upstream again (primary breaker closed, none open)",
            closed,
            format!("{last} after {}", secs(start.elapsed())),
        );
        self.step_end(step);
    }

    async fn node_freeze(&mut self, node: &str, nodes: &[NodeState]) {
        let held = held_by(nodes, node);
        for role in held.keys() {
            self.undo().homes.insert(role.clone(), node.to_owned());
        }
        let step = self.fault_step(format!("{node} stops answering the cluster"));
        let started = hale_agent::view::unix_ms();
        match self.set_fault(node, Fault::Freeze).await {
            Ok(()) => {
                let (seen, events) = self
                    .watch(self.args.duration, Some(node), None, &held)
                    .await;
                let target = self.args.promote_target;
                for role in held.keys() {
                    let moved = seen.new_holder.get(role).cloned();
                    let (took, detail) = match &moved {
                        Some((t, h, e)) => (
                            *t <= target,
                            format!("{h} holds it at epoch {e}, {} after the freeze", secs(*t)),
                        ),
                        None => (
                            false,
                            format!(
                                "no standby held it during the {} freeze",
                                secs(self.args.duration)
                            ),
                        ),
                    };
                    let name = format!("a standby took {role} within {}", secs(target));
                    self.check(step, name, took, detail);
                    if let Some((_, h, e)) = moved {
                        self.verify_serves(step, role, &h, e).await;
                    }
                }
                if held.is_empty() {
                    self.check(
                        step,
                        format!("{node} held no role"),
                        true,
                        "no failover expected",
                    );
                }
                let first = |kind: &str, is: fn(&AgentEvent) -> bool| {
                    events
                        .iter()
                        .filter(|e| e.member.as_deref() == Some(node) && e.observer != node)
                        .find(|e| is(&e.event))
                        .map(|e| {
                            format!(
                                "{kind} by {} {:.2}s after the freeze",
                                e.observer,
                                e.unix_ms.saturating_sub(started) as f64 / 1000.0
                            )
                        })
                        .unwrap_or_else(|| format!("not {kind} during the freeze"))
                };
                self.check(
                    step,
                    format!("the cluster noticed {node} (informational)"),
                    true,
                    format!(
                        "{}; {}",
                        first("suspected", |e| matches!(e, AgentEvent::Suspected { .. })),
                        first("dead", |e| matches!(e, AgentEvent::Dead(_)))
                    ),
                );
                self.window_checks(step, &seen, &events, Some(node));
            }
            Err(e) => self.check(step, "the fault was set", false, format!("{e:#}")),
        }
        self.step_end(step);
        let step = self.step_start(&format!("restore: {node} answers again"));
        self.restore_and_verify(step).await;
        let state = self.agents.survey().await;
        let leases = cluster::leases(&state).unwrap_or_default();
        let stale: Vec<String> = state
            .iter()
            .filter(|n| n.name == node)
            .flat_map(NodeState::holding)
            .filter(|r| {
                leases
                    .get(r)
                    .is_none_or(|(h, _)| h.as_deref() != Some(node))
            })
            .collect();
        self.add(
            step,
            none_check(
                format!("{node} does not act as holder of a role it lost"),
                &stale,
                "no stale holder",
                "still acting as holder of ",
                ", ",
            ),
        );
        self.step_end(step);
        for role in held.keys() {
            let step = self.step_start(&format!("hand {role} back to {node}"));
            self.hand_home(step, role, node).await;
            self.step_end(step);
        }
    }

    /// Hands `role` back to `home` unless it already holds it.
    pub(super) async fn hand_home(&mut self, step: usize, role: &str, home: &str) {
        let deadline = Instant::now() + self.args.recover_timeout;
        let current = until(TICK, deadline, async || {
            let l = self.leases(None).await.unwrap_or_default();
            let members = match self.agents.client(&self.agents.local) {
                Ok(c) => c.members().await.unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            // Whether `home` is alive and an eligible candidate for `role`.
            let candidates = cluster::candidates(&members);
            let eligible = candidates
                .get(role)
                .is_some_and(|c| c.iter().any(|c| c.0 == home && c.2));
            match l.get(role) {
                Some((Some(h), e)) if h == home || eligible => Some((h.clone(), *e)),
                _ => None,
            }
        })
        .await;
        if let Some((h, e)) = &current {
            if h == home {
                let c = check(format!("{home} holds {role}"), true, format!("epoch {e}"));
                self.add(step, c);
                self.undo().homes.remove(role);
                return;
            }
        }
        let Some((from, epoch)) = current else {
            self.check(
                step,
                format!("{role} can be handed back to {home}"),
                false,
                format!(
                    "no holder, or {home} not eligible, within {}",
                    secs(self.args.recover_timeout)
                ),
            );
            return;
        };
        if self
            .handover_to(step, role, &from, home, epoch)
            .await
            .is_some()
        {
            self.undo().homes.remove(role);
        }
    }

    /// Asks `from` to hand `role` to `to`, then verifies `to` took it within
    /// the promote target and really serves it. Returns the new epoch.
    async fn handover_to(
        &mut self,
        step: usize,
        role: &str,
        from: &str,
        to: &str,
        epoch: u64,
    ) -> Option<u64> {
        let start = Instant::now();
        self.mark(
            "handover",
            Some(to),
            serde_json::json!({ "role": role, "from": from }),
        );
        let handed = async {
            self.agents.client(from)?.handover(role, Some(to)).await?;
            anyhow::Ok(())
        };
        if let Err(e) = handed.await {
            self.check(
                step,
                format!("{from} handed {role} over"),
                false,
                format!("{e:#}"),
            );
            return None;
        }
        let target = self.args.promote_target;
        let limit = target.max(self.args.recover_timeout);
        let got = until(TICK, start + limit, async || {
            let l = self.leases(None).await?;
            let (h, e) = l.get(role)?;
            (h.as_deref() == Some(to) && *e > epoch).then(|| (start.elapsed(), *e))
        })
        .await;
        let Some((t, new_epoch)) = got else {
            self.check(
                step,
                format!("{to} took {role} within {}", secs(target)),
                false,
                format!("not its holder after {}", secs(limit)),
            );
            return None;
        };
        self.check(
            step,
            format!("{to} took {role} within {}", secs(target)),
            t <= target,
            format!("epoch {epoch} -> {new_epoch} after {}", secs(t)),
        );
        let ok = self.verify_serves(step, role, to, new_epoch).await;
        let events = self.poll_events().await;
        self.add(step, super::no_deaths(&events, None));
        ok.then_some(new_epoch)
    }

    /// Checks that `to` really serves `role` at `new_epoch`: its own view
    /// says holder once the promote hook has run, and its essential
    /// services pass.
    async fn verify_serves(&mut self, step: usize, role: &str, to: &str, new_epoch: u64) -> bool {
        let target = self.args.promote_target;
        let deadline = Instant::now() + target.max(Duration::from_secs(3));
        let mut last = String::from("no answer");
        let ok = match self.agents.client(to) {
            Ok(c) => until(TICK, deadline, async || {
                let (Ok(r), Ok(s)) = (c.roles().await, c.services().await) else {
                    return None;
                };
                let local = r
                    .local
                    .into_iter()
                    .find(|l| l.role == role)
                    .unwrap_or_default();
                let failing: Vec<String> = s
                    .iter()
                    .filter(|s| s.essential && !s.healthy)
                    .map(|s| s.name.clone())
                    .collect();
                last = format!(
                    "state {}, epoch {}, last change {}, failing essential: {}",
                    local.state.as_str(),
                    local.epoch.map_or("-".to_owned(), |e| e.to_string()),
                    local.last_change.as_deref().unwrap_or("-"),
                    names_or_none(failing.iter())
                );
                (local.state == RoleState::Holder
                    && local.epoch == Some(new_epoch)
                    && local.last_change.as_deref() == Some("promoted")
                    && failing.is_empty())
                .then_some(())
            })
            .await
            .is_some(),
            Err(_) => false,
        };
        self.check(step, format!("{to} really serves {role}"), ok, last);
        ok
    }

    async fn handover(&mut self, role: &str, nodes: &[NodeState], members: &[MemberView]) {
        let Some((Some(home), mut epoch)) = cluster::leases(nodes)
            .unwrap_or_default()
            .get(role)
            .cloned()
        else {
            return;
        };
        self.undo().homes.insert(role.to_owned(), home.clone());
        let standbys: Vec<String> = cluster::candidates(members)
            .get(role)
            .into_iter()
            .flatten()
            .filter(|c| c.2 && c.0 != home)
            .map(|c| c.0.clone())
            .collect();
        let mut current = home.clone();
        for s in standbys {
            let step = self.step_start(&format!("hand {role} from {current} to {s}"));
            let handed = self.handover_to(step, role, &current, &s, epoch).await;
            self.step_end(step);
            let Some(e) = handed else { break };
            epoch = e;
            current = s;
        }
        let step = self.step_start(&format!("hand {role} back to {home}"));
        self.hand_home(step, role, &home).await;
        let nodes = self.agents.survey().await;
        let problems = super::whole(&nodes, self.agents.addrs.len());
        self.add(
            step,
            none_check(
                "the cluster is whole",
                &problems,
                "every member alive everywhere",
                "",
                "; ",
            ),
        );
        self.step_end(step);
    }

    async fn traffic_ignored(&self) -> u64 {
        let mut total = 0;
        for (_, c) in self.agents.clients_except(None) {
            if let Ok(d) = c.drill().await {
                total += d.traffic_ignored;
            }
        }
        total
    }

    async fn quiet(&mut self) {
        let step = self.fault_step("every agent ignores application traffic".to_owned());
        let before = self.traffic_ignored().await;
        let mut set = Ok(());
        for n in self.agents.addrs.keys() {
            set = self.set_fault(n, Fault::Quiet).await;
            if set.is_err() {
                break;
            }
        }
        match set {
            Ok(()) => {
                let (seen, events) = self
                    .watch(self.args.duration, None, None, &BTreeMap::new())
                    .await;
                self.window_checks(step, &seen, &events, None);
                let ignored = self.traffic_ignored().await.saturating_sub(before);
                self.check(
                    step,
                    "application traffic was ignored (informational)",
                    true,
                    format!("{ignored} traffic signals ignored; probes alone kept members alive"),
                );
            }
            Err(e) => self.check(
                step,
                "the fault was set on every agent",
                false,
                format!("{e:#}"),
            ),
        }
        self.step_end(step);
        let step = self.step_start("restore: application traffic counts again");
        self.restore_and_verify(step).await;
        self.step_end(step);
    }
}

/// The roles `node` holds in the lease table: role -> (`node`, epoch).
fn held_by(nodes: &[NodeState], node: &str) -> BTreeMap<String, (String, u64)> {
    let leases = cluster::leases(nodes).unwrap_or_default().into_iter();
    let held = leases.filter(|(_, (h, _))| h.as_deref() == Some(node));
    held.map(|(r, (_, e))| (r, (node.to_owned(), e))).collect()
}

/// Whether any essential check got slower during the window than before it:
/// slowest run during the drill against twice the slowest recent run before
/// it, plus 200 ms of slack for a busy machine.
fn slowdown(before: &[NodeState], seen: &super::Seen) -> super::Check {
    let mut slowed = Vec::new();
    let mut worst = 0;
    for ((node, service), during) in &seen.check_ms {
        let base = before
            .iter()
            .filter(|n| &n.name == node)
            .flat_map(|n| n.services.iter().flatten())
            .filter(|s| &s.name == service)
            .flat_map(|s| s.checks.iter().flat_map(|c| c.recent.iter()))
            .map(|r| r.took_ms)
            .max()
            .unwrap_or(0);
        worst = worst.max(*during);
        if *during > base * 2 + 200 {
            slowed.push(format!(
                "{service} on {node}: {during}ms (was at most {base}ms)"
            ));
        }
    }
    none_check(
        "no essential service slowed",
        &slowed,
        format!("slowest essential check during the drill: {worst}ms"),
        "",
        ", ",
    )
}
