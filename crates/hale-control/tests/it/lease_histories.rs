//! Randomized fault schedules against the lease protocol, on virtual time.
//!
//! Three candidates contend for a role through a control plane of three
//! servers that replicate a log the way Raft does: the leader appends a
//! request, followers append it when it reaches them, it commits once a
//! majority holds it, and followers learn of the commit later. Leaders
//! crash (the most up-to-date live server is elected after a delay, and
//! commits what its log holds; the crashed one restarts later), clocks
//! drift (each node's runs 2% fast or slow), messages take random time,
//! holders freeze (SIGSTOP: the watchdog fences them when their lease runs
//! out) and get cut off from the control plane. Every promote and demote goes
//! into a history, and the history checker must find nothing over many
//! seeds. The same model with deliberately unsafe variants must be caught.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use hale_control::{
    check, AppendClock, Grantor, HeldLease, HookEvent, HookKind, LeaseRequest, LeaseResponse,
    LeaseTable, LeaseTiming,
};
use hale_core::Time;

const ROLE: &str = "db";
const N: usize = 3;
const SERVERS: usize = 3;

/// What a newly elected leader's grantor starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Knowledge {
    /// When it appended each entry of its log (safe: what hale does).
    Appends,
    /// When it learned that entries were committed (unsafe: a renewal that
    /// committed just before the old leader died is counted too late).
    Commits,
    /// Nothing: it grants at once (unsafe).
    Nothing,
}

#[derive(Debug, Clone, Copy)]
struct Variant {
    knowledge: Knowledge,
    /// A frozen holder is fenced by its watchdog when its lease runs out
    /// (safe: true); otherwise it demotes only when it resumes.
    watchdog: bool,
}

const SAFE: Variant = Variant {
    knowledge: Knowledge::Appends,
    watchdog: true,
};

#[derive(Debug)]
enum Ev {
    Tick(usize),
    ToLeader(usize, u64, LeaseRequest, Time),
    /// An entry (index into `entries`) reaches a follower.
    Replicate(usize, usize, u64),
    /// A follower's acknowledgement of its log up to an entry reaches the leader.
    Ack(usize, u64),
    /// A follower learns the commit index.
    CommitNote(usize, usize),
    Reply(usize, u64, LeaseResponse, Time),
    RequestTimeout(usize, u64),
    Expire(usize, u64),
    Freeze(usize, Duration),
    Unfreeze(usize),
    Cut(usize, bool),
    LeaderCrash,
    Restart(usize),
    NewLeader,
}

struct Candidate {
    rate: f64,
    frozen: bool,
    cut: bool,
    held: Option<HeldLease>,
    gen: u64,
    pending: Option<u64>,
    fence_on_resume: bool,
}

struct Entry {
    req: LeaseRequest,
    from: usize,
    id: u64,
    sent_local: Time,
    term: u64,
}

