//! Elections that a slow member cannot force: hale, not openraft, decides
//! when a server campaigns, and it campaigns only after a *pre-vote* (Raft
//! thesis §9.6) that a majority of voters granted.
//!
//! openraft 0.9 has no PreVote: a follower whose host was too busy to hear
//! five heartbeats raises its term and campaigns; the voters refuse it
//! (their leader lease), but its higher term, answered to the leader's next
//! append, unseats a healthy leader. Every such election costs the
//! holders' renewals a few hundred milliseconds, and on a host busy with
//! hooks (issue 41) elections followed each other until leases lapsed.
//!
//! So the servers run with openraft's own election timer off
//! (`Config::enable_elect = false`) and a `Driver` per server:
//!
//! * [`Contact`] is when this server last heard from a leader it follows
//!   (an append it accepted, whatever its answer but a higher vote) or
//!   granted a vote; a leader is in contact with itself.
//! * When a voter has had no contact for its campaign timeout (drawn again
//!   after every round from [`CAMPAIGN_MIN`]..[`CAMPAIGN_MAX`]) it asks
//!   every other voter `/raft/prevote`: *would you vote for me?* A voter
//!   grants only if it does not lead, has itself had no contact for
//!   [`PREVOTE_QUIET`], and the candidate's last log id is at least its
//!   own. Nothing changes on either side: no term, no vote.
//! * Before it asks, it writes to its own disk (`LogStore::probe_disk`):
//!   a write slower than `CORE_ANSWER` defers the round by one campaign
//!   timeout, once per silence, and *excuses* the silence so far
//!   ([`Contact::excuse`]): its quiet clock starts over, so it also
//!   refuses the others' pre-votes for [`PREVOTE_QUIET`]. When every disk
//!   stalls at once the leader's appends wait too and it falls silent; an
//!   election would only start when the stall ends, against a leader that
//!   is back. A server whose own disk had a write stuck longer than
//!   `CORE_ANSWER` excuses the silence the same way once it answers.
//! * Only with a majority of grants (its own included) does the server
//!   campaign (`Raft::trigger().elect()`): a server the others still hear
//!   the leader through never raises its term.
//!
//! A server of the previous release has no `/raft/prevote` route (404): it
//! counts as granting, since it would vote by openraft's own rules (and
//! campaigns by them). A server that does not answer in
//! [`PREVOTE_RPC_TIMEOUT`] counts as refusing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use openraft::{LogId, Raft, ServerState};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use hale_seal::{CallError, Target};

use openraft::storage::RaftLogStorage;

use super::network::Network;
use super::store::LogStore;
use super::types::TypeConfig;
use crate::election::{CAMPAIGN_MAX, CAMPAIGN_MIN, PREVOTE_QUIET};
use crate::protocol;

/// How long a pre-vote waits for each voter's answer.
pub const PREVOTE_RPC_TIMEOUT: Duration = Duration::from_millis(300);

/// How often the driver looks at its contact.
const TICK: Duration = Duration::from_millis(20);

/// How long this server's Raft core may take to answer before the server
/// counts as stuck (a write it waits for on a stalled disk): a stuck
/// server neither asks for nor grants a pre-vote. Its silence is no
/// evidence that the leader is gone (with every disk stalled, every core
/// waits, the leader's too), and an election it started would only run
/// once the stall ends, against a leader that is back.
const CORE_ANSWER: Duration = Duration::from_millis(100);

