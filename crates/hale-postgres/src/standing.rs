//! Where the local server stands in replication, read with queries: primary
//! (with its standbys), replica (with its replay), or down.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use crate::client::{connect, ConnectError};
use crate::config::PostgresConfig;
use crate::lsn::{lag_bytes, parse_lsn, LsnParseError};

/// A standby as its primary sees it (a row of `pg_stat_replication`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandbyState {
    /// Its `application_name` (hale sets it to the member's name).
    pub name: String,
    /// True when the primary waits for its flush (`sync_state` `sync`, or
    /// `quorum`: a commit returns once one of the quorum has flushed it).
    pub sync: bool,
    /// The WAL position it has flushed to its disk, when reported.
    pub flush_lsn: Option<u64>,
    /// The WAL position it has replayed, when reported.
    pub replay_lsn: Option<u64>,
    /// Its WAL sender's state.
    pub state: SenderState,
}

/// A WAL sender's state (`pg_stat_replication.state`), by PostgreSQL's
/// names; `unknown` for one hidden from hale's user or newer than PostgreSQL 15.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SenderState {
    /// Starting up.
    Startup,
    /// Catching up with the primary.
    Catchup,
    /// Streaming what the primary writes.
    Streaming,
    /// Sending a base backup (`pg_basebackup`).
    Backup,
    /// Stopping.
    Stopping,
    /// Any other (or no) state.
    #[serde(other)]
    Unknown,
}

impl SenderState {
    /// The state `pg_stat_replication` shows, by the names serde gives the
    /// variants (one list of names); an unknown or hidden one is `Unknown`.
    fn parse(state: Option<&str>) -> SenderState {
        use serde::de::{value::StrDeserializer, IntoDeserializer};
        let read = |s: &str| {
            let name: StrDeserializer<'_, serde::de::value::Error> = s.into_deserializer();
            SenderState::deserialize(name).unwrap_or(SenderState::Unknown)
        };
        state.map_or(SenderState::Unknown, read)
    }
}

/// Where a PostgreSQL server stands in replication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "standing", rename_all = "snake_case")]
pub enum Standing {
    /// It accepts writes.
    Primary {
        /// Its current WAL write position (`pg_current_wal_lsn()`).
        lsn: u64,
        /// The timeline it writes on.
        timeline: u32,
        /// The standbys connected to it, by name.
        standbys: Vec<StandbyState>,
        /// Its `synchronous_standby_names` in effect (see
        /// [`crate::Waits::parse`]).
        #[serde(default)]
        synchronous: String,
    },
    /// It is in recovery: a standby.
    Replica {
        /// The last WAL position received and flushed from an upstream, if any
        /// was (`pg_last_wal_receive_lsn()`).
        receive_lsn: Option<u64>,
        /// The last WAL position replayed (`pg_last_wal_replay_lsn()`).
        replay_lsn: u64,
        /// True when replay is paused (`pg_wal_replay_pause()`).
        replay_paused: bool,
        /// When the last replayed transaction committed on the primary.
        #[serde(default, with = "humantime_serde")]
        last_replay: Option<SystemTime>,
        /// True when its WAL receiver streams from an upstream
        /// (`pg_stat_wal_receiver.status = 'streaming'`).
        streaming: bool,
        /// The upstream its WAL receiver is connected to, as written in
        /// `primary_conninfo` (`sender_host`).
        upstream: Option<String>,
        /// The upstream's port (`sender_port`).
        upstream_port: Option<u16>,
        /// The timeline it receives (`received_tli`), else the one of its last
        /// restartpoint.
        timeline: u32,
    },
    /// The server does not answer: not running, starting, stopping or hung.
    Down,
}

impl Standing {
    /// For a replica, how many bytes of WAL its replay is behind
    /// `primary_lsn` (see [`lag_bytes`]); `None` otherwise.
    pub fn replay_lag(&self, primary_lsn: u64) -> Option<u64> {
        match self {
            Standing::Replica { replay_lsn, .. } => Some(lag_bytes(primary_lsn, *replay_lsn)),
            _ => None,
        }
    }

    /// The timeline it writes (a primary) or receives (a replica).
    pub fn timeline(&self) -> Option<u32> {
        match self {
            Standing::Primary { timeline, .. } | Standing::Replica { timeline, .. } => {
                Some(*timeline)
            }
            Standing::Down => None,
        }
    }

    /// True for a replica whose WAL receiver streams from `host:port`.
    pub fn streams_from(&self, host: &str, port: u16) -> bool {
        matches!(self, Standing::Replica { streaming: true, upstream: Some(h), upstream_port: Some(p), .. }
            if h == host && *p == port)
    }
}

