//! Synchronous replication by quorum: the primary waits for *one* flush
//! among the streaming standbys the role's lease table names
//! (`synchronous_standby_names = 'ANY 1 ("b", "c")'`), and commits alone when
//! none streams, unless strict.
//!
//! Why a quorum: with `FIRST 1` (or `'*'`, which is `FIRST 1 (*)`) one
//! standby is *the* synchronous one, and a hung standby (its processes
//! stopped, its connection open) holds every commit until its WAL sender
//! times out. With `ANY 1` over two standbys the other one's flush is
//! enough: a hung standby costs nothing while another streams.
//!
//! Why names, not `*`: the standbys a commit may have waited for must be
//! named in the role's lease table before the primary may wait for them
//! (the grantor's proof under strict durability, `hale_control::replication`).
//! So the caller passes the names the table holds (`admitted`), and only
//! those are ever added; a standby leaves the setting as soon as it stops
//! streaming, and the table after.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{connect, poll_until, ConnectError};
use crate::config::{ConfigError, PostgresConfig};
use crate::standing::{SenderState, Standing};

/// The name a strict primary waits for before any standby was admitted: no
/// standby is ever named so (hale's node names are its members' names), so
/// commits wait until a real one is named in its place.
pub const NO_STANDBY: &str = "hale-no-standby";

/// Why `synchronous_standby_names` could not be set. It is as it was, or set
/// but not yet in effect (`NotInEffect`).
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The configuration is invalid; nothing was done.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The local server could not be reached.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The local server is a standby; nothing was done.
    #[error("the local server is a standby: only a primary has synchronous standbys")]
    NotPrimary,
    /// A query failed.
    #[error("setting synchronous_standby_names: {0}")]
    Query(#[from] tokio_postgres::Error),
    /// The setting was changed and the configuration reloaded, but the
    /// server did not report it in effect within `promote_timeout`.
    #[error("synchronous_standby_names set to {wanted:?} but not in effect after {after:?}")]
    NotInEffect {
        /// The value set.
        wanted: String,
        /// How long hale waited.
        after: Duration,
    },
}

/// The value of `synchronous_standby_names` that waits for one flush among
/// `names` (`ANY 1 ("b", "c")`, each a quoted identifier); `''` for none.
pub fn quorum_setting(names: &BTreeSet<String>) -> String {
    if names.is_empty() {
        return String::new();
    }
    let quoted: Vec<String> = names
        .iter()
        .map(|n| format!("\"{}\"", n.replace('"', "\"\"")))
        .collect();
    format!("ANY 1 ({})", quoted.join(", "))
}

/// What a value of `synchronous_standby_names` waits for, as far as hale
/// needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waits {
    /// Nothing: commits return alone (`''`).
    Nothing,
    /// One flush among these names (what [`quorum_setting`] writes).
    Quorum(BTreeSet<String>),
    /// Any value hale does not write (`'*'` of an earlier release, `FIRST
    /// 2 (...)`, a hand-edited list): any connected standby may be waited for.
    Other(String),
}

impl Waits {
    /// Reads a value of `synchronous_standby_names`.
    pub fn parse(value: &str) -> Waits {
        let value = value.trim();
        if value.is_empty() {
            return Waits::Nothing;
        }
        let Some(list) = value
            .strip_prefix("ANY 1 (")
            .and_then(|rest| rest.strip_suffix(')'))
        else {
            return Waits::Other(value.to_owned());
        };
        match parse_names(list) {
            Some(names) if quorum_setting(&names) == value => Waits::Quorum(names),
            _ => Waits::Other(value.to_owned()),
        }
    }

    /// The standbys this value names: all of a quorum; none for
    /// [`Waits::Nothing`] and [`Waits::Other`].
    pub fn names(&self) -> BTreeSet<String> {
        match self {
            Waits::Quorum(names) => names.clone(),
            Waits::Nothing | Waits::Other(_) => BTreeSet::new(),
        }
    }
}

/// `"b", "c"` → {b, c}; `None` for anything else.
fn parse_names(list: &str) -> Option<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let mut rest = list.trim();
    while !rest.is_empty() {
        let body = rest.strip_prefix('"')?;
        let mut name = String::new();
        let mut chars = body.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            if c != '"' {
                name.push(c);
            } else if body[i + 1..].starts_with('"') {
                name.push('"');
                chars.next();
            } else {
                break i + 1;
            }
        };
        names.insert(name);
        rest = body[end..].trim_start();
        if let Some(next) = rest.strip_prefix(',') {
            rest = next.trim_start();
            if rest.is_empty() {
                return None;
            }
        } else if !rest.is_empty() {
            return None;
        }
    }
    Some(names)
}

