//! Drill faults: outages an operator sets on purpose, each for a duration
//! after which the agent reverts it on its own (so a drill whose driver is
//! killed leaves nothing behind once the duration is over).
//!
//! * `blackhole` — the relay's upstream is made half-dead: the agent opens a
//!   loopback TCP listener that accepts connections and never answers, and
//!   diverts the relay there ([`hale_relay::pipeline::Pipeline::divert`]).
//! * `freeze` — this agent stops answering the cluster, as a half-dead host
//!   would: the driver drops every inbound and outbound gossip packet and
//!   stream (UDP and TCP), and the role managers' requests to the control
//!   plane (acquire, renew, release) fail as if unreachable. Its timers keep
//!   running: it suspects the others, and a held role's lease runs out, so
//!   the role manager demotes itself (demote hook, then a release that is
//!   lost too), exactly as on a host whose network died; the fencing
//!   watchdog, re-armed only by renewals, would fence at the same deadline
//!   if the agent could not. The HTTP API keeps working so the drill
//!   can observe and restore. A control-plane server hosted by this agent
//!   keeps serving the other servers: the drill measures membership and
//!   role failover, not the loss of a Raft voter (kill the process for that).
//! * `slow-disk` — this agent's control-plane server takes `delay_ms`
//!   (default 300 ms, at most 10 s) longer over every durable write of its
//!   Raft log and vote, as when another writer saturates the disk and
//!   `fsync` stalls ([`hale_control::raft::ControlPlane::slow_disk`]).
//!   Everything else keeps working. 409 on an agent that hosts no server.
//! * `disk-stall` — no durable write of this agent's control-plane log and
//!   vote finishes until the fault ends: the disk stops answering for
//!   `duration_ms` ([`hale_control::raft::ControlPlane::stall_disk`]).
//!   409 on an agent that hosts no server.
//! * `quiet` — application traffic signals (`POST /v1/traffic`,
//!   [`crate::Agent::note_traffic`]) are ignored, so only probes keep
//!   members alive (the night without traffic).
//!
//! Endpoints (the POSTs behind `api_guard`, like join/leave):
//! `GET /v1/drill`, `POST /v1/drill/{fault}` with `{"duration_ms": N}` (and
//! `"delay_ms"` for `slow-disk`),
//! `POST /v1/drill/restore` with an optional `{"fault": "..."}`, and
//! `POST /v1/traffic` with `{"peers": ["name", ...]}`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use crate::http::state::AppState;
use crate::http::state::{error, json_body, ApiError};
use crate::membership::runtime::{Command, Shared};
use crate::view::{
    AgentEvent, DrillView, Fault, FaultView, RestoredView, TrafficView, DEFAULT_DISK_DELAY,
    MAX_DISK_DELAY, MAX_FAULT,
};

/// Why a fault could not be set.
#[derive(Debug, thiserror::Error)]
pub enum SetFaultError {
    /// `blackhole` on an agent without a relay.
    #[error("this agent has no relay to divert")]
    NoRelay,
    /// The black hole's listener could not be bound.
    #[error("cannot open the black hole: {0}")]
    Bind(#[from] std::io::Error),
    /// `slow-disk` on an agent that hosts no control-plane server.
    #[error("this agent hosts no control-plane server")]
    NoServer,
}

/// Sets and reverts faults (a revert may come from a timer, after the
/// request that set the fault).
#[derive(Clone)]
struct DrillState {
    shared: Arc<Shared>,
    relay: Option<hale_relay::Relay>,
    server: Option<hale_control::raft::ControlPlane>,
}

impl DrillState {
    fn of(st: &AppState) -> DrillState {
        DrillState {
            shared: st.shared.clone(),
            relay: st.relay().cloned(),
            server: st.control_server.clone(),
        }
    }

    fn event(&self, e: AgentEvent) {
        tracing::warn!(event = ?e, "drill");
        self.shared.emit(e, None);
    }

    /// Sets `f` for `length` (replacing the deadline if it is already set;
    /// `delay` is `slow-disk`'s) and schedules its revert.
    async fn set(
        &self,
        f: Fault,
        length: Duration,
        delay: Duration,
    ) -> Result<FaultView, SetFaultError> {
        let faults = &self.shared.drill();
        let mut hole = None;
        let mut divert = None;
        let already = faults.is_set(f);
        let delay = (f == Fault::SlowDisk).then_some(delay);
        if matches!(f, Fault::SlowDisk | Fault::DiskStall) {
            let server = self.server.as_ref().ok_or(SetFaultError::NoServer)?;
            match delay {
                Some(d) => server.slow_disk(d),
                None => server.stall_disk(true),
            }
        }
        if f == Fault::Blackhole && !already {
            let relay = self.relay.as_ref().ok_or(SetFaultError::NoRelay)?;
            let (addr, task) = black_hole().await?;
            relay.divert(Some(addr));
            hole = Some(task);
            divert = Some(addr.to_string());
        }
        let (view, generation) = faults.set(f, length, hole, divert, delay);
        self.event(AgentEvent::DrillSet {
            fault: f,
            duration_ms: length.as_millis() as u64,
        });
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(length).await;
            me.revert(f, Some(generation), "expired");
        });
        Ok(view)
    }

    /// Reverts `f` if it is set (and, with `generation`, only if it was not
    /// set again since). Returns whether anything changed.
    fn revert(&self, f: Fault, generation: Option<u64>, why: &str) -> bool {
        let faults = &self.shared.drill();
        let Some(hole) = faults.clear(f, generation) else {
            return false;
        };
        if let Some(h) = hole {
            h.abort();
        }
        if f == Fault::Blackhole {
            if let Some(r) = &self.relay {
                r.divert(None);
            }
        }
        match (f, &self.server) {
            (Fault::SlowDisk, Some(s)) => s.slow_disk(Duration::ZERO),
            (Fault::DiskStall, Some(s)) => s.stall_disk(false),
            _ => {}
        }
        self.event(AgentEvent::DrillRestored {
            fault: f,
            reason: why.to_owned(),
        });
        true
    }
}

