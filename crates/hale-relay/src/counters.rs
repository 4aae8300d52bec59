//! Exact counters: what was offered, accepted, forwarded and dropped (per
//! reason and category), rendered as Prometheus text and as Sentry client
//! reports.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

hale_core::named_enum! {
    /// Why an event was dropped. Every drop is counted under exactly one reason.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum DropReason {
        /// The in-memory queue was full (bytes or slots) when the event was
        /// offered: the newest event is dropped, the caller is never blocked.
        Overflow => "overflow",
        /// The reporter or relay was closed (or closing) before the event was
        /// delivered or spooled.
        Shutdown => "shutdown",
        /// Requests carrying the event timed out at every attempt.
        Timeout => "timeout",
        /// Requests carrying the event failed (connection refused or reset, 5xx)
        /// at every attempt.
        UpstreamError => "upstream_error",
        /// The upstream answered with a 4xx other than 429: the event itself was
        /// refused and is not retried.
        Rejected => "rejected",
        /// The event waited in memory longer than its maximum age while every
        /// upstream's circuit breaker was open (and no spool took it).
        BreakerOpen => "breaker_open",
        /// The upstream asked us to back off (429, `Retry-After`,
        /// `X-Sentry-Rate-Limits`) and no other upstream could take the event.
        RateLimited => "rate_limited",
        /// The disk spool was full: the oldest spooled event was evicted, or a
        /// new one could not be written.
        SpoolFull => "spool_full",
        /// The event stayed in the disk spool longer than its time to live.
        Expired => "expired",
    }
}

impl DropReason {
    /// The reason as Sentry's client reports name it.
    pub fn sentry_reason(self) -> &'static str {
        match self {
            DropReason::Overflow => "queue_overflow",
            DropReason::Shutdown => "internal_sdk_error",
            DropReason::Timeout
            | DropReason::UpstreamError
            | DropReason::BreakerOpen
            | DropReason::Expired => "network_error",
            DropReason::Rejected => "send_error",
            DropReason::RateLimited => "ratelimit_backoff",
            DropReason::SpoolFull => "cache_overflow",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

hale_core::named_enum! {
    /// What kind of data an envelope carries, as Sentry's rate limits and
    /// client reports categorise it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Category {
        /// An error event (`event` item).
        Error => "error",
        /// A performance transaction.
        Transaction => "transaction",
        /// Release-health sessions.
        Session => "session",
        /// An attachment.
        Attachment => "attachment",
        /// A client report or other bookkeeping: never itself reported as lost.
        Internal => "internal",
        /// Anything else.
        Default => "default",
    }
}

impl Category {
    /// The category of an envelope item type.
    pub fn of_item_type(ty: &str) -> Category {
        match ty {
            "event" => Category::Error,
            "transaction" => Category::Transaction,
            "session" | "sessions" => Category::Session,
            "attachment" => Category::Attachment,
            "client_report" => Category::Internal,
            _ => Category::Default,
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

const REASONS: usize = DropReason::ALL.len();
const CATEGORIES: usize = Category::ALL.len();

hale_core::named_enum! {
    /// Which upstream of the pipeline: events go to the primary, and to the
    /// standby while the primary's breaker is open.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum UpstreamRole {
        /// The upstream events go to first (index 0).
        Primary => "primary",
        /// The upstream events go to while the primary's breaker is open (index 1).
        Standby => "standby",
    }
}

hale_core::named_enum! {
    /// The state of an upstream's circuit breaker (metrics, the agent's API:
    /// `closed`, `open`, `half-open`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "kebab-case")]
    #[repr(u8)]
    pub enum BreakerGauge {
        /// Requests flow.
        Closed = 0 => "closed",
        /// No requests until a probe is due.
        Open = 1 => "open",
        /// One probe request is allowed.
        HalfOpen = 2 => "half-open",
    }
}

/// Counters shared by the callers, the HTTP handlers and the worker.
#[derive(Debug, Default)]
pub struct Counters {
    /// Events accepted into the queue.
    pub(crate) accepted: AtomicU64,
    /// Events the upstream acknowledged (2xx).
    pub(crate) forwarded: AtomicU64,
    /// Events written to the spool (each time; a spooled event read back and
    /// forwarded also counts as forwarded).
    pub(crate) spooled: AtomicU64,
    /// Requests sent upstream, and how they ended.
    pub(crate) requests: AtomicU64,
    pub(crate) request_failures: AtomicU64,
    pub(crate) failovers: AtomicU64,
    pub(crate) client_reports_sent: AtomicU64,
    /// Bytes currently spooled, and files.
    pub(crate) spool_bytes: AtomicU64,
    pub(crate) spool_files: AtomicU64,
    /// Requests in flight.
    pub(crate) in_flight: AtomicU64,
    /// Breaker state per upstream (0 primary, 1 standby).
    pub(crate) breaker: [AtomicU8; 2],
    dropped: [[AtomicU64; CATEGORIES]; REASONS],
    /// Overflow drops happen on callers' threads, often many at once: one
    /// cache line per stripe keeps the reject path free of contention.
    overflow: [Padded<[AtomicU64; CATEGORIES]>; STRIPES],
}

const STRIPES: usize = 16;

#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

fn stripe() -> usize {
    use std::cell::Cell;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
        s.set(v);
        v
    })
}

/// Public getters of counters kept as atomics: each one's value now.
macro_rules! getters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        $($(#[$doc])* pub fn $name(&self) -> u64 {
            self.$name.load(Ordering::Relaxed)
        })*
    };
}

