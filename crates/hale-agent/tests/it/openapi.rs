//! `/v1/openapi.json` against what the agent serves: every route the code
//! declares is documented and every documented route is served, the
//! document passes a standard OpenAPI validator (`openapi-spec-validator`),
//! and every schema agrees with the Rust type it describes, field by field,
//! both ways (`tests/openapi_check.py`, with `openapi-schema-validator`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde::Serialize;
use serde_json::Value;

use hale_agent::client::{ErrorBody, HandoverView};
use hale_agent::drill::{DrillView, Fault, FaultView, RestoredView, TrafficView};
use hale_agent::keys_api::{KeyOp, KeyReport, KeyView, KeysView};
use hale_agent::roles::RoleView;
use hale_agent::services::{CheckResult, CheckView, ServiceView};
use hale_agent::view::{
    CandidateView, ClusterRoleView, ClusterRolesView, ClusterServicesView, HealthView, LeaseView,
    MemberCounts, NodeServicesView, PrimaryView, ReplicaView, RolesView,
};
use hale_agent::{AgentEvent, EvidenceView, MemberView, RelayView, UpstreamView};
use hale_control::raft::ControlStatus;
use hale_control::{HookOutcome, RoleState, StepDownReason};

/// `(method, path)` of every `.route(...)` in these sources; `format!`
/// paths (the relay's, under its prefix) read with the prefix empty.
fn declared_routes(sources: &[&Path]) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for file in sources {
        let text = std::fs::read_to_string(file).unwrap();
        for (at, _) in text.match_indices(".route(") {
            let rest = text[at + ".route(".len()..].trim_start();
            let rest = rest.strip_prefix("&format!(").unwrap_or(rest);
            let Some(rest) = rest.strip_prefix('"') else {
                continue; // Not a literal: not a route declaration.
            };
            let end = rest.find('"').unwrap();
            let path = rest[..end]
                .replace("{p}", "")
                .replace("{{", "{")
                .replace("}}", "}");
            let after = rest[end + 1..].trim_start_matches([')', ',']);
            let method: String = after
                .trim_start()
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect();
            out.insert((method, path));
        }
    }
    out
}

fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let paths: BTreeMap<String, BTreeMap<String, Value>> =
        serde_json::from_value(doc["paths"].clone()).unwrap();
    paths
        .into_iter()
        .flat_map(|(p, ops)| ops.into_keys().map(move |m| (m, p.clone())))
        .collect()
}

#[test]
fn every_route_the_agent_serves_is_documented_and_every_documented_route_is_served() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let mut files: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.push(root.join("../hale-relay/src/relay.rs"));
    let files: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    let served = declared_routes(&files);
    let doc: Value = serde_json::from_str(hale_agent::api::OPENAPI).unwrap();
    let documented = documented_routes(&doc);
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served, not in openapi.json: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "in openapi.json, not served: {unserved:?}"
    );
    assert!(
        served.len() > 30,
        "the route scan found too little: {served:?}"
    );
}

