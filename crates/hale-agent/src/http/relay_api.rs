//! `GET /v1/relay`: the relay's state (queue and spool bytes, breaker per
//! upstream, counters, drops by reason), and the watcher that turns breaker
//! changes into `breaker` events on the event stream.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use hale_relay::{BreakerGauge, DropReason, Relay, RelayConfig, UpstreamRole};
use tokio::sync::watch;

use crate::http::state::AppState;
use crate::membership::runtime::Shared;
use crate::view::{AgentEvent, RelayView, UpstreamView};

fn target(dsn: &hale_relay::Dsn) -> String {
    // The DSN's text is scheme://key@host...: show it without the key.
    let s = dsn.to_string();
    match (s.find("://"), s.find('@')) {
        (Some(i), Some(j)) if j > i => format!("{}{}", &s[..i + 3], &s[j + 1..]),
        _ => s,
    }
}

/// The relay's state now.
pub fn relay_view(relay: &Relay, cfg: &RelayConfig) -> RelayView {
    let c = relay.counters();
    let mut upstreams = vec![(&cfg.pipeline.primary, UpstreamRole::Primary)];
    if let Some(s) = &cfg.pipeline.standby {
        upstreams.push((s, UpstreamRole::Standby));
    }
    let dropped: std::collections::BTreeMap<_, _> = DropReason::ALL
        .iter()
        .map(|r| (r.as_str().to_owned(), c.dropped(*r)))
        .collect();
    RelayView {
        queue_bytes: relay.queue_bytes() as u64,
        queue_cap: relay.queue_cap() as u64,
        spool_bytes: c.spool_bytes(),
        spool: cfg.pipeline.spool.is_some(),
        in_flight: c.in_flight(),
        accepted: c.accepted(),
        forwarded: c.forwarded(),
        spooled: c.spooled(),
        failovers: c.failovers(),
        upstreams: upstreams
            .into_iter()
            .enumerate()
            .map(|(i, (u, role))| UpstreamView {
                role,
                target: target(&u.dsn),
                member: u.member.clone(),
                breaker: c.breaker(i),
            })
            .collect(),
        dropped_total: dropped.values().sum(),
        dropped,
        diverted: relay.diverted().map(|a| a.to_string()),
    }
}

/// `GET /v1/relay`: the view, or `null` when no relay is configured.
pub(crate) async fn status(State(st): State<AppState>) -> Json<Option<RelayView>> {
    Json(st.relay.as_ref().map(|(r, c)| relay_view(r, c)))
}

/// How often breaker states are sampled for events.
const BREAKER_POLL: Duration = Duration::from_millis(100);

/// Publishes a `breaker` event (member: none; detail: upstream, role,
/// from, to) whenever an upstream's breaker changes state.
pub(crate) async fn watch_breakers(
    relay: Relay,
    cfg: Arc<RelayConfig>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    // Which upstreams there are does not change: only their gauges are read
    // on each tick.
    let upstreams = relay_view(&relay, &cfg).upstreams;
    let mut last: Vec<BreakerGauge> = (0..upstreams.len())
        .map(|i| relay.counters().breaker(i))
        .collect();
    crate::membership::holders::every(BREAKER_POLL, &mut stop, || {
        for (i, prev) in last.iter_mut().enumerate() {
            let now = relay.counters().breaker(i);
            if now == *prev {
                continue;
            }
            let u = &upstreams[i];
            shared.emit(
                AgentEvent::Breaker {
                    upstream: u.target.clone(),
                    role: u.role,
                    from: *prev,
                    to: now,
                },
                u.member.clone(),
            );
            *prev = now;
        }
    })
    .await;
}

/// Opens the breakers of upstreams on members declared dead, and probes
/// those on members that joined or recovered, until `stop`.
pub(crate) async fn follow_members(
    relay: Relay,
    mut events: tokio::sync::broadcast::Receiver<crate::view::EventView>,
    mut stop: watch::Receiver<bool>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        tokio::select! {
            e = events.recv() => match e {
                Ok(e) => {
                    let Some(m) = e.member.as_deref() else { continue };
                    match e.event {
                        AgentEvent::Dead(_) => relay.member_dead(m),
                        AgentEvent::Joined | AgentEvent::Recovered { .. } => relay.member_alive(m),
                        _ => {}
                    }
                }
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => return,
            },
            _ = stop.changed() => return,
        }
    }
}
