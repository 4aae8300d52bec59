//! A PostgreSQL role's keeper (`[role.postgres]`): one task per such role
//! beside its manager, which measures the local server twice a second and
//! keeps it where the role's state says it belongs.
//!
//! * **Measures.** [`hale_postgres::standing()`] every `EVERY`: the role's
//!   `Holder` gets it as a [`DataState`] (a replica's replayed position is
//!   its copy; a primary's position and synchronous standbys are the mark
//!   its renewals publish), and the role's view shows it. A server carrying
//!   the fence marker is never offered as a copy: it must rejoin first.
//! * **Holder.** Keeps quorum commit over the streaming standbys the lease
//!   table names, and none when none streams unless strict
//!   ([`hale_postgres::maintain_synchronous`]); its mark names every standby
//!   the primary may wait for (`Named`). A standby set apart by its tags
//!   (`synchronous_standby = false`, or `promotable = false`, as its member
//!   metadata says: `SetApart`) is neither waited for nor named.
//! * **Not the holder.** Follows what the control plane's lease table
//!   says (read every 2 s):
//!   - another node holds the role and is alive in this node's view: a
//!     server not streaming from the holder's host rejoins it
//!     ([`hale_postgres::rejoin`]: repointed, restarted, rewound or
//!     re-cloned; each step an event). A running replica that merely lost
//!     its stream gets `REJOIN_AFTER` first, since a rejoin fences it;
//!   - the holder is dead: the copy is kept as it is (this node is a
//!     candidate), a stopped server starts as a standby;
//!   - the role was never granted (a new cluster), or this node held it
//!     last (its agent restarted and nobody was granted the role since): a
//!     server running as a primary is offered as this node's copy, so that
//!     the first primary an operator set up takes the role;
//!   - released (nobody holds it): a server running as a primary is fenced;
//!   - a stopped, unfenced server with nobody else holding the role starts
//!     as a standby so that it can offer its copy (a cold start).
//! * **Paused** (`hale roles pause`): measures only; never starts, fences
//!   or rejoins the server.
//! * **Promoting, demoting.** Nothing: the hooks (`hale postgres promote`,
//!   `hale postgres fence`) are at work.
//!
//! Invariants: the keeper never promotes (only the promote hook does, under
//! a grant); the fence marker is removed only by a rejoin that reached
//! streaming; while a rejoin runs the role's candidate offers no copy.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use hale_control::{DataState, Mark, RoleState};
use hale_postgres::{PostgresConfig, RejoinStep, Standing, Upstream};

use super::changes::RoleChange;
use super::peers;
use super::set::RoleContext;
use super::views::RoleViewWriter;
use crate::membership::runtime::Command;
use crate::view::{AgentEvent, MemberState, PostgresView};

/// How often the server is measured.
pub const EVERY: Duration = Duration::from_millis(500);
/// How often the holder is read from the control plane while not holding.
const HOLDER_EVERY: Duration = Duration::from_secs(2);
/// How long after a failed rejoin or start the next one is tried.
const RETRY: Duration = Duration::from_secs(5);
/// How long a running replica may have lost its stream from a live holder
/// before it is rejoined (and so fenced): a blink of the network or of the
/// holder's server must not cost a standby its place.
const REJOIN_AFTER: Duration = Duration::from_secs(5);
/// How long a standby stays named in the holder's mark after the primary
/// last waited for it or saw it stream: longer than a renewal can be in
/// flight (its deadline is its lease's end, 2 s by default), so that no
/// renewal that dropped a name can be applied after the primary was told
/// to wait for it again (see [`Named`]).
const NAMED_FOR: Duration = Duration::from_secs(5);

/// The standbys a holder names synchronous in its mark: those its primary
/// waits for or that stream to it, each for [`NAMED_FOR`] after it was last
/// seen so. The primary waits only for names the lease table already holds
/// (`hale_postgres::wanted_setting`), so the table's names are always a
/// superset of the standbys a commit may have waited for: what the
/// grantor's proof under strict durability rests on.
#[derive(Debug, Default)]
struct Named {
    seen: std::collections::BTreeMap<String, Instant>,
}