/// Sets `synchronous_standby_names` on the local primary to `wanted`
/// (`ALTER SYSTEM`, `pg_reload_conf()`) and waits until the server reports
/// it. Answers whether anything changed.
pub async fn set_synchronous(cfg: &PostgresConfig, wanted: &str) -> Result<bool, SyncError> {
    cfg.validate()?;
    let client = connect(cfg, &cfg.host, cfg.port).await?;
    let query = "SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names')";
    let row = client.query_one(query, &[]).await?;
    if row.get::<_, bool>(0) {
        return Err(SyncError::NotPrimary);
    }
    if row.get::<_, String>(1) == wanted {
        return Ok(false);
    }
    // Two statements: ALTER SYSTEM refuses a transaction block. The value
    // is a literal: its quotes doubled.
    client
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{}'",
            wanted.replace('\'', "''")
        ))
        .await?;
    client.batch_execute("SELECT pg_reload_conf()").await?;
    // The reload reaches each process asynchronously; a new session reads the
    // configuration the postmaster has loaded.
    let deadline = Instant::now() + cfg.promote_timeout;
    let in_effect = poll_until(deadline, Duration::from_millis(20), || async {
        let client = connect(cfg, &cfg.host, cfg.port).await.ok()?;
        let row = client
            .query_one("SELECT current_setting('synchronous_standby_names')", &[])
            .await
            .ok()?;
        (row.get::<_, String>(0) == wanted).then_some(())
    })
    .await;
    in_effect.map(|()| true).ok_or(SyncError::NotInEffect {
        wanted: wanted.to_owned(),
        after: cfg.promote_timeout,
    })
}

/// The standbys streaming to a primary that may be waited for (by name;
/// `pg_basebackup`'s WAL stream does not count).
pub fn streaming(standing: &Standing) -> BTreeSet<String> {
    let Standing::Primary { standbys, .. } = standing else {
        return BTreeSet::new();
    };
    standbys
        .iter()
        .filter(|s| s.state == SenderState::Streaming && s.name != "pg_basebackup")
        .map(|s| s.name.clone())
        .collect()
}

/// The value a primary's `synchronous_standby_names` should have: one flush
/// among the standbys that stream *and* that the role's lease table names
/// (`admitted`) *and* that may be waited for (not in `never`: standbys set
/// `synchronous_standby = false`, or that may not be promoted); when there
/// are none, `''` (commit alone), or if `cfg.strict` what it waits for now
/// less the names in `never` (never less otherwise: a quorum of names that
/// no longer stream), or [`NO_STANDBY`] when that leaves none (commits wait
/// until a standby that may be waited for streams). `None` when nothing is
/// to be set: a replica or a server that is down, or `cfg.synchronous` off.
pub fn wanted_setting(
    cfg: &PostgresConfig,
    standing: &Standing,
    admitted: &BTreeSet<String>,
    never: &BTreeSet<String>,
) -> Option<String> {
    let Standing::Primary { synchronous, .. } = standing else {
        return None;
    };
    if !cfg.synchronous {
        return None;
    }
    let target: BTreeSet<String> = streaming(standing)
        .intersection(admitted)
        .filter(|n| !never.contains(*n))
        .cloned()
        .collect();
    if !target.is_empty() {
        return Some(quorum_setting(&target));
    }
    if !cfg.strict {
        return Some(String::new());
    }
    let waited: BTreeSet<String> = Waits::parse(synchronous)
        .names()
        .into_iter()
        .filter(|n| !never.contains(n))
        .collect();
    Some(match waited.is_empty() {
        false => quorum_setting(&waited),
        true => quorum_setting(&BTreeSet::from([NO_STANDBY.to_owned()])),
    })
}

