//! Live key rotation across the cluster, without restarts (Serf's keyring
//! operations are the model).
//!
//! `POST /v1/keys/{install|use|remove}` with `{"key": "<base64>"}` (on an
//! agent's own API: token and browser guards apply) changes this agent's
//! keyring, then fans the same operation out to every live member that
//! publishes an HTTP address, at `POST /v1/cluster/keys/{op}`, and reports
//! which agents applied it. That route is for agents only: its body is
//! sealed with the cluster keyring for that agent and route (stamped,
//! used once, answered sealed to the request; see `hale_seal`),
//! so a key travels encrypted and only a holder of a current key can
//! change anyone's keys. `GET /v1/keys` lists fingerprints, never keys.
//! An agent that does not apply an operation says why as a
//! [`KeyOpError`], which also says what that leaves of its keys.
//!
//! One keyring (`SharedKeyring`) seals and opens gossip, the control plane
//! and these requests: a change applies to all of them at once. Rotation:
//! install the new key everywhere, use it everywhere, then remove the old
//! one (only once every agent has answered `use`: an agent still sealing
//! with a removed key is cut off). With `[agent] state_dir` set, every
//! change is saved to its keyring file before it takes effect (and refused
//! if it cannot be saved), and a restart comes back with those keys;
//! without it, changes live in memory until the next restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, StreamExt};

use hale_keyring::{Key, KeyringChangeError, SharedKeyring};
use hale_seal::{CallError, Guard, Sealing};

use crate::http::state::ApiError;
use crate::http::state::AppState;
use crate::membership::meta::AgentMeta;
use crate::view::{
    routes, KeyOp, KeyOpError, KeyReport, KeyRequest, KeyView, KeysView, MemberState,
};

/// How long one agent may take to answer a fanned-out key operation.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// How many agents are asked at once.
const CONCURRENCY: usize = 16;

/// The id an agent's key route is sealed for (its name, hashed as the wire
/// format hashes names).
fn agent_id(name: &str) -> u64 {
    hale_core::wire::fnv1a(name.as_bytes())
}

/// The sealing guard of the route other agents call (its route is declared
/// with the others, in [`crate::http`]); none without a keyring.
pub(super) fn peer_guard(st: &AppState) -> Option<Arc<Guard>> {
    let keys = st.keys.clone()?;
    Some(Arc::new(Guard::new(agent_id(st.me()), keys)))
}

fn view(st: &AppState, keys: &SharedKeyring) -> KeysView {
    let ring = keys.current();
    KeysView {
        node: st.me().to_owned(),
        keys: ring
            .keys()
            .iter()
            .enumerate()
            .map(|(i, k)| KeyView {
                fingerprint: k.fingerprint(),
                primary: i == 0,
            })
            .collect(),
    }
}

/// This agent's keyring, or the answer that it has none.
fn keyring(st: &AppState) -> Result<&SharedKeyring, ApiError> {
    st.keys.as_ref().ok_or_else(|| {
        ApiError(
            StatusCode::CONFLICT,
            "this agent has no keyring (insecure_plaintext = true)".into(),
        )
    })
}

pub(crate) async fn list(State(st): State<AppState>) -> Result<Response, ApiError> {
    Ok(Json(view(&st, keyring(&st)?)).into_response())
}

/// Applies `op` with `key` to `keys`.
fn apply(keys: &SharedKeyring, op: KeyOp, key: &Key) -> Result<(), KeyOpError> {
    keys.update(|ring| match op {
        KeyOp::Install => Ok(ring.installing(key.clone())),
        KeyOp::Use => ring.using(key),
        KeyOp::Remove => ring.removing(key),
    })
    .map_err(refused)
}

/// A keyring's refusal, as the API says it (the keys are unchanged).
fn refused(e: KeyringChangeError) -> KeyOpError {
    match e {
        KeyringChangeError::NotInstalled(key) => KeyOpError::NotInstalled { key },
        KeyringChangeError::IsPrimary(key) => KeyOpError::IsPrimary { key },
        KeyringChangeError::Save { path, reason } => KeyOpError::NotSaved {
            path,
            detail: reason,
        },
    }
}

/// Why a call to another agent got no usable answer, as the report says
/// it (with what that leaves of its keys).
fn unanswered(e: CallError) -> KeyOpError {
    match e {
        CallError::Unreachable(detail) => KeyOpError::Unreachable { detail },
        CallError::TimedOut(detail) => KeyOpError::TimedOut { detail },
        CallError::Refused { status, message } => KeyOpError::Refused { status, message },
        e @ (CallError::Unauthentic | CallError::TooLarge | CallError::Decode(_)) => {
            KeyOpError::BadAnswer {
                detail: e.to_string(),
            }
        }
    }
}

/// Reads an operation and its key; the error is the answer.
fn parse(op: &str, body: &[u8]) -> Result<(KeyOp, Key, bool), ApiError> {
    let op = KeyOp::parse(op).ok_or_else(|| {
        ApiError(
            StatusCode::NOT_FOUND,
            format!("no key operation {op:?}: install, use or remove"),
        )
    })?;
    let bad = |e: String| ApiError(StatusCode::BAD_REQUEST, e);
    let req: KeyRequest = serde_json::from_slice(body)
        .map_err(|e| bad(format!("expected {{\"key\": \"<base64>\"}}: {e}")))?;
    let key = Key::from_base64(&req.key).map_err(|e| bad(format!("key: {e}")))?;
    Ok((op, key, req.force))
}

