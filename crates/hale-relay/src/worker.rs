//! The worker: one thread with its own single-threaded tokio runtime, so
//! nothing it does (serialisation, HTTP, disk) runs on a caller's thread or
//! runtime. Each turn of its loop:
//!
//! 1. takes what callers queued, serialising it into envelopes;
//! 2. checks every breaker for a stall (requests in flight, no answer);
//! 3. sends: spooled envelopes first at the drain rate, then memory, to the
//!    primary, or to the standby while the primary is unavailable (breaker
//!    open or rate-limited); at most `max_in_flight` per upstream;
//! 4. spools what has waited too long (or, with no spool, drops what is
//!    older than `max_age`);
//! 5. sends a client report of the drops once an upstream answers again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::counters::{client_report_json, Category, DropReason};
use crate::envelope::{self, Envelope};
use crate::limits::RateLimits;
use crate::pipeline::{lock, Payload, PipelineConfig, Shared};
use crate::queue::Consumer;
use crate::spool::Spool;

const PRIMARY: usize = 0;
const STANDBY: usize = 1;
type Matrix = [[u64; Category::ALL.len()]; DropReason::ALL.len()];

#[derive(Debug)]
enum Outcome {
    Status {
        code: u16,
        retry_after: Option<String>,
        limits: Option<String>,
    },
    Timeout,
    Failed,
}

#[derive(Debug)]
enum Kind {
    /// An event; `bytes` of the memory budget (0 when read from the spool).
    Event { bytes: usize },
    /// A client report covering the drops in this matrix.
    Report(Box<Matrix>),
}

#[derive(Debug)]
struct InFlight {
    up: usize,
    env: Envelope,
    kind: Kind,
    since: Instant,
    /// Sent as the half-open probe: its failure does not count against the
    /// envelope's attempts (it would otherwise be spent on probing).
    probe: bool,
}

struct Target {
    url: Arc<str>,
    auth: Arc<str>,
}

pub(crate) struct Worker<T> {
    cfg: PipelineConfig,
    client: reqwest::Client,
    consumer: Consumer<T>,
    shared: Arc<Shared>,
    spool: Option<Spool>,
    targets: [Option<Target>; 2],
    limits: [RateLimits; 2],
    pending: VecDeque<(Envelope, usize)>,
    tasks: JoinSet<(u64, Outcome)>,
    inflight: HashMap<u64, InFlight>,
    seq: u64,
    tokens: f64,
    refilled: Instant,
    reported: Box<Matrix>,
    report_in_flight: bool,
    last_report: Option<Instant>,
}

impl<T: Payload> Worker<T> {
    pub(crate) fn new(
        cfg: PipelineConfig,
        client: reqwest::Client,
        consumer: Consumer<T>,
        shared: Arc<Shared>,
        spool: Option<Spool>,
    ) -> Worker<T> {
        let target = |u: &crate::pipeline::UpstreamConfig| Target {
            url: u.dsn.envelope_url().into(),
            auth: u.dsn.auth_header().into(),
        };
        let targets = [Some(target(&cfg.primary)), cfg.standby.as_ref().map(target)];
        Worker {
            client,
            consumer,
            shared,
            spool,
            targets,
            limits: Default::default(),
            pending: VecDeque::new(),
            tasks: JoinSet::new(),
            inflight: HashMap::new(),
            seq: 0,
            tokens: 0.0,
            refilled: Instant::now(),
            reported: Box::new([[0; Category::ALL.len()]; DropReason::ALL.len()]),
            report_in_flight: false,
            last_report: None,
            cfg,
        }
    }