/// Keeps a primary's `synchronous_standby_names` at [`wanted_setting`]
/// (when `cfg.synchronous`). Does nothing for a replica, a server that is
/// down, or when `cfg.synchronous` is off. Answers the value it decided, if
/// any.
pub async fn maintain_synchronous(
    cfg: &PostgresConfig,
    standing: &Standing,
    admitted: &BTreeSet<String>,
    never: &BTreeSet<String>,
) -> Result<Option<String>, SyncError> {
    let Some(wanted) = wanted_setting(cfg, standing, admitted, never) else {
        return Ok(None);
    };
    set_synchronous(cfg, &wanted).await?;
    Ok(Some(wanted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standing::StandbyState;

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    /// No standby set apart: every one may be waited for.
    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    fn primary(setting: &str, streaming: &[&str]) -> Standing {
        Standing::Primary {
            lsn: 1,
            timeline: 1,
            synchronous: setting.to_owned(),
            standbys: streaming
                .iter()
                .map(|n| StandbyState {
                    name: n.to_string(),
                    sync: false,
                    flush_lsn: None,
                    replay_lsn: None,
                    state: SenderState::Streaming,
                })
                .collect(),
        }
    }

    fn cfg(strict: bool) -> PostgresConfig {
        PostgresConfig {
            strict,
            ..PostgresConfig::new("/srv/pg")
        }
    }

    #[test]
    fn a_quorum_setting_reads_back_with_its_names_and_any_other_value_names_none() {
        let set = names(&["host-b", "we\"ird", "c"]);
        let value = quorum_setting(&set);
        assert_eq!(value, r#"ANY 1 ("c", "host-b", "we""ird")"#);
        assert_eq!(Waits::parse(&value), Waits::Quorum(set));
        assert_eq!(Waits::parse(""), Waits::Nothing);
        assert_eq!(quorum_setting(&BTreeSet::new()), "");
        for other in [
            "*",
            "FIRST 1 (a, b)",
            "ANY 2 (\"a\", \"b\")",
            "ANY 1 (a)",
            "ANY 1 (\"a\",)",
            "ANY 1 (\"a\" \"b\")",
            "ANY 1 (\"a)",
        ] {
            assert_eq!(
                Waits::parse(other),
                Waits::Other(other.to_owned()),
                "{other}"
            );
            assert!(Waits::parse(other).names().is_empty());
        }
    }

    #[test]
    fn a_primary_waits_only_for_streaming_standbys_the_table_admitted_and_alone_for_none_unless_strict(
    ) {
        let both = primary("", &["b", "c"]);
        // c streams but the table does not name it yet: not waited for.
        assert_eq!(
            wanted_setting(&cfg(false), &both, &names(&["b"]), &none()),
            Some(r#"ANY 1 ("b")"#.to_owned())
        );
        assert_eq!(
            wanted_setting(&cfg(false), &both, &names(&["b", "c", "gone"]), &none()),
            Some(r#"ANY 1 ("b", "c")"#.to_owned())
        );
        // Nobody streams: alone, unless strict (then as it was).
        let alone = primary(r#"ANY 1 ("b", "c")"#, &[]);
        assert_eq!(
            wanted_setting(&cfg(false), &alone, &names(&["b", "c"]), &none()),
            Some(String::new())
        );
        assert_eq!(
            wanted_setting(&cfg(true), &alone, &names(&["b", "c"]), &none()),
            Some(r#"ANY 1 ("b", "c")"#.to_owned())
        );
        // Strict, and never a standby: waits for one that does not exist.
        assert_eq!(
            wanted_setting(&cfg(true), &primary("", &[]), &BTreeSet::new(), &none()),
            Some(format!("ANY 1 (\"{NO_STANDBY}\")"))
        );
        // A replica, a server that is down, synchronous off: nothing to set.
        let off = PostgresConfig {
            synchronous: false,
            ..cfg(false)
        };
        assert_eq!(wanted_setting(&off, &both, &names(&["b"]), &none()), None);
        assert_eq!(
            wanted_setting(&cfg(false), &Standing::Down, &names(&["b"]), &none()),
            None
        );
    }

    #[test]
    fn a_standby_that_may_not_be_waited_for_is_never_named_and_under_strict_durability_commits_wait(
    ) {
        let never = names(&["c"]);
        let both = primary("", &["b", "c"]);
        let admitted = names(&["b", "c"]);
        assert_eq!(
            wanted_setting(&cfg(false), &both, &admitted, &never),
            Some(r#"ANY 1 ("b")"#.to_owned())
        );
        // c the only standby: alone by default; under strict durability,
        // nothing it may wait for, so commits wait (never for c).
        let only_c = primary(r#"ANY 1 ("c")"#, &["c"]);
        assert_eq!(
            wanted_setting(&cfg(false), &only_c, &admitted, &never),
            Some(String::new())
        );
        assert_eq!(
            wanted_setting(&cfg(true), &only_c, &admitted, &never),
            Some(format!("ANY 1 (\"{NO_STANDBY}\")"))
        );
        // Set apart while waited for with b: b alone is kept, whether b
        // streams or not.
        let was = primary(r#"ANY 1 ("b", "c")"#, &["c"]);
        assert_eq!(
            wanted_setting(&cfg(true), &was, &admitted, &never),
            Some(r#"ANY 1 ("b")"#.to_owned())
        );
    }
}