/// Whether this server's Raft core answers within `CORE_ANSWER`.
async fn core_answers(raft: &Raft<TypeConfig>) -> bool {
    tokio::time::timeout(CORE_ANSWER, raft.with_raft_state(|_| ()))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// The route a server answers pre-votes on.
pub const PREVOTE_PATH: &str = "/raft/prevote";

/// When this server last heard from a leader it follows, or granted a vote
/// (shared by the RPC routes, which note it, and the `Driver`).
#[derive(Debug, Clone)]
pub struct Contact {
    /// When a leader was last heard from (or a vote granted), and when
    /// this server's own silence was last excused ([`Contact::excuse`]).
    at: Arc<Mutex<Heard>>,
    /// Appends from the leader still being written (the leader spoke; its
    /// next append waits for this one: a slow or stalled disk here is no
    /// silence of the leader's).
    writing: Arc<std::sync::atomic::AtomicUsize>,
}

/// The instants [`Contact`] keeps.
#[derive(Debug, Clone, Copy)]
struct Heard {
    /// A leader heard from, a vote granted.
    leader: Instant,
    /// The last silence this server's own disk explains.
    excused: Instant,
}

/// An append from the leader being written ([`Contact::writing`]): while it
/// lives, the server is in contact.
#[derive(Debug)]
pub struct Writing(Contact);

impl Drop for Writing {
    fn drop(&mut self) {
        self.0.touch();
        self.0
            .writing
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Contact {
    /// Contact now (a server that just started waits a campaign timeout
    /// before asking anyone, time for a leader's heartbeat to find it).
    pub fn new() -> Contact {
        let now = Instant::now();
        Contact {
            at: Arc::new(Mutex::new(Heard {
                leader: now,
                excused: now,
            })),
            writing: Arc::default(),
        }
    }

    /// An append from the leader arrived: contact now and until the
    /// returned guard is dropped (its write done or abandoned).
    pub fn writing(&self) -> Writing {
        self.writing
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.touch();
        Writing(self.clone())
    }

    /// Notes contact now.
    pub fn touch(&self) {
        self.at.lock().expect("contact lock").leader = Instant::now();
    }

    /// This server's own disk was slow until now: the silence so far is
    /// no evidence against the leader (its appends waited on the same
    /// disks), so the quiet clock starts over, for this server's campaign
    /// and for the pre-votes it grants. Not contact: [`Contact::heard_for`]
    /// goes on.
    pub fn excuse(&self) {
        self.at.lock().expect("contact lock").excused = Instant::now();
    }

    /// How long this server has been without contact, its excused silence
    /// left out (none while an append from the leader is being written).
    pub fn quiet_for(&self) -> Duration {
        if self.writing.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        let at = *self.at.lock().expect("contact lock");
        at.leader.max(at.excused).elapsed()
    }

    /// How long since a leader was last heard from (or a vote granted),
    /// excuses aside (none while an append from the leader is being
    /// written).
    pub fn heard_for(&self) -> Duration {
        if self.writing.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        self.at.lock().expect("contact lock").leader.elapsed()
    }
}

impl Default for Contact {
    fn default() -> Self {
        Contact::new()
    }
}

/// *Would you vote for me?* Changes nothing on the server asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteRequest {
    /// The server asking.
    pub candidate: u64,
    /// Its last log id: a voter refuses a candidate whose log is behind its
    /// own (it would refuse the vote too).
    pub last_log_id: Option<LogId<u64>>,
}

/// The answer to a [`PreVoteRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreVoteResponse {
    /// Whether the server asked would vote for the candidate now.
    pub granted: bool,
}

/// Why a pre-vote was refused (for the logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The server asked leads.
    Leading,
    /// The server asked campaigns, since this long.
    Campaigning(Duration),
    /// The server asked heard from its leader lately.
    InContact(Duration),
    /// The candidate's log is behind the server's.
    LogBehind,
    /// The server's own Raft core did not answer in time (see
    /// `CORE_ANSWER`).
    Stuck,
}

/// The decision of the server asked, from what it knows: whether it leads
/// or campaigns (`state`), how long it has been without contact, and both
/// last log ids. A candidate refuses for [`CAMPAIGN_MAX`] after its own
/// round (its quiet clock starts over when it campaigns): a pre-vote it
/// granted would let another server raise the term over its election
/// while that election waits on the disks (each vote is written before it
/// is given: on disks that take 150 ms a write, an election takes about
/// half a second, and two candidates that kept granting each other's
/// pre-votes could take turns unseating each other's elections).
pub fn judge(
    state: ServerState,
    quiet_for: Duration,
    candidate_log: Option<LogId<u64>>,
    own_log: Option<LogId<u64>>,
) -> Result<(), Refused> {
    if state == ServerState::Leader {
        return Err(Refused::Leading);
    }
    if state == ServerState::Candidate && quiet_for < CAMPAIGN_MAX {
        return Err(Refused::Campaigning(quiet_for));
    }
    if quiet_for < PREVOTE_QUIET {
        return Err(Refused::InContact(quiet_for));
    }
    if candidate_log < own_log {
        return Err(Refused::LogBehind);
    }
    Ok(())
}