pub(super) async fn peer_op(
    State(st): State<AppState>,
    Path(op): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let keys = keyring(&st)?;
    let (op, key, _) = parse(&op, &body)?;
    let answer: Result<KeysView, KeyOpError> = apply(keys, op, &key).map(|()| {
        tracing::info!(op = op.as_str(), key = %key.fingerprint(), "keyring changed by the cluster");
        view(&st, keys)
    });
    Ok(Json(answer).into_response())
}

pub(crate) async fn fan_out(
    State(st): State<AppState>,
    Path(op): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let keys = keyring(&st)?.clone();
    let (op, key, force) = parse(&op, &body)?;
    let members = st.snapshot().await.map(|s| s.members).unwrap_or_default();
    // A member that is dead but has not left may never have installed the
    // new key (cut off during the rotation): removing the old one would
    // lock it out for good when it comes back (nemesis seed 10030), and so
    // would using the new one, which it could not open (seed 90064: `use`
    // while a member's host was frozen; it came back unable to read
    // anyone).
    let dead: Vec<&str> = members
        .iter()
        .filter(|m| !m.is_self && m.state == MemberState::Dead)
        .map(|m| m.name.as_str())
        .collect();
    let (done, undo) = match op {
        KeyOp::Install => ("installed", "installs it"),
        KeyOp::Use => ("used", "uses it"),
        KeyOp::Remove => ("removed", "removes it"),
    };
    if op != KeyOp::Install && !force && !dead.is_empty() {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!(
                "not {done}: {} dead and not left (it may not have the new key, and would be \
                 locked out when it comes back): bring it back and repeat `install` and `use`, \
                 or make it leave; --force {undo} anyway",
                dead.join(", ")
            ),
        ));
    }
    let peers: Vec<(String, Option<String>)> = members
        .iter()
        .filter(|m| !m.is_self && m.state.is_live())
        .map(|m| {
            (
                m.name.clone(),
                AgentMeta::parse(&m.meta).and_then(|p| p.http),
            )
        })
        .collect();
    // What every live member must have done for this change to lock
    // nobody out, told to each again first (both steps are idempotent),
    // and the change made only when each one confirmed it:
    // * a `use`: the key installed. A member that missed the `install` (cut
    //   off, its API too slow) could not open what the others seal once
    //   they use the key.
    // * a `remove`: the key in use used. A member that missed the `use`
    //   (cut off one way, its answer lost) still seals with the key being
    //   removed: once it is gone from the others, that member is locked out.
    let current = keys.current();
    let before = match op {
        KeyOp::Use => {
            // Not installed here: refused before anyone is told anything.
            current
                .using(&key)
                .map_err(|e| ApiError(StatusCode::CONFLICT, refused(e).to_string()))?;
            Some((KeyOp::Install, key.clone(), "having the key"))
        }
        KeyOp::Remove if current.primary() != &key => Some((
            KeyOp::Use,
            current.primary().clone(),
            "using the key in use",
        )),
        _ => None,
    };
    if let Some((step, with, what)) = before.filter(|_| !force) {
        let unconfirmed: Vec<String> = tell(&st, &keys, &peers, step, &with)
            .await
            .into_iter()
            .filter_map(|(name, r)| r.err().map(|e| format!("{name} ({e})")))
            .collect();
        if !unconfirmed.is_empty() {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!(
                    "not {done}: {} did not confirm {what} ({}): it would be locked out; \
                     repeat `install` and `use` once it answers, or make it leave; --force \
                     {undo} anyway",
                    unconfirmed.join(", "),
                    with.fingerprint()
                ),
            ));
        }
    }
    // This agent first: a refused change (use of a key not installed,
    // removal of the primary) goes no further.
    apply(&keys, op, &key).map_err(|e| ApiError(StatusCode::CONFLICT, e.to_string()))?;
    tracing::info!(op = op.as_str(), key = %key.fingerprint(), "keyring changed; telling the cluster");
    let answers = tell(&st, &keys, &peers, op, &key).await;
    let mut report = KeyReport {
        op,
        key: key.fingerprint(),
        agents: answers.len() + 1,
        ok: vec![st.me().to_owned()],
        failed: BTreeMap::new(),
    };
    for (name, r) in answers {
        match r {
            Ok(()) => report.ok.push(name),
            Err(e) => drop(report.failed.insert(name, e)),
        }
    }
    report.ok.sort();
    Ok(Json(report).into_response())
}

/// Tells each of `peers` (name, HTTP address) to apply `op` with `key`, on
/// the agents' sealed route (sealed with `keys`), at most
/// [`CONCURRENCY`] at once: what each answered.
async fn tell(
    st: &AppState,
    keys: &SharedKeyring,
    peers: &[(String, Option<String>)],
    op: KeyOp,
    key: &Key,
) -> Vec<(String, Result<(), KeyOpError>)> {
    let sealing = Sealing::Sealed(keys.clone());
    let req = KeyRequest {
        key: key.to_base64(),
        force: false,
    };
    let path = routes::fill(routes::CLUSTER_KEY_OP, "op", op.as_str());
    let (client, sealing, req, path) = (&st.peers.client, &sealing, &req, &path);
    stream::iter(peers.iter().cloned())
        .map(|(name, http)| async move {
            let Some(addr) = http else {
                return (name, Err(KeyOpError::NoAddress));
            };
            let r = hale_seal::call::<_, Result<KeysView, KeyOpError>>(
                client,
                sealing,
                agent_id(&name),
                &addr,
                path,
                req,
                PEER_TIMEOUT,
            )
            .await;
            (name, r.map_err(unanswered).and_then(|r| r.map(drop)))
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}
