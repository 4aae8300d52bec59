//! The in-process reporter for Rust services.
//!
//! [`Reporter::report`] costs a compare-and-swap on the byte budget and a
//! slot in a bounded channel: it never blocks, never does I/O or
//! serialisation, and never allocates when it refuses (the refused event is
//! dropped where it stands and counted as `overflow`). Everything else
//! happens on the reporter's own worker thread.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::counters::Category;
use crate::envelope::{self, Envelope};
use crate::pipeline::{Owned, Payload, Pipeline, PipelineConfig, Rejected, StartError};

/// Severity, as Sentry names it (the serialized name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Debugging detail.
    Debug,
    /// Information.
    Info,
    /// A warning.
    Warning,
    /// An error.
    Error,
    /// A fatal error.
    Fatal,
}

/// An error event. Build it on the caller's thread (the only allocations
/// are the caller's own strings); it is serialised on the worker thread.
#[derive(Debug, Clone)]
pub struct Event {
    /// Severity.
    pub level: Level,
    /// The message.
    pub message: Cow<'static, str>,
    /// The logger or module that reports it.
    pub logger: Option<&'static str>,
    /// Tags: indexed key/value pairs.
    pub tags: Vec<(Cow<'static, str>, Cow<'static, str>)>,
    /// When it happened.
    pub timestamp: SystemTime,
}

impl Event {
    /// An error with a message, timestamped now.
    pub fn error(message: impl Into<Cow<'static, str>>) -> Event {
        Event {
            level: Level::Error,
            message: message.into(),
            logger: None,
            tags: Vec::new(),
            timestamp: SystemTime::now(),
        }
    }

    /// Adds a tag.
    pub fn tag(
        mut self,
        k: impl Into<Cow<'static, str>>,
        v: impl Into<Cow<'static, str>>,
    ) -> Event {
        self.tags.push((k.into(), v.into()));
        self
    }

    /// The bytes this event is accounted for in the queue: its struct and
    /// its heap strings (computed without allocating).
    pub fn accounted_bytes(&self) -> usize {
        let heap = |c: &Cow<'static, str>| match c {
            Cow::Borrowed(_) => 0,
            Cow::Owned(s) => s.capacity(),
        };
        std::mem::size_of::<Event>()
            + heap(&self.message)
            + self.tags.capacity() * std::mem::size_of::<(Cow<'static, str>, Cow<'static, str>)>()
            + self
                .tags
                .iter()
                .map(|(k, v)| heap(k) + heap(v))
                .sum::<usize>()
    }

    fn to_json(&self, event_id: &str) -> Vec<u8> {
        let ts = self
            .timestamp
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let tags: serde_json::Map<String, serde_json::Value> = self
            .tags
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(v.as_ref())))
            .collect();
        let mut v = serde_json::json!({
            "event_id": event_id,
            "timestamp": ts,
            "level": self.level,
            "platform": "other",
            "message": self.message.as_ref(),
            "sdk": { "name": "hale-relay.reporter", "version": env!("CARGO_PKG_VERSION") },
        });
        if let Some(l) = self.logger {
            v["logger"] = l.into();
        }
        if !tags.is_empty() {
            v["tags"] = tags.into();
        }
        serde_json::to_vec(&v).unwrap_or_default()
    }
}

impl Payload for Event {
    fn category(&self) -> Category {
        Category::Error
    }

    fn into_envelope(self) -> Envelope {
        let id = envelope::new_event_id();
        let body = envelope::build(&id, "event", &self.to_json(&id));
        Envelope::new(Bytes::from(body), Category::Error)
    }
}

/// The in-process reporter. Cheap to clone; dropping the last clone stops
/// the worker without waiting for it.
#[derive(Debug, Clone)]
pub struct Reporter {
    inner: Arc<Owned<Event>>,
}

impl Reporter {
    /// Starts the worker thread.
    pub fn start(cfg: PipelineConfig) -> Result<Reporter, StartError> {
        Ok(Reporter {
            inner: Arc::new(Owned(Pipeline::start(cfg)?)),
        })
    }

    /// Queues an event for delivery, or drops it (counted) if the queue is
    /// full or closed. Never blocks, does no I/O, and never allocates when
    /// it refuses.
    #[inline]
    pub fn report(&self, event: Event) -> Result<(), Rejected> {
        let bytes = event.accounted_bytes();
        self.inner.0.offer(event, bytes)
    }

    /// Prometheus text, metric names prefixed `hale_reporter_`.
    pub fn render_metrics(&self) -> String {
        self.inner.0.metrics_text("hale_reporter")
    }
}

/// The reporter's pipeline: its counters, flush, close, membership
/// verdicts on its upstreams' hosts.
impl std::ops::Deref for Reporter {
    type Target = Pipeline<Event>;

    fn deref(&self) -> &Pipeline<Event> {
        &self.inner.0
    }
}
