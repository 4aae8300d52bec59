//! The control plane of the model: a leader that runs the real grantor and
//! replicates a log to two followers the way Raft does.

use rand::Rng;

use hale_control::{AppendClock, ControlRequest, Grantor, LeaseRequest, RequestId};
use hale_core::Time;

use super::*;

impl World {
    pub(super) fn at_leader(&mut self, from: usize, life: u64, id: RequestId, req: ControlRequest) {
        let Some(l) = self.leader.filter(|&l| self.servers[l].up) else {
            return;
        };
        let lnow = self.server_now(l);
        let req = match req {
            ControlRequest::Acquire(ask) => {
                let clock = match self.v.knowledge {
                    Knowledge::Appends => &self.servers[l].appends,
                    Knowledge::Commits | Knowledge::Nothing => &self.granting_clock,
                };
                match self.grantor.contend(&self.table, clock, &ask, lnow) {
                    Ok(grant) => grant,
                    Err(_) => {
                        // "Not yet" is an error answer: the client sees no grant.
                        if !self.lost() {
                            let at = self.now + self.net();
                            self.push(at, Ev::Input(from, life, Input::Response(id, None)));
                        }
                        return;
                    }
                }
            }
            ControlRequest::Lease(r) => r,
        };
        self.granting_clock.appended(&req, lnow);
        self.entries.push(Entry {
            req,
            from,
            life,
            id,
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

    /// Appends entry `e` to server `s`'s log at its position `pos`
    /// (replacing a divergent suffix, as Raft's truncation does).
    pub(super) fn append(&mut self, s: usize, pos: usize, e: usize) {
        let now = self.server_now(s);
        let srv = &mut self.servers[s];
        srv.log.truncate(pos);
        srv.log.push(e);
        srv.appends.appended(&self.entries[e].req, now);
    }

    /// Sends the leader's log from `from` on to follower `f`, in order.
    pub(super) fn replicate(&mut self, f: usize, from: usize) {
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
    pub(super) fn commit(&mut self, upto: usize) {
        let Some(l) = self.leader else { return };
        while self.committed < upto {
            let e = self.servers[l].log[self.committed];
            self.committed += 1;
            let resp = self.table.apply(&self.entries[e].req);
            let ent = &self.entries[e];
            // At the worst moment: the leader dies just after committing a
            // renewal (before its followers learn of the commit), while
            // the holder freezes or is cut off from the control plane.
            if matches!(ent.req, LeaseRequest::Renew { .. })
                && self.faults
                && self.rng.random_bool(0.005)
            {
                let d = self.rng.random_range(1500..5000) * MS;
                let cut = self.rng.random_bool(0.5);
                self.push(
                    self.now + 100_000,
                    Ev::HolderAndLeader(Duration::from_nanos(d), cut),
                );
            }
            let ent = &self.entries[e];
            if ent.term == self.term {
                let (from, life, id) = (ent.from, ent.life, ent.id);
                if !self.lost() && !self.nodes[from].cut {
                    let at = self.now + self.net();
                    self.push(at, Ev::Input(from, life, Input::Response(id, Some(resp))));
                }
            }
        }
        let now = self.server_now(l);
        for pos in self.servers[l].commit_known..upto {
            let e = self.servers[l].log[pos];
            self.servers[l].commits.appended(&self.entries[e].req, now);
        }
        self.servers[l].commit_known = upto;
        // Followers learn the commit index from the leader's next message
        // (a heartbeat at the latest, every 100 ms): lost if it dies first.
        let at = self.now + self.rng.random_range(0..100 * MS);
        self.push(at, Ev::Beat(l, self.term));
    }

    /// Leader `l` of `term` sends its commit index to its followers, if it
    /// still leads.
    pub(super) fn beat(&mut self, l: usize, term: u64) {
        if self.leader != Some(l) || self.term != term || !self.servers[l].up {
            return;
        }
        for f in 0..SERVERS {
            if f != l {
                let at = self.now + self.net();
                self.push(at, Ev::CommitNote(f, self.committed));
            }
        }
    }

    /// The live server with the most up-to-date log (last entry's term,
    /// then length) wins; it commits what its log holds.
    pub(super) fn elect(&mut self) {
        let last_term =
            |w: &World, s: usize| w.servers[s].log.last().map_or(0, |&e| w.entries[e].term);
        let live: Vec<usize> = (0..SERVERS).filter(|&s| self.servers[s].up).collect();
        if live.len() < 2 {
            let at = self.now + 200 * MS;
            self.push(at, Ev::NewLeader);
            return;
        }
        let l = *live
            .iter()
            .max_by_key(|&&s| (last_term(self, s), self.servers[s].log.len()))
            .expect("live servers");
        if self.servers[l].log.len() < self.committed {
            // Every server holding the committed entries is down (leaders
            // crashed one after another): as in Raft, none of the others
            // can win a vote until one of those is back.
            let at = self.now + 200 * MS;
            self.push(at, Ev::NewLeader);
            return;
        }
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