/// The state `/raft/prevote` (and the other Raft routes) answer from.
#[derive(Clone)]
pub(super) struct RouteState {
    pub(super) raft: Raft<TypeConfig>,
    pub(super) contact: Contact,
    pub(super) log: LogStore,
}

/// `POST /raft/prevote`.
pub(super) async fn route(
    State(s): State<RouteState>,
    Json(req): Json<PreVoteRequest>,
) -> Json<PreVoteResponse> {
    let state = s.raft.metrics().borrow().state;
    let own = last_log_id(&s.log).await;
    let verdict = if s.log.stall().busy_for() <= CORE_ANSWER && core_answers(&s.raft).await {
        judge(state, s.contact.quiet_for(), req.last_log_id, own)
    } else {
        Err(Refused::Stuck)
    };
    match verdict {
        Ok(()) => tracing::info!(candidate = req.candidate, "pre-vote granted"),
        Err(why) => tracing::debug!(candidate = req.candidate, ?why, "pre-vote refused"),
    }
    Json(PreVoteResponse {
        granted: verdict.is_ok(),
    })
}

/// One server's election timer (see the module's documentation).
pub(super) struct Driver {
    pub(super) id: u64,
    pub(super) raft: Raft<TypeConfig>,
    pub(super) contact: Contact,
    pub(super) network: Network,
    pub(super) log: LogStore,
}

impl Driver {
    /// Runs until this server's Raft stops.
    pub(super) fn spawn(self) {
        tokio::spawn(self.run());
    }

