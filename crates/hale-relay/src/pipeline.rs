//! What the reporter and the relay share: the configuration of the way
//! upstream, the state callers and the worker both see, and the handle that
//! offers, flushes and closes.
//!
//! ```text
//!  callers ──offer──▶ byte budget + sync_channel ──▶ worker thread (own tokio runtime)
//!  (never block)       (drop newest when full)        serialise, batch, breakers,
//!                                                     failover, rate limits, spool,
//!                                                     client reports ──HTTP──▶ upstreams
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::{Breaker, BreakerConfig};
use crate::counters::{Category, Counters, DropReason};
use crate::dsn::Dsn;
use crate::envelope::Envelope;
use crate::queue::{self, Producer, Refused};
use crate::spool::{Spool, SpoolError};

/// One upstream Sentry.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Where to send, and with which key.
    pub dsn: Dsn,
    /// The hale member hosting it: its death opens the breaker at once.
    pub member: Option<String>,
}

impl UpstreamConfig {
    /// An upstream with no member.
    pub fn new(dsn: Dsn) -> UpstreamConfig {
        UpstreamConfig { dsn, member: None }
    }
}

/// The disk spool.
#[derive(Debug, Clone)]
pub struct SpoolConfig {
    /// The directory (created if missing).
    pub dir: PathBuf,
    /// Cap on bytes on disk; the oldest envelopes are evicted past it.
    pub max_bytes: u64,
    /// Envelopes older than this are deleted unsent.
    pub ttl: Duration,
    /// Most envelopes read back per second once an upstream is available,
    /// so a backlog drains at a bounded rate.
    pub drain_per_sec: u32,
}

impl SpoolConfig {
    /// A spool in `dir`: 256 MiB, 24 h, 200 envelopes/s.
    pub fn new(dir: impl Into<PathBuf>) -> SpoolConfig {
        SpoolConfig {
            dir: dir.into(),
            max_bytes: 256 << 20,
            ttl: Duration::from_secs(24 * 3600),
            drain_per_sec: 200,
        }
    }
}

/// How events go upstream. `Pipeline::new(primary)` gives the defaults.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// The primary upstream.
    pub primary: UpstreamConfig,
    /// The standby, used while the primary is unavailable.
    pub standby: Option<UpstreamConfig>,
    /// Cap on bytes held in memory (queued, waiting or in flight). 8 MiB.
    pub queue_bytes: usize,
    /// Requests in flight per upstream. 4.
    pub max_in_flight: usize,
    /// TCP + TLS connect timeout. 1 s.
    pub connect_timeout: Duration,
    /// Whole-request timeout. 5 s.
    pub request_timeout: Duration,
    /// Circuit breaker knobs (5 failures or 2 s without progress).
    pub breaker: BreakerConfig,
    /// Tries per event before it is dropped (timeouts and failures). 3.
    pub max_attempts: u8,
    /// Longest an event waits in memory for an upstream (no spool). 30 s.
    pub max_age: Duration,
    /// With a spool: events that waited this long in memory go to disk. 1 s.
    pub spool_after: Duration,
    /// The disk spool, if any.
    pub spool: Option<SpoolConfig>,
    /// Least time between two client reports. 5 s.
    pub client_report_interval: Duration,
}

impl PipelineConfig {
    /// Defaults for `primary`.
    pub fn new(primary: UpstreamConfig) -> PipelineConfig {
        PipelineConfig {
            primary,
            standby: None,
            queue_bytes: 8 << 20,
            max_in_flight: 4,
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
            breaker: BreakerConfig::default(),
            max_attempts: 3,
            max_age: Duration::from_secs(30),
            spool_after: Duration::from_secs(1),
            spool: None,
            client_report_interval: Duration::from_secs(5),
        }
    }
}

/// Why the pipeline could not start. Nothing is running.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The spool directory is unusable.
    #[error(transparent)]
    Spool(#[from] SpoolError),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// The worker thread could not be spawned.
    #[error("cannot spawn the worker thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// `flush` passed its deadline. Nothing was lost: the events not yet
/// handled stay queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlushError {
    /// Events accepted before the call are still queued or in flight.
    #[error("{pending} events still pending at the deadline; they stay queued")]
    TimedOut {
        /// How many.
        pending: u64,
    },
}

/// `close` passed its deadline before the worker finished. New events were
/// already refused; the worker goes on alone and counts what it abandons as
/// `shutdown` drops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CloseError {
    /// The worker had not finished.
    #[error("the worker had not finished by the deadline ({pending} events pending)")]
    TimedOut {
        /// Events still pending.
        pending: u64,
    },
}

/// Why `offer` refused an event. It was dropped and counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The queue was full (counted as `overflow`).
    #[error("the queue is full; the event was dropped")]
    Overflow,
    /// The pipeline is closed (counted as `shutdown`).
    #[error("closed; the event was dropped")]
    Closed,
}