/// Why the standing could not be read although the server answered.
#[derive(Debug, thiserror::Error)]
pub enum StandingError {
    /// The server refused the session (see [`ConnectError::Refused`]).
    #[error(transparent)]
    Connect(ConnectError),
    /// A query failed.
    #[error("reading the replication state: {0}")]
    Query(#[from] tokio_postgres::Error),
    /// The server wrote a WAL position or timeline hale cannot read.
    #[error("reading the replication state: {0}")]
    Lsn(#[from] LsnParseError),
    /// A WAL file name without a timeline.
    #[error("reading the replication state: unexpected WAL file name {0:?}")]
    Timeline(String),
}

/// Reads where the local server (`cfg.host`, `cfg.port`) stands. `Down` when
/// it does not answer within `cfg.connect_timeout`; an error when it answers
/// but a session or a query fails.
pub async fn standing(cfg: &PostgresConfig) -> Result<Standing, StandingError> {
    match connect(cfg, &cfg.host, cfg.port).await {
        Ok(client) => read(&client).await,
        Err(err) if err.is_unanswered() => Ok(Standing::Down),
        Err(err) => Err(StandingError::Connect(err)),
    }
}

/// Reads the standing over an open session.
pub(crate) async fn read(client: &Client) -> Result<Standing, StandingError> {
    let in_recovery: bool = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .get(0);
    if in_recovery {
        replica(client).await
    } else {
        primary(client).await
    }
}

async fn primary(client: &Client) -> Result<Standing, StandingError> {
    let row = client
        .query_one(
            "SELECT pg_current_wal_lsn()::text, pg_walfile_name(pg_current_wal_lsn()), \
                    current_setting('synchronous_standby_names')",
            &[],
        )
        .await?;
    let lsn = parse_lsn(row.get(0))?;
    // A WAL file name is the timeline, then the segment, in hexadecimal.
    let walfile: String = row.get(1);
    let timeline = walfile
        .get(..8)
        .and_then(|tli| u32::from_str_radix(tli, 16).ok())
        .ok_or_else(|| StandingError::Timeline(walfile.clone()))?;
    let rows = client
        .query(
            "SELECT application_name, sync_state, state, flush_lsn::text, replay_lsn::text \
             FROM pg_stat_replication ORDER BY application_name, pid",
            &[],
        )
        .await?;
    let mut standbys = Vec::with_capacity(rows.len());
    for row in rows {
        let sync_state: Option<String> = row.get(1);
        standbys.push(StandbyState {
            name: row.get::<_, Option<String>>(0).unwrap_or_default(),
            sync: matches!(sync_state.as_deref(), Some("sync" | "quorum")),
            state: SenderState::parse(row.get(2)),
            flush_lsn: row.get::<_, Option<&str>>(3).map(parse_lsn).transpose()?,
            replay_lsn: row.get::<_, Option<&str>>(4).map(parse_lsn).transpose()?,
        });
    }
    Ok(Standing::Primary {
        lsn,
        timeline,
        standbys,
        synchronous: row.get(2),
    })
}

async fn replica(client: &Client) -> Result<Standing, StandingError> {
    let row = client
        .query_one(
            "SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text, \
                    pg_is_wal_replay_paused(), pg_last_xact_replay_timestamp(), \
                    r.status, r.sender_host, r.sender_port, \
                    COALESCE(r.received_tli, c.timeline_id) \
             FROM pg_control_checkpoint() c LEFT JOIN pg_stat_wal_receiver r ON true",
            &[],
        )
        .await?;
    let status: Option<String> = row.get(4);
    Ok(Standing::Replica {
        receive_lsn: row.get::<_, Option<&str>>(0).map(parse_lsn).transpose()?,
        // NULL only for a server that never was in recovery; this one is.
        replay_lsn: row
            .get::<_, Option<&str>>(1)
            .map(parse_lsn)
            .transpose()?
            .unwrap_or(0),
        replay_paused: row.get(2),
        last_replay: row.get(3),
        streaming: status.as_deref() == Some("streaming"),
        upstream: row.get(5),
        upstream_port: row
            .get::<_, Option<i32>>(6)
            .and_then(|p| u16::try_from(p).ok()),
        timeline: row
            .get::<_, Option<i32>>(7)
            .and_then(|t| u32::try_from(t).ok())
            .unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_senders_state_is_read_by_postgresqls_name_and_any_other_is_unknown() {
        let read = |s| SenderState::parse(Some(s));
        assert_eq!(read("startup"), SenderState::Startup);
        assert_eq!(read("catchup"), SenderState::Catchup);
        assert_eq!(read("streaming"), SenderState::Streaming);
        assert_eq!(read("backup"), SenderState::Backup);
        assert_eq!(read("stopping"), SenderState::Stopping);
        assert_eq!(read("Streaming"), SenderState::Unknown);
        assert_eq!(read("archiving"), SenderState::Unknown);
        assert_eq!(SenderState::parse(None), SenderState::Unknown);
        let json = serde_json::to_string(&SenderState::Streaming).expect("a state serialises");
        assert_eq!(json, "\"streaming\"");
    }

    #[test]
    fn a_standing_reads_back_from_its_json() {
        let standing = Standing::Replica {
            receive_lsn: Some(7),
            replay_lsn: 5,
            replay_paused: false,
            last_replay: Some(
                SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000),
            ),
            streaming: true,
            upstream: Some("10.0.0.1".into()),
            upstream_port: Some(5432),
            timeline: 2,
        };
        let json = serde_json::to_string(&standing).expect("serializes");
        assert!(json.contains("\"standing\":\"replica\""), "{json}");
        assert!(
            json.contains("\"last_replay\":\"2027-01-15T08:00:00Z\""),
            "{json}"
        );
        assert_eq!(
            serde_json::from_str::<Standing>(&json).expect("parses"),
            standing
        );
        assert!(standing.streams_from("10.0.0.1", 5432));
        assert!(!standing.streams_from("10.0.0.1", 5433));
        assert_eq!(
            serde_json::to_string(&Standing::Down).expect("serializes"),
            r#"{"standing":"down"}"#
        );
    }
}
