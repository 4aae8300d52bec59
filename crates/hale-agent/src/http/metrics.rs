//! `/metrics` in the Prometheus text exposition format.

use std::fmt::{Display, Write};

use hale_core::DropReason;

use crate::membership::faults::Faults;
use crate::membership::runtime::{Counter, Shared, Snapshot};
use crate::roles::services::Services;
use crate::roles::RoleViews;
use crate::view::Fault;

/// Writes one metric family: its HELP and TYPE lines, then one sample per
/// `(labels, value)`.
pub(crate) fn family<V: Display>(
    out: &mut String,
    (name, kind, help): (&str, &str, &str),
    samples: impl IntoIterator<Item = (String, V)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, v) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {v}");
    }
}

/// `(hale_<field>_total, help, value)` for each named field of the stats.
macro_rules! counters {
    ($st:expr; $($field:ident: $help:literal,)*) => {
        [$((concat!("hale_", stringify!($field), "_total"), $help, $st.$field)),*]
    };
}

/// Renders every metric.
pub fn render(s: &Snapshot, shared: &Shared) -> String {
    let mut out = String::with_capacity(4096);
    let node = shared.id().name();
    let me = format!("node=\"{node}\"");
    let st = &s.stats;
    let counters = counters!(st;
        probes: "Direct probes started.",
        probes_skipped_fresh: "Probe visits skipped because the member was heard from recently.",
        acks: "Probes answered.",
        fallback_acks: "Probes answered only over the TCP fallback.",
        acks_ignored: "Acks with the number of a probe in flight from a member it did not ask (a replay).",
        nacks: "Nacks received from indirect probers.",
        probe_failures: "Probes that failed.",
        suspicions: "Suspicions started.",
        discounted_accusations: "Accusations discounted (unhealthy or over-eager accuser).",
        refutations: "Times this node refuted a suspicion or death of itself.",
        targeted_sent: "Datagrams carrying a targeted accusation or refutation.",
        deaths_declared: "Members declared dead on this node's verdict.",
        deaths_accepted: "Death verdicts of others accepted.",
        datagrams_in: "Datagrams received.",
        datagrams_out: "Datagrams sent.",
        datagram_bytes_in: "Datagram payload bytes received (before decryption).",
        datagram_bytes_out: "Datagram payload bytes sent (before encryption).",
        streams_in: "Stream frames received.",
        streams_out: "Stream frames sent.",
        stream_bytes_in: "Stream bytes received.",
        stream_bytes_out: "Stream bytes sent.",
        pauses: "Local pauses detected (stop-the-world, SIGSTOP).",
        generations_raised: "Times a peer's notice raised this agent's generation (restarted with its wall clock behind an earlier run's).",
    );
    for (name, help, v) in counters {
        family(&mut out, (name, "counter", help), [(me.clone(), v)]);
    }
    let c = &shared.counters();
    let labelled = |label: &str, rows: &[(&str, Counter)]| -> Vec<(String, u64)> {
        rows.iter()
            .map(|(l, v)| (format!("{me},{label}=\"{l}\""), c.get(*v)))
            .collect()
    };
    let dropped = DropReason::ALL
        .iter()
        .map(|r| (format!("{me},reason=\"{}\"", r.as_str()), st.dropped(*r)))
        .chain(labelled(
            "reason",
            &[
                ("auth_failed", Counter::AuthFailed),
                ("seal_malformed", Counter::SealMalformed),
                ("oversize_datagram", Counter::Oversize),
            ],
        ));
    let name = "hale_dropped_packets_total";
    family(
        &mut out,
        (name, "counter", "Packets dropped, by reason."),
        dropped,
    );
    let stream_errors = labelled(
        "kind",
        &[
            ("error", Counter::StreamErrors),
            ("out_dropped", Counter::StreamsOutDropped),
            ("in_refused", Counter::StreamsInRefused),
            ("in_refused_per_source", Counter::StreamsInPerSource),
            ("in_refused_budget", Counter::StreamsInBudget),
            ("in_refused_oversize", Counter::StreamsInOversize),
        ],
    );
    let help = "Stream connections that failed or were refused.";
    family(
        &mut out,
        ("hale_stream_errors_total", "counter", help),
        stream_errors,
    );
    let gauge = |out: &mut String, name, help, v: u64| {
        family(out, (name, "gauge", help), [(me.clone(), v)]);
    };
    let help = "Lifeguard local health score (0 is healthy).";
    gauge(&mut out, "hale_local_health", help, s.local_health.into());
    let help = "This node's incarnation.";
    gauge(&mut out, "hale_incarnation", help, s.incarnation.into());
    let by_state = crate::view::MemberState::ALL.map(|state| {
        let n = s.members.iter().filter(|m| m.state == state).count();
        (format!("{me},state=\"{state}\""), n)
    });
    let help = "Members by state, as this node sees them (itself included).";
    family(&mut out, ("hale_members", "gauge", help), by_state);
    let w = &s.wire;
    let by_version = w
        .received
        .iter()
        .map(|(v, n)| (format!("{me},direction=\"in\",version=\"{v}\""), *n))
        .chain(
            w.sent
                .iter()
                .map(|(v, n)| (format!("{me},direction=\"out\",version=\"{v}\""), *n)),
        );
    let help = "Membership packets by wire version (in: every packet that reached the core, dropped ones included).";
    family(
        &mut out,
        ("hale_wire_packets_total", "counter", help),
        by_version,
    );
    let help =
        "The wire version this node writes (negotiated: the highest every live member speaks).";
    gauge(&mut out, "hale_wire_version", help, w.writes.into());
    let help = "News waiting to be gossiped.";
    let pending = s.pending_broadcasts as u64;
    gauge(&mut out, "hale_pending_broadcasts", help, pending);
    out
}