    async fn run(self) {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = self.id ^ wall ^ u64::from(std::process::id());
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut timeout = draw(&mut rng);
        let mut metrics = self.raft.metrics();
        // This server's own disk was stuck: when it answers again, the
        // silence until then is no evidence against the leader (its
        // appends waited on the same disks): the quiet clock starts over.
        let mut stuck = false;
        // Whether this silence already bought the leader a campaign
        // timeout because this server's own disk was slow (see below).
        let mut deferred = false;
        // This server's core did not answer when it was about to ask for
        // pre-votes (see below).
        let mut core_stuck = false;
        // Not before this instant: a lost round waits a campaign timeout.
        let mut next_round = Instant::now();
        let stall = self.log.stall();
        loop {
            tokio::time::sleep(TICK).await;
            if stall.busy_for() > CORE_ANSWER {
                stuck = true;
                continue;
            }
            if core_stuck {
                // Its core did not answer at the last look: the silence
                // is excused once it answers again (below).
                if !core_answers(&self.raft).await {
                    continue;
                }
                core_stuck = false;
                stuck = true;
            }
            if std::mem::take(&mut stuck) {
                self.contact.excuse();
            }
            // Read in place every tick; the voters' addresses are copied
            // only for a round.
            let (state, voter) = {
                let m = metrics.borrow_and_update();
                if m.running_state.is_err() {
                    return;
                }
                let voter = m
                    .membership_config
                    .membership()
                    .voter_ids()
                    .any(|v| v == self.id);
                (m.state, voter)
            };
            if state == ServerState::Shutdown {
                return;
            }
            if state == ServerState::Leader {
                self.contact.touch();
                continue;
            }
            if !voter || self.contact.quiet_for() < timeout || Instant::now() < next_round {
                if deferred && self.contact.heard_for() < CAMPAIGN_MIN {
                    // Heard from a leader since: a new silence.
                    deferred = false;
                    timeout = draw(&mut rng);
                }
                continue;
            }
            if !core_answers(&self.raft).await {
                // Its core waits, on its own disk most often (a write queued
                // behind a stalled one holds redb's write lock without
                // counting as busy): once per silence, like a slow disk
                // probe below, the silence until the core answers again is
                // excused. Looking again at once instead let both followers
                // campaign the moment a stall of every disk ended, before
                // the leader had a heartbeat's time to speak (1 run in 8 of
                // `every_disk_stalling_...` under the suite's load).
                if !std::mem::replace(&mut deferred, true) {
                    tracing::info!(
                        server = self.id,
                        "no leader heard from, but this server's Raft core does not answer: waiting for it, then another campaign timeout"
                    );
                    core_stuck = true;
                }
                continue;
            }
            // Its own disk answers? With every disk stalled (shared
            // storage, a hypervisor's I/O freeze) the leader's appends
            // wait like everyone's and it falls silent; an election then
            // would only start when the stall ends, against a leader that
            // is back, and cost every holder its renewals. A disk slower
            // than `CORE_ANSWER` buys the leader one more campaign
            // timeout per silence, never more: a host whose disk is always
            // slow still replaces a dead leader.
            let probe = Instant::now();
            let answered = self.log.probe_disk().await.is_ok();
            if !answered
                || (probe.elapsed() > CORE_ANSWER && !std::mem::replace(&mut deferred, true))
            {
                tracing::info!(
                    server = self.id,
                    probe_ms = probe.elapsed().as_millis() as u64,
                    answered,
                    "no leader heard from, but this server's own disk was slow: waiting another campaign timeout"
                );
                // Excused, not only deferred: this server also refuses
                // the others' pre-votes for a while. A voter that granted
                // right after its own disk stalled (every disk did) would
                // let a peer that looked only after the stall ended, and
                // found its disk fast, campaign against a leader that has
                // not had a heartbeat's time to speak.
                self.contact.excuse();
                timeout = draw(&mut rng);
                continue;
            }
            let voters: Vec<(u64, String)> = {
                let m = metrics.borrow();
                let membership = m.membership_config.membership();
                membership
                    .voter_ids()
                    .filter(|v| *v != self.id)
                    .filter_map(|v| membership.get_node(&v).map(|n| (v, n.addr.clone())))
                    .collect()
            };
            let total = voters.len() + 1;
            let own = last_log_id(&self.log).await;
            let granted = 1 + self.ask(&voters, own).await;
            if 2 * granted > total {
                tracing::info!(
                    server = self.id,
                    granted,
                    voters = total,
                    quiet_ms = self.contact.quiet_for().as_millis() as u64,
                    "no leader heard from, and a majority agrees: campaigning"
                );
                if self.raft.trigger().elect().await.is_err() {
                    return;
                }
                // The election has a fresh timeout to show, and this
                // server, a candidate now, refuses others' pre-votes
                // meanwhile (see [`judge`]).
                self.contact.excuse();
                timeout = draw(&mut rng);
            } else {
                tracing::debug!(server = self.id, granted, voters = total, "pre-vote lost");
                // Its next round waits a fresh timeout; the pre-votes it
                // grants do not: a lost round is no contact, and a voter
                // that refused others for a while after each of its own
                // lost rounds made elections on slow disks take turns
                // failing (`with_every_disk_slow_...`, 5 s passed).
                next_round = Instant::now() + draw(&mut rng);
            }
        }
    }

    /// How many of `voters` grant a pre-vote.
    async fn ask(&self, voters: &[(u64, String)], own: Option<LogId<u64>>) -> usize {
        let req = PreVoteRequest {
            candidate: self.id,
            last_log_id: own,
        };
        let calls = voters.iter().map(|(id, addr)| {
            let to = Target {
                target: *id,
                addr,
                path: PREVOTE_PATH,
            };
            let net = &self.network;
            let req = &req;
            async move {
                let heard: Result<protocol::Heard<PreVoteResponse>, CallError> = protocol::call(
                    &net.client,
                    &net.auth,
                    to,
                    req,
                    PREVOTE_RPC_TIMEOUT,
                    net.speaks,
                )
                .await;
                match heard {
                    Ok(h) => h.answer.granted,
                    // The previous release: no pre-vote, it votes by
                    // openraft's rules.
                    Err(CallError::Refused { status: 404, .. }) => true,
                    Err(_) => false,
                }
            }
        });
        // Counted as they come: a voter that does not answer (frozen, its
        // host gone) must not hold the round up once a majority has
        // answered either way.
        let total = voters.len() + 1;
        let mut pending: futures_util::stream::FuturesUnordered<_> = calls.collect();
        let (mut granted, mut refused) = (0, 0);
        while let Some(g) = futures_util::StreamExt::next(&mut pending).await {
            if g {
                granted += 1;
            } else {
                refused += 1;
            }
            if 2 * (granted + 1) > total || 2 * refused >= total {
                break;
            }
        }
        granted
    }
}

