//! Virtual time: the core never reads a clock, callers pass `now` in.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an origin chosen by the caller.
///
/// The core only ever compares and offsets `Time`s; it never asks the
/// operating system what time it is. The agent maps its monotonic clock onto
/// `Time`, the simulator its virtual clock.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

impl Time {
    /// The origin.
    pub const ZERO: Time = Time(0);
    /// A time later than any the core will ever be given ("never").
    pub const NEVER: Time = Time(u64::MAX);

    /// A time `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Time {
        Time(nanos)
    }

    /// A time `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Time {
        Time(millis.saturating_mul(1_000_000))
    }

    /// A time `secs` seconds after the origin.
    pub const fn from_secs(secs: u64) -> Time {
        Time(secs.saturating_mul(1_000_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the origin, as a float (for reports).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Time) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Time {
    type Output = Time;
    fn add(self, rhs: Duration) -> Time {
        let nanos = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_add(nanos))
    }
}

impl Sub<Duration> for Time {
    type Output = Time;
    fn sub(self, rhs: Duration) -> Time {
        let nanos = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Time(self.0.saturating_sub(nanos))
    }
}

impl fmt::Debug for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Time::NEVER {
            write!(f, "never")
        } else {
            write!(f, "{:.6}s", self.as_secs_f64())
        }
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A node's periodic timers: each has one slot in a [`TimerTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The next step of the round-robin walk (`probe.rs`).
    Probe,
    /// The next gossip round (`gossip.rs`); armed only while news is queued.
    Gossip,
    /// The next periodic push/pull sync (`sync.rs`).
    PushPull,
    /// The next contact with the seeds; armed only while alone or cut off.
    SeedRetry,
    /// The next ping to a member declared dead (`sync.rs`).
    Reconnect,
    /// The next reaping of tombstones and old bookkeeping (`sync.rs`).
    Reap,
}

impl Timer {
    const ALL: [Timer; 6] = [
        Timer::Probe,
        Timer::Gossip,
        Timer::PushPull,
        Timer::SeedRetry,
        Timer::Reconnect,
        Timer::Reap,
    ];
}

/// When each [`Timer`] fires next ([`Time::NEVER`]: not set).
///
/// Invariant: one slot per timer, nothing else; a slot keeps its value
/// while its timer is disarmed (the gossip timer while no news is queued),
/// so re-arming it with `min` behaves as it always did.
#[derive(Debug, Clone)]
pub(crate) struct TimerTable([Time; 6]);

impl TimerTable {
    /// Every timer unset.
    pub(crate) fn new() -> TimerTable {
        TimerTable([Time::NEVER; 6])
    }

    /// When `t` fires.
    pub(crate) fn get(&self, t: Timer) -> Time {
        self.0[t as usize]
    }

    /// Sets `t` to fire at `at`.
    pub(crate) fn set(&mut self, t: Timer, at: Time) {
        self.0[t as usize] = at;
    }

    /// Whether `t` is due at `now`.
    pub(crate) fn due(&self, t: Timer, now: Time) -> bool {
        now >= self.get(t)
    }

    /// The earliest of the timers that are `armed`.
    pub(crate) fn next(&self, armed: impl Fn(Timer) -> bool) -> Time {
        Timer::ALL
            .into_iter()
            .filter(|t| armed(*t))
            .map(|t| self.get(t))
            .min()
            .unwrap_or(Time::NEVER)
    }
}