/// Samples of every type the document describes, by schema name.
#[derive(Default)]
struct Samples(BTreeMap<&'static str, Vec<Value>>);

impl Samples {
    fn add<T: Serialize>(&mut self, schema: &'static str, v: &T) {
        let v = serde_json::to_value(v).unwrap();
        self.0.entry(schema).or_default().push(v);
    }
}

fn evidence(silent: Option<u64>) -> EvidenceView {
    EvidenceView {
        declared_by: "n1".into(),
        accusers: vec!["n1".into(), "n2".into()],
        discounted: 0,
        confirmations: 2,
        suspected_ms_before_verdict: silent.map(|s| s / 2),
        silent_ms_before_verdict: silent,
        declared_at_unix_ms: 1,
    }
}

fn role(epoch: Option<u64>) -> RoleView {
    RoleView {
        role: "db".into(),
        priority: 100,
        state: if epoch.is_some() {
            RoleState::Holder
        } else {
            RoleState::Standby
        },
        epoch,
        lease_left_ms: epoch.map(|_| 900),
        last_change: epoch.map(|_| "promoted".into()),
        held_since_unix_ms: epoch.map(|_| 5),
        promotions: 1,
        demotions: 0,
        renewals: 12,
        valid_until: None,
    }
}

fn events() -> Vec<AgentEvent> {
    let (role, epoch) = ("db".to_owned(), 3);
    vec![
        AgentEvent::Joined,
        AgentEvent::Suspected {
            accuser: "n2".into(),
        },
        AgentEvent::Dead(evidence(Some(4000))),
        AgentEvent::Recovered { was_dead: true },
        AgentEvent::Left,
        AgentEvent::Metadata,
        AgentEvent::Refuted { was_dead: false },
        AgentEvent::SeedFallback,
        AgentEvent::Paused { gap_ms: 2500 },
        AgentEvent::Promoting {
            role: role.clone(),
            epoch,
        },
        AgentEvent::Promoted {
            role: role.clone(),
            epoch,
            hook_ok: true,
        },
        AgentEvent::Demoting {
            role: role.clone(),
            epoch,
            reason: StepDownReason::Handover,
        },
        AgentEvent::Demoted {
            role: role.clone(),
            epoch,
            reason: StepDownReason::PromoteTimedOut,
            hook_ok: true,
            demote: HookOutcome::Succeeded,
            promote: Some(HookOutcome::TimedOut),
        },
        AgentEvent::Holder {
            role,
            from: Some("n0".into()),
            to: Some("n1".into()),
            epoch,
        },
        AgentEvent::ControlStopped {
            server: 1,
            error: "No space left on device".into(),
        },
        AgentEvent::Breaker {
            upstream: "http://sentry:9000/1".into(),
            role: "primary".into(),
            from: "closed".into(),
            to: "open".into(),
        },
        AgentEvent::DrillSet {
            fault: Fault::Freeze,
            duration_ms: 5000,
        },
        AgentEvent::DrillRestored {
            fault: Fault::Freeze,
            reason: "expired".into(),
        },
    ]
}

/// The schema of each event kind's detail.
fn detail_schema(e: &AgentEvent) -> Option<&'static str> {
    Some(match e {
        AgentEvent::Suspected { .. } => "SuspectedDetail",
        AgentEvent::Dead(_) => "Evidence",
        AgentEvent::Recovered { .. } | AgentEvent::Refuted { .. } => "WasDeadDetail",
        AgentEvent::Paused { .. } => "PausedDetail",
        AgentEvent::Promoting { .. } => "PromotingDetail",
        AgentEvent::Promoted { .. } => "PromotedDetail",
        AgentEvent::Demoting { .. } => "DemotingDetail",
        AgentEvent::Demoted { .. } => "DemotedDetail",
        AgentEvent::Holder { .. } => "HolderDetail",
        AgentEvent::ControlStopped { .. } => "ControlStoppedDetail",
        AgentEvent::Breaker { .. } => "BreakerDetail",
        AgentEvent::DrillSet { .. } => "DrillSetDetail",
        AgentEvent::DrillRestored { .. } => "DrillRestoredDetail",
        _ => return None,
    })
}

