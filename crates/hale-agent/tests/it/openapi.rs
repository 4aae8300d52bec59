//! `/v1/openapi.json` against what the agent serves: every route the code
//! declares is documented and every documented route is served, the
//! document passes a standard OpenAPI validator (`openapi-spec-validator`),
//! and every schema agrees with the Rust type it describes, field by field,
//! both ways (`tests/openapi_check.py`, with `openapi-schema-validator`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use hale_agent::view::ClockReport;
use hale_agent::view::{
    CandidateView, ClusterRoleView, ClusterRolesView, ClusterServicesView, HealthView, LeaseView,
    NodeServicesView, PrimaryView, ReplicaView, RolesView,
};
use hale_agent::view::{Cause, Change, HistoryView};
use hale_agent::view::{CheckResult, CheckView, ServiceView};
use hale_agent::view::{ConfigChange, RefusedKey, ReloadRefusal, ReloadView};
use hale_agent::view::{DrillView, FaultView, RestoredView, TrafficView};
use hale_agent::view::{ErrorBody, HandoverView};
use hale_agent::view::{KeyOpError, KeyReport, KeyView, KeysView};
use hale_agent::view::{Lagging, PauseView, PostgresView, SwitchoverRequest, SwitchoverView};
use hale_agent::view::{RoleTags, RoleView};
use hale_agent::{EventView, EvidenceView, MemberView, RelayView, UpstreamView};
use hale_control::raft::ControlStatus;
use hale_postgres::{StandbyState, Standing};

/// The path constants of `view/routes.rs`, by name.
fn route_constants(file: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("pub const "))
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let path = rest.split('"').nth(1)?;
            Some((name.trim().to_owned(), path.to_owned()))
        })
        .collect()
}

