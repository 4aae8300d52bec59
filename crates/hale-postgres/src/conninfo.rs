//! The libpq connection strings hale writes: a standby's `primary_conninfo`,
//! `pg_rewind --source-server` and `pg_basebackup --dbname`. They carry
//! where to connect, as whom, TLS (`sslmode`, `sslrootcert`) and the *path*
//! of the passfile, never a password: a command line shows in `ps` to every
//! user, and `primary_conninfo` is kept in `postgresql.auto.conf` (copied by
//! every `pg_basebackup`).

use std::path::Path;

use crate::config::PostgresConfig;
use crate::rejoin::Upstream;

/// A connection string to `upstream` as `user`, with `cfg`'s TLS settings,
/// the passfile when there is one, and `extra` keywords (`dbname`,
/// `application_name`, `connect_timeout`...), in that order.
pub(crate) fn conninfo(
    cfg: &PostgresConfig,
    upstream: &Upstream,
    user: &str,
    passfile: Option<&Path>,
    extra: &[(&str, &str)],
) -> String {
    let port = upstream.port.to_string();
    let mut pairs: Vec<(&str, &str)> =
        vec![("host", &upstream.host), ("port", &port), ("user", user)];
    pairs.extend_from_slice(extra);
    pairs.push(("sslmode", cfg.sslmode.as_str()));
    let rootcert = cfg.sslrootcert.as_deref().map(Path::to_string_lossy);
    if let Some(rootcert) = &rootcert {
        pairs.push(("sslrootcert", rootcert));
    }
    let passfile = passfile.map(Path::to_string_lossy);
    if let Some(passfile) = &passfile {
        pairs.push(("passfile", passfile));
    }
    pairs
        .iter()
        .map(|(key, value)| format!("{key}={}", conninfo_value(value)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The connection strings of a rejoin's libpq clients ([`conninfo`]):
/// with TLS and the passfile, never a password.
pub(crate) struct Sources {
    /// The standby's `primary_conninfo`: as `replication_user`, named
    /// `application_name`.
    pub(crate) stream: String,
    /// `pg_rewind --source-server`: as `user` to `database`.
    pub(crate) rewind: String,
    /// `pg_basebackup --dbname`: as `replication_user`.
    pub(crate) clone: String,
}

impl Sources {
    /// The three strings to `upstream`, with `passfile` when there is one.
    pub(crate) fn new(
        cfg: &PostgresConfig,
        upstream: &Upstream,
        passfile: Option<&Path>,
        application_name: &str,
    ) -> Self {
        let timeout = cfg.connect_timeout.as_secs().max(2).to_string();
        let repl = &cfg.replication_user;
        Sources {
            stream: conninfo(
                cfg,
                upstream,
                repl,
                passfile,
                &[("application_name", application_name)],
            ),
            rewind: conninfo(
                cfg,
                upstream,
                &cfg.user,
                passfile,
                &[("dbname", &cfg.database), ("connect_timeout", &timeout)],
            ),
            clone: conninfo(cfg, upstream, repl, passfile, &[]),
        }
    }
}

/// A value for a libpq connection string: single-quoted, with quotes and
/// backslashes escaped.
pub(crate) fn conninfo_value(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::SslMode;

    #[test]
    fn a_conninfo_names_tls_and_the_passfile_and_quotes_every_value() {
        let mut cfg = PostgresConfig::new("/d");
        let upstream = Upstream {
            host: "db-1".into(),
            port: 5433,
        };
        assert_eq!(
            conninfo(&cfg, &upstream, "rep", None, &[("application_name", "n'1")]),
            "host='db-1' port='5433' user='rep' application_name='n\\'1' sslmode='prefer'"
        );
        cfg.sslmode = SslMode::VerifyFull;
        cfg.sslrootcert = Some("/etc/hale/ca.pem".into());
        assert_eq!(
            conninfo(&cfg, &upstream, "rep", Some(Path::new("/d.pgpass")), &[]),
            "host='db-1' port='5433' user='rep' sslmode='verify-full' \
             sslrootcert='/etc/hale/ca.pem' passfile='/d.pgpass'"
        );
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        assert_eq!(conninfo_value(r"a'b\c"), r"'a\'b\\c'");
    }
}