    /// Runs the worker on this thread until it is closed.
    pub(crate) fn run_blocking(self) {
        let shared = self.shared.clone();
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => {
                rt.block_on(self.run());
                // Dropping a runtime waits for its blocking tasks without a
                // bound (reqwest resolves host names on them: a hung DNS
                // lookup would keep this thread, and `stopped`, waiting).
                rt.shutdown_background();
            }
            Err(e) => tracing::error!("hale-relay worker cannot start a runtime: {e}"),
        }
        *lock(&shared.stopped) = true;
        let _g = lock(&shared.lock);
        shared.progress.notify_all();
    }

    async fn run(mut self) {
        loop {
            let now = Instant::now();
            self.take_queued();
            self.check_stalls(now);
            self.expire(now);
            self.dispatch(now);
            self.publish();
            let closing = *lock(&self.shared.closing);
            let idle = self.pending.is_empty() && self.inflight.is_empty();
            if closing.is_some_and(|soft| idle || now >= soft) {
                self.shutdown().await;
                return;
            }
            let mut wait = if idle && self.spool_ready() == 0 {
                Duration::from_secs(1)
            } else {
                Duration::from_millis(20)
            };
            if let Some(soft) = closing {
                wait = wait.min(soft.saturating_duration_since(now));
            }
            if idle {
                self.consumer.budget.set_idle(true);
                // Anything queued between the last take and the flag?
                if let Some((item, bytes)) = self.consumer.pop() {
                    self.consumer.budget.set_idle(false);
                    self.push_pending(item, bytes);
                    continue;
                }
            }
            tokio::select! {
                () = self.consumer.budget.notify.notified() => {}
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    if let Ok((seq, outcome)) = done {
                        self.complete(seq, outcome);
                    }
                    // Collect every other finished request without waiting.
                    while let Some(Ok((seq, outcome))) = self.tasks.try_join_next() {
                        self.complete(seq, outcome);
                    }
                }
                () = tokio::time::sleep(wait) => {}
            }
            self.consumer.budget.set_idle(false);
        }
    }

    fn spool_ready(&self) -> usize {
        self.spool.as_ref().map_or(0, Spool::ready)
    }

    fn push_pending(&mut self, item: T, bytes: usize) {
        // Serialisation happens here, on the worker thread.
        self.pending.push_back((item.into_envelope(), bytes));
    }

    fn take_queued(&mut self) {
        while let Some((item, bytes)) = self.consumer.pop() {
            self.push_pending(item, bytes);
        }
    }

    fn check_stalls(&mut self, now: Instant) {
        let mut oldest = [None::<Instant>; 2];
        for f in self.inflight.values() {
            let o = &mut oldest[f.up];
            *o = Some(o.map_or(f.since, |t: Instant| t.min(f.since)));
        }
        let mut b = lock(&self.shared.breakers);
        for (i, o) in oldest.iter().enumerate() {
            if b[i].check_stall(now, *o) {
                tracing::warn!(upstream = i, "upstream stalled: circuit breaker opened");
            }
        }
    }

    fn in_flight_to(&self, up: usize) -> usize {
        self.inflight.values().filter(|f| f.up == up).count()
    }

    /// Where an envelope of `cat` can go now: the primary if it can take
    /// it, the standby only while the primary is unavailable (not merely
    /// busy).
    fn pick(&mut self, cat: Category, now: Instant) -> Option<usize> {
        let busy = [
            self.in_flight_to(PRIMARY) >= self.cfg.max_in_flight,
            self.in_flight_to(STANDBY) >= self.cfg.max_in_flight,
        ];
        let mut b = lock(&self.shared.breakers);
        // Closed but busy: wait for it. Open: only a probe, when a slot is free.
        let primary = !self.limits[PRIMARY].is_limited(cat, now)
            && (b[PRIMARY].is_closed() || (!busy[PRIMARY] && b[PRIMARY].can_send(now)));
        if primary {
            return (!busy[PRIMARY]).then_some(PRIMARY);
        }
        if self.targets[STANDBY].is_some()
            && !self.limits[STANDBY].is_limited(cat, now)
            && !busy[STANDBY]
            && b[STANDBY].can_send(now)
        {
            return Some(STANDBY);
        }
        None
    }

    fn all_limited(&self, cat: Category, now: Instant) -> bool {
        (0..2).all(|i| self.targets[i].is_none() || self.limits[i].is_limited(cat, now))
    }

    fn dispatch(&mut self, now: Instant) {
        // The spool's backlog, oldest first, at a bounded rate.
        if let Some(rate) = self.cfg.spool.as_ref().map(|s| f64::from(s.drain_per_sec)) {
            let burst = (self.cfg.max_in_flight as f64).max(1.0);
            self.tokens = (self.tokens
                + now.saturating_duration_since(self.refilled).as_secs_f64() * rate)
                .min(burst);
            self.refilled = now;
            while self.tokens >= 1.0 && self.spool_ready() > 0 {
                // The category is known without reading the file; any
                // category will do to learn whether an upstream is free.
                let Some(up) = self.pick(Category::Error, now) else {
                    break;
                };
                let Some(spool) = self.spool.as_mut() else {
                    break;
                };
                match spool.take_oldest() {
                    Some(Ok(env)) => {
                        self.tokens -= 1.0;
                        self.send(up, env, Kind::Event { bytes: 0 }, now);
                    }
                    Some(Err(cat)) => {
                        self.shared
                            .counters
                            .drop_event(DropReason::SpoolFull, cat, 1)
                    }
                    None => break,
                }
            }
        }
        // Memory, in order.
        while let Some(cat) = self.pending.front().map(|(env, _)| env.category) {
            // No upstream free: wait, unless every one is rate-limited.
            let up = self.pick(cat, now);
            if up.is_none() && !self.all_limited(cat, now) {
                break;
            }
            let Some((env, bytes)) = self.pending.pop_front() else {
                break;
            };
            match up {
                Some(up) => self.send(up, env, Kind::Event { bytes }, now),
                None => self.drop_env(env, bytes, DropReason::RateLimited),
            }
        }
    }

    fn send(&mut self, up: usize, env: Envelope, kind: Kind, now: Instant) {
        let Some(t) = &self.targets[up] else {
            return;
        };
        let c = &self.shared.counters;
        if up == STANDBY {
            c.failovers.fetch_add(1, Ordering::Relaxed);
        }
        let mut b = lock(&self.shared.breakers);
        let probe = !b[up].is_closed();
        b[up].on_send();
        drop(b);
        self.seq += 1;
        let seq = self.seq;
        // A drill's diversion (a black hole) replaces the upstream's address.
        let diverted = *lock(&self.shared.divert);
        let url = diverted.map_or_else(
            || t.url.to_string(),
            |a| format!("http://{a}/api/0/envelope/"),
        );
        let req = self
            .client
            .post(url)
            .header("x-sentry-auth", &*t.auth)
            .header("content-type", "application/x-sentry-envelope")
            .body(env.body.clone());
        self.tasks.spawn(async move { (seq, outcome(req).await) });
        c.requests.fetch_add(1, Ordering::Relaxed);
        self.inflight.insert(
            seq,
            InFlight {
                up,
                env,
                kind,
                since: now,
                probe,
            },
        );
    }

    fn complete(&mut self, seq: u64, outcome: Outcome) {
        let Some(InFlight {
            up,
            mut env,
            kind,
            probe,
            ..
        }) = self.inflight.remove(&seq)
        else {
            return;
        };
        let now = Instant::now();
        let c = &self.shared.counters;
        let (ok, retry_reason) = match &outcome {
            Outcome::Status { code, .. } => match code {
                200..=299 => (true, None),
                429 => (false, Some(DropReason::RateLimited)),
                400..=499 => (false, None),
                _ => (false, Some(DropReason::UpstreamError)),
            },
            Outcome::Timeout => (false, Some(DropReason::Timeout)),
            Outcome::Failed => (false, Some(DropReason::UpstreamError)),
        };
        let mut b = lock(&self.shared.breakers);
        if let Outcome::Status {
            code,
            retry_after,
            limits,
        } = &outcome
        {
            b[up].on_success(now);
            self.limits[up].update(now, *code, retry_after.as_deref(), limits.as_deref());
        }
        // Timeouts, failures and 5xx count against the breaker (429s and
        // other 4xx do not: the upstream answered).
        if matches!(
            retry_reason,
            Some(DropReason::Timeout | DropReason::UpstreamError)
        ) {
            b[up].on_failure(now);
        }
        drop(b);
        if !ok && !matches!(outcome, Outcome::Status { code: 429, .. }) {
            c.request_failures.fetch_add(1, Ordering::Relaxed);
        }
        match kind {
            Kind::Report(matrix) => {
                self.report_in_flight = false;
                if ok {
                    self.reported = matrix;
                    c.client_reports_sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            Kind::Event { bytes } => {
                if ok {
                    c.forwarded.fetch_add(1, Ordering::Relaxed);
                    self.finish(&env, bytes);
                } else if let Some(reason) = retry_reason {
                    if !probe {
                        env.attempts = env.attempts.saturating_add(1);
                    }
                    if let Some(name) = &env.spool_name {
                        // Still on disk: it will be read again.
                        if let Some(s) = self.spool.as_mut() {
                            s.put_back(name);
                        }
                    } else if env.attempts >= self.cfg.max_attempts
                        && reason != DropReason::RateLimited
                    {
                        // With a spool it waits there; without, it is dropped.
                        self.spool_or_drop(env, bytes, reason);
                    } else {
                        self.pending.push_front((env, bytes));
                    }
                } else {
                    self.drop_env(env, bytes, DropReason::Rejected);
                }
            }
        }
        if ok {
            self.maybe_report(up, now);
        }
    }

    /// After a success: report the drops not yet reported, at most every
    /// `client_report_interval`.
    fn maybe_report(&mut self, up: usize, now: Instant) {
        if self.report_in_flight
            || self
                .last_report
                .is_some_and(|t| now.saturating_duration_since(t) < self.cfg.client_report_interval)
        {
            return;
        }
        let matrix = self.shared.counters.drop_matrix();
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let Some(json) = client_report_json(&matrix, &self.reported, ts) else {
            return;
        };
        self.last_report = Some(now);
        self.report_in_flight = true;
        let body = envelope::build("", "client_report", json.as_bytes());
        let env = Envelope::new(Bytes::from(body), Category::Internal);
        self.send(up, env, Kind::Report(Box::new(matrix)), now);
    }

    /// Done with an envelope (delivered): forget it.
    fn finish(&mut self, env: &Envelope, bytes: usize) {
        if let Some(name) = &env.spool_name {
            if let Some(s) = self.spool.as_mut() {
                s.remove(name);
            }
            return;
        }
        self.consumer.budget.release(bytes);
        self.shared.finished.fetch_add(1, Ordering::SeqCst);
    }

    fn drop_env(&mut self, env: Envelope, bytes: usize, reason: DropReason) {
        self.shared.counters.drop_event(reason, env.category, 1);
        self.finish(&env, bytes);
    }

    /// Moves a memory envelope to the spool (or drops it if the spool is
    /// full). Evictions are counted.
    fn spool_or_drop(&mut self, env: Envelope, bytes: usize, otherwise: DropReason) {
        let Some(spool) = self.spool.as_mut() else {
            self.drop_env(env, bytes, otherwise);
            return;
        };
        let pushed = spool.push(&env.body, env.category);
        let c = &self.shared.counters;
        for cat in pushed.evicted {
            c.drop_event(DropReason::SpoolFull, cat, 1);
        }
        if pushed.stored {
            c.spooled.fetch_add(1, Ordering::Relaxed);
            self.finish(&env, bytes);
        } else {
            self.drop_env(env, bytes, DropReason::SpoolFull);
        }
    }

    fn expire(&mut self, now: Instant) {
        if let Some(spool) = self.spool.as_mut() {
            for cat in spool.expire() {
                self.shared.counters.drop_event(DropReason::Expired, cat, 1);
            }
        }
        let limit = if self.spool.is_some() {
            self.cfg.spool_after
        } else {
            self.cfg.max_age
        };
        let reason = {
            let b = lock(&self.shared.breakers);
            if (0..2).any(|i| self.targets[i].is_some() && b[i].is_closed()) {
                DropReason::Timeout
            } else {
                DropReason::BreakerOpen
            }
        };
        if !self
            .pending
            .iter()
            .any(|(e, _)| now.saturating_duration_since(e.since) >= limit)
        {
            return;
        }
        for (env, bytes) in std::mem::take(&mut self.pending) {
            if now.saturating_duration_since(env.since) >= limit {
                self.spool_or_drop(env, bytes, reason);
            } else {
                self.pending.push_back((env, bytes));
            }
        }
    }

    fn publish(&self) {
        let c = &self.shared.counters;
        for (i, br) in lock(&self.shared.breakers).iter().enumerate() {
            c.breaker[i].store(br.gauge() as u8, Ordering::Relaxed);
        }
        c.in_flight
            .store(self.inflight.len() as u64, Ordering::Relaxed);
        if let Some(s) = &self.spool {
            c.spool_bytes.store(s.bytes(), Ordering::Relaxed);
            c.spool_files.store(s.len() as u64, Ordering::Relaxed);
        }
        self.shared.notify_progress();
    }

    /// Closing: abandon requests in flight and spool (or drop, counted as
    /// `shutdown`) everything still in memory.
    async fn shutdown(&mut self) {
        self.tasks.abort_all();
        let inflight: Vec<InFlight> = self.inflight.drain().map(|(_, f)| f).collect();
        for f in inflight {
            match f.kind {
                Kind::Report(_) => {}
                Kind::Event { bytes } => match &f.env.spool_name {
                    Some(name) => {
                        if let Some(s) = self.spool.as_mut() {
                            s.put_back(name);
                        }
                    }
                    None => self.spool_or_drop(f.env, bytes, DropReason::Shutdown),
                },
            }
        }
        // Offers that raced with close are still taken: yield once so a
        // producer between its check and its send finishes.
        for _ in 0..2 {
            self.take_queued();
            while let Some((env, bytes)) = self.pending.pop_front() {
                self.spool_or_drop(env, bytes, DropReason::Shutdown);
            }
            tokio::task::yield_now().await;
        }
        self.publish();
        while self.tasks.join_next().await.is_some() {}
    }
}

async fn outcome(req: reqwest::RequestBuilder) -> Outcome {
    match req.send().await {
        Ok(mut resp) => {
            let h = resp.headers();
            let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
            let out = Outcome::Status {
                code: resp.status().as_u16(),
                retry_after: get("retry-after"),
                limits: get("x-sentry-rate-limits"),
            };
            // Read a bounded body so the connection can be reused.
            let mut read = 0usize;
            while let Ok(Some(chunk)) = resp.chunk().await {
                read += chunk.len();
                if read > 64 << 10 {
                    break;
                }
            }
            out
        }
        Err(e) if e.is_timeout() => Outcome::Timeout,
        Err(_) => Outcome::Failed,
    }
}
