//! Randomized fault schedules against the lease protocol, on virtual time.
//!
//! Three candidates contend for a role through a control plane whose
//! leader may crash (a new one is elected after a delay). Clocks drift
//! (each node's runs 2% fast or slow), messages take random time, holders
//! freeze (SIGSTOP: the watchdog fences them when their lease runs out) and
//! get cut off from the control plane. Every promote and demote goes into a
//! history, and the history checker must find nothing, over many seeds.
//! The same model with a deliberately unsafe variant must be caught.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use hale_control::{
    check, Grantor, HeldLease, HookEvent, HookKind, LeaseRequest, LeaseResponse, LeaseTable,
    LeaseTiming,
};
use hale_core::Time;

const ROLE: &str = "db";
const N: usize = 3;

#[derive(Debug, Clone, Copy)]
struct Variant {
    /// A new leader waits one lease before granting (safe: true).
    new_leader_waits: bool,
    /// A frozen holder is fenced by its watchdog when its lease runs out
    /// (safe: true); otherwise it demotes only when it resumes.
    watchdog: bool,
}

const SAFE: Variant = Variant {
    new_leader_waits: true,
    watchdog: true,
};

#[derive(Debug)]
enum Ev {
    Tick(usize),
    ToLeader {
        from: usize,
        req: LeaseRequest,
        sent_local: Time,
    },
    Commit {
        from: usize,
        req: LeaseRequest,
        sent_local: Time,
        term: u64,
    },
    Reply {
        to: usize,
        resp: LeaseResponse,
        sent_local: Time,
    },
    Expire(usize, u64),
    Freeze(usize, Duration),
    Unfreeze(usize),
    Cut(usize, bool),
    LeaderCrash,
    NewLeader,
}

struct Candidate {
    rate: f64,
    frozen: bool,
    cut: bool,
    held: Option<HeldLease>,
    gen: u64,
    pending: bool,
    fence_on_resume: bool,
}

struct World {
    v: Variant,
    timing: LeaseTiming,
    rng: Xoshiro256PlusPlus,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    events: Vec<Option<Ev>>,
    cands: Vec<Candidate>,
    leader_rate: f64,
    leader_up: bool,
    term: u64,
    grantor: Grantor,
    table: LeaseTable,
    history: Vec<HookEvent>,
}