struct Server {
    rate: f64,
    up: bool,
    log: Vec<usize>,
    appends: AppendClock,
    commits: AppendClock,
    commit_known: usize,
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
    servers: Vec<Server>,
    leader: Option<usize>,
    term: u64,
    entries: Vec<Entry>,
    /// Length of the committed (and applied) prefix of the log.
    committed: usize,
    /// Per server, when its replication stream is next free (keeps order).
    link_free: Vec<u64>,
    next_req: u64,
    grantor: Grantor,
    /// What the grantor of the unsafe variants reads (the safe one reads
    /// its server's own append clock).
    granting_clock: AppendClock,
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
                pending: None,
                fence_on_resume: false,
            })
            .collect();
        let servers = (0..SERVERS)
            .map(|_| Server {
                rate: rng.random_range(0.98..1.02),
                up: true,
                log: Vec::new(),
                appends: AppendClock::new(Time::ZERO),
                commits: AppendClock::new(Time::ZERO),
                commit_known: 0,
            })
            .collect();
        let mut w = World {
            v,
            timing,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            cands,
            servers,
            leader: Some(0),
            term: 1,
            entries: Vec::new(),
            committed: 0,
            link_free: vec![0; SERVERS],
            next_req: 0,
            grantor: Grantor::new(timing),
            granting_clock: AppendClock::new(Time::ZERO),
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

    fn server_now(&self, s: usize) -> Time {
        self.local(self.servers[s].rate)
    }

    /// Real time at which a clock running at `rate` shows `t`.
    fn real(t: Time, rate: f64) -> u64 {
        (t.as_nanos() as f64 / rate).ceil() as u64
    }

    fn net(&mut self) -> u64 {
        if self.rng.random_bool(0.05) {
            self.rng.random_range(5_000_000..100_000_000)
        } else {
            self.rng.random_range(100_000..5_000_000)
        }
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

    /// Appends entry `e` to server `s`'s log at its position `pos`
    /// (replacing a divergent suffix, as Raft's truncation does).
    fn append(&mut self, s: usize, pos: usize, e: usize) {
        let now = self.server_now(s);
        let srv = &mut self.servers[s];
        srv.log.truncate(pos);
        srv.log.push(e);
        srv.appends.appended(&self.entries[e].req, now);
    }

    /// Sends the leader's log from `from` on to follower `f`, in order.
    fn replicate(&mut self, f: usize, from: usize) {
        let term = self.term;
        let Some(l) = self.leader else { return };
        for pos in from..self.servers[l].log.len() {
            let at = (self.now + self.net()).max(self.link_free[f]);
            self.link_free[f] = at;
            self.push(at, Ev::Replicate(f, pos, term));
        }
    }

    /// The leader's log is committed up to `upto`: apply, and answer the
    /// requests of the current term.
    fn commit(&mut self, upto: usize) {
        let Some(l) = self.leader else { return };
        while self.committed < upto {
            let e = self.servers[l].log[self.committed];
            self.committed += 1;
            let resp = self.table.apply(&self.entries[e].req);
            let ent = &self.entries[e];
            if ent.term == self.term {
                let (from, id, sent) = (ent.from, ent.id, ent.sent_local);
                let at = self.now + self.net();
                self.push(at, Ev::Reply(from, id, resp, sent));
            }
        }
        let now = self.server_now(l);
        for pos in self.servers[l].commit_known..upto {
            let e = self.servers[l].log[pos];
            self.servers[l].commits.appended(&self.entries[e].req, now);
        }
        self.servers[l].commit_known = upto;
        for f in 0..SERVERS {
            if f != l {
                let at = self.now + self.net();
                self.push(at, Ev::CommitNote(f, upto));
            }
        }
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Tick(c) => {
                let every = (self.timing.renew_every.as_nanos() as f64 / self.cands[c].rate) as u64;
                self.push(self.now + every, Ev::Tick(c));
                let cand = &self.cands[c];
                if cand.frozen || cand.cut || cand.pending.is_some() {
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
                self.next_req += 1;
                let id = self.next_req;
                self.cands[c].pending = Some(id);
                let at = self.now + self.net();
                self.push(at, Ev::ToLeader(c, id, req, sent_local));
                // The client gives up after 1.5 s (its clock).
                let give_up = (1.5e9 / self.cands[c].rate) as u64;
                self.push(self.now + give_up, Ev::RequestTimeout(c, id));
            }
            Ev::RequestTimeout(c, id) => {
                if self.cands[c].pending == Some(id) {
                    self.cands[c].pending = None;
                }
            }
            Ev::ToLeader(from, id, req, sent_local) => {
                let Some(l) = self.leader.filter(|&l| self.servers[l].up) else {
                    return;
                };
                if self.cands[from].cut {
                    return;
                }
                let lnow = self.server_now(l);
                let req = match req {
                    LeaseRequest::Grant { role, holder, .. } => {
                        let clock = match self.v.knowledge {
                            Knowledge::Appends => &self.servers[l].appends,
                            Knowledge::Commits | Knowledge::Nothing => &self.granting_clock,
                        };
                        if self
                            .grantor
                            .may_grant(&self.table, clock, &role, lnow)
                            .is_err()
                        {
                            self.cands[from].pending = None;
                            return;
                        }
                        self.grantor.grant(&self.table, &role, &holder)
                    }
                    other => other,
                };
                self.granting_clock.appended(&req, lnow);
                self.entries.push(Entry {
                    req,
                    from,
                    id,
                    sent_local,
                    term: self.term,
                });
                let e = self.entries.len() - 1;
                let pos = self.servers[l].log.len();
                self.append(l, pos, e);
                for f in 0..SERVERS {
                    if f != l {
                        let at = (self.now + self.net()).max(self.link_free[f]);
                        self.link_free[f] = at;
                        let term = self.term;
                        self.push(at, Ev::Replicate(f, pos, term));
                    }
                }
            }
            Ev::Replicate(f, pos, term) => {
                let Some(l) = self.leader else { return };
                if term != self.term || !self.servers[f].up || !self.servers[l].up {
                    return;
                }
                if self.servers[f].log.len() < pos {
                    return; // a gap: the leader resends from the start on election
                }
                let e = self.servers[l].log[pos];
                self.append(f, pos, e);
                let at = self.now + self.net();
                self.push(at, Ev::Ack(pos + 1, term));
            }
            Ev::Ack(upto, term) => {
                let Some(l) = self.leader else { return };
                if term != self.term || !self.servers[l].up {
                    return;
                }
                // The leader and this follower hold `upto` entries: a majority.
                // (Raft commits earlier-term entries only with one of its own.)
                let own = self.servers[l].log[..upto]
                    .iter()
                    .any(|&e| self.entries[e].term == self.term);
                if upto > self.committed && own {
                    self.commit(upto);
                }
            }
            Ev::CommitNote(f, upto) => {
                if !self.servers[f].up {
                    return;
                }
                let upto = upto.min(self.servers[f].log.len());
                let now = self.server_now(f);
                for pos in self.servers[f].commit_known..upto {
                    let e = self.servers[f].log[pos];
                    self.servers[f].commits.appended(&self.entries[e].req, now);
                }
                self.servers[f].commit_known = self.servers[f].commit_known.max(upto);
            }
            Ev::Reply(to, id, resp, sent_local) => {
                if self.cands[to].pending != Some(id) {
                    return; // gave up on it
                }
                self.cands[to].pending = None;
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
                if let Some(l) = self.leader.take() {
                    self.servers[l].up = false;
                    self.term += 1;
                    let at = self.now + self.rng.random_range(300_000_000..900_000_000);
                    self.push(at, Ev::NewLeader);
                    let back = self.now + self.rng.random_range(500_000_000..5_000_000_000);
                    self.push(back, Ev::Restart(l));
                }
            }
            Ev::Restart(s) => {
                // Its log is read back from disk: append times unknown.
                let now = self.server_now(s);
                let srv = &mut self.servers[s];
                srv.up = true;
                srv.appends = AppendClock::new(now);
                srv.commits = AppendClock::new(now);
                srv.commit_known = 0;
                if self.leader.is_some() {
                    self.replicate(s, 0);
                }
            }
            Ev::NewLeader => self.elect(),
        }
    }

    /// The live server with the most up-to-date log (last entry's term,
    /// then length) wins; it commits what its log holds.
    fn elect(&mut self) {
        let last_term =
            |w: &World, s: usize| w.servers[s].log.last().map_or(0, |&e| w.entries[e].term);
        let live: Vec<usize> = (0..SERVERS).filter(|&s| self.servers[s].up).collect();
        if live.len() < 2 {
            let at = self.now + 200_000_000;
            self.push(at, Ev::NewLeader);
            return;
        }
        let l = *live
            .iter()
            .max_by_key(|&&s| (last_term(self, s), self.servers[s].log.len()))
            .expect("live servers");
        assert!(
            self.servers[l].log.len() >= self.committed,
            "the model elected a leader without every committed entry"
        );
        self.leader = Some(l);
        self.grantor = Grantor::new(self.timing);
        self.granting_clock = match self.v.knowledge {
            Knowledge::Commits => self.servers[l].commits.clone(),
            // Appends: the grantor reads the server's own clock instead.
            Knowledge::Appends | Knowledge::Nothing => AppendClock::new(Time::ZERO),
        };
        // Its first entry of the term commits everything before it (a
        // blank entry, modelled as committing at once); the rest of the
        // servers are brought in line.
        let len = self.servers[l].log.len();
        self.commit(len);
        for f in 0..SERVERS {
            if f != l && self.servers[f].up {
                self.link_free[f] = self.now;
                self.replicate(f, 0);
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
        knowledge: Knowledge::Nothing,
        ..SAFE
    };
    let caught = (0..200)
        .filter(|&s| check(&history(s, v, 5)).is_err())
        .count();
    assert!(caught > 0, "the unsafe leader was never caught");
}

#[test]
fn a_new_leader_that_times_leases_from_commits_it_learned_is_caught() {
    let v = Variant {
        knowledge: Knowledge::Commits,
        ..SAFE
    };
    // The window is narrow (a renewal committed in the last moments before
    // the leader died): about one schedule in a hundred opens it.
    let caught = (0..600)
        .filter(|&s| check(&history(s, v, 5)).is_err())
        .count();
    assert!(caught > 0, "timing from learned commits was never caught");
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
