//! `/metrics` in the Prometheus text exposition format.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use hale_core::DropReason;

use crate::runtime::{Shared, Snapshot};

/// Renders every metric.
pub fn render(s: &Snapshot, shared: &Shared) -> String {
    let mut out = String::with_capacity(4096);
    let node = shared.id.name();
    let st = &s.stats;
    let counters: [(&str, &str, u64); 20] = [
        ("probes_total", "Direct probes started.", st.probes),
        (
            "probes_skipped_fresh_total",
            "Probe visits skipped because the member was heard from recently.",
            st.probes_skipped_fresh,
        ),
        ("acks_total", "Probes answered.", st.acks),
        (
            "fallback_acks_total",
            "Probes answered only over the TCP fallback.",
            st.fallback_acks,
        ),
        (
            "nacks_total",
            "Nacks received from indirect probers.",
            st.nacks,
        ),
        (
            "probe_failures_total",
            "Probes that failed.",
            st.probe_failures,
        ),
        ("suspicions_total", "Suspicions started.", st.suspicions),
        (
            "discounted_accusations_total",
            "Accusations discounted (unhealthy or over-eager accuser).",
            st.discounted_accusations,
        ),
        (
            "refutations_total",
            "Times this node refuted a suspicion or death of itself.",
            st.refutations,
        ),
        (
            "deaths_declared_total",
            "Members declared dead on this node's verdict.",
            st.deaths_declared,
        ),
        (
            "deaths_accepted_total",
            "Death verdicts of others accepted.",
            st.deaths_accepted,
        ),
        ("datagrams_in_total", "Datagrams received.", st.datagrams_in),
        ("datagrams_out_total", "Datagrams sent.", st.datagrams_out),
        (
            "datagram_bytes_in_total",
            "Datagram payload bytes received (before decryption).",
            st.datagram_bytes_in,
        ),
        (
            "datagram_bytes_out_total",
            "Datagram payload bytes sent (before encryption).",
            st.datagram_bytes_out,
        ),
        ("streams_in_total", "Stream frames received.", st.streams_in),
        ("streams_out_total", "Stream frames sent.", st.streams_out),
        (
            "stream_bytes_in_total",
            "Stream bytes received.",
            st.stream_bytes_in,
        ),
        (
            "stream_bytes_out_total",
            "Stream bytes sent.",
            st.stream_bytes_out,
        ),
        (
            "pauses_total",
            "Local pauses detected (stop-the-world, SIGSTOP).",
            st.pauses,
        ),
    ];
    for (name, help, v) in counters {
        let _ = writeln!(
            out,
            "# HELP hale_{name} {help}\n# TYPE hale_{name} counter\nhale_{name}{{node=\"{node}\"}} {v}"
        );
    }
    let _ = writeln!(out, "# HELP hale_dropped_packets_total Packets dropped, by reason.\n# TYPE hale_dropped_packets_total counter");
    for r in DropReason::ALL {
        let _ = writeln!(
            out,
            "hale_dropped_packets_total{{node=\"{node}\",reason=\"{}\"}} {}",
            r.as_str(),
            st.dropped(r)
        );
    }
    let c = &shared.counters;
    for (reason, v) in [
        ("auth_failed", &c.auth_failed),
        ("seal_malformed", &c.seal_malformed),
        ("oversize_datagram", &c.oversize),
    ] {
        let _ = writeln!(
            out,
            "hale_dropped_packets_total{{node=\"{node}\",reason=\"{reason}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(out, "# HELP hale_stream_errors_total Stream connections that failed or were refused.\n# TYPE hale_stream_errors_total counter");
    for (kind, v) in [
        ("error", &c.stream_errors),
        ("out_dropped", &c.streams_out_dropped),
        ("in_refused", &c.streams_in_refused),
        ("in_refused_per_source", &c.streams_in_per_source),
        ("in_refused_budget", &c.streams_in_budget),
        ("in_refused_oversize", &c.streams_in_oversize),
    ] {
        let _ = writeln!(
            out,
            "hale_stream_errors_total{{node=\"{node}\",kind=\"{kind}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let _ = writeln!(out, "# HELP hale_local_health Lifeguard local health score (0 is healthy).\n# TYPE hale_local_health gauge\nhale_local_health{{node=\"{node}\"}} {}", s.local_health);
    let _ = writeln!(out, "# HELP hale_incarnation This node's incarnation.\n# TYPE hale_incarnation gauge\nhale_incarnation{{node=\"{node}\"}} {}", s.incarnation);
    let _ = writeln!(out, "# HELP hale_members Members by state, as this node sees them (itself included).\n# TYPE hale_members gauge");
    for state in ["alive", "suspect", "dead", "left"] {
        let n = s.members.iter().filter(|m| m.state == state).count();
        let _ = writeln!(out, "hale_members{{node=\"{node}\",state=\"{state}\"}} {n}");
    }
    let _ = writeln!(out, "# HELP hale_pending_broadcasts News waiting to be gossiped.\n# TYPE hale_pending_broadcasts gauge\nhale_pending_broadcasts{{node=\"{node}\"}} {}", s.pending_broadcasts);
    out
}

/// Roles (holder, epoch, lease left, promotions, demotions, renewals) and
/// service checks (runs, failures, health, readiness) of this node.
pub fn render_roles(
    node: &str,
    roles: &crate::roles::RoleViews,
    services: &crate::services::Services,
) -> String {
    let mut out = String::new();
    let roles = roles.lock().expect("role views lock");
    if !roles.is_empty() {
        type Get = fn(&crate::roles::RoleView) -> String;
        let series: [(&str, &str, &str, Get); 6] = [
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
                "hale_role_renewals_total",
                "counter",
                "Lease renewals committed.",
                |r| r.renewals.to_string(),
            ),
        ];
        for (name, kind, help, get) in series {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for r in roles.values() {
                let _ = writeln!(
                    out,
                    "{name}{{node=\"{node}\",role=\"{}\"}} {}",
                    r.role,
                    get(r)
                );
            }
        }
    }
    let services = crate::services::views(services);
    if !services.is_empty() {
        let _ = writeln!(out, "# HELP hale_service_healthy Whether every liveness check passed last time.\n# TYPE hale_service_healthy gauge");
        for s in &services {
            let _ = writeln!(
                out,
                "hale_service_healthy{{node=\"{node}\",service=\"{}\",essential=\"{}\"}} {}",
                s.name,
                s.essential,
                u8::from(s.healthy)
            );
        }
        let _ = writeln!(
            out,
            "# HELP hale_check_runs_total Check runs.\n# TYPE hale_check_runs_total counter"
        );
        for s in &services {
            for c in &s.checks {
                let _ = writeln!(
                    out,
                    "hale_check_runs_total{{node=\"{node}\",service=\"{}\",check=\"{}\"}} {}",
                    s.name,
                    c.name.replace('"', "'"),
                    c.runs
                );
            }
        }
        let _ = writeln!(out, "# HELP hale_check_failures_total Failed check runs (timeouts included).\n# TYPE hale_check_failures_total counter");
        for s in &services {
            for c in &s.checks {
                let _ = writeln!(
                    out,
                    "hale_check_failures_total{{node=\"{node}\",service=\"{}\",check=\"{}\"}} {}",
                    s.name,
                    c.name.replace('"', "'"),
                    c.failures
                );
            }
        }
    }
    out
}

/// The control-plane server this agent runs: its Raft state, log indices,
/// voters and storage health.
pub fn render_control(node: &str, c: &hale_control::raft::ControlStatus) -> String {
    let mut out = String::new();
    let l = format!("node=\"{node}\",server=\"{}\"", c.id);
    let idx = |i: Option<u64>| i.map_or("0".to_owned(), |i| i.to_string());
    let series: [(&str, &str, &str, String); 8] = [
        (
            "hale_control_is_leader",
            "gauge",
            "Whether this server is the control-plane leader (1) or not (0).",
            u8::from(c.state == "leader").to_string(),
        ),
        (
            "hale_control_leader",
            "gauge",
            "The leader's server id as this server knows it (0: none known).",
            c.leader.unwrap_or(0).to_string(),
        ),
        (
            "hale_control_term",
            "gauge",
            "The Raft term.",
            c.term.to_string(),
        ),
        (
            "hale_control_last_log_index",
            "gauge",
            "The last index in this server's log.",
            idx(c.last_log_index),
        ),
        (
            "hale_control_applied_index",
            "gauge",
            "The last index applied to this server's lease table.",
            idx(c.applied_index),
        ),
        (
            "hale_control_snapshot_index",
            "gauge",
            "The last index this server's snapshot covers.",
            idx(c.snapshot_index),
        ),
        (
            "hale_control_voters",
            "gauge",
            "Voters in the membership this server knows.",
            c.voters.len().to_string(),
        ),
        (
            "hale_control_storage_failed",
            "gauge",
            "Whether this server's storage failed and its Raft stopped (1) or not (0).",
            u8::from(c.storage_error.is_some()).to_string(),
        ),
    ];
    for (name, kind, help, v) in series {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{l}}} {v}"
        );
    }
    out
}
