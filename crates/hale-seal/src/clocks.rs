//! Clocks that disagree with this process's by more than the window: the
//! offsets its clients stamp requests with, and the requests its guards
//! refused for their stamps ([`clock_report`]).

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// What this process learned about clocks that disagree with its own, on
/// both sides of its sealed calls (see [`clock_report`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockReport {
    /// Servers whose clocks this process's clock is off from by more than
    /// the window, and the offset it stamps its requests to them with.
    pub offsets: Vec<ServerOffset>,
    /// Requests this process's servers refused because their stamps were
    /// out of the window (a member whose clock is off).
    pub refused: Vec<StampsRefused>,
}

/// The offset this process applies to its wall clock for one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerOffset {
    /// The server's id.
    pub server: u64,
    /// Its address.
    pub addr: String,
    /// Its clock minus this process's, in ms (as learned).
    pub offset_ms: i64,
    /// When it was learned (this process's wall clock, ms since the epoch).
    pub learned_unix_ms: u64,
}

/// Requests a server refused for their timestamps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StampsRefused {
    /// The refusing server's id.
    pub server: u64,
    /// How many.
    pub count: u64,
    /// The last one's stamp minus the server's clock, in ms.
    pub last_skew_ms: i64,
    /// When the last one came (the server's wall clock, ms since the epoch).
    pub last_unix_ms: u64,
}

/// The process-wide record behind [`clock_report`]. Process-wide because
/// the wall clock it corrects is: every client in the process stamps with
/// the same clock, so one offset per server serves them all.
#[derive(Debug, Default)]
pub(crate) struct Clocks {
    inner: Mutex<ClockReport>,
}

pub(crate) static CLOCKS: std::sync::LazyLock<Clocks> = std::sync::LazyLock::new(Clocks::default);

impl Clocks {
    /// `now_ms` of this process's clock in server `target`'s time.
    pub(crate) fn server_time(&self, target: u64, addr: &str, now_ms: u64) -> u64 {
        let r = self.inner.lock().expect("clock record lock");
        let known = r
            .offsets
            .iter()
            .find(|o| o.server == target && o.addr == addr);
        known.map_or(now_ms, |o| now_ms.saturating_add_signed(o.offset_ms))
    }

    /// Server `server` at `addr` is `offset_ms` ahead of this process.
    pub(crate) fn note_offset(&self, server: u64, addr: &str, offset_ms: i64, now_ms: u64) {
        let mut r = self.inner.lock().expect("clock record lock");
        r.offsets
            .retain(|o| !(o.server == server && o.addr == addr));
        // Bounded: a handful of servers per cluster; the oldest goes first.
        if r.offsets.len() >= 64 {
            r.offsets.remove(0);
        }
        r.offsets.push(ServerOffset {
            server,
            addr: addr.to_owned(),
            offset_ms,
            learned_unix_ms: now_ms,
        });
    }

    /// Server `server` (this process's) refused a request stamped `skew_ms`
    /// from its clock.
    pub(crate) fn note_refused(&self, server: u64, skew_ms: i64, now_ms: u64) {
        let mut r = self.inner.lock().expect("clock record lock");
        if let Some(x) = r.refused.iter_mut().find(|x| x.server == server) {
            x.count += 1;
            x.last_skew_ms = skew_ms;
            x.last_unix_ms = now_ms;
            return;
        }
        if r.refused.len() >= 64 {
            r.refused.remove(0);
        }
        r.refused.push(StampsRefused {
            server,
            count: 1,
            last_skew_ms: skew_ms,
            last_unix_ms: now_ms,
        });
    }
}

/// What this process knows of clocks that disagree with its own by more
/// than [`crate::REPLAY_WINDOW`]: the offsets it stamps requests to each
/// server with (client side), and the requests its servers refused for
/// their stamps (server side). Empty when every clock agrees.
pub fn clock_report() -> ClockReport {
    CLOCKS.inner.lock().expect("clock record lock").clone()
}
