//! The agents of the model: how each carries out its holder's actions
//! (requests, hooks, the watchdog), and the faults that befall them.

use std::time::Duration;

use rand::Rng;

use hale_control::{Action, Holder, HookExit, HookId, HookKind, ServiceStatus};
use hale_core::Time;

use super::*;

impl World {
    pub(super) fn new(seed: u64, v: Variant, faults: bool) -> World {
        World::with_timing(seed, v, faults, LeaseTiming::default())
    }

    pub(super) fn with_timing(seed: u64, v: Variant, faults: bool, timing: LeaseTiming) -> World {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        // With faults, some promotions outlive the hook timeout; in the
        // steady state none does.
        let hook_timeout = Duration::from_secs(if faults { 4 } else { 10 });
        let nodes = (0..N)
            .map(|c| Node {
                rate: rng.random_range(0.98..1.02),
                frozen: false,
                cut: false,
                crashed: false,
                life: 0,
                wake_gen: 0,
                holder: Holder::new(config(c, timing, hook_timeout), Time::ZERO),
                deferred: Vec::new(),
                hooks: BTreeMap::new(),
                watchdog: None,
                failing: false,
                holding: None,
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
            nodes,
            servers,
            leader: Some(0),
            term: 1,
            entries: Vec::new(),
            committed: 0,
            link_free: vec![0; SERVERS],
            grantor: Grantor::new(timing),
            granting_clock: AppendClock::new(Time::ZERO),
            table: LeaseTable::default(),
            procs: Vec::new(),
            holdings: Vec::new(),
            violations: Vec::new(),
            next_wd: 0,
            faults,
            hook_timeout,
        };
        for c in 0..N {
            let at = w.rng.random_range(0..500 * MS);
            w.push(at, Ev::Input(c, 0, Input::Checks(true)));
        }
        w
    }

    pub(super) fn push(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Some(ev));
        self.queue
            .push(Reverse((at.max(self.now), self.seq, self.events.len() - 1)));
    }

    pub(super) fn local(&self, rate: f64) -> Time {
        Time::from_nanos((self.now as f64 * rate) as u64)
    }

    pub(super) fn node_now(&self, c: usize) -> Time {
        self.local(self.nodes[c].rate)
    }

    pub(super) fn server_now(&self, s: usize) -> Time {
        self.local(self.servers[s].rate)
    }

    /// Real time at which a clock running at `rate` shows `t`.
    pub(super) fn real(t: Time, rate: f64) -> u64 {
        let mut at = (t.as_nanos() as f64 / rate).ceil() as u64;
        // Float rounding: the node's clock (`local`) must read at least `t`
        // then, or a holder woken a nanosecond early asks for the same
        // deadline again and the world wakes it at the same instant forever.
        while ((at as f64 * rate) as u64) < t.as_nanos() {
            at += 1;
        }
        at
    }

    pub(super) fn net(&mut self) -> u64 {
        if self.rng.random_bool(0.05) {
            self.rng.random_range(5 * MS..100 * MS)
        } else {
            self.rng.random_range(100_000..5 * MS)
        }
    }

    pub(super) fn lost(&mut self) -> bool {
        self.faults && self.rng.random_bool(0.02)
    }