impl Named {
    /// Notes `names` as seen `now`; answers every name seen within
    /// [`NAMED_FOR`] (sorted).
    fn note(&mut self, now: Instant, names: impl IntoIterator<Item = String>) -> Vec<String> {
        for name in names {
            self.seen.insert(name, now);
        }
        self.seen
            .retain(|_, at| now.saturating_duration_since(*at) < NAMED_FOR);
        self.seen.keys().cloned().collect()
    }
}

/// The standbys a primary may not wait for, by their tags
/// (`synchronous_standby = false` or `promotable = false`: [`peers`]), read
/// from this node's membership view at most once per [`APART_EVERY`] while
/// this node's server is a primary that standbys stream to.
#[derive(Debug, Default)]
struct SetApart {
    names: BTreeSet<String>,
    read: Option<Instant>,
}

/// How often a primary reads its standbys' tags (a member's reload reaches
/// it a gossip round later anyway).
const APART_EVERY: Duration = Duration::from_secs(1);

impl SetApart {
    /// The standbys set apart, as last read (read again when due); none
    /// unless `standing` is a primary that standbys stream to.
    async fn read(
        &mut self,
        ctx: &RoleContext,
        role: &str,
        standing: &Standing,
        now: Instant,
    ) -> BTreeSet<String> {
        if hale_postgres::streaming(standing).is_empty() {
            return BTreeSet::new();
        }
        if self.read.is_none_or(|t| now >= t + APART_EVERY) {
            if let Some(found) = peers::of_role(&ctx.cmds, role).await {
                self.names = peers::never_waited(&found);
            }
            self.read = Some(now);
        }
        self.names.clone()
    }
}

/// One `[role.postgres]` role's keeper: see the module documentation.
/// Built with `Keeper::new`, run with [`Keeper::run`].
pub struct Keeper {
    /// The server's settings.
    cfg: PostgresConfig,
    /// The role.
    role: String,
    /// What the agent's role managers share: this node's name (its
    /// replication slot and `application_name`), the control plane (the
    /// lease table names the holder), the membership driver (the holder's
    /// address), where events are reported.
    ctx: Arc<RoleContext>,
    /// This role's view (its state is read, its PostgreSQL view written).
    view: RoleViewWriter,
    /// To the role's manager: what the server says of its data.
    data: watch::Sender<DataState>,
    /// Fires when the agent stops.
    stop: watch::Receiver<bool>,
}

/// How this node's server has been following the holder (owned by
/// [`Keeper::run`]).
#[derive(Debug, Default)]
struct Following {
    /// The holder it was last seen streaming from.
    holder: Option<String>,
    /// Since when a running replica has not streamed from that holder.
    adrift_since: Option<Instant>,
}

/// What the control plane's lease table says of the role, as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TableSays {
    /// Not read yet, or no server answered.
    Unknown,
    /// The role was never granted (a new cluster).
    NeverGranted,
    /// This node or another holds it (or held it last, its lease since run out).
    Held(String),
    /// Released: nobody holds it.
    Free,
}

impl Keeper {
    /// The keeper of `role`'s server (`cfg`), sharing the managers' `ctx`,
    /// writing the role's view through `view`, telling the role's manager
    /// what it measures of the data on `data`, until `stop` fires.
    pub(crate) fn new(
        cfg: PostgresConfig,
        role: String,
        ctx: Arc<RoleContext>,
        view: RoleViewWriter,
        data: watch::Sender<DataState>,
        stop: watch::Receiver<bool>,
    ) -> Keeper {
        Keeper {
            cfg,
            role,
            ctx,
            view,
            data,
            stop,
        }
    }