/// Appends to `out` the roles (holder, epoch, lease left, promotions,
/// demotions, renewals) and service checks (runs, failures, health, readiness) of this node.
pub fn render_roles(out: &mut String, node: &str, roles: &RoleViews, services: &Services) {
    let roles = roles.snapshot();
    if !roles.is_empty() {
        type Get = fn(&crate::view::RoleView) -> String;
        let series: [(&str, &str, &str, Get); 7] = [
            (
                "hale_role_holder",
                "gauge",
                "Whether this node holds the role (1) or not (0).",
                |r| u8::from(r.state == hale_control::RoleState::Holder).to_string(),
            ),
            (
                "hale_role_epoch",
                "gauge",
                "Fencing epoch held (0 when not holder).",
                |r| r.epoch.unwrap_or(0).to_string(),
            ),
            (
                "hale_role_lease_left_seconds",
                "gauge",
                "Lease time left on this node's clock (0 when not holder).",
                |r| format!("{:.3}", r.lease_left_ms.unwrap_or(0) as f64 / 1000.0),
            ),
            (
                "hale_role_promotions_total",
                "counter",
                "Times this node became holder (failovers and handovers to it).",
                |r| r.promotions.to_string(),
            ),
            (
                "hale_role_demotions_total",
                "counter",
                "Times this node stopped being holder.",
                |r| r.demotions.to_string(),
            ),
            (
                "hale_role_demote_failures_total",
                "counter",
                "Demote hook runs that failed (retried; the role is not released meanwhile).",
                |r| r.demote_failures.to_string(),
            ),
            (
                "hale_role_renewals_total",
                "counter",
                "Lease renewals committed.",
                |r| r.renewals.to_string(),
            ),
        ];
        for (name, kind, help, get) in series {
            let samples = roles
                .values()
                .map(|r| (format!("node=\"{node}\",role=\"{}\"", r.role), get(r)));
            family(out, (name, kind, help), samples);
        }
    }
    let services = crate::roles::services::views(services);
    if !services.is_empty() {
        let healthy = services.iter().map(|s| {
            let l = format!(
                "node=\"{node}\",service=\"{}\",essential=\"{}\"",
                s.name, s.essential
            );
            (l, u8::from(s.healthy))
        });
        let help = "Whether every liveness check passed last time.";
        family(out, ("hale_service_healthy", "gauge", help), healthy);
        let checks = || {
            services.iter().flat_map(|s| {
                s.checks.iter().map(move |c| {
                    let l = format!(
                        "node=\"{node}\",service=\"{}\",check=\"{}\"",
                        s.name,
                        c.name.replace('"', "'")
                    );
                    (l, c)
                })
            })
        };
        let runs = checks().map(|(l, c)| (l, c.runs));
        family(
            out,
            ("hale_check_runs_total", "counter", "Check runs."),
            runs,
        );
        let failures = checks().map(|(l, c)| (l, c.failures));
        let help = "Failed check runs (timeouts included).";
        family(
            out,
            ("hale_check_failures_total", "counter", help),
            failures,
        );
    }
}