/// `(method, path)` of every `.route(...)` in these sources, its path a
/// literal or one of `constants` (`routes::NAME`); `format!` paths (the
/// relay's, under its prefix) read with the prefix empty.
fn declared_routes(
    sources: &[&Path],
    constants: &BTreeMap<String, String>,
) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for file in sources {
        let text = std::fs::read_to_string(file).unwrap();
        for (at, _) in text.match_indices(".route(") {
            let rest = text[at + ".route(".len()..].trim_start();
            let rest = rest.strip_prefix("&format!(").unwrap_or(rest);
            let (path, rest) = if let Some(named) = rest.strip_prefix("routes::") {
                let end = named.find(|c: char| c != '_' && !c.is_ascii_alphanumeric());
                let end = end.unwrap();
                (constants[&named[..end]].clone(), &named[end..])
            } else if let Some(rest) = rest.strip_prefix('"') {
                let end = rest.find('"').unwrap();
                (rest[..end].to_owned(), &rest[end + 1..])
            } else {
                continue; // Not a literal: not a route declaration.
            };
            let path = path
                .replace("{p}", "")
                .replace("{{", "{")
                .replace("}}", "}");
            let after = rest.trim_start_matches([')', ',']);
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
    let constants = route_constants(&src.join("view/routes.rs"));
    let served = declared_routes(&files, &constants);
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

/// Reads `sample` into `T` and writes it back: what the type makes of it,
/// which must be the sample itself, so that each sample shows exactly the
/// fields its Rust type has.
fn typed<T: Serialize + DeserializeOwned>(sample: Value) -> Value {
    let t: T = serde_json::from_value(sample.clone()).unwrap_or_else(|e| panic!("{sample}: {e}"));
    let back = serde_json::to_value(t).unwrap();
    assert_eq!(back, sample, "the sample is not what its type writes");
    back
}

/// `schema: RustType = json;`: samples of every schema, by name, each
/// written by its Rust type (see [`typed`]).
macro_rules! samples {
    ($($schema:literal: $ty:ty = $json:tt;)*) => {{
        let mut s: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        $(s.entry($schema.to_owned()).or_default().push(typed::<$ty>(json!($json)));)*
        s
    }};
}

fn samples() -> BTreeMap<String, Vec<Value>> {
    let control = json!({"id": 1, "state": "leader", "leader": 1, "term": 2, "last_log_index": 9,
        "applied_index": 9, "snapshot_index": null, "voters": [1, 2, 3],
        "storage_error": "No space left on device", "protocol": 2, "common_protocol": 2,
        "churn_breaker": true});
    let counts = json!({"alive": 0, "suspect": 0, "dead": 0, "left": 0});
    let clock = json!({"offsets": [{"server": 2, "addr": "10.0.0.2:7948", "offset_ms": -61000,
            "learned_unix_ms": 1_700_000_000_000_u64}],
        "refused": [{"server": 1, "count": 3, "last_skew_ms": 60500,
            "last_unix_ms": 1_700_000_000_000_u64}]});
    let health = |control: Value| {
        // An agent before 0.2.0 says nothing of its wire versions.
        let (wire, hooks) = if control.is_null() {
            (Value::Null, Value::Null)
        } else {
            (
                json!({"speaks": "2-3", "writes": 3}),
                json!({"running": 1, "queued": 2, "limit": 8}),
            )
        };
        json!({"status": "ok", "control": control, "cluster": "c", "clock": clock,
        "node": "n0", "addr": "127.0.0.1:7946", "incarnation": 0, "local_health": 0,
        "members": counts, "wire": wire, "hooks": hooks})
    };
    let evidence = |silent: Option<u64>| {
        json!({"declared_by": "n1", "accusers": ["n1", "n2"],
        "discounted": 0, "confirmations": 2, "suspected_ms_before_verdict": silent.map(|s| s / 2),
        "silent_ms_before_verdict": silent, "declared_at_unix_ms": 1})
    };
    let member = |state: &str, ev: Value| {
        json!({"name": "n1", "addr": "127.0.0.1:7950",
        "state": state, "incarnation": 1, "health": 0, "last_heard_ms_ago": 200,
        "state_for_ms": 1000, "meta": "", "is_self": false, "evidence": ev})
    };
    let role = |epoch: Option<u64>| {
        json!({"role": "db", "priority": 100,
        "state": if epoch.is_some() { "holder" } else { "standby" }, "epoch": epoch,
        "lease_left_ms": epoch.map(|_| 900), "last_change": epoch.map(|_| "promoted"),
        "held_since_unix_ms": epoch.map(|_| 5), "promotions": 1, "demotions": 0, "demote_failures": 0, "renewals": 12})
    };
    let replica = json!({"standing": "replica", "receive_lsn": 50_331_648, "replay_lsn": 33_554_432,
        "replay_paused": true, "last_replay": "2026-12-03T03:20:00.500000000Z", "streaming": true,
        "upstream": "10.0.0.1", "upstream_port": 5432, "timeline": 2});
    let primary = json!({"standing": "primary", "lsn": 50_331_648, "timeline": 2,
        "standbys": [{"name": "b", "sync": true, "flush_lsn": 50_331_648,
        "replay_lsn": 50_331_000, "state": "streaming"}, {"name": "c", "sync": false,
        "flush_lsn": null, "replay_lsn": null, "state": "catchup"}],
        "synchronous": "ANY 1 (\"b\")"});
    let pg_role = |standing: Value, lagging: Option<Value>| {
        let mut r = role(None);
        r["postgres"] = json!({"standing": standing, "fenced": lagging.is_none(),
            "rejoin": "rewound", "error": null, "primary_lsn": 50_331_648, "max_lag": 1_048_576,
            "synchronous": lagging.is_none()});
        match lagging {
            Some(l) => r["lagging"] = l,
            None => r["paused"] = json!(true),
        }
        r
    };
    let tags = json!({"promotable": false, "load_balance": false, "synchronous_standby": false});
    let mut tagged_role = role(Some(3));
    tagged_role["tags"] = tags.clone();
    tagged_role["handover_waits"] = json!(
        "keeps the role until another node can take it: \
        no other live candidate may take the role (its checks pass and it may be promoted)"
    );
    let lease = json!({"holder": "n0", "epoch": 3});
    let first_grant = json!({"seq": 1, "epoch": 1, "holder": "n0",
        "at_unix_ms": 1_764_727_200_000_u64, "cause": {"kind": "first-grant"}});
    let expired = json!({"seq": 2, "epoch": 2, "holder": "n1", "at_unix_ms": 1_764_727_260_000_u64,
        "cause": {"kind": "lease-expired", "previous": "n0"}});
    let candidate = json!({"node": "n0", "priority": 100, "eligible": true,
        "member_state": "alive", "holder": true});
    let cluster_role = json!({"role": "db", "holder": "n0", "epoch": 3,
        "holder_state": "promoting", "lease_left_ms": 900, "held_since_unix_ms": null,
        "candidates": [candidate]});
    let result = json!({"ok": false, "detail": "exit status 1", "took_ms": 3});
    let check = json!({"name": "pg", "ready": false, "runs": 4, "failures": 1,
        "recent": [result]});
    let service = json!({"name": "pg", "essential": true, "healthy": false, "ready": true,
        "failing_for_ms": 1200, "checks": [check]});
    let node = json!({"node": "n1", "state": "alive", "services": [service], "error": null});
    let upstream = json!({"role": "primary", "target": "http://sentry:9000/1", "member": "n2",
        "breaker": "half-open"});
    let fault = json!({"fault": "blackhole", "since_unix_ms": 1, "until_unix_ms": 2,
        "divert": "127.0.0.1:40000", "delay_ms": null});
    let slow = json!({"fault": "slow-disk", "since_unix_ms": 1, "until_unix_ms": 2,
        "divert": null, "delay_ms": 300});
    let drill = json!({"node": "n0", "active": [fault], "traffic_ignored": 0});
    let key = json!({"fingerprint": "ab12", "primary": true});
    let change = json!({"key": "service[pg].check[ping]", "change": "added"});
    let reloaded = json!({"changes": [change, {"key": "role[db].priority", "change": "changed"}]});
    let refused_key = json!({"key": "agent.bind", "problem": "read at start only"});
    let refusal = json!({"error": "cannot apply while the agent runs: agent.bind (read at start only); nothing changed",
        "reason": "unreloadable", "keys": [refused_key]});
    let mut s = samples! {
        "Error": ErrorBody = {"error": "no such endpoint"};
        "ControlStatus": ControlStatus = control;
        "ClockReport": ClockReport = (clock.clone());
        "Health": HealthView = (health(control.clone()));
        "Health": HealthView = (health(Value::Null));
        "Evidence": EvidenceView = (evidence(None));
        "Member": MemberView = (member("dead", evidence(Some(4000))));
        "Member": MemberView = (member("alive", Value::Null));
        "Lease": LeaseView = lease;
        "Role": RoleView = (role(Some(3)));
        "Role": RoleView = (role(None));
        "Role": RoleView = (pg_role(replica.clone(), Some(json!({"lag": 16_777_216, "max_lag": 1_048_576}))));
        "Role": RoleView = (pg_role(primary.clone(), None));
        "Role": RoleView = (pg_role(json!({"standing": "down"}), None));
        "Role": RoleView = (tagged_role.clone());
        "RoleTags": RoleTags = (tags.clone());
        "RoleTags": RoleTags = {"promotable": true, "load_balance": true, "synchronous_standby": true};
        "Lagging": Lagging = {"lag": 16_777_216, "max_lag": 1_048_576};
        "Pause": PauseView = {"role": "db", "paused": true};
        "History": HistoryView = {"role": "db", "changes": [first_grant, expired]};
        "Change": Change = (first_grant.clone());
        "Change": Change = (expired.clone());
        "Change": Change = {"seq": 3, "epoch": 2, "holder": null, "at_unix_ms": null,
            "cause": {"kind": "released", "previous": "n1", "reason": "service-failing",
            "next": null}};
        "Cause": Cause = {"kind": "first-grant"};
        "Cause": Cause = {"kind": "lease-expired", "previous": "n0"};
        "Cause": Cause = {"kind": "after-release", "previous": "n0", "named": "n2"};
        "Cause": Cause = {"kind": "after-release", "previous": null, "named": null};
        "Cause": Cause = {"kind": "switchover-done", "previous": "n0"};
        "Cause": Cause = {"kind": "released", "previous": "n1", "reason": null, "next": "n2"};
        "Cause": Cause = {"kind": "released", "previous": "n1", "reason": "switchover",
            "next": "n2"};
        "Cause": Cause = {"kind": "switchover-ordered", "to": "n1", "at_unix_ms": 0, "by": "n2"};
        "Cause": Cause = {"kind": "switchover-cancelled", "to": "n1", "by": null};
        "Cause": Cause = {"kind": "paused", "by": "n2"};
        "Cause": Cause = {"kind": "resumed", "by": "n2", "forced": true};
        "Cause": Cause = {"kind": "unknown"};
        "Lease": LeaseView = {"holder": "n0", "epoch": 3, "paused": true};
        "Lease": LeaseView = {"holder": "n0", "epoch": 3, "paused": true, "kept": true};
        "Lease": LeaseView = {"holder": "n0", "epoch": 3,
            "switchover": {"to": "n1", "at_unix_ms": 0}};
        "SwitchoverOrder": hale_control::Switchover = {"to": "n1",
            "at_unix_ms": 1_764_727_200_000_u64};
        "SwitchoverRequest": SwitchoverRequest = {"to": "n1", "at_unix_ms": 1_764_727_200_000_u64,
            "cancel": false};
        "SwitchoverRequest": SwitchoverRequest = {"to": null, "at_unix_ms": null, "cancel": true};
        "Switchover": SwitchoverView = {"role": "db", "from": "n0", "epoch": 3, "to": "n1",
            "at_unix_ms": 0};
        "Switchover": SwitchoverView = {"role": "db", "from": "n0", "epoch": 3, "to": null,
            "at_unix_ms": 0};
        "Standing": Standing = (replica.clone());
        "Standing": Standing = (primary.clone());
        "Standing": Standing = {"standing": "down"};
        "Standby": StandbyState = (primary["standbys"][0].clone());
        "Standby": StandbyState = (primary["standbys"][1].clone());
        "PostgresView": PostgresView = {"standing": null, "fenced": true, "rejoin": null,
            "error": "connection refused", "primary_lsn": null, "max_lag": null,
            "synchronous": false};
        "Roles": RolesView = {"control_plane": true, "leader": 1, "leases": {"db": lease},
            "local": [role(Some(3))]};
        "Primary": PrimaryView = {"role": "db", "state": "holder", "epoch": 3,
            "lease_left_ms": 900};
        "Replica": ReplicaView = {"role": "db", "state": "standby"};
        "Replica": ReplicaView = {"role": "db", "state": "standby", "lag": 4096};
        "Replica": ReplicaView = {"role": "db", "state": "standby",
            "reason": "this node takes no load-balanced reads (load_balance = false in its [[role]])"};
        "Handover": HandoverView = {"handover": "db"};
        "Candidate": CandidateView = candidate;
        "Candidate": CandidateView = {"node": "n2", "priority": 5, "eligible": false,
            "member_state": "alive", "holder": false, "tags": tags};
        "ClusterRole": ClusterRoleView = cluster_role;
        "ClusterRole": ClusterRoleView = {"role": "db", "holder": null, "epoch": 0, "holder_state": null,
            "lease_left_ms": null, "held_since_unix_ms": null, "candidates": [], "paused": true};
        "ClusterRole": ClusterRoleView = {"role": "db", "holder": null, "epoch": 4, "holder_state": null,
            "lease_left_ms": null, "held_since_unix_ms": null, "candidates": [],
            "unheld": "no live candidate may take the role: n2 may not be promoted (promotable = false)"};
        "ClusterRole": ClusterRoleView = {"role": "db", "holder": "n0", "epoch": 3, "holder_state": "holder",
            "lease_left_ms": 900, "held_since_unix_ms": 5, "candidates": [],
            "switchover": {"to": "n1", "at_unix_ms": 0}};
        "ClusterRoles": ClusterRolesView = {"control_plane": true, "leader": null,
            "fetched_unix_ms": 5, "roles": [cluster_role]};
        "CheckResult": CheckResult = result;
        "CheckResult": CheckResult = {"ok": false, "detail": "/data: 33554432 bytes free, less than min_free_bytes (67108864)",
            "took_ms": 0, "failure": "short-of-disk"};
        "Check": CheckView = check;
        "Service": ServiceView = service;
        "NodeServices": NodeServicesView = node;
        "ClusterServices": ClusterServicesView = {"nodes": [node], "truncated": false};
        "Upstream": UpstreamView = upstream;
        "Relay": RelayView = {"queue_bytes": 0, "queue_cap": 8 << 20, "spool_bytes": 0,
            "spool": false, "in_flight": 0, "accepted": 3, "forwarded": 3, "spooled": 0,
            "failovers": 0, "upstreams": [upstream], "dropped": {"queue-full": 0},
            "dropped_total": 0, "diverted": "127.0.0.1:40000"};
        "Fault": FaultView = fault;
        "Fault": FaultView = slow;
        "Drill": DrillView = drill;
        "Restored": RestoredView = {"restored": ["blackhole"], "drill": drill};
        "Traffic": TrafficView = {"noted": 2, "quiet": false};
        "KeyEntry": KeyView = key;
        "Keys": KeysView = {"node": "n0", "keys": [key]};
        "KeyReport": KeyReport = {"op": "install", "key": "ab12", "agents": 2, "ok": ["n0"],
            "failed": {"n1": {"reason": "timed-out", "detail": "operation timed out"}}};
        "KeyOpError": KeyOpError = {"reason": "not-installed", "key": "ab12"};
        "KeyOpError": KeyOpError = {"reason": "is-primary", "key": "ab12"};
        "KeyOpError": KeyOpError = {"reason": "not-saved", "path": "/var/lib/hale/keyring",
            "detail": "No space left on device"};
        "KeyOpError": KeyOpError = {"reason": "no-address"};
        "KeyOpError": KeyOpError = {"reason": "unreachable", "detail": "connection refused"};
        "KeyOpError": KeyOpError = {"reason": "refused", "status": 401,
            "message": "not sealed with a cluster key for this server and route"};
        "KeyOpError": KeyOpError = {"reason": "bad-answer", "detail": "the answer is not authentic"};
        "ConfigChange": ConfigChange = (change.clone());
        "Reload": ReloadView = (reloaded.clone());
        "Reload": ReloadView = {"changes": []};
        "RefusedKey": RefusedKey = (refused_key.clone());
        "ReloadRefusal": ReloadRefusal = (refusal.clone());
    };
    let (role, epoch) = ("db", 3);
    // Every event kind, with the schema of its detail (if it has one).
    let events = json!([
        {"kind": "joined"},
        {"kind": "suspected", "detail": {"accuser": "n2"}, "schema": "SuspectedDetail"},
        {"kind": "dead", "detail": evidence(Some(4000)), "schema": "Evidence"},
        {"kind": "recovered", "detail": {"was_dead": true}, "schema": "WasDeadDetail"},
        {"kind": "left"},
        {"kind": "metadata"},
        {"kind": "refuted", "detail": {"was_dead": false}, "schema": "WasDeadDetail"},
        {"kind": "seed-fallback"},
        {"kind": "paused", "detail": {"gap_ms": 2500}, "schema": "PausedDetail"},
        {"kind": "generation-raised", "detail": {"previous": 1, "generation": 5}, "schema": "GenerationRaisedDetail"},
        {"kind": "promoting", "detail": {"role": role, "epoch": epoch},
            "schema": "PromotingDetail"},
        {"kind": "promoted", "detail": {"role": role, "epoch": epoch, "hook_ok": true},
            "schema": "PromotedDetail"},
        {"kind": "demoting", "detail": {"role": role, "epoch": epoch, "reason": "handover"},
            "schema": "DemotingDetail"},
        {"kind": "demoted", "detail": {"role": role, "epoch": epoch,
            "reason": "promote-hook-timed-out", "hook_ok": true, "demote": "succeeded",
            "promote": "timed-out"}, "schema": "DemotedDetail"},
        {"kind": "holder", "detail": {"role": role, "from": "n0", "to": "n1", "epoch": epoch},
            "schema": "HolderDetail"},
        {"kind": "control-stopped", "detail": {"server": 1, "error": "No space left on device"},
            "schema": "ControlStoppedDetail"},
        {"kind": "churn-breaker", "detail": {"server": 3, "open": true},
            "schema": "ChurnBreakerDetail"},
        {"kind": "clock-skew", "detail": {"server": 2, "skew_ms": -3600000, "side": "client"},
            "schema": "ClockSkewDetail"},
        {"kind": "breaker", "detail": {"upstream": "http://sentry:9000/1", "role": "primary",
            "from": "closed", "to": "open"}, "schema": "BreakerDetail"},
        {"kind": "drill-set", "detail": {"fault": "freeze", "duration_ms": 5000},
            "schema": "DrillSetDetail"},
        {"kind": "drill-restored", "detail": {"fault": "freeze", "reason": "expired"},
            "schema": "DrillRestoredDetail"},
        {"kind": "role-paused", "detail": {"role": role, "paused": true},
            "schema": "RolePausedDetail"},
        {"kind": "demote-failed", "detail": {"role": role, "epoch": epoch, "reason": "handover",
            "outcome": "failed", "failures": 2, "retry_in_ms": 1000}, "schema": "DemoteFailedDetail"},
        {"kind": "role-kept", "detail": {"role": role, "epoch": epoch},
            "schema": "RoleKeptDetail"},
        {"kind": "role-adopted", "detail": {"role": role, "epoch": epoch},
            "schema": "RoleKeptDetail"},
        {"kind": "not-eligible", "detail": {"role": role, "lag": 16_777_216, "max_lag": 1_048_576},
            "schema": "NotEligibleDetail"},
        {"kind": "rejoining", "detail": {"role": role, "upstream": "n1"}, "schema": "RejoinDetail"},
        {"kind": "rewound", "detail": {"role": role, "upstream": "n1"}, "schema": "RejoinDetail"},
        {"kind": "recloned", "detail": {"role": role, "upstream": "n1"}, "schema": "RejoinDetail"},
        {"kind": "streaming", "detail": {"role": role, "upstream": "n1"}, "schema": "RejoinDetail"},
        {"kind": "rejoin-failed", "detail": {"role": role, "upstream": "n1",
            "error": "pg_rewind failed"}, "schema": "RejoinFailedDetail"},
        {"kind": "postgres-fenced", "detail": {"role": role, "how": "stopped_fast"},
            "schema": "PostgresFencedDetail"},
        {"kind": "switchover", "detail": {"role": role, "to": "n1", "step": "ordered"},
            "schema": "SwitchoverDetail"},
        {"kind": "switchover", "detail": {"role": role, "to": "n1", "step": "waiting",
            "reason": "n1 does not stream from this primary"}, "schema": "SwitchoverDetail"},
        {"kind": "unsupported-wire-version", "detail": {"version": 4, "speaks": "3-4", "ours": "2-3"},
            "schema": "UnsupportedWireVersionDetail"},
        {"kind": "unsupported-wire-version", "detail": {"version": 2, "speaks": null, "ours": "3"},
            "schema": "UnsupportedWireVersionDetail"},
        {"kind": "config-reloaded", "detail": reloaded, "schema": "Reload"},
        {"kind": "config-reload-refused", "detail": refusal, "schema": "ReloadRefusal"},
    ]);
    for (i, event) in events.as_array().unwrap().iter().enumerate() {
        let mut event = event.as_object().unwrap().clone();
        let schema = event.remove("schema");
        let member = (i % 2 == 0).then_some("n1");
        let stamp = json!({"seq": i + 1, "unix_ms": 1, "observer": "n0", "member": member,
            "incarnation": 1});
        event.extend(stamp.as_object().unwrap().clone());
        let event = typed::<EventView>(event.into());
        if let Some(schema) = schema {
            let detail = event["detail"].clone();
            s.entry(schema.as_str().unwrap().into())
                .or_default()
                .push(detail);
        }
        s.entry("Event".into()).or_default().push(event);
    }
    s
}

#[test]
fn the_openapi_document_is_valid_and_its_schemas_agree_with_the_types_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("openapi.json");
    std::fs::write(&doc, hale_agent::api::OPENAPI).unwrap();
    let sampled = dir.path().join("samples.json");
    std::fs::write(&sampled, serde_json::to_vec(&samples()).unwrap()).unwrap();
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