/// Things the worker turns into envelopes on its own thread.
pub trait Payload: Send + 'static {
    /// The category this payload is counted under before serialisation.
    fn category(&self) -> Category;
    /// Serialises into an envelope (runs on the worker thread).
    fn into_envelope(self) -> Envelope;
}

impl Payload for Envelope {
    fn category(&self) -> Category {
        self.category
    }
    fn into_envelope(self) -> Envelope {
        self
    }
}

/// State shared by the handle and the worker.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) counters: Counters,
    /// Accepted events the worker is done with (delivered, dropped, spooled).
    pub(crate) finished: AtomicU64,
    pub(crate) breakers: Mutex<[Breaker; 2]>,
    pub(crate) members: [Option<String>; 2],
    /// Set when close is called: the worker's soft deadline.
    pub(crate) closing: Mutex<Option<Instant>>,
    pub(crate) stopped: Mutex<bool>,
    pub(crate) progress: Condvar,
    pub(crate) lock: Mutex<()>,
    pub(crate) waiters: AtomicU64,
    /// Drills: while set, every request goes to this address instead of
    /// the configured upstreams (see [`Pipeline::divert`]).
    pub(crate) divert: Mutex<Option<std::net::SocketAddr>>,
}

/// Locks `m` even if a thread panicked holding it: every holder leaves
/// the state whole between statements, and the relay must keep counting.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn notify_progress(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.lock);
            self.progress.notify_all();
        }
    }
}

/// The running pipeline: offer, flush, close. Cheap to clone.
#[derive(Debug)]
pub struct Pipeline<T> {
    pub(crate) producer: Producer<T>,
    pub(crate) shared: Arc<Shared>,
}

impl<T> Clone for Pipeline<T> {
    fn clone(&self) -> Self {
        Pipeline {
            producer: self.producer.clone(),
            shared: self.shared.clone(),
        }
    }
}

/// The pipeline of a [`crate::Reporter`] or a [`crate::Relay`], owned by
/// all its clones: dropping the last one tells the worker to stop now and
/// returns at once (never joins it).
#[derive(Debug)]
pub(crate) struct Owned<T: Payload>(pub(crate) Pipeline<T>);

impl<T: Payload> Drop for Owned<T> {
    fn drop(&mut self) {
        let _ = self.0.close(Duration::ZERO);
    }
}