/// Appends to `out` the agent's hook slots: running, queued, the bound.
pub fn render_hooks(out: &mut String, node: &str, h: crate::roles::slots::SlotCounts) {
    let me = format!("node=\"{node}\"");
    for (name, help, v) in [
        (
            "hale_hooks_running",
            "Hooks running now (holding a slot).",
            h.running,
        ),
        (
            "hale_hooks_queued",
            "Hooks waiting for a slot (demotes start first).",
            h.queued,
        ),
        (
            "hale_hooks_limit",
            "How many hooks run at once ([agent] hooks_at_once).",
            h.limit,
        ),
    ] {
        family(out, (name, "gauge", help), [(me.clone(), v)]);
    }
}

/// Appends to `out` the control-plane server this agent runs: its Raft state, log indices,
/// voters and storage health.
pub fn render_control(out: &mut String, node: &str, c: &hale_control::raft::ControlStatus) {
    let l = format!("node=\"{node}\",server=\"{}\"", c.id);
    let idx = |i: Option<u64>| i.unwrap_or(0);
    let series: [(&str, &str, u64); 9] = [
        (
            "is_leader",
            "Whether this server is the control-plane leader (1) or not (0).",
            u64::from(c.state == hale_control::raft::ControlState::Leader),
        ),
        (
            "leader",
            "The leader's server id as this server knows it (0: none known).",
            c.leader.unwrap_or(0),
        ),
        ("term", "The Raft term.", c.term),
        (
            "last_log_index",
            "The last index in this server's log.",
            idx(c.last_log_index),
        ),
        (
            "applied_index",
            "The last index applied to this server's lease table.",
            idx(c.applied_index),
        ),
        (
            "snapshot_index",
            "The last index this server's snapshot covers.",
            idx(c.snapshot_index),
        ),
        (
            "voters",
            "Voters in the membership this server knows.",
            c.voters.len() as u64,
        ),
        (
            "storage_failed",
            "Whether this server's storage failed and its Raft stopped (1) or not (0).",
            u64::from(c.storage_error.is_some()),
        ),
        (
            "churn_breaker_open",
            "On the leader: whether the churn breaker is open (1: the control plane was unstable lately, and run-out roles go back to their living holders).",
            u64::from(c.churn_breaker),
        ),
    ];
    for (name, help, v) in series {
        let name = format!("hale_control_{name}");
        family(out, (&name, "gauge", help), [(l.clone(), v)]);
    }
}

/// Appends to `out` the clocks that disagree with this agent's beyond the control plane's
/// window: the offset it stamps requests to each server with, and the
/// requests its own server refused for their stamps.
pub fn render_clocks(out: &mut String, node: &str, c: &hale_seal::ClockReport) {
    family(
        out,
        (
            "hale_control_clock_offset_ms",
            "gauge",
            "A control-plane server's wall clock minus this agent's, where they disagree beyond the 30 s window (requests to it are stamped in its time).",
        ),
        c.offsets.iter().map(|o| {
            (
                format!("node=\"{node}\",server=\"{}\"", o.server),
                o.offset_ms,
            )
        }),
    );
    family(
        out,
        (
            "hale_control_stamps_refused_total",
            "counter",
            "Requests this agent's control-plane server refused because their stamps were beyond the 30 s window (a member's clock is off; it was told the server's time).",
        ),
        c.refused.iter().map(|r| {
            (
                format!("node=\"{node}\",server=\"{}\"", r.server),
                r.count as i64,
            )
        }),
    );
}

/// Appends to `out` `hale_config_reloads_total{node,result}`, configuration
/// reloads `applied` and `refused` (nothing changed) since the start.
pub fn render_reloads(out: &mut String, node: &str, (applied, refused): (u64, u64)) {
    let help =
        "Configuration reloads (hale reload, SIGHUP): applied, or refused with nothing changed.";
    let samples = [("applied", applied), ("refused", refused)]
        .map(|(r, n)| (format!("node=\"{node}\",result=\"{r}\""), n));
    family(out, ("hale_config_reloads_total", "counter", help), samples);
}

/// Appends to `out` `hale_drill_fault_active{node,fault}` and
/// `hale_drill_traffic_ignored_total{node}`.
pub fn render_drill(out: &mut String, node: &str, faults: &Faults) {
    let active = Fault::ALL.map(|f| {
        let l = format!("node=\"{node}\",fault=\"{}\"", f.as_str());
        (l, u8::from(faults.is_set(f)))
    });
    let help = "Whether a drill fault is set on this agent.";
    family(out, ("hale_drill_fault_active", "gauge", help), active);
    let ignored = faults.traffic_ignored();
    let help = "Application traffic signals ignored during quiet drills.";
    let name = "hale_drill_traffic_ignored_total";
    family(
        out,
        (name, "counter", help),
        [(format!("node=\"{node}\""), ignored)],
    );
}
