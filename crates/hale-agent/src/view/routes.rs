//! The API's paths, defined once: the router mounts them and
//! [`crate::Client`] asks them. A path with `{name}` takes a parameter;
//! the functions fill it in.

/// `GET`: the agent's health.
pub const HEALTH: &str = "/v1/health";
/// `GET`: every member.
pub const MEMBERS: &str = "/v1/members";
/// `GET`: the event history (`?since=seq`).
pub const EVENTS: &str = "/v1/events";
/// `GET`: the live event stream (server-sent events).
pub const EVENT_STREAM: &str = "/v1/events/stream";
/// `POST`: join through addresses.
pub const JOIN: &str = "/v1/join";
/// `POST`: leave the cluster.
pub const LEAVE: &str = "/v1/leave";
/// `GET`: the API's OpenAPI description.
pub const OPENAPI: &str = "/v1/openapi.json";
/// `GET`: Prometheus metrics.
pub const METRICS: &str = "/metrics";
/// `GET`: this node's roles.
pub const ROLES: &str = "/v1/roles";
/// `GET`: this node's services.
pub const SERVICES: &str = "/v1/services";
/// `POST`: hand a held role over.
pub const HANDOVER: &str = "/v1/roles/{role}/handover";
/// `POST`: pause a role (no automatic promotion or demotion).
pub const PAUSE: &str = "/v1/roles/{role}/pause";
/// `POST`: resume a paused role.
pub const RESUME: &str = "/v1/roles/{role}/resume";
/// `POST`: order (or cancel) a planned switchover of a role to a named candidate.
pub const SWITCHOVER: &str = "/v1/roles/{role}/switchover";
/// `GET`: 200 if this node holds the role (for load balancers).
pub const PRIMARY: &str = "/v1/roles/{role}/primary";
/// `GET`: 200 if this node is a ready replica of the role (`?lag=BYTES`).
pub const REPLICA: &str = "/v1/roles/{role}/replica";
/// `GET`: 200 if reads may go to this node (holder or ready replica).
pub const READ_ONLY: &str = "/v1/roles/{role}/read-only";
/// `GET`: 200 on a streaming standby the primary may wait for (quorum).
pub const SYNC: &str = "/v1/roles/{role}/sync";
/// `GET`: 200 on a streaming standby the primary does not wait for.
pub const ASYNC: &str = "/v1/roles/{role}/async";
/// `GET`: a role's failover history, from the control plane (`?limit=N`).
pub const HISTORY: &str = "/v1/roles/{role}/history";
/// `POST`: add a control-plane server.
pub const CONTROL_SERVERS: &str = "/v1/control/servers";
/// `POST`: remove a control-plane server.
pub const CONTROL_SERVER_REMOVE: &str = "/v1/control/servers/{id}/remove";
/// `GET`: the cluster's roles.
pub const CLUSTER_ROLES: &str = "/v1/cluster/roles";
/// `GET`: the cluster's services.
pub const CLUSTER_SERVICES: &str = "/v1/cluster/services";
/// `GET`: the drill faults set.
pub const DRILL: &str = "/v1/drill";
/// `POST`: revert drill faults.
pub const DRILL_RESTORE: &str = "/v1/drill/restore";
/// `POST`: set a drill fault.
pub const DRILL_FAULT: &str = "/v1/drill/{fault}";
/// `POST`: application traffic signals.
pub const TRAFFIC: &str = "/v1/traffic";
/// `GET`: the relay's state.
pub const RELAY: &str = "/v1/relay";
/// `GET`: the keyring's fingerprints.
pub const KEYS: &str = "/v1/keys";
/// `POST`: a key operation, fanned out to every live member.
pub const KEY_OP: &str = "/v1/keys/{op}";
/// `POST`: read the configuration file again and apply it (all or nothing).
pub const RELOAD: &str = "/v1/reload";
/// `POST`: a key operation from another agent (sealed).
pub const CLUSTER_KEY_OP: &str = "/v1/cluster/keys/{op}";

/// `path` with its `{name}` parameter replaced by `value`.
pub fn fill(path: &str, name: &str, value: &str) -> String {
    path.replace(&format!("{{{name}}}"), value)
}