    /// Runs until the agent stops.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut table = TableSays::Unknown;
        let mut paused = false;
        let mut table_read: Option<Instant> = None;
        let mut retry_after: Option<Instant> = None;
        let mut track = Following::default();
        let mut named = Named::default();
        let mut apart = SetApart::default();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.stop.changed() => return,
            }
            if *self.stop.borrow() {
                return;
            }
            let standing = match hale_postgres::standing(&self.cfg).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(role = %self.role, error = %e, "postgres: reading its standing");
                    self.data.send_replace(DataState::Unknown);
                    self.publish(|v| v.error = Some(e.to_string()));
                    continue;
                }
            };
            let fenced = self.cfg.fence_marker().exists();
            let state = self.state();
            let following = matches!(state, RoleState::Standby | RoleState::Ineligible);
            let now = Instant::now();
            if following && table_read.is_none_or(|t| now >= t + HOLDER_EVERY) {
                (table, paused) = self.read_table().await;
                table_read = Some(now);
            }
            // The standbys this primary may not wait for (their tags).
            let never = apart.read(&self.ctx, &self.role, &standing, now).await;
            let data = match &standing {
                Standing::Primary { lsn, .. }
                    if following && !fenced && self.offers_own_primary(&table) =>
                {
                    DataState::Copy(*lsn)
                }
                _ => match data_state(&standing, fenced, &never) {
                    DataState::Primary(mark) => DataState::Primary(Mark {
                        synchronous: named.note(now, mark.synchronous),
                        strict: self.cfg.strict,
                        ..mark
                    }),
                    other => other,
                },
            };
            self.data.send_replace(data);
            self.publish(|v| {
                v.standing = Some(standing.clone());
                v.fenced = fenced;
                v.max_lag = Some(self.cfg.max_lag_on_failover);
            });
            match state {
                RoleState::Holder => {
                    // Only standbys the table names may be waited for: the
                    // table (committed state) is read only when a streaming
                    // standby is not waited for yet, the one case that adds a
                    // name; otherwise the names in effect are admitted
                    // already (none is added, one that stopped streaming
                    // leaves). With no server answering, likewise: a primary
                    // cut off from the control plane must not wait for a
                    // dead standby.
                    let in_effect = match &standing {
                        Standing::Primary { synchronous, .. } => {
                            hale_postgres::Waits::parse(synchronous).names()
                        }
                        _ => Default::default(),
                    };
                    let mut may_add = hale_postgres::streaming(&standing);
                    may_add.retain(|n| !never.contains(n));
                    let adds = !may_add.is_subset(&in_effect);
                    let admitted = match adds {
                        true => self.admitted().await.unwrap_or(in_effect),
                        false => in_effect,
                    };
                    let sync = hale_postgres::maintain_synchronous(
                        &self.cfg, &standing, &admitted, &never,
                    );
                    if let Err(e) = sync.await {
                        tracing::warn!(role = %self.role, error = %e, "postgres: synchronous replication");
                    }
                }
                RoleState::Promoting | RoleState::Demoting => {}
                // Paused (maintenance): measure, never act on the server.
                RoleState::Standby | RoleState::Ineligible if paused => {}
                RoleState::Standby | RoleState::Ineligible => {
                    if retry_after.is_some_and(|t| Instant::now() < t) {
                        continue;
                    }
                    let ok = self.follow(&mut track, &table, &standing, fenced).await;
                    retry_after = (!ok).then(|| Instant::now() + RETRY);
                    if !ok {
                        table_read = None; // read it again before the next try
                    }
                }
            }
        }
    }

    /// What the lease table says of the role, and whether it is paused.
    async fn read_table(&self) -> (TableSays, bool) {
        let Some(table) = self.ctx.control.table().await else {
            return (TableSays::Unknown, false);
        };
        let lease = table.role(&self.role);
        let paused = lease.is_some_and(|r| r.paused);
        let mark = lease.and_then(|r| r.mark.as_ref());
        let synchronous = mark.is_some_and(|m| m.synchronous.contains(&self.ctx.node));
        self.publish(|v| {
            v.primary_lsn = mark.map(|m| m.position);
            v.synchronous = synchronous;
        });
        let says = match lease {
            Some(r) if r.epoch > 0 => r.holder.clone().map_or(TableSays::Free, TableSays::Held),
            _ => TableSays::NeverGranted,
        };
        (says, paused)
    }

    /// The standbys the lease table's last mark of the role names
    /// synchronous (`None` when no server answered).
    async fn admitted(&self) -> Option<std::collections::BTreeSet<String>> {
        let table = self.ctx.control.table().await?;
        let mark = table.role(&self.role).and_then(|r| r.mark.as_ref());
        Some(
            mark.map(|m| m.synchronous.iter().cloned().collect())
                .unwrap_or_default(),
        )
    }

    /// Whether a primary on this node that does not act as holder may be
    /// offered as its copy: in a new cluster (the role never granted: the
    /// server an operator set up as the first primary), or when this node
    /// held the role last (its agent restarted; nobody was granted it
    /// since, so no other server can have diverged from it).
    fn offers_own_primary(&self, table: &TableSays) -> bool {
        match table {
            TableSays::NeverGranted => true,
            TableSays::Held(h) => *h == self.ctx.node,
            TableSays::Unknown | TableSays::Free => false,
        }
    }

    /// Keeps a node that does not hold the role following the one that
    /// does; false when what it tried failed (tried again after [`RETRY`]).
    async fn follow(
        &mut self,
        following: &mut Following,
        table: &TableSays,
        standing: &Standing,
        fenced: bool,
    ) -> bool {
        match table {
            TableSays::Unknown => true,
            TableSays::Held(h) if *h != self.ctx.node => {
                let Some((upstream, alive)) = self.upstream(h).await else {
                    return true; // not in this node's view yet
                };
                if standing.streams_from(&upstream.host, upstream.port) && !fenced {
                    following.adrift_since = None;
                    following.holder = Some(h.clone());
                    return true;
                }
                if !alive {
                    // The holder is gone (or not seen alive yet): its role
                    // will move. Keep the copy as it is (a candidate), never
                    // rejoin a dead server; a stopped one starts as a
                    // standby to offer its copy, unless it went down as a
                    // primary: another node holds the role, so its WAL may
                    // run past the holder's fork, and such a copy is never
                    // offered (fenced: it rejoins once a holder is alive).
                    if matches!(standing, Standing::Down) && !fenced {
                        match hale_postgres::crashed_as_primary(&self.cfg).await {
                            Ok(true) => {
                                return self
                                    .fence_down(
                                        "went down as a primary while another holds the role",
                                    )
                                    .await
                            }
                            Ok(false) => {}
                            Err(e) => {
                                tracing::warn!(role = %self.role, error = %e, "postgres: reading its control file");
                                return false;
                            }
                        }
                    }
                    return self.start_if_down(standing, fenced).await;
                }
                // A replica that lost its stream from this holder may only
                // be blinking, or hung, or restarting (it measures as down):
                // rejoin it (which fences it, killing a hung server) only
                // once the holder has been alive and unfollowed for
                // REJOIN_AFTER. By then a holder that died with it is seen
                // dead, and the copy, good, is kept and offered: fencing it
                // would leave nobody to promote. One that never streamed
                // from this holder rejoins at once.
                let lost = following.holder.as_deref() == Some(h.as_str());
                let blinking = matches!(standing, Standing::Replica { .. } | Standing::Down);
                if lost && blinking && !fenced {
                    let since = *following.adrift_since.get_or_insert_with(Instant::now);
                    if since.elapsed() < REJOIN_AFTER {
                        return true;
                    }
                }
                following.adrift_since = None;
                let h = h.clone();
                self.rejoin(&h, &upstream).await
            }
            TableSays::Free if matches!(standing, Standing::Primary { .. }) => {
                // Released, yet this server takes writes (started by hand?).
                self.fence_down("ran as a primary while nobody holds the role")
                    .await
            }
            // Nobody else holds it: a stopped, unfenced server starts as a
            // standby so that it can offer its copy.
            TableSays::Held(_) | TableSays::NeverGranted | TableSays::Free => {
                self.start_if_down(standing, fenced).await
            }
        }
    }

    /// Fences this node's server (`why`, logged; stopped if it runs): it
    /// rejoins the holder before it may offer its copy or be promoted.
    async fn fence_down(&self, why: &str) -> bool {
        match hale_postgres::fence(&self.cfg).await {
            Ok(how) => {
                tracing::warn!(role = %self.role, why, "postgres: fenced");
                let role = self.role.clone();
                self.emit(AgentEvent::PostgresFenced { role, how });
                true
            }
            Err(e) => {
                tracing::warn!(role = %self.role, error = %e, why, "postgres: fencing");
                false
            }
        }
    }

    /// Starts a stopped, unfenced server as a standby (so that it can offer
    /// its copy); false when that failed.
    async fn start_if_down(&self, standing: &Standing, fenced: bool) -> bool {
        if !matches!(standing, Standing::Down) || fenced {
            return true;
        }
        match hale_postgres::start_standby(&self.cfg).await {
            // (NotACluster: nothing to start yet, a member awaiting its
            // first clone.)
            Ok(_) | Err(hale_postgres::StartError::NotACluster(_)) => true,
            Err(e) => {
                tracing::warn!(role = %self.role, error = %e, "postgres: starting as a standby");
                false
            }
        }
    }

    /// Rejoins the holder `holder` at `upstream`, reporting each step.
    async fn rejoin(&mut self, holder: &str, upstream: &Upstream) -> bool {
        self.data.send_replace(DataState::Unknown);
        let slot = self.cfg.slot_name(&self.ctx.node);
        let (role, on_change, view) = (
            self.role.clone(),
            self.ctx.on_change.clone(),
            self.view.clone(),
        );
        let from = holder.to_owned();
        let report = move |step: RejoinStep| {
            view.update_existing(|v| {
                let pg = v.postgres.get_or_insert_with(PostgresView::default);
                pg.rejoin = Some(step);
                pg.error = None;
            });
            let (role, upstream) = (role.clone(), from.clone());
            let e = match step {
                RejoinStep::Rejoining => AgentEvent::Rejoining { role, upstream },
                RejoinStep::Rewound => AgentEvent::Rewound { role, upstream },
                RejoinStep::Recloned => AgentEvent::Recloned { role, upstream },
                RejoinStep::Streaming => AgentEvent::Streaming { role, upstream },
            };
            on_change(RoleChange::Event(e));
        };
        match hale_postgres::rejoin(&self.cfg, upstream, &slot, &self.ctx.node, report).await {
            Ok(how) => {
                tracing::info!(role = %self.role, ?how, %holder, "postgres: streaming from the holder");
                true
            }
            Err(e) => {
                tracing::warn!(role = %self.role, error = %e, %holder, "postgres: rejoin failed");
                let (role, upstream, error) = (self.role.clone(), holder.to_owned(), e.to_string());
                self.publish(|v| v.error = Some(error.clone()));
                self.emit(AgentEvent::RejoinFailed {
                    role,
                    upstream,
                    error,
                });
                false
            }
        }
    }

    /// The PostgreSQL server of member `name`: its address in this node's
    /// membership view, at this role's port (every member's server listens
    /// on the same port), and whether the member is alive.
    async fn upstream(&self, name: &str) -> Option<(Upstream, bool)> {
        let snap = crate::membership::runtime::ask(&self.ctx.cmds, Command::Snapshot).await?;
        let m = snap.members.iter().find(|m| m.name == name)?;
        let addr: std::net::SocketAddr = m.addr.parse().ok()?;
        let upstream = Upstream {
            host: addr.ip().to_string(),
            port: self.cfg.port,
        };
        Some((upstream, m.state == MemberState::Alive))
    }

    fn state(&self) -> RoleState {
        self.view
            .read(|v| v.map_or(RoleState::Ineligible, |v| v.state))
    }

    fn publish(&self, f: impl FnOnce(&mut PostgresView)) {
        self.view
            .update_existing(|v| f(v.postgres.get_or_insert_with(PostgresView::default)));
    }

    fn emit(&self, e: AgentEvent) {
        (self.ctx.on_change)(RoleChange::Event(e));
    }
}