impl Counters {
    pub(crate) fn drop_event(&self, reason: DropReason, cat: Category, n: u64) {
        if reason == DropReason::Overflow {
            self.overflow[stripe()].0[cat.index()].fetch_add(n, Ordering::Relaxed);
        } else {
            self.dropped[reason.index()][cat.index()].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Events dropped for `reason`, all categories.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        Category::ALL
            .iter()
            .map(|c| self.dropped_in(reason, *c))
            .sum()
    }

    /// Events dropped for `reason` in category `cat`.
    pub fn dropped_in(&self, reason: DropReason, cat: Category) -> u64 {
        let plain = self.dropped[reason.index()][cat.index()].load(Ordering::Relaxed);
        if reason == DropReason::Overflow {
            plain
                + self
                    .overflow
                    .iter()
                    .map(|s| s.0[cat.index()].load(Ordering::Relaxed))
                    .sum::<u64>()
        } else {
            plain
        }
    }

    /// Events dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        DropReason::ALL.iter().map(|r| self.dropped(*r)).sum()
    }

    getters! {
        /// Events accepted into the queue.
        accepted,
        /// Events acknowledged by an upstream.
        forwarded,
        /// Events written to the spool (cumulative).
        spooled,
        /// Bytes in the spool now.
        spool_bytes,
        /// Times a request went to the standby because the primary was unavailable.
        failovers,
        /// Client reports delivered upstream.
        client_reports_sent,
        /// Requests in flight upstream now (as of the worker's last turn).
        in_flight,
        /// Requests that failed (timeouts, connection errors, 5xx; not 429).
        request_failures,
    }

    /// The breaker state of upstream `i` (0 primary, 1 standby).
    pub fn breaker(&self, i: usize) -> BreakerGauge {
        let gauge = usize::from(self.breaker[i].load(Ordering::Relaxed));
        BreakerGauge::ALL
            .get(gauge)
            .copied()
            .unwrap_or(BreakerGauge::Closed)
    }

    /// A snapshot of the drop matrix, for client reports: `(reason, category, count)`.
    pub(crate) fn drop_matrix(&self) -> [[u64; CATEGORIES]; REASONS] {
        DropReason::ALL.map(|r| Category::ALL.map(|c| self.dropped_in(r, c)))
    }

