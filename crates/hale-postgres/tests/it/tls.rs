//! TLS between hosts: hale's sessions check the server's certificate as
//! `sslmode` says, and the connection strings it writes make PostgreSQL's
//! programs and a standby's WAL receiver do the same.

use hale_postgres::{
    promote, rejoin, standing, ConnectError, RejoinStep, Rejoined, SslMode, Standing, StandingError,
};

use crate::fixture::{eventually, other_ca, Lab, Node, Opts};

const PASSWORD: &str = "Hale-tls-S3cret-w4Yv";

/// `node`'s configuration with hale's own sessions over TCP (TLS), not the
/// unix socket.
fn over_tcp(node: &Node, mode: SslMode) -> hale_postgres::PostgresConfig {
    let mut cfg = node.cfg.clone();
    cfg.host = "127.0.0.1".into();
    cfg.sslmode = mode;
    cfg
}

fn refused_handshake(got: &Result<Standing, StandingError>) -> bool {
    matches!(
        got,
        Err(StandingError::Connect(ConnectError::Handshake { .. }))
    )
}

#[tokio::test]
async fn hales_session_with_verify_full_refuses_a_server_whose_certificate_names_another_host() {
    let lab = Lab::new().with_scram(PASSWORD).with_tls(&["db.invalid"]);
    let a = lab.primary("a", Opts::default()).await;

    let full = standing(&over_tcp(&a, SslMode::VerifyFull)).await;
    assert!(refused_handshake(&full), "{full:?}");
    let text = full.unwrap_err().to_string();
    assert!(
        text.contains("verify-full") && text.contains("certificate"),
        "{text}"
    );

    // The same server, its certificate signed by the CA: verify-ca (and
    // require) accept it.
    for mode in [SslMode::VerifyCa, SslMode::Require, SslMode::Prefer] {
        let got = standing(&over_tcp(&a, mode)).await;
        assert!(
            matches!(got, Ok(Standing::Primary { .. })),
            "{mode:?}: {got:?}"
        );
    }
    // A CA that did not sign it: refused by verify-ca, and by require once
    // a root certificate is given (as libpq).
    let other = lab.path().join("other-ca.pem");
    std::fs::write(&other, other_ca()).unwrap();
    for mode in [SslMode::VerifyCa, SslMode::Require] {
        let mut cfg = over_tcp(&a, mode);
        cfg.sslrootcert = Some(other.clone());
        let got = standing(&cfg).await;
        assert!(refused_handshake(&got), "{mode:?}: {got:?}");
    }
    // Without a root certificate, require takes any certificate.
    let mut any = over_tcp(&a, SslMode::Require);
    any.sslrootcert = None;
    assert!(matches!(standing(&any).await, Ok(Standing::Primary { .. })));
    // The server refuses TCP without TLS: the sessions above were TLS.
    let plain = standing(&over_tcp(&a, SslMode::Disable)).await;
    assert!(
        matches!(
            plain,
            Err(StandingError::Connect(ConnectError::Refused { .. }))
        ),
        "{plain:?}"
    );
}

/// Whether `standby`'s WAL sender on `primary` runs over TLS.
async fn streams_over_tls(primary: &Node, standby: &str) -> bool {
    let client = primary.client().await;
    let row = client
        .query_opt(
            "SELECT s.ssl FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid) \
             WHERE r.application_name = $1",
            &[&standby],
        )
        .await
        .unwrap();
    row.is_some_and(|r| r.get::<_, bool>(0))
}

#[tokio::test]
async fn a_standby_cloned_rewound_and_streaming_with_verify_full_uses_tls_for_every_connection() {
    let lab = Lab::new()
        .with_scram(PASSWORD)
        .with_tls(&["127.0.0.1", "localhost"]);
    let a = lab.primary("a", Opts::default()).await;
    // hale's session checks the name: 127.0.0.1 is in the certificate.
    let got = standing(&over_tcp(&a, SslMode::VerifyFull)).await;
    assert!(matches!(got, Ok(Standing::Primary { .. })), "{got:?}");

    // Cloned afresh by hale (pg_basebackup over verify-full TLS).
    let b = lab.standby("b", &a, Opts::default()).await;
    b.stop(&lab, "fast").await;
    std::fs::remove_file(b.cfg.data_dir.join("global/pg_control")).unwrap();
    let how = rejoin(&b.cfg, &a.upstream(), "b", "b", |_| {}).await;
    assert_eq!(how.expect("b cloned"), Rejoined::Recloned);
    let auto = std::fs::read_to_string(b.cfg.data_dir.join("postgresql.auto.conf")).unwrap();
    assert!(
        auto.contains("sslmode=''verify-full''") && auto.contains("sslrootcert="),
        "{auto}"
    );
    eventually("b streams over TLS", || async {
        streams_over_tls(&a, "b").await.then_some(())
    })
    .await;

    // a fails over to b and is rewound (pg_rewind over TLS), then streams
    // over TLS.
    a.sql("CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 10)")
        .await;
    b.has_rows(10).await;
    promote(&b.cfg).await.expect("promote b");
    a.sql("INSERT INTO t VALUES (1001); CHECKPOINT").await;
    a.stop(&lab, "immediate").await;
    let mut steps = Vec::new();
    let how = rejoin(&a.cfg, &b.upstream(), "a", "a", |s| steps.push(s)).await;
    assert_eq!(how.expect("a rewound"), Rejoined::Rewound);
    assert_eq!(
        steps,
        [
            RejoinStep::Rejoining,
            RejoinStep::Rewound,
            RejoinStep::Streaming
        ]
    );
    eventually("a streams from b over TLS", || async {
        streams_over_tls(&b, "a").await.then_some(())
    })
    .await;
}
