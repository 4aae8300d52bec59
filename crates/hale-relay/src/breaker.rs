//! The circuit breaker of one upstream, sans IO: the worker tells it what
//! happened and when, and asks whether a request may go.
//!
//! * **Closed**: requests flow. It opens after `failures` consecutive
//!   timeouts or failures, or when requests have been in flight for `stall`
//!   with no response at all (a half-dead sink that accepts connections and
//!   never answers is caught in `stall`, not in the request timeout).
//! * **Open**: no request until the backoff passes; the backoff doubles with
//!   each consecutive opening (1 s … 30 s) and is jittered down to half, so
//!   many relays do not probe a recovering sink in step.
//! * **Half-open**: one probe request. Success closes the breaker, failure
//!   opens it again with a longer backoff.
//!
//! A membership verdict forces it open (`force_open`: the host is dead, no
//! probes at all) until `allow_probe` lets a probe through at once.

use std::time::Duration;

use tokio::time::Instant;

use crate::counters::BreakerGauge;

/// Breaker knobs.
#[derive(Debug, Clone, Copy)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker.
    pub failures: u32,
    /// Time with requests in flight and no response that opens it.
    pub stall: Duration,
    /// Backoff after the first opening.
    pub backoff_min: Duration,
    /// Longest backoff.
    pub backoff_max: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 5,
            stall: Duration::from_secs(2),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen {
        probing: bool,
    },
    /// Forced open by a membership verdict: no probe until allowed.
    Held,
}

/// One upstream's breaker.
#[derive(Debug)]
pub(crate) struct Breaker {
    cfg: BreakerConfig,
    state: State,
    consecutive: u32,
    openings: u32,
    last_progress: Instant,
    rng: u64,
}

impl Breaker {
    pub(crate) fn new(cfg: BreakerConfig, now: Instant, seed: u64) -> Breaker {
        Breaker {
            cfg,
            state: State::Closed,
            consecutive: 0,
            openings: 0,
            last_progress: now,
            rng: seed | 1,
        }
    }

    /// The state, for metrics.
    pub(crate) fn gauge(&self) -> BreakerGauge {
        match self.state {
            State::Closed => BreakerGauge::Closed,
            State::Open { .. } | State::Held => BreakerGauge::Open,
            State::HalfOpen { .. } => BreakerGauge::HalfOpen,
        }
    }

    /// Whether a request may be sent now. Moves Open to HalfOpen once the
    /// backoff has passed. Call [`Breaker::on_send`] if one is sent.
    pub(crate) fn can_send(&mut self, now: Instant) -> bool {
        if let State::Open { until } = self.state {
            if now >= until {
                self.state = State::HalfOpen { probing: false };
            }
        }
        match self.state {
            State::Closed => true,
            State::HalfOpen { probing } => !probing,
            State::Open { .. } | State::Held => false,
        }
    }

    /// Whether requests flow freely (closed), as opposed to one probe.
    pub(crate) fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// A request was sent.
    pub(crate) fn on_send(&mut self) {
        if let State::HalfOpen { .. } = self.state {
            self.state = State::HalfOpen { probing: true };
        }
    }

    /// The upstream answered (any status that proves it is alive: 2xx, 4xx,
    /// 429).
    pub(crate) fn on_success(&mut self, now: Instant) {
        self.last_progress = now;
        self.consecutive = 0;
        match self.state {
            State::HalfOpen { .. } | State::Closed => {
                self.state = State::Closed;
                self.openings = 0;
            }
            // A late answer from before the verdict does not lift it, and an
            // open breaker waits for its probe.
            State::Open { .. } | State::Held => {}
        }
    }

    /// A request timed out or failed (connect error, 5xx).
    pub(crate) fn on_failure(&mut self, now: Instant) {
        self.last_progress = now;
        self.consecutive = self.consecutive.saturating_add(1);
        match self.state {
            State::HalfOpen { .. } => self.open(now),
            State::Closed if self.consecutive >= self.cfg.failures => self.open(now),
            _ => {}
        }
    }

    /// Opens the breaker if requests have been in flight for `stall` with no
    /// response since. `oldest` is the send time of the oldest request in
    /// flight. Returns whether it opened.
    pub(crate) fn check_stall(&mut self, now: Instant, oldest: Option<Instant>) -> bool {
        let Some(oldest) = oldest else {
            return false;
        };
        let since = oldest.max(self.last_progress);
        if self.state == State::Closed && now.saturating_duration_since(since) >= self.cfg.stall {
            self.open(now);
            return true;
        }
        false
    }

    /// The member hosting this upstream was declared dead: open, and stay
    /// open until [`Breaker::allow_probe`].
    pub(crate) fn force_open(&mut self) {
        self.state = State::Held;
    }

    /// A drill's diversion ended: forget what it taught (failures, stalls,
    /// openings) and start closed; a membership verdict (held) stays.
    pub(crate) fn reset(&mut self, now: Instant) {
        if self.state != State::Held {
            self.state = State::Closed;
            self.consecutive = 0;
            self.openings = 0;
            self.last_progress = now;
        }
    }

    /// The member is alive (again): let a probe through now.
    pub(crate) fn allow_probe(&mut self, now: Instant) {
        match self.state {
            State::Held | State::Open { .. } => {
                self.state = State::HalfOpen { probing: false };
                self.last_progress = now;
            }
            _ => {}
        }
    }

    fn open(&mut self, now: Instant) {
        let exp = self.openings.min(5);
        self.openings = self.openings.saturating_add(1);
        let full = self
            .cfg
            .backoff_min
            .saturating_mul(1 << exp)
            .min(self.cfg.backoff_max);
        // Jitter into [full/2, full].
        let frac = (self.next_rand() % 1000) as u32;
        let wait = full / 2 + (full / 2) * frac / 1000;
        self.state = State::Open { until: now + wait };
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*: enough to spread probes, no dependency.
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_probes_after_backoff() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig::default(), t0, 7);
        for _ in 0..4 {
            assert!(b.can_send(t0));
            b.on_failure(t0);
        }
        assert!(b.can_send(t0));
        b.on_failure(t0);
        assert!(!b.can_send(t0), "open after 5 failures");
        let later = t0 + Duration::from_secs(1);
        assert!(b.can_send(later), "half-open after the backoff");
        b.on_send();
        assert!(!b.can_send(later), "one probe at a time");
        b.on_success(later);
        assert!(b.is_closed());
    }

    #[test]
    fn a_stall_opens_and_a_verdict_holds() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig::default(), t0, 7);
        assert!(!b.check_stall(t0 + Duration::from_secs(1), Some(t0)));
        assert!(b.check_stall(t0 + Duration::from_secs(2), Some(t0)));
        b.force_open();
        assert!(!b.can_send(t0 + Duration::from_secs(3600)));
        b.allow_probe(t0);
        assert!(b.can_send(t0));
    }
}
