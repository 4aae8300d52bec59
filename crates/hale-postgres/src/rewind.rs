//! Readying a stopped, fenced cluster for `pg_rewind` (its crash recovery,
//! run by hale as a primary or a standby as it went down) and the rewind
//! itself.

use std::ffi::OsString;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::PostgresConfig;
use crate::process::{remove_synced, ToolError, Tools};
use crate::rejoin::{remaining, Rejoined};

/// Runs the crash recovery of a (stopped, fenced) cluster that did not shut
/// down cleanly, unreachable and not streaming, and stops it cleanly, so
/// that `pg_rewind` reads where its WAL really ends:
///
/// * It crashed as a primary (`in production`): recovered as a primary,
///   `standby.signal` set aside meanwhile (the fence marker stays). Its
///   shutdown checkpoint then follows the last record it wrote. Recovered
///   as a standby instead, its control file would say where its WAL ends
///   only by `minRecoveryPoint`, which a last record that touches no page
///   (a commit) does not move: `pg_rewind` would see nothing to rewind
///   while its WAL runs past the new primary's fork, and the server would
///   never follow the new timeline ("forked off ... before current recovery
///   point").
/// * It crashed as a standby: recovered as one. All its WAL came from an
///   upstream; ending its recovery would write a checkpoint of its own.
async fn recover(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    deadline: Instant,
) -> Result<(), ToolError> {
    let was_primary = ran_as_primary(cfg, tools, deadline).await?;
    let signal = cfg.data_dir.join("standby.signal");
    let file = |source| ToolError::File {
        path: signal.clone(),
        source,
    };
    let mut options =
        "-c listen_addresses= -c primary_conninfo= -c primary_slot_name= -c hot_standby=on"
            .to_owned();
    if was_primary {
        // Nobody but its OS user may connect (no TCP; PostgreSQL needs one
        // socket), and no commit waits for a synchronous standby.
        options.push_str(" -c unix_socket_permissions=0700 -c synchronous_standby_names=");
        remove_synced(&signal).await.map_err(file)?;
    }
    let ran = async {
        tools
            .start(remaining(deadline).min(cfg.start_timeout), Some(&options))
            .await?;
        tools
            .stop("fast", remaining(deadline).min(cfg.stop_timeout))
            .await
    }
    .await;
    if was_primary {
        crate::process::write_owned(&signal, Vec::new(), tools.user())
            .await
            .map_err(file)?;
    }
    ran
}

/// Whether the stopped server's control file says it went down while it ran
/// as a primary (`in production`, or `in crash recovery` from that): its
/// WAL may run past what any standby received. A server that is not the
/// role's last holder with such a data directory must rejoin, never offer
/// its copy ([`crate::fence`] it).
pub async fn crashed_as_primary(cfg: &PostgresConfig) -> Result<bool, ToolError> {
    let tools = Tools::new(cfg)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    ran_as_primary(cfg, &tools, deadline).await
}

/// Whether the cluster's state, as its control file says, is `in
/// production` or `in crash recovery` (`pg_controldata`'s "Database cluster
/// state"; others: `shut down`, `shut down in recovery`, `in archive
/// recovery`, ...). A stopped server answers no query: the tool is the only
/// way to ask.
async fn ran_as_primary(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    deadline: Instant,
) -> Result<bool, ToolError> {
    let out = tools
        .run(
            "pg_controldata",
            ["-D".as_ref(), cfg.data_dir.as_os_str()],
            remaining(deadline).min(Duration::from_secs(10)),
        )
        .await?;
    let state = parse_cluster_state(&String::from_utf8_lossy(&out.stdout));
    Ok(matches!(
        state.as_str(),
        "in production" | "in crash recovery"
    ))
}

/// The value of `Database cluster state:` in `pg_controldata`'s output
/// (run with `LC_ALL=C`); empty when it is missing.
pub(crate) fn parse_cluster_state(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("Database cluster state:"))
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}

/// Rewinds the (stopped, fenced) cluster onto the upstream's timeline.
/// `pg_rewind` needs a cleanly shut down target and cannot recover one itself
/// while `standby.signal` exists (single-user mode refuses standby mode), so
/// after an unclean stop the server first runs its crash recovery
/// ([`recover`]) and is stopped cleanly.
pub(crate) async fn rewind(
    cfg: &PostgresConfig,
    tools: &Tools<'_>,
    source: &str,
    clean: bool,
    deadline: Instant,
) -> Result<Rejoined, ToolError> {
    if !clean {
        recover(cfg, tools, deadline).await?;
    }
    let label = cfg.data_dir.join("backup_label");
    let had_label = label.exists();
    tools
        .run("pg_rewind", rewind_args(cfg, source), remaining(deadline))
        .await?;
    // pg_rewind writes a backup_label only when it rewound something ("no
    // rewind required" leaves the directory alone).
    Ok(if !had_label && label.exists() {
        Rejoined::Rewound
    } else {
        Rejoined::Restarted
    })
}

/// `pg_rewind`'s arguments: the target data directory, the source server
/// (`source`, a connection string), and, with the configuration outside the
/// data directory, its `postgresql.conf` (PostgreSQL 13 and later): without
/// it, the `postgres` that `pg_rewind` runs on the target (single-user
/// crash recovery) would look for one in the data directory and fail.
fn rewind_args(cfg: &PostgresConfig, source: &str) -> Vec<OsString> {
    let mut target = OsString::from("--target-pgdata=");
    target.push(&cfg.data_dir);
    let mut args = vec![target, format!("--source-server={source}").into()];
    if cfg.config_dir.is_some() {
        let mut config = OsString::from("--config-file=");
        config.push(cfg.config_file());
        args.push(config);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_rewind_is_given_the_configuration_outside_the_data_directory_and_only_then() {
        let mut cfg = PostgresConfig::new("/var/lib/postgresql/15/main");
        assert_eq!(
            rewind_args(&cfg, "host=a"),
            [
                "--target-pgdata=/var/lib/postgresql/15/main",
                "--source-server=host=a"
            ]
        );
        cfg.config_dir = Some("/etc/postgresql/15/main".into());
        assert_eq!(
            rewind_args(&cfg, "host=a")[2],
            "--config-file=/etc/postgresql/15/main/postgresql.conf"
        );
    }

    #[test]
    fn the_cluster_state_is_read_from_pg_controldata_and_missing_is_empty() {
        let out = "pg_control version number:            1300\n\
                   Database cluster state:               in production\n\
                   pg_control last modified:             Thu Dec  3 07:02:18 2026\n";
        assert_eq!(parse_cluster_state(out), "in production");
        assert_eq!(
            parse_cluster_state("Database cluster state:  shut down in recovery"),
            "shut down in recovery"
        );
        assert_eq!(parse_cluster_state("garbage"), "");
    }
}