/// A loopback listener that accepts connections and never answers; the
/// connections are held until the task is aborted.
async fn black_hole() -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let l = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = l.local_addr()?;
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            if held.len() < 1024 {
                held.push(s);
            }
        }
    });
    Ok((addr, task))
}

fn view(st: &AppState) -> DrillView {
    DrillView {
        node: st.shared.id().name().to_owned(),
        active: st.shared.drill().views(),
        traffic_ignored: st.shared.drill().traffic_ignored(),
    }
}

pub(crate) async fn status(State(st): State<AppState>) -> Json<DrillView> {
    Json(view(&st))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetBody {
    duration_ms: u64,
    /// `slow-disk` only.
    delay_ms: Option<u64>,
}

pub(crate) async fn set(
    State(st): State<AppState>,
    Path(fault): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let f = parse_fault(
        &fault,
        ": blackhole, freeze, quiet, slow-disk or disk-stall",
    )?;
    let req: SetBody = json_body(&body, r#"expected {"duration_ms": 5000}"#)?;
    let bad = |e: String| ApiError(StatusCode::BAD_REQUEST, e);
    let length = Duration::from_millis(req.duration_ms);
    if length.is_zero() || length > MAX_FAULT {
        let max = MAX_FAULT.as_millis();
        return Err(bad(format!("duration_ms must be 1 to {max}")));
    }
    let delay = match (f, req.delay_ms) {
        (Fault::SlowDisk, None) => DEFAULT_DISK_DELAY,
        (Fault::SlowDisk, Some(ms)) if (1..=MAX_DISK_DELAY.as_millis() as u64).contains(&ms) => {
            Duration::from_millis(ms)
        }
        (Fault::SlowDisk, Some(_)) => {
            let max = MAX_DISK_DELAY.as_millis();
            return Err(bad(format!("delay_ms must be 1 to {max}")));
        }
        (_, Some(_)) => return Err(bad("delay_ms is only for slow-disk".into())),
        (_, None) => Duration::ZERO,
    };
    Ok(match DrillState::of(&st).set(f, length, delay).await {
        Ok(v) => Json(v).into_response(),
        Err(e @ (SetFaultError::NoRelay | SetFaultError::NoServer)) => {
            error(StatusCode::CONFLICT, e.to_string())
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    })
}

/// The fault named `name`, or the answer that there is none (`more` added
/// to the message).
fn parse_fault(name: &str, more: &str) -> Result<Fault, ApiError> {
    Fault::parse(name)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no fault {name:?}{more}")))
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    fault: Option<String>,
}

pub(crate) async fn restore(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let req: RestoreBody = match body.is_empty() {
        true => RestoreBody::default(),
        false => json_body(&body, r#"expected {"fault": "freeze"} or an empty body"#)?,
    };
    let which = req.fault.map(|f| parse_fault(&f, "")).transpose()?;
    let drill = DrillState::of(&st);
    let restored = Fault::ALL
        .into_iter()
        .filter(|f| which.is_none_or(|w| w == *f))
        .filter(|f| drill.revert(*f, None, "restored"))
        .collect();
    Ok(Json(RestoredView {
        restored,
        drill: view(&st),
    })
    .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrafficBody {
    peers: Vec<String>,
}

pub(crate) async fn traffic(State(st): State<AppState>, body: Bytes) -> Result<Response, ApiError> {
    let req: TrafficBody = json_body(&body, r#"expected {"peers": ["node-name", ...]}"#)?;
    if req.peers.len() > 1024 {
        let too_many = "at most 1024 peers per request";
        return Err(ApiError(StatusCode::BAD_REQUEST, too_many.into()));
    }
    let mut noted = 0;
    for p in req.peers {
        // The driver applies `quiet`; a full queue drops the signal.
        if st.cmds.try_send(Command::NoteTraffic(p)).is_ok() {
            noted += 1;
        }
    }
    let quiet = st.shared.drill().quiet();
    Ok((StatusCode::ACCEPTED, Json(TrafficView { noted, quiet })).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_names_round_trip() {
        for f in Fault::ALL {
            assert_eq!(Fault::parse(f.as_str()), Some(f));
        }
        assert_eq!(Fault::parse("nope"), None);
    }

    #[test]
    fn metrics_show_every_fault_inactive_at_first() {
        let f = crate::membership::faults::Faults::default();
        let mut text = String::new();
        crate::http::metrics::render_drill(&mut text, "n1", &f);
        assert!(text.contains("hale_drill_fault_active{node=\"n1\",fault=\"freeze\"} 0"));
        assert!(text.contains("hale_drill_traffic_ignored_total{node=\"n1\"} 0"));
        assert!(!f.frozen() && !f.ignore_traffic());
    }
}