fn samples() -> Samples {
    let mut s = Samples::default();
    s.add(
        "Error",
        &ErrorBody {
            error: "no such endpoint".into(),
        },
    );
    let control = ControlStatus {
        id: 1,
        state: "leader".into(),
        leader: Some(1),
        term: 2,
        last_log_index: Some(9),
        applied_index: Some(9),
        snapshot_index: None,
        voters: vec![1, 2, 3],
        storage_error: Some("No space left on device".into()),
    };
    s.add("ControlStatus", &control);
    for control in [Some(control), None] {
        s.add(
            "Health",
            &HealthView {
                status: "ok".into(),
                control,
                cluster: "c".into(),
                node: "n0".into(),
                addr: "127.0.0.1:7946".into(),
                incarnation: 0,
                local_health: 0,
                members: MemberCounts::default(),
            },
        );
    }
    for ev in [Some(evidence(Some(4000))), None] {
        s.add("Evidence", &evidence(None));
        s.add(
            "Member",
            &MemberView {
                name: "n1".into(),
                addr: "127.0.0.1:7950".into(),
                state: if ev.is_some() { "dead" } else { "alive" }.into(),
                incarnation: 1,
                health: 0,
                last_heard_ms_ago: Some(200),
                state_for_ms: 1000,
                meta: String::new(),
                is_self: false,
                evidence: ev,
            },
        );
    }
    for (i, e) in events().into_iter().enumerate() {
        if let (Some(schema), Some(detail)) = (detail_schema(&e), e.detail()) {
            s.add(schema, &detail);
        }
        let member = (i % 2 == 0).then(|| "n1".to_owned());
        s.add("Event", &e.stamped(i as u64 + 1, "n0", member, Some(1)));
    }
    let lease = LeaseView {
        holder: Some("n0".into()),
        epoch: 3,
    };
    s.add("Lease", &lease);
    s.add("Role", &role(Some(3)));
    s.add("Role", &role(None));
    s.add(
        "Roles",
        &RolesView {
            control_plane: true,
            leader: Some(1),
            leases: Some([("db".to_owned(), lease)].into()),
            local: vec![role(Some(3))],
        },
    );
    s.add(
        "Primary",
        &PrimaryView {
            role: "db".into(),
            state: RoleState::Holder,
            epoch: Some(3),
            lease_left_ms: Some(900),
        },
    );
    s.add(
        "Replica",
        &ReplicaView {
            role: "db".into(),
            state: RoleState::Standby,
        },
    );
    s.add(
        "Handover",
        &HandoverView {
            handover: "db".into(),
        },
    );
    let candidate = CandidateView {
        node: "n0".into(),
        priority: 100,
        eligible: true,
        member_state: "alive".into(),
        holder: true,
    };
    s.add("Candidate", &candidate);
    let cluster_role = ClusterRoleView {
        role: "db".into(),
        holder: Some("n0".into()),
        epoch: 3,
        holder_state: Some(RoleState::Promoting),
        lease_left_ms: Some(900),
        held_since_unix_ms: None,
        candidates: vec![candidate],
    };
    s.add("ClusterRole", &cluster_role);
    s.add(
        "ClusterRoles",
        &ClusterRolesView {
            control_plane: true,
            leader: None,
            fetched_unix_ms: 5,
            roles: vec![cluster_role],
        },
    );
    let result = CheckResult {
        ok: false,
        detail: "exit status 1".into(),
        took_ms: 3,
    };
    s.add("CheckResult", &result);
    let check = CheckView {
        name: "pg".into(),
        ready: false,
        runs: 4,
        failures: 1,
        recent: vec![result],
    };
    s.add("Check", &check);
    let service = ServiceView {
        name: "pg".into(),
        essential: true,
        healthy: false,
        ready: true,
        failing_for_ms: Some(1200),
        checks: vec![check],
    };
    s.add("Service", &service);
    let node = NodeServicesView {
        node: "n1".into(),
        state: "alive".into(),
        services: Some(vec![service]),
        error: None,
    };
    s.add("NodeServices", &node);
    s.add(
        "ClusterServices",
        &ClusterServicesView {
            nodes: vec![node],
            truncated: false,
        },
    );
    let upstream = UpstreamView {
        role: "primary".into(),
        target: "http://sentry:9000/1".into(),
        member: Some("n2".into()),
        breaker: "half-open".into(),
    };
    s.add("Upstream", &upstream);
    s.add(
        "Relay",
        &RelayView {
            queue_bytes: 0,
            queue_cap: 8 << 20,
            spool_bytes: 0,
            spool: false,
            in_flight: 0,
            accepted: 3,
            forwarded: 3,
            spooled: 0,
            failovers: 0,
            upstreams: vec![upstream],
            dropped: [("queue-full".to_owned(), 0)].into(),
            dropped_total: 0,
            diverted: Some("127.0.0.1:40000".into()),
        },
    );
    let fault = FaultView {
        fault: Fault::Blackhole,
        since_unix_ms: 1,
        until_unix_ms: 2,
        divert: Some("127.0.0.1:40000".into()),
    };
    s.add("Fault", &fault);
    let drill = DrillView {
        node: "n0".into(),
        active: vec![fault],
        traffic_ignored: 0,
    };
    s.add("Drill", &drill);
    s.add(
        "Restored",
        &RestoredView {
            restored: vec![Fault::Blackhole],
            drill,
        },
    );
    s.add(
        "Traffic",
        &TrafficView {
            noted: 2,
            quiet: false,
        },
    );
    let key = KeyView {
        fingerprint: "ab12".into(),
        primary: true,
    };
    s.add("KeyEntry", &key);
    s.add(
        "Keys",
        &KeysView {
            node: "n0".into(),
            keys: vec![key],
        },
    );
    s.add(
        "KeyReport",
        &KeyReport {
            op: KeyOp::Install,
            key: "ab12".into(),
            agents: 2,
            ok: vec!["n0".into()],
            failed: [("n1".to_owned(), "timed out".to_owned())].into(),
        },
    );
    s
}

#[test]
fn the_openapi_document_is_valid_and_its_schemas_agree_with_the_types_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("openapi.json");
    std::fs::write(&doc, hale_agent::api::OPENAPI).unwrap();
    let sampled = dir.path().join("samples.json");
    std::fs::write(&sampled, serde_json::to_vec(&samples().0).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi_check.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(&doc)
        .arg(&sampled)
        .output()
        .expect("python3 runs (with openapi-spec-validator: pip install openapi-spec-validator)");
    assert!(
        out.status.success(),
        "openapi.json and the types disagree:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
