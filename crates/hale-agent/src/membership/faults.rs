//! The drill faults set on one agent (see [`crate::http::drill`] for what each
//! does): the flags the driver reads on every packet, and the active
//! faults with their deadlines.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::view::{unix_ms, Fault, FaultView};

#[derive(Debug)]
struct Active {
    view: FaultView,
    generation: u64,
    /// The black hole's acceptor (dropping the handle does not stop it).
    hole: Option<tokio::task::JoinHandle<()>>,
}

/// The drill faults of one agent; read by the driver on every packet.
#[derive(Debug, Default)]
pub struct Faults {
    frozen: Arc<AtomicBool>,
    quiet: AtomicBool,
    traffic_ignored: AtomicU64,
    generation: AtomicU64,
    active: Mutex<BTreeMap<Fault, Active>>,
}

impl Faults {
    /// Whether cluster traffic is being dropped (`freeze`).
    pub fn frozen(&self) -> bool {
        self.frozen.load(Ordering::Relaxed)
    }

    /// The freeze flag itself, for the control-plane client of role managers.
    pub fn frozen_flag(&self) -> Arc<AtomicBool> {
        self.frozen.clone()
    }

    /// Whether application traffic signals are being ignored (`quiet`);
    /// counts the signal as ignored if so.
    pub fn ignore_traffic(&self) -> bool {
        let q = self.quiet.load(Ordering::Relaxed);
        if q {
            self.traffic_ignored.fetch_add(1, Ordering::Relaxed);
        }
        q
    }

    /// The active faults.
    pub fn views(&self) -> Vec<FaultView> {
        let a = self.active.lock().expect("drill lock");
        a.values().map(|a| a.view.clone()).collect()
    }

    fn flag(&self, f: Fault, on: bool) {
        match f {
            Fault::Freeze => self.frozen.store(on, Ordering::Relaxed),
            Fault::Quiet => self.quiet.store(on, Ordering::Relaxed),
            Fault::Blackhole | Fault::SlowDisk | Fault::DiskStall => {}
        }
    }

    /// Whether `quiet` is set (without counting a signal).
    pub(crate) fn quiet(&self) -> bool {
        self.quiet.load(Ordering::Relaxed)
    }

    /// Whether `f` is set.
    pub(crate) fn is_set(&self, f: Fault) -> bool {
        self.active.lock().expect("drill lock").contains_key(&f)
    }

    /// Application traffic signals ignored so far.
    pub(crate) fn traffic_ignored(&self) -> u64 {
        self.traffic_ignored.load(Ordering::Relaxed)
    }

    /// Sets `f` until `length` from now (a new deadline if it is already
    /// set; `hole` and `divert` are kept only if it is new, `delay` is
    /// replaced) and raises its flag: its view, and the generation a revert
    /// must name.
    pub(crate) fn set(
        &self,
        f: Fault,
        length: Duration,
        hole: Option<JoinHandle<()>>,
        divert: Option<String>,
        delay: Option<Duration>,
    ) -> (FaultView, u64) {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let now = unix_ms();
        let view = {
            let mut a = self.active.lock().expect("drill lock");
            let e = a.entry(f).or_insert_with(|| Active {
                view: FaultView {
                    fault: f,
                    since_unix_ms: now,
                    until_unix_ms: 0,
                    divert,
                    delay_ms: None,
                },
                generation,
                hole,
            });
            e.generation = generation;
            e.view.delay_ms = delay.map(|d| d.as_millis() as u64);
            e.view.until_unix_ms = now + length.as_millis() as u64;
            e.view.clone()
        };
        self.flag(f, true);
        (view, generation)
    }

    /// Clears `f` if it is set (and, with `generation`, only if it was not
    /// set again since) and lowers its flag: None if nothing was cleared,
    /// else its black hole's acceptor, if it had one.
    pub(crate) fn clear(
        &self,
        f: Fault,
        generation: Option<u64>,
    ) -> Option<Option<JoinHandle<()>>> {
        let removed = {
            let mut a = self.active.lock().expect("drill lock");
            match a.get(&f) {
                Some(e) if generation.is_none_or(|g| g == e.generation) => a.remove(&f),
                _ => None,
            }
        }?;
        self.flag(f, false);
        Some(removed.hole)
    }
}