/// This server's last log id, as its store has it (`None` if it cannot
/// be read: the server then grants no one whose log it cannot compare, and
/// asks with none, which no server with a log grants).
async fn last_log_id(log: &LogStore) -> Option<LogId<u64>> {
    let mut log = log.clone();
    log.get_log_state().await.ok()?.last_log_id
}

/// A campaign timeout in [`CAMPAIGN_MIN`]..[`CAMPAIGN_MAX`].
fn draw(rng: &mut Xoshiro256PlusPlus) -> Duration {
    let (lo, hi) = (
        CAMPAIGN_MIN.as_millis() as u64,
        CAMPAIGN_MAX.as_millis() as u64,
    );
    Duration::from_millis(rng.random_range(lo..hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn id(term: u64, index: u64) -> Option<LogId<u64>> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    #[test]
    fn a_voter_grants_only_when_it_neither_leads_nor_campaigns_has_heard_no_leader_and_the_log_is_not_behind(
    ) {
        let quiet = PREVOTE_QUIET;
        assert_eq!(
            judge(ServerState::Follower, quiet, id(2, 10), id(2, 10)),
            Ok(())
        );
        assert_eq!(
            judge(ServerState::Follower, quiet, id(3, 1), id(2, 10)),
            Ok(())
        );
        assert_eq!(
            judge(ServerState::Leader, quiet, id(2, 10), id(2, 10)),
            Err(Refused::Leading)
        );
        let lately = PREVOTE_QUIET - Duration::from_millis(1);
        assert_eq!(
            judge(ServerState::Follower, lately, id(2, 10), id(2, 10)),
            Err(Refused::InContact(lately))
        );
        assert_eq!(
            judge(ServerState::Follower, quiet, id(2, 9), id(2, 10)),
            Err(Refused::LogBehind)
        );
        assert_eq!(
            judge(ServerState::Follower, quiet, id(1, 20), id(2, 10)),
            Err(Refused::LogBehind)
        );
        assert_eq!(
            judge(ServerState::Follower, quiet, None, id(1, 1)),
            Err(Refused::LogBehind)
        );
        assert_eq!(judge(ServerState::Follower, quiet, None, None), Ok(()));
        // A candidate refuses for a campaign timeout after its own round.
        let campaigning = CAMPAIGN_MAX - Duration::from_millis(1);
        assert_eq!(
            judge(ServerState::Candidate, campaigning, id(2, 10), id(2, 10)),
            Err(Refused::Campaigning(campaigning))
        );
        assert_eq!(
            judge(ServerState::Candidate, CAMPAIGN_MAX, id(2, 10), id(2, 10)),
            Ok(())
        );
        assert_eq!(
            judge(ServerState::Follower, campaigning, id(2, 10), id(2, 10)),
            Ok(())
        );
    }

    #[test]
    fn the_quiet_a_pre_vote_needs_outlasts_openrafts_leader_lease_and_campaigns_wait_longer() {
        use crate::election::{ELECTION_TIMEOUT_MAX, HEARTBEAT};
        assert!(PREVOTE_QUIET > ELECTION_TIMEOUT_MAX);
        assert!(CAMPAIGN_MIN > PREVOTE_QUIET);
        assert!(CAMPAIGN_MIN >= 4 * HEARTBEAT);
        assert!(CAMPAIGN_MAX > CAMPAIGN_MIN);
    }
}