    /// Prometheus text for every counter, names prefixed with `prefix`
    /// (e.g. `hale_relay`), queue gauges included.
    pub(crate) fn render(&self, prefix: &str, queue_bytes: usize, queue_cap: usize) -> String {
        let mut out = String::with_capacity(4096);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let counters = [
            (
                "accepted_total",
                "Events accepted into the queue.",
                self.accepted(),
            ),
            (
                "forwarded_total",
                "Events acknowledged by an upstream.",
                self.forwarded(),
            ),
            (
                "spooled_total",
                "Events written to the disk spool.",
                self.spooled(),
            ),
            (
                "requests_total",
                "Requests sent upstream.",
                load(&self.requests),
            ),
            (
                "request_failures_total",
                "Requests that timed out or failed.",
                self.request_failures(),
            ),
            (
                "failovers_total",
                "Requests sent to the standby because the primary was unavailable.",
                self.failovers(),
            ),
            (
                "client_reports_total",
                "Client reports of dropped events delivered upstream.",
                self.client_reports_sent(),
            ),
        ];
        let gauges = [
            ("in_flight", "Requests in flight.", self.in_flight()),
            ("queue_bytes", "Bytes held in memory.", queue_bytes as u64),
            (
                "queue_bytes_cap",
                "Cap on bytes held in memory.",
                queue_cap as u64,
            ),
            (
                "spool_bytes",
                "Bytes in the disk spool.",
                self.spool_bytes(),
            ),
            (
                "spool_files",
                "Envelopes in the disk spool.",
                load(&self.spool_files),
            ),
        ];
        let families = counters.map(|c| (c, "counter")).into_iter();
        for ((name, help, v), kind) in families.chain(gauges.map(|g| (g, "gauge"))) {
            let _ = writeln!(
                out,
                "# HELP {prefix}_{name} {help}\n# TYPE {prefix}_{name} {kind}\n{prefix}_{name} {v}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP {prefix}_dropped_total Events dropped, by reason and category.\n# TYPE {prefix}_dropped_total counter"
        );
        for r in DropReason::ALL {
            for c in Category::ALL {
                let v = self.dropped_in(r, c);
                if v > 0 || c == Category::Error {
                    let _ = writeln!(
                        out,
                        "{prefix}_dropped_total{{reason=\"{}\",category=\"{}\"}} {v}",
                        r.as_str(),
                        c.as_str()
                    );
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP {prefix}_breaker_state Circuit breaker: 0 closed, 1 open, 2 half-open.\n# TYPE {prefix}_breaker_state gauge"
        );
        for (i, name) in UpstreamRole::ALL.iter().enumerate() {
            let _ = writeln!(
                out,
                "{prefix}_breaker_state{{upstream=\"{name}\"}} {}",
                self.breaker(i) as u8
            );
        }
        out
    }
}

/// Builds the JSON payload of a client report from the drops not yet
/// reported (`now - already`), or `None` if there are none. Internal
/// items (client reports themselves) are never reported.
pub(crate) fn client_report_json(
    now: &[[u64; CATEGORIES]; REASONS],
    already: &[[u64; CATEGORIES]; REASONS],
    timestamp_secs: u64,
) -> Option<String> {
    let mut items = Vec::new();
    for (r, reason) in DropReason::ALL.iter().enumerate() {
        for (c, cat) in Category::ALL.iter().enumerate() {
            if *cat == Category::Internal {
                continue;
            }
            let q = now[r][c].saturating_sub(already[r][c]);
            if q > 0 {
                items.push(serde_json::json!({
                    "reason": reason.sentry_reason(),
                    "category": cat.as_str(),
                    "quantity": q,
                }));
            }
        }
    }
    if items.is_empty() {
        return None;
    }
    Some(serde_json::json!({ "timestamp": timestamp_secs, "discarded_events": items }).to_string())
}

#[cfg(test)]
mod display_tests {
    use super::*;

    #[test]
    fn names_are_padded_to_the_width_asked_for() {
        assert_eq!(format!("{:<8}|", UpstreamRole::Primary), "primary |");
        assert_eq!(format!("{:<10}|", BreakerGauge::HalfOpen), "half-open |");
    }
}