    pub(super) fn run(&mut self, until: Duration) {
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

    pub(super) fn schedule_faults(&mut self, end: u64) {
        if !self.faults {
            return;
        }
        let mut t = 5 * SEC;
        while t < end {
            let c = self.rng.random_range(0..N);
            let d = self.rng.random_range(300..6000) * MS;
            match self.rng.random_range(0..8) {
                0 | 1 => self.push(t, Ev::Freeze(c, Duration::from_nanos(d))),
                2 => {
                    self.push(t, Ev::Cut(c, true));
                    self.push(t + d, Ev::Cut(c, false));
                }
                3 => self.push(t, Ev::LeaderCrash),
                4 => {
                    self.push(t, Ev::Crash(c));
                    self.push(t + d, Ev::Restart(c));
                }
                5 => {
                    self.push(t, Ev::Failing(c, true));
                    self.push(t + d, Ev::Failing(c, false));
                }
                6 => self.push(t, Ev::Handover(c)),
                _ => {
                    let cut = self.rng.random_bool(0.5);
                    self.push(t, Ev::HolderAndLeader(Duration::from_nanos(d), cut));
                }
            }
            t += self.rng.random_range(2 * SEC..10 * SEC);
        }
    }

    /// Whether the agent's loop is blocked on its promote hook (the
    /// `BlocksOnHooks` executor).
    pub(super) fn blocked(&self, c: usize) -> bool {
        self.v.executor == Executor::BlocksOnHooks
            && self.nodes[c]
                .hooks
                .values()
                .any(|&p| self.procs[p].alive && self.procs[p].kind == HookKind::Promote)
    }

    /// Hands `input` to agent `c` (of life `life`), or keeps it until the
    /// agent can take it.
    pub(super) fn deliver(&mut self, c: usize, life: u64, input: Input) {
        let n = &self.nodes[c];
        if n.life != life || n.crashed {
            return;
        }
        let unblocks = matches!(&input, Input::HookExit(id, _)
            if n.hooks.get(id).is_some_and(|&p| self.procs[p].kind == HookKind::Promote));
        if n.frozen || (self.blocked(c) && !unblocks) {
            self.nodes[c].deferred.push(input);
            return;
        }
        self.feed(c, input);
        if unblocks && self.v.executor == Executor::BlocksOnHooks {
            self.drain_deferred(c);
        }
    }

    pub(super) fn drain_deferred(&mut self, c: usize) {
        let pending = std::mem::take(&mut self.nodes[c].deferred);
        for input in pending {
            if self.nodes[c].frozen || self.blocked(c) {
                self.nodes[c].deferred.push(input);
            } else {
                self.feed(c, input);
            }
        }
        if !self.nodes[c].frozen && !self.blocked(c) {
            let now = self.node_now(c);
            self.nodes[c].holder.handle_timeout(now);
            self.carry_out(c);
        }
    }

    pub(super) fn feed(&mut self, c: usize, input: Input) {
        let now = self.node_now(c);
        let h = &mut self.nodes[c].holder;
        match input {
            Input::Response(id, r) => h.handle_response(now, id, r),
            Input::HookExit(id, exit) => {
                let p = self.nodes[c].hooks.remove(&id);
                self.nodes[c].holder.handle_hook_exit(now, id, exit);
                let promote = p.is_some_and(|p| self.procs[p].kind == HookKind::Promote);
                if promote && self.v.executor == Executor::ArmsWatchdogOnHooks {
                    self.arm(c, now + self.timing.lease);
                }
            }
            Input::WatchdogReleased(fenced) => h.handle_watchdog_released(now, fenced),
            Input::Checks(ok) => {
                let failing_since = (!ok).then_some(now);
                h.handle_checks(
                    now,
                    ServiceStatus {
                        healthy: ok,
                        ready: true,
                        failing_since,
                    },
                );
            }
            Input::Handover => h.handle_handover(now, None),
        }
        self.carry_out(c);
    }

    /// Carries out the holder's actions, the way the agent does (or the
    /// way a broken executor would), and schedules its next wake.
    pub(super) fn carry_out(&mut self, c: usize) {
        while let Some(a) = self.nodes[c].holder.poll_action() {
            self.act(c, a);
        }
        self.note_lease(c);
        let n = &mut self.nodes[c];
        n.wake_gen += 1;
        let gen = n.wake_gen;
        if let Some(t) = n.holder.poll_timeout() {
            let at = World::real(t, n.rate);
            self.push(at, Ev::Wake(c, gen));
        }
    }

    /// Keeps the holding's lease end up to date.
    pub(super) fn note_lease(&mut self, c: usize) {
        let n = &self.nodes[c];
        if let (Some(h), Some(until)) = (n.holding, n.holder.lease_valid_until()) {
            if Some(self.holdings[h].epoch) == n.holder.epoch() {
                let real = World::real(until, n.rate);
                let hd = &mut self.holdings[h];
                hd.lease_end = hd.lease_end.max(real);
            }
        }
    }

    pub(super) fn act(&mut self, c: usize, a: Action) {
        let life = self.nodes[c].life;
        match a {
            Action::Send {
                id,
                request,
                deadline,
            } => {
                let give_up = World::real(deadline, self.nodes[c].rate);
                self.push(give_up, Ev::Input(c, life, Input::Response(id, None)));
                if !self.nodes[c].cut && !self.lost() {
                    let at = self.now + self.net();
                    self.push(at, Ev::ToLeader(c, life, id, request));
                }
            }
            Action::StartHook {
                id, kind, epoch, ..
            } => self.start_hook(c, id, kind, epoch),
            Action::KillHook { id } => {
                let Some(&p) = self.nodes[c].hooks.get(&id) else {
                    return;
                };
                let skip = self.v.executor == Executor::DemoteWithoutKill
                    && self.procs[p].kind == HookKind::Promote;
                if !skip {
                    self.end_proc(p, true);
                }
                self.push(
                    self.now + MS,
                    Ev::Input(c, life, Input::HookExit(id, HookExit::Killed)),
                );
            }
            Action::StartWatchdog { deadline, .. } => {
                self.next_wd += 1;
                let gen = self.next_wd;
                let promote = None;
                self.nodes[c].watchdog = Some(Watchdog {
                    gen,
                    armed: self.v.watchdog,
                    deadline,
                    holding: None,
                    promote,
                    fence: Fence::No,
                    asked: false,
                });
                let at = World::real(deadline, self.nodes[c].rate);
                self.push(at, Ev::WatchdogDeadline(c, gen));
            }
            Action::ArmWatchdog { deadline } => self.arm(c, deadline),
            Action::DisarmWatchdog => {
                let Some(wd) = self.nodes[c].watchdog.as_mut() else {
                    self.push(
                        self.now + MS,
                        Ev::Input(c, life, Input::WatchdogReleased(false)),
                    );
                    return;
                };
                if !self.v.claims {
                    wd.armed = false;
                }
                // At the worst moment: the agent freezes just after asking,
                // before it can start its demote.
                if self.faults && self.rng.random_bool(0.1) {
                    let d = self.rng.random_range(1500..4000) * MS;
                    self.push(self.now + MS / 2, Ev::Freeze(c, Duration::from_nanos(d)));
                }
                let Some(wd) = self.nodes[c].watchdog.as_mut() else {
                    return;
                };
                match wd.fence {
                    Fence::Running(_) => wd.asked = true,
                    Fence::Done => self.push(
                        self.now + MS,
                        Ev::Input(c, life, Input::WatchdogReleased(true)),
                    ),
                    Fence::No => self.push(
                        self.now + MS,
                        Ev::Input(c, life, Input::WatchdogReleased(false)),
                    ),
                }
            }
            Action::StopWatchdog | Action::KeepWatchdog => self.nodes[c].watchdog = None,
            Action::Event(_) => {}
        }
    }

    pub(super) fn arm(&mut self, c: usize, deadline: Time) {
        self.next_wd += 1;
        let gen = self.next_wd;
        let rate = self.nodes[c].rate;
        if let Some(wd) = self.nodes[c].watchdog.as_mut() {
            if wd.fence == Fence::No && wd.armed {
                wd.deadline = deadline;
                wd.gen = gen;
                let at = World::real(deadline, rate);
                self.push(at, Ev::WatchdogDeadline(c, gen));
            }
        }
    }

    pub(super) fn start_hook(&mut self, c: usize, id: HookId, kind: HookKind, epoch: u64) {
        let life = self.nodes[c].life;
        let holding = match kind {
            HookKind::Promote => {
                self.holdings.push(Holding {
                    node: c,
                    epoch,
                    start: self.now,
                    promote_end: None,
                    stop_start: None,
                    stop_end: None,
                    lost: false,
                    lease_end: 0,
                    stops: 0,
                    crashed: false,
                    claim: Claim::Free,
                    waiting: Vec::new(),
                });
                let h = self.holdings.len() - 1;
                self.nodes[c].holding = Some(h);
                if let Some(wd) = self.nodes[c].watchdog.as_mut() {
                    wd.holding = Some(h);
                }
                Some(h)
            }
            HookKind::Demote => {
                let h = self.nodes[c].holding;
                let claim = h.filter(|_| self.v.claims).map(|h| self.holdings[h].claim);
                match claim {
                    Some(Claim::Held(_)) => {
                        // It waits for the other side's run to end.
                        let p = self.new_proc(c, Some(id), life, kind, None);
                        self.holdings[h.unwrap_or_default()]
                            .waiting
                            .push((p, false));
                        return;
                    }
                    Some(Claim::Ran) => {
                        // Already run (by the watchdog): nothing to do.
                        let p = self.new_proc(c, Some(id), life, kind, None);
                        self.push(self.now + MS, Ev::ProcEnd(p));
                        return;
                    }
                    Some(Claim::Free) | None => {}
                }
                if let Some(h) = h {
                    if self.v.claims {
                        self.holdings[h].claim = Claim::Held(self.procs.len());
                    }
                    if self.holdings[h].promote_end.is_none() {
                        self.violations.push(format!(
                            "c{c} started its demote hook at {} ns while its promote hook ran",
                            self.now
                        ));
                    }
                    self.begin_stop(h);
                }
                h
            }
        };
        let p = self.new_proc(c, Some(id), life, kind, holding);
        if kind == HookKind::Promote {
            if let Some(wd) = self.nodes[c].watchdog.as_mut() {
                wd.promote = Some(p);
            }
        }
        let d = match kind {
            HookKind::Promote => self.rng.random_range(0..5000) * MS,
            HookKind::Demote => self.rng.random_range(0..2000) * MS,
        };
        self.push(self.now + d, Ev::ProcEnd(p));
    }

    /// A new process of node `c` (`hook`: the agent's id for it; None for
    /// the watchdog's fence), not yet scheduled to end.
    pub(super) fn new_proc(
        &mut self,
        c: usize,
        hook: Option<HookId>,
        life: u64,
        kind: HookKind,
        holding: Option<usize>,
    ) -> usize {
        self.procs.push(Proc {
            node: c,
            hook,
            life,
            kind,
            holding,
            alive: true,
        });
        let p = self.procs.len() - 1;
        if let Some(id) = hook {
            self.nodes[c].hooks.insert(id, p);
        }
        p
    }

    /// The run holding holding `h`'s claim ended now, to its end or
    /// killed: the waiting runs find the demote done (or, after a kill,
    /// the first of them runs it).
    pub(super) fn release_claim(&mut self, h: usize, ran: bool) {
        if ran {
            self.holdings[h].claim = Claim::Ran;
            for (w, _) in std::mem::take(&mut self.holdings[h].waiting) {
                self.push(self.now + MS, Ev::ProcEnd(w));
            }
            return;
        }
        self.holdings[h].claim = Claim::Free;
        if self.holdings[h].waiting.is_empty() {
            return;
        }
        let (w, fence) = self.holdings[h].waiting.remove(0);
        self.holdings[h].claim = Claim::Held(w);
        self.procs[w].holding = Some(h);
        self.begin_stop(h);
        if fence {
            self.holdings[h].lost = true;
        }
        let d = self.rng.random_range(0..2000) * MS;
        self.push(self.now + d, Ev::ProcEnd(w));
    }

    /// A holding's demote (or fence) starts now.
    pub(super) fn begin_stop(&mut self, h: usize) {
        let hd = &mut self.holdings[h];
        hd.stops += 1;
        if hd.stop_start.is_none() {
            hd.stop_start = Some(self.now);
        }
        // Lost: refused or run out on the holder's clock by now (a demote
        // for a lease that is still valid is a voluntary step-down).
        if self.now >= hd.lease_end {
            hd.lost = true;
        }
    }

    /// A hook process ends now (on its own, or `killed`).
    pub(super) fn end_proc(&mut self, p: usize, killed: bool) {
        if !self.procs[p].alive {
            return;
        }
        self.procs[p].alive = false;
        for hd in &mut self.holdings {
            hd.waiting.retain(|(w, _)| *w != p);
        }
        if let Some(h) = self.procs[p].holding {
            if self.holdings[h].claim == Claim::Held(p) {
                self.release_claim(h, !killed);
            }
        }
        let now = self.now;
        if let Some(h) = self.procs[p].holding {
            let hd = &mut self.holdings[h];
            match self.procs[p].kind {
                HookKind::Promote => hd.promote_end = Some(now),
                HookKind::Demote => {
                    hd.stop_end = Some(hd.stop_end.map_or(now, |e| e.max(now)));
                    if now > hd.lease_end {
                        hd.lost = true;
                    }
                }
            }
        }
    }
}

impl World {
    pub(super) fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Wake(c, gen) => {
                let n = &self.nodes[c];
                if n.wake_gen != gen || n.frozen || n.crashed || self.blocked(c) {
                    return;
                }
                let now = self.node_now(c);
                self.nodes[c].holder.handle_timeout(now);
                self.carry_out(c);
            }
            Ev::Input(c, life, input) => self.deliver(c, life, input),
            Ev::ProcEnd(p) => self.proc_end(p),
            Ev::WatchdogDeadline(c, gen) => {
                let due = self.nodes[c]
                    .watchdog
                    .as_ref()
                    .is_some_and(|w| w.gen == gen && w.armed && w.fence == Fence::No);
                if due {
                    self.fence(c);
                }
            }
            Ev::Freeze(c, d) => {
                if !self.nodes[c].crashed && !self.nodes[c].frozen {
                    self.nodes[c].frozen = true;
                    self.push(self.now + d.as_nanos() as u64, Ev::Unfreeze(c));
                }
            }
            Ev::Unfreeze(c) => {
                if self.nodes[c].frozen {
                    self.nodes[c].frozen = false;
                    self.drain_deferred(c);
                }
            }
            Ev::Cut(c, on) => self.nodes[c].cut = on,
            Ev::Crash(c) => self.crash(c),
            Ev::Restart(c) => {
                if !self.nodes[c].crashed {
                    return;
                }
                let now = self.node_now(c);
                let n = &mut self.nodes[c];
                n.crashed = false;
                let mut cfg = config(c, self.timing, self.hook_timeout);
                cfg.instance += n.life << 16;
                n.holder = Holder::new(cfg, now);
                let (life, ok) = (n.life, !n.failing);
                self.deliver(c, life, Input::Checks(ok));
            }
            Ev::Failing(c, on) => {
                self.nodes[c].failing = on;
                let life = self.nodes[c].life;
                self.deliver(c, life, Input::Checks(!on));
            }
            Ev::Handover(c) => {
                let life = self.nodes[c].life;
                self.deliver(c, life, Input::Handover);
            }
            Ev::HolderAndLeader(d, cut) => {
                if let Some(c) = (0..N).find(|&c| self.nodes[c].holder.epoch().is_some()) {
                    if cut {
                        self.nodes[c].cut = true;
                        self.push(self.now + d.as_nanos() as u64, Ev::Cut(c, false));
                    } else {
                        self.step(Ev::Freeze(c, d));
                    }
                }
                self.step(Ev::LeaderCrash);
            }
            Ev::ToLeader(from, life, id, req) => self.at_leader(from, life, id, req),
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
            Ev::Beat(l, term) => self.beat(l, term),
            Ev::LeaderCrash => {
                if let Some(l) = self.leader.take() {
                    self.servers[l].up = false;
                    self.term += 1;
                    let at = self.now + self.rng.random_range(300 * MS..900 * MS);
                    self.push(at, Ev::NewLeader);
                    let back = self.now + self.rng.random_range(500 * MS..5 * SEC);
                    self.push(back, Ev::ServerRestart(l));
                }
            }
            Ev::ServerRestart(s) => {
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

    /// A hook process or a fence ends on its own.
    pub(super) fn proc_end(&mut self, p: usize) {
        if !self.procs[p].alive {
            return;
        }
        self.end_proc(p, false);
        let (c, life) = (self.procs[p].node, self.procs[p].life);
        match self.procs[p].hook {
            Some(id) => {
                let exit = if self.procs[p].kind == HookKind::Promote
                    && self.faults
                    && self.rng.random_bool(0.05)
                {
                    HookExit::Failed
                } else {
                    HookExit::Succeeded
                };
                self.deliver(c, life, Input::HookExit(id, exit));
                // At the worst moment: the agent freezes just as its
                // promotion completes.
                if self.procs[p].kind == HookKind::Promote
                    && self.faults
                    && self.rng.random_bool(0.1)
                {
                    let d = self.rng.random_range(1500..4000) * MS;
                    self.push(self.now + MS, Ev::Freeze(c, Duration::from_nanos(d)));
                }
            }
            None => {
                let Some(wd) = self.nodes[c].watchdog.as_mut() else {
                    return;
                };
                if wd.fence != Fence::Running(p) {
                    return;
                }
                wd.fence = Fence::Done;
                if wd.asked {
                    wd.asked = false;
                    let life = self.nodes[c].life;
                    self.push(
                        self.now + MS,
                        Ev::Input(c, life, Input::WatchdogReleased(true)),
                    );
                }
                if self.nodes[c].crashed {
                    self.nodes[c].watchdog = None;
                }
            }
        }
    }

    /// The watchdog fences: it kills the promote hook, then runs the demote command.
    pub(super) fn fence(&mut self, c: usize) {
        let life = self.nodes[c].life;
        let Some(wd) = self.nodes[c].watchdog.as_ref() else {
            return;
        };
        let (promote, holding) = (wd.promote, wd.holding);
        if let Some(p) = promote {
            if self.procs[p].alive {
                self.end_proc(p, true);
                if let Some(id) = self.procs[p].hook {
                    let at = self.now + MS;
                    self.push(
                        at,
                        Ev::Input(c, life, Input::HookExit(id, HookExit::Killed)),
                    );
                }
            }
        }
        let claim = holding
            .filter(|_| self.v.claims)
            .map(|h| self.holdings[h].claim);
        if claim == Some(Claim::Ran) {
            // The agent's demote ran: the fence does nothing.
            let p = self.new_proc(c, None, life, HookKind::Demote, None);
            if let Some(wd) = self.nodes[c].watchdog.as_mut() {
                wd.fence = Fence::Running(p);
            }
            self.push(self.now + MS, Ev::ProcEnd(p));
            return;
        }
        if let (Some(h), Some(Claim::Held(_))) = (holding, claim) {
            // The agent's demote runs: the fence waits for it.
            let p = self.new_proc(c, None, life, HookKind::Demote, None);
            self.holdings[h].waiting.push((p, true));
            if let Some(wd) = self.nodes[c].watchdog.as_mut() {
                wd.fence = Fence::Running(p);
            }
            return;
        }
        if let Some(h) = holding {
            self.begin_stop(h);
            self.holdings[h].lost = true;
        }
        let p = self.new_proc(c, None, life, HookKind::Demote, holding);
        if let (Some(h), true) = (holding, self.v.claims) {
            self.holdings[h].claim = Claim::Held(p);
        }
        if let Some(wd) = self.nodes[c].watchdog.as_mut() {
            wd.fence = Fence::Running(p);
        }
        let d = self.rng.random_range(0..2000) * MS;
        self.push(self.now + d, Ev::ProcEnd(p));
    }

    /// The agent dies: its inputs are lost, its hooks run on as orphans,
    /// its watchdog sees its standard input close and fences at once.
    pub(super) fn crash(&mut self, c: usize) {
        if self.nodes[c].crashed {
            return;
        }
        let n = &mut self.nodes[c];
        n.crashed = true;
        n.frozen = false;
        n.life += 1;
        n.deferred.clear();
        n.hooks.clear();
        if let Some(h) = n.holding {
            self.holdings[h].crashed = true;
        }
        let fence = match self.nodes[c].watchdog.as_ref().map(|w| w.fence) {
            Some(Fence::No) => true,
            Some(Fence::Done) => {
                self.nodes[c].watchdog = None;
                false
            }
            Some(Fence::Running(_)) | None => false,
        };
        if fence {
            self.fence(c);
        }
    }
}
