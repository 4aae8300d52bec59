//! Names clocks that disagree with this agent's by more than the control
//! plane's replay window, on both sides: a `clock-skew` event when this
//! agent learns an offset to a control-plane server (it stamps its requests
//! to it in that server's time from then on), and when its own server
//! refuses requests stamped by a member whose clock is off (that member is
//! told the server's time, sealed, and corrects). The same record is in
//! `/v1/health` (`clock`), `/metrics` and `hale status`. See
//! `hale_seal` for the correction itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use hale_seal::{clock_report, ClockReport};
use tokio::sync::watch;

use crate::membership::runtime::Shared;
use crate::view::{AgentEvent, ClockSide};

/// How often the record is read (a memory read).
const POLL: Duration = Duration::from_secs(1);
/// Least time between two server-side events for the same server: a
/// member whose clock is off is refused once per correction, but several
/// members (or a clock drifting) may keep it busy.
const SERVER_EVENT_EVERY_MS: u64 = 10_000;

/// What has been reported so far.
#[derive(Debug, Default)]
struct Reported {
    /// Per server, the offset last reported (client side).
    offsets: BTreeMap<(u64, String), (i64, u64)>,
    /// Per server, the refusal count and time last reported (server side).
    refused: BTreeMap<u64, (u64, u64)>,
}

/// The events `report` implies after `seen`, which it updates: `(server,
/// skew_ms, side)`. On the client side `skew_ms` is this host's clock minus
/// the server's; on the server side, the requester's stamp minus this
/// server's clock.
fn news(seen: &mut Reported, report: &ClockReport) -> Vec<(u64, i64, ClockSide)> {
    let mut out = Vec::new();
    for o in &report.offsets {
        let key = (o.server, o.addr.clone());
        let now = (o.offset_ms, o.learned_unix_ms);
        if seen.offsets.insert(key, now) != Some(now) {
            out.push((o.server, -o.offset_ms, ClockSide::Client));
        }
    }
    for r in &report.refused {
        let due = seen.refused.get(&r.server).is_none_or(|&(count, at)| {
            r.count > count && r.last_unix_ms >= at.saturating_add(SERVER_EVENT_EVERY_MS)
        });
        if due {
            seen.refused.insert(r.server, (r.count, r.last_unix_ms));
            out.push((r.server, r.last_skew_ms, ClockSide::Server));
        }
    }
    out
}

/// Publishes `clock-skew` events until `stop`.
pub(crate) async fn watch_clocks(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut seen = Reported::default();
    crate::membership::holders::every(POLL, &mut stop, || {
        for (server, skew_ms, side) in news(&mut seen, &clock_report()) {
            tracing::warn!(
                server,
                skew_ms,
                ?side,
                "wall clocks disagree beyond the control plane's window"
            );
            shared.emit(
                AgentEvent::ClockSkew {
                    server,
                    skew_ms,
                    side,
                },
                None,
            );
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_seal::{ServerOffset, StampsRefused};

    #[test]
    fn a_learned_offset_is_reported_once_and_again_when_it_changes() {
        let mut seen = Reported::default();
        let mut r = ClockReport {
            offsets: vec![ServerOffset {
                server: 2,
                addr: "10.0.0.2:7948".into(),
                offset_ms: 3_600_000,
                learned_unix_ms: 1_000,
            }],
            refused: vec![],
        };
        assert_eq!(
            news(&mut seen, &r),
            vec![(2, -3_600_000, ClockSide::Client)]
        );
        assert!(news(&mut seen, &r).is_empty());
        r.offsets[0].offset_ms = 3_630_000;
        r.offsets[0].learned_unix_ms = 40_000;
        assert_eq!(
            news(&mut seen, &r),
            vec![(2, -3_630_000, ClockSide::Client)]
        );
    }

    #[test]
    fn refusals_are_reported_at_most_every_ten_seconds() {
        let mut seen = Reported::default();
        let mut r = ClockReport {
            offsets: vec![],
            refused: vec![StampsRefused {
                server: 1,
                count: 1,
                last_skew_ms: 60_000,
                last_unix_ms: 1_000,
            }],
        };
        assert_eq!(news(&mut seen, &r), vec![(1, 60_000, ClockSide::Server)]);
        r.refused[0].count = 5;
        r.refused[0].last_unix_ms = 5_000;
        assert!(news(&mut seen, &r).is_empty());
        r.refused[0].last_unix_ms = 11_000;
        assert_eq!(news(&mut seen, &r), vec![(1, 60_000, ClockSide::Server)]);
    }
}
