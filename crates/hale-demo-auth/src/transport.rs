//! A Sentry transport for a DSN that points at a local hale relay: envelopes
//! are posted concurrently (at most 32 at once) from a bounded queue of
//! 10,000, instead of one at a time from the SDK's queue of 30, which drops
//! envelopes during a burst of errors. The relay answers at once, whatever
//! state the real Sentry is in, so nothing here ever waits long.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

/// Envelopes this transport could not hand to the relay.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Queues envelopes for the sender thread.
pub struct Concurrent {
    tx: mpsc::Sender<Vec<u8>>,
    in_flight: Arc<AtomicU64>,
}

impl Concurrent {
    /// Starts the sender thread for `dsn`.
    pub fn start(dsn: &sentry::types::Dsn) -> anyhow::Result<Arc<Concurrent>> {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(10_000);
        let url = dsn.envelope_api_url().to_string();
        let auth = dsn.to_auth(Some("hale-demo-auth")).to_string();
        let in_flight = Arc::new(AtomicU64::new(0));
        let counter = in_flight.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name("sentry-transport".into())
            .spawn(move || {
                rt.block_on(async move {
                    let http = reqwest::Client::builder()
                        .timeout(Duration::from_secs(5))
                        .build()
                        .expect("an HTTP client");
                    let slots = Arc::new(Semaphore::new(32));
                    while let Some(body) = rx.recv().await {
                        let permit = slots.clone().acquire_owned().await.expect("open");
                        let (http, url, auth, counter) =
                            (http.clone(), url.clone(), auth.clone(), counter.clone());
                        tokio::spawn(async move {
                            let ok = http
                                .post(&url)
                                .header("X-Sentry-Auth", auth)
                                .body(body)
                                .send()
                                .await
                                .is_ok_and(|r| r.status().is_success());
                            if !ok {
                                DROPPED.fetch_add(1, Ordering::Relaxed);
                            }
                            counter.fetch_sub(1, Ordering::Relaxed);
                            drop(permit);
                        });
                    }
                })
            })?;
        Ok(Arc::new(Concurrent { tx, in_flight }))
    }
}

impl sentry::Transport for Concurrent {
    fn send_envelope(&self, envelope: sentry::Envelope) {
        let mut body = Vec::new();
        if envelope.to_writer(&mut body).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(body).is_err() {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn flush(&self, timeout: Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        while self.in_flight.load(Ordering::Relaxed) > 0 {
            if std::time::Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }
}