/// What the server says of its data, for the role's `Holder`: a replica's
/// copy (unless fenced: it must rejoin first), the furthest of the WAL it
/// received and flushed and the WAL it replayed (a promotion replays all it
/// received: a commit it flushed is one it holds); a primary's position and
/// the standbys it waits for or that stream to it, except those in `never`
/// that it does not wait for (a standby that may not be waited for is
/// never named in the mark once the primary has stopped waiting for it, so
/// that the control plane never ranks it as a synchronous copy; the mark's
/// names stay a superset of those a commit may have waited for).
pub fn data_state(standing: &Standing, fenced: bool, never: &BTreeSet<String>) -> DataState {
    match standing {
        Standing::Replica {
            receive_lsn,
            replay_lsn,
            ..
        } if !fenced => DataState::Copy((*replay_lsn).max(receive_lsn.unwrap_or(0))),
        Standing::Primary {
            lsn, synchronous, ..
        } => {
            let mut names = hale_postgres::Waits::parse(synchronous).names();
            let streaming = hale_postgres::streaming(standing);
            names.extend(streaming.into_iter().filter(|n| !never.contains(n)));
            names.remove(hale_postgres::NO_STANDBY);
            DataState::Primary(Mark {
                position: *lsn,
                synchronous: names.into_iter().collect(),
                strict: false,
            })
        }
        Standing::Replica { .. } | Standing::Down => DataState::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hale_postgres::StandbyState;

    #[test]
    fn a_fenced_replica_offers_no_copy_and_a_primary_names_every_standby_it_may_wait_for() {
        let replica = Standing::Replica {
            receive_lsn: Some(10),
            replay_lsn: 8,
            replay_paused: false,
            last_replay: None,
            streaming: true,
            upstream: Some("10.0.0.1".into()),
            upstream_port: Some(5432),
            timeline: 2,
        };
        let none = BTreeSet::new();
        assert_eq!(data_state(&replica, false, &none), DataState::Copy(10));
        assert_eq!(data_state(&replica, true, &none), DataState::Unknown);
        let standby = |name: &str, sync| StandbyState {
            name: name.into(),
            sync,
            flush_lsn: None,
            replay_lsn: None,
            state: hale_postgres::SenderState::Streaming,
        };
        // b is waited for, c streams (not yet admitted), d waited for
        // but gone: all named.
        let primary = Standing::Primary {
            lsn: 99,
            timeline: 2,
            standbys: vec![standby("b", true), standby("c", false)],
            synchronous: r#"ANY 1 ("b", "d")"#.into(),
        };
        assert_eq!(
            data_state(&primary, false, &none),
            DataState::Primary(Mark {
                position: 99,
                synchronous: vec!["b".into(), "c".into(), "d".into()],
                strict: false,
            })
        );
        assert_eq!(
            data_state(&Standing::Down, false, &none),
            DataState::Unknown
        );
        // b and c may not be waited for (their tags): c, streaming and not
        // waited for, is left out; b, still waited for, stays named until
        // the primary no longer waits for it.
        let never = BTreeSet::from(["b".to_owned(), "c".to_owned()]);
        assert_eq!(
            data_state(&primary, false, &never),
            DataState::Primary(Mark {
                position: 99,
                synchronous: vec!["b".into(), "d".into()],
                strict: false,
            })
        );
    }
}