impl<T: Payload> Pipeline<T> {
    /// Starts the worker thread. `per_item` is the accounted size of one
    /// queue slot, used to size the slots for the byte cap.
    pub fn start(cfg: PipelineConfig) -> Result<Pipeline<T>, StartError> {
        let spool = match &cfg.spool {
            Some(s) => Some(Spool::open(&s.dir, s.max_bytes, s.ttl)?),
            None => None,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .timeout(cfg.request_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(cfg.max_in_flight)
            .build()?;
        let slots = (cfg.queue_bytes / 256).clamp(64, 1 << 16);
        let (producer, consumer) = queue::bounded::<T>(cfg.queue_bytes, slots);
        let now = Instant::now();
        let seed = crate::envelope::splitmix(
            now.elapsed().as_nanos() as u64 ^ u64::from(std::process::id()),
        );
        let shared = Arc::new(Shared {
            counters: Counters::default(),
            finished: AtomicU64::new(0),
            breakers: Mutex::new([
                Breaker::new(cfg.breaker, now, seed),
                Breaker::new(cfg.breaker, now, seed.rotate_left(17)),
            ]),
            members: [
                cfg.primary.member.clone(),
                cfg.standby.as_ref().and_then(|s| s.member.clone()),
            ],
            closing: Mutex::new(None),
            stopped: Mutex::new(false),
            progress: Condvar::new(),
            lock: Mutex::new(()),
            waiters: AtomicU64::new(0),
            divert: Mutex::new(None),
        });
        if let Some(s) = &spool {
            let c = &shared.counters;
            c.spool_bytes.store(s.bytes(), Ordering::Relaxed);
            c.spool_files.store(s.len() as u64, Ordering::Relaxed);
        }
        let worker = crate::worker::Worker::new(cfg, client, consumer, shared.clone(), spool);
        std::thread::Builder::new()
            .name("hale-relay".into())
            .spawn(move || worker.run_blocking())?;
        Ok(Pipeline { producer, shared })
    }

    /// Offers an event accounted as `bytes`. Never blocks, never allocates
    /// when refusing; a refused event is dropped and counted.
    #[inline]
    pub fn offer(&self, item: T, bytes: usize) -> Result<(), Rejected> {
        let c = &self.shared.counters;
        match self.producer.offer(item, bytes) {
            Ok(()) => {
                c.accepted.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err((item, why)) => {
                let cat = item.category();
                drop(item);
                let (reason, rejected) = match why {
                    Refused::Full => (DropReason::Overflow, Rejected::Overflow),
                    Refused::Closed => (DropReason::Shutdown, Rejected::Closed),
                };
                c.drop_event(reason, cat, 1);
                Err(rejected)
            }
        }
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Bytes held in memory now (queued, waiting or in flight).
    pub fn queue_bytes(&self) -> usize {
        self.producer.budget.used()
    }

    /// The cap on bytes held in memory.
    pub fn queue_cap(&self) -> usize {
        self.producer.budget.cap()
    }

    /// Prometheus text, metric names prefixed `prefix`.
    pub fn metrics_text(&self, prefix: &str) -> String {
        self.counters()
            .render(prefix, self.queue_bytes(), self.queue_cap())
    }

    fn pending(&self) -> u64 {
        let accepted = self.shared.counters.accepted.load(Ordering::SeqCst);
        accepted.saturating_sub(self.shared.finished.load(Ordering::SeqCst))
    }

    /// Waits until every event accepted before the call is delivered,
    /// spooled or dropped, or until `timeout` passes, whichever is first:
    /// returns by the deadline whatever the upstream does. Blocks the
    /// calling thread: from async code, call it through `spawn_blocking`.
    pub fn flush(&self, timeout: Duration) -> Result<(), FlushError> {
        let deadline = std::time::Instant::now() + timeout;
        let target = self.shared.counters.accepted.load(Ordering::SeqCst);
        self.producer.budget.wake();
        self.wait(deadline, || {
            self.shared.finished.load(Ordering::SeqCst) >= target
        })
        .then_some(())
        .ok_or(FlushError::TimedOut {
            pending: self.pending(),
        })
    }

    /// Refuses new events, gives the worker until the deadline to deliver
    /// (or spool) what is pending, and returns by `timeout` whatever the
    /// upstream does (what is left is counted as `shutdown` drops, or
    /// spooled). The worker thread is never joined without a bound.
    pub fn close(&self, timeout: Duration) -> Result<(), CloseError> {
        let deadline = std::time::Instant::now() + timeout;
        {
            let mut c = lock(&self.shared.closing);
            // The worker stops sending a little before the deadline, to
            // leave time to spool or count what is left.
            let margin = (timeout / 4).min(Duration::from_millis(100));
            let soft = Instant::now() + timeout.saturating_sub(margin);
            *c = Some(c.map_or(soft, |t| t.min(soft)));
        }
        self.producer.budget.close();
        self.wait(deadline, || *lock(&self.shared.stopped))
            .then_some(())
            .ok_or_else(|| CloseError::TimedOut {
                pending: self.pending(),
            })
    }

    /// Whether the worker has stopped.
    pub fn is_stopped(&self) -> bool {
        *lock(&self.shared.stopped)
    }

    fn wait(&self, deadline: std::time::Instant, done: impl Fn() -> bool) -> bool {
        self.shared.waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = lock(&self.shared.lock);
        let ok = loop {
            if done() {
                break true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                break false;
            }
            g = match self.shared.progress.wait_timeout(g, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        };
        drop(g);
        self.shared.waiters.fetch_sub(1, Ordering::SeqCst);
        ok
    }

    /// For drills: send every request to `to` (e.g. a black hole) instead
    /// of the configured upstreams while it is set; `None` ends the
    /// diversion. Breakers, timeouts and counters apply as usual; when the
    /// diversion ends, what it taught the breakers is set aside: they start
    /// closed again (unless held open by a membership verdict).
    pub fn divert(&self, to: Option<std::net::SocketAddr>) {
        *lock(&self.shared.divert) = to;
        if to.is_none() {
            let now = Instant::now();
            let mut b = lock(&self.shared.breakers);
            b.iter_mut().for_each(|b| b.reset(now));
        }
        self.producer.budget.wake();
    }

    /// Where requests are diverted to now, if anywhere.
    pub fn diverted(&self) -> Option<std::net::SocketAddr> {
        *lock(&self.shared.divert)
    }

    /// The member `name` was declared dead: open the breaker of every
    /// upstream it hosts, at once; they stay open until `member_alive`.
    pub fn member_dead(&self, name: &str) {
        self.with_breakers_of(name, |b| b.force_open());
    }

    /// The member `name` is alive (joined or recovered): let a probe through
    /// to every upstream it hosts now.
    pub fn member_alive(&self, name: &str) {
        let now = Instant::now();
        self.with_breakers_of(name, |b| b.allow_probe(now));
    }

    /// Applies `f` to the breaker of every upstream member `name` hosts, then
    /// wakes the worker to act on it.
    fn with_breakers_of(&self, name: &str, mut f: impl FnMut(&mut Breaker)) {
        let mut b = lock(&self.shared.breakers);
        for (i, m) in self.shared.members.iter().enumerate() {
            if m.as_deref() == Some(name) {
                f(&mut b[i]);
            }
        }
        drop(b);
        self.producer.budget.wake();
    }
}