impl World {
    fn new(seed: u64, v: Variant) -> World {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let timing = LeaseTiming::default();
        let cands = (0..N)
            .map(|_| Candidate {
                rate: rng.random_range(0.98..1.02),
                frozen: false,
                cut: false,
                held: None,
                gen: 0,
                pending: false,
                fence_on_resume: false,
            })
            .collect();
        let leader_rate = rng.random_range(0.98..1.02);
        let mut w = World {
            v,
            timing,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            cands,
            leader_rate,
            leader_up: true,
            term: 1,
            grantor: Grantor::new(timing, Time::ZERO),
            table: LeaseTable::default(),
            history: Vec::new(),
        };
        for c in 0..N {
            let at = w.rng.random_range(0..500_000_000);
            w.push(at, Ev::Tick(c));
        }
        w
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Some(ev));
        self.queue
            .push(Reverse((at, self.seq, self.events.len() - 1)));
    }

    fn local(&self, rate: f64) -> Time {
        Time::from_nanos((self.now as f64 * rate) as u64)
    }

    /// Real time at which a clock running at `rate` shows `t`.
    fn real(t: Time, rate: f64) -> u64 {
        (t.as_nanos() as f64 / rate).ceil() as u64
    }

    fn net(&mut self) -> u64 {
        self.rng.random_range(100_000..5_000_000)
    }

    fn record(&mut self, c: usize, epoch: u64, kind: HookKind) {
        self.history.push(HookEvent {
            at_nanos: self.now,
            node: format!("c{c}"),
            role: ROLE.to_owned(),
            epoch,
            kind,
        });
    }

    fn demote(&mut self, c: usize) {
        if let Some(h) = self.cands[c].held.take() {
            self.record(c, h.epoch, HookKind::Demote);
        }
        self.cands[c].gen += 1;
    }

    fn arm_expiry(&mut self, c: usize) {
        self.cands[c].gen += 1;
        let gen = self.cands[c].gen;
        if let Some(h) = &self.cands[c].held {
            let at = World::real(h.valid_until(), self.cands[c].rate).max(self.now);
            self.push(at, Ev::Expire(c, gen));
        }
    }

    fn run(&mut self, until: Duration) {
        let end = until.as_nanos() as u64;
        self.schedule_faults(end);
        while let Some(Reverse((t, _, idx))) = self.queue.pop() {
            if t > end {
                break;
            }
            self.now = t;
            let ev = self.events[idx].take().expect("event");
            self.step(ev);
        }
    }

    fn schedule_faults(&mut self, end: u64) {
        let mut t = 5_000_000_000u64;
        while t < end {
            let fault = self.rng.random_range(0..4);
            let c = self.rng.random_range(0..N);
            let d = Duration::from_millis(self.rng.random_range(300..6000));
            match fault {
                0 => self.push(t, Ev::Freeze(c, d)),
                1 => {
                    self.push(t, Ev::Cut(c, true));
                    self.push(t + d.as_nanos() as u64, Ev::Cut(c, false));
                }
                2 => self.push(t, Ev::LeaderCrash),
                _ => {}
            }
            t += self.rng.random_range(2_000_000_000..12_000_000_000);
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Tick(c) => {
                let every = (self.timing.renew_every.as_nanos() as f64 / self.cands[c].rate) as u64;
                self.push(self.now + every, Ev::Tick(c));
                let cand = &self.cands[c];
                if cand.frozen || cand.cut || cand.pending {
                    return;
                }
                let sent_local = self.local(cand.rate);
                let req = match &cand.held {
                    Some(h) => LeaseRequest::Renew {
                        role: ROLE.into(),
                        holder: format!("c{c}"),
                        epoch: h.epoch,
                    },
                    None => LeaseRequest::Grant {
                        role: ROLE.into(),
                        holder: format!("c{c}"),
                        epoch: 0, // filled in by the leader's grantor
                    },
                };
                self.cands[c].pending = true;
                let at = self.now + self.net();
                self.push(
                    at,
                    Ev::ToLeader {
                        from: c,
                        req,
                        sent_local,
                    },
                );
            }
            Ev::ToLeader {
                from,
                req,
                sent_local,
            } => {
                if !self.leader_up || self.cands[from].cut {
                    self.cands[from].pending = false;
                    return;
                }
                let lnow = self.local(self.leader_rate);
                let req = match req {
                    LeaseRequest::Grant { role, holder, .. } => {
                        if self.grantor.may_grant(&self.table, &role, lnow).is_err() {
                            self.cands[from].pending = false;
                            return;
                        }
                        self.grantor.grant(&self.table, &role, &holder)
                    }
                    other => other,
                };
                let at = self.now + self.rng.random_range(1_000_000..30_000_000);
                let term = self.term;
                self.push(
                    at,
                    Ev::Commit {
                        from,
                        req,
                        sent_local,
                        term,
                    },
                );
            }
            Ev::Commit {
                from,
                req,
                sent_local,
                term,
            } => {
                if !self.leader_up || term != self.term {
                    self.cands[from].pending = false;
                    return; // never committed
                }
                let resp = self.table.apply(&req);
                if matches!(
                    resp,
                    LeaseResponse::Granted { .. } | LeaseResponse::Renewed { .. }
                ) {
                    let lnow = self.local(self.leader_rate);
                    self.grantor.observe(ROLE, lnow);
                }
                let at = self.now + self.net();
                self.push(
                    at,
                    Ev::Reply {
                        to: from,
                        resp,
                        sent_local,
                    },
                );
            }
            Ev::Reply {
                to,
                resp,
                sent_local,
            } => {
                self.cands[to].pending = false;
                if self.cands[to].frozen || self.cands[to].cut {
                    return;
                }
                let lnow = self.local(self.cands[to].rate);
                match resp {
                    LeaseResponse::Granted { epoch } => {
                        let h = HeldLease::granted(self.timing, ROLE, epoch, sent_local);
                        if !h.expired(lnow) && self.cands[to].held.is_none() {
                            self.cands[to].held = Some(h);
                            self.record(to, epoch, HookKind::Promote);
                            self.arm_expiry(to);
                        }
                    }
                    LeaseResponse::Renewed { epoch } => {
                        if let Some(h) = self.cands[to].held.as_mut() {
                            if h.epoch == epoch {
                                h.renewed(sent_local);
                                self.arm_expiry(to);
                            }
                        }
                    }
                    _ => {}
                }
            }
            Ev::Expire(c, gen) => {
                if self.cands[c].gen != gen {
                    return;
                }
                if self.cands[c].frozen && !self.v.watchdog {
                    self.cands[c].fence_on_resume = true;
                    return;
                }
                self.demote(c);
            }
            Ev::Freeze(c, d) => {
                self.cands[c].frozen = true;
                let at = self.now + d.as_nanos() as u64;
                self.push(at, Ev::Unfreeze(c));
            }
            Ev::Unfreeze(c) => {
                self.cands[c].frozen = false;
                if std::mem::take(&mut self.cands[c].fence_on_resume) {
                    self.demote(c);
                }
            }
            Ev::Cut(c, on) => self.cands[c].cut = on,
            Ev::LeaderCrash => {
                if self.leader_up {
                    self.leader_up = false;
                    self.term += 1;
                    let at = self.now + self.rng.random_range(150_000_000..600_000_000);
                    self.push(at, Ev::NewLeader);
                }
            }
            Ev::NewLeader => {
                self.leader_up = true;
                self.leader_rate = self.rng.random_range(0.98..1.02);
                let lnow = self.local(self.leader_rate);
                let since = if self.v.new_leader_waits {
                    lnow
                } else {
                    Time::ZERO // pretends it has been leader forever: grants at once
                };
                self.grantor = Grantor::new(self.timing, since);
            }
        }
    }
}

fn history(seed: u64, v: Variant, minutes: u64) -> Vec<HookEvent> {
    let mut w = World::new(seed, v);
    w.run(Duration::from_secs(60 * minutes));
    w.history
}

#[test]
fn no_two_holders_ever_overlap_across_many_fault_schedules() {
    let mut promotions = 0;
    for seed in 0..200 {
        let h = history(seed, SAFE, 5);
        promotions += h.iter().filter(|e| e.kind == HookKind::Promote).count();
        if let Err(e) = check(&h) {
            panic!("seed {seed}: {e}");
        }
    }
    // The schedules really did move the role around.
    assert!(promotions > 200 * 3, "only {promotions} promotions");
}

#[test]
fn a_control_plane_leader_that_grants_without_waiting_is_caught() {
    let v = Variant {
        new_leader_waits: false,
        ..SAFE
    };
    let caught = (0..200)
        .filter(|&s| check(&history(s, v, 5)).is_err())
        .count();
    assert!(caught > 0, "the unsafe leader was never caught");
}

#[test]
fn a_frozen_holder_without_a_watchdog_is_caught() {
    let v = Variant {
        watchdog: false,
        ..SAFE
    };
    let caught = (0..200)
        .filter(|&s| check(&history(s, v, 5)).is_err())
        .count();
    assert!(caught > 0, "the frozen holder was never caught");
}
