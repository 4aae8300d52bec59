//! hale.toml: errors name the field; environment overrides the file.

use std::collections::HashMap;
use std::time::Duration;

use hale_agent::{ConfigError, FileConfig};
use hale_core::Profile;

fn field_of(e: ConfigError) -> String {
    match e {
        ConfigError::Invalid { field, .. } => field,
        other => panic!("expected an invalid field, got {other}"),
    }
}

/// The field named by the error validating the file `text`.
fn bad_field(text: &str) -> String {
    field_of(
        FileConfig::parse(text, "t")
            .unwrap()
            .validate()
            .unwrap_err(),
    )
}

#[test]
fn no_configuration_at_all_gives_a_single_node_on_loopback() {
    let c = FileConfig::default().validate().unwrap();
    assert_eq!(c.bind.to_string(), "127.0.0.1:7946");
    assert_eq!(c.http.to_string(), "127.0.0.1:7947");
    assert!(c.seeds.is_empty());
    assert!(
        c.keyring.is_some() && c.ephemeral_key,
        "encrypted even by default"
    );
    assert_eq!(c.profile, Profile::Lan);
}

#[test]
fn a_full_file_is_read() {
    let key = hale_agent::Key::generate().to_base64();
    let text = format!(
        r#"
        [agent]
        name = "db-1"
        bind = "127.0.0.1:8000"
        http = "127.0.0.1:8001"
        seeds = ["127.0.0.1:9000", "127.0.0.1:9001"]
        api_token = "s3cret"
        meta = "rack=a"
        [cluster]
        name = "prod"
        profile = "wan"
        keys = ["{key}"]
        [membership]
        probe_interval = "2s"
        probe_timeout = "700ms"
        corroboration = 3
        "#
    );
    let c = FileConfig::parse(&text, "hale.toml")
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(c.id.name(), "db-1");
    assert_eq!(c.seeds.len(), 2);
    assert_eq!(c.api_token.as_deref(), Some("s3cret"));
    assert_eq!(c.core.cluster, "prod");
    assert_eq!(c.core.probe_interval, Duration::from_secs(2));
    assert_eq!(c.core.probe_timeout, Duration::from_millis(700));
    assert_eq!(c.core.corroboration, 3);
    assert_eq!(c.core.meta, b"rack=a");
    assert!(!c.ephemeral_key);
}

#[test]
fn an_unknown_key_is_an_error_naming_it() {
    let e = FileConfig::parse("[agent]\nnmae = \"x\"\n", "hale.toml").unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("nmae"), "{msg}");
    assert!(msg.contains("hale.toml"), "{msg}");
}

#[test]
fn a_value_of_the_wrong_type_is_an_error_naming_it() {
    let e = FileConfig::parse("[membership]\nprobe_interval = 5\n", "hale.toml").unwrap_err();
    assert!(e.to_string().contains("probe_interval"), "{e}");
}

#[test]
fn bad_values_name_their_field() {
    let cases = [
        ("[agent]\nbind = \"nowhere\"\n", "agent.bind"),
        ("[agent]\nname = \"has space\"\n", "agent.name"),
        ("[agent]\nseeds = [\"x\"]\n", "agent.seeds"),
        ("[agent]\nbind = \"0.0.0.0:7946\"\n", "agent.advertise"),
        ("[cluster]\nprofile = \"moon\"\n", "cluster.profile"),
        ("[cluster]\nkeys = [\"c2hvcnQ=\"]\n", "cluster.keys[0]"),
        (
            "[membership]\nprobe_timeout = \"5s\"\n",
            "membership.probe_timeout",
        ),
        (
            "[membership]\ngossip_fanout = 0\n",
            "membership.gossip_fanout",
        ),
        (
            "[[service]]\nname = \"pg\"\n[[service]]\nname = \"pg\"\n",
            "service[1].name",
        ),
        (
            "[[service]]\nname = \"pg\"\n[[role]]\nname = \"db\"\nservice = \"pg\"\n\
             [[role]]\nname = \"db\"\nservice = \"pg\"\n",
            "role[1].name",
        ),
    ];
    for (text, field) in cases {
        assert_eq!(bad_field(text), field, "for {text:?}");
    }
}

#[test]
fn environment_variables_override_the_file() {
    let mut f = FileConfig::parse("[agent]\nname = \"a\"\n[cluster]\nname = \"x\"\n", "t").unwrap();
    let env: HashMap<&str, &str> = [
        ("HALE_NAME", "b"),
        ("HALE_CLUSTER", "y"),
        ("HALE_SEEDS", "127.0.0.1:1, 127.0.0.1:2"),
        ("HALE_PROFILE", "local"),
    ]
    .into();
    f.apply_env(|k| env.get(k).map(|v| (*v).to_owned()));
    let c = f.validate().unwrap();
    assert_eq!(c.id.name(), "b");
    assert_eq!(c.core.cluster, "y");
    assert_eq!(c.seeds.len(), 2);
    assert_eq!(c.profile, Profile::Local);
}

#[test]
fn the_documented_example_file_is_valid() {
    let text = include_str!("../../../../hale.toml.example").replace(
        "REPLACE-WITH-OUTPUT-OF-hale-keygen",
        &hale_agent::Key::generate().to_base64(),
    );
    let c = FileConfig::parse(&text, "hale.toml.example")
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(c.id.name(), "db-1");
    assert_eq!(c.core.suspicion_min, Duration::from_millis(2500));
}

#[test]
fn the_example_files_membership_values_are_the_lan_defaults() {
    // Its comments present them as what an unset knob means: a user who
    // copies the file must get the timing the defaults were measured with.
    let text = include_str!("../../../../hale.toml.example").replace(
        "REPLACE-WITH-OUTPUT-OF-hale-keygen",
        &hale_agent::Key::generate().to_base64(),
    );
    let mut example = FileConfig::parse(&text, "hale.toml.example")
        .unwrap()
        .validate()
        .unwrap()
        .core;
    let default = FileConfig::default().validate().unwrap().core;
    example.cluster = default.cluster.clone();
    example.rng_seed = default.rng_seed;
    example.meta = default.meta.clone(); // [agent] meta: the node's own labels
    assert_eq!(format!("{example:#?}"), format!("{default:#?}"));
}

#[test]
fn the_relay_section_is_optional_and_validated() {
    assert!(FileConfig::default().validate().unwrap().relay.is_none());
    let ok = FileConfig::parse(
        r#"
        [relay]
        primary = { dsn = "http://k@127.0.0.1:9000/3", member = "sentry-host" }
        queue_bytes = 65536
        "#,
        "t",
    )
    .unwrap()
    .validate()
    .unwrap();
    let r = ok.relay.unwrap();
    assert_eq!(r.pipeline.queue_bytes, 65536);
    assert_eq!(r.pipeline.primary.member.as_deref(), Some("sentry-host"));
    for (text, field) in [
        ("[relay]\nqueue_bytes = 65536", "relay.primary"),
        (
            "[relay]\nprimary = { dsn = \"http://nokey/1\" }",
            "relay.primary.dsn",
        ),
        (
            "[relay]\nprimary = { dsn = \"http://k@h/1\" }\nstandby = { dsn = \"ftp://k@h/1\" }",
            "relay.standby.dsn",
        ),
        (
            "[relay]\nprimary = { dsn = \"http://k@h/1\" }\nspool_ttl = \"1h\"",
            "relay.spool_dir",
        ),
    ] {
        assert_eq!(bad_field(text), field, "{text}");
    }
    assert!(FileConfig::parse("[relay]\nnope = 1", "t").is_err());
}

fn control(extra: &str) -> Result<hale_agent::AgentConfig, ConfigError> {
    let text = format!(
        r#"
        [control]
        id = 1
        bind = "127.0.0.1:7948"
        {extra}
        "#
    );
    FileConfig::parse(&text, "hale.toml").unwrap().validate()
}

#[test]
fn lease_timing_is_read_and_its_errors_name_the_key() {
    let c = control("lease = \"4s\"\nrenew_every = \"1s\"").unwrap();
    let t = c.control.unwrap().timing;
    assert_eq!(t.lease, Duration::from_secs(4));
    assert_eq!(t.renew_every, Duration::from_secs(1));
    assert_eq!(t.drift_margin, Duration::from_millis(800));
    let d = control("").unwrap().control.unwrap().timing;
    assert_eq!(d, hale_control::LeaseTiming::default());
    // Renewals must fit three times in a lease.
    let e = control("lease = \"3s\"\nrenew_every = \"1100ms\"").unwrap_err();
    assert!(e.to_string().contains("third"), "{e}");
    assert_eq!(field_of(e), "control.renew_every");
    assert_eq!(
        field_of(control("lease = \"100ms\"").unwrap_err()),
        "control.lease"
    );
    assert_eq!(
        field_of(control("renew_every = \"10ms\"").unwrap_err()),
        "control.renew_every"
    );
}

#[test]
fn lease_timing_that_cannot_ride_out_a_control_plane_election_is_refused() {
    // 1.2 s with 300 ms renewals rides out 1.2 - 0.24 - 0.3 = 0.66 s, less
    // than an election (0.8 s) plus the slack for the first commit.
    let e = control("lease = \"1200ms\"\nrenew_every = \"300ms\"").unwrap_err();
    assert!(e.to_string().contains("election"), "{e}");
    assert_eq!(field_of(e), "control.lease");
    // Renewing more often is not enough at that lease; 2 s with the
    // default renewals rides out 1.35 s and is accepted.
    assert!(control("lease = \"1500ms\"\nrenew_every = \"100ms\"").is_err());
    let t = control("lease = \"2s\"").unwrap().control.unwrap().timing;
    assert_eq!(t.ride_through(), Duration::from_millis(1350));
}

#[test]
fn keys_saved_by_a_live_rotation_win_over_the_configured_keys_until_the_file_is_deleted() {
    use hale_agent::keyring::{Key, Keyring, SharedKeyring};
    let dir = std::env::temp_dir().join(format!("hale-state-{}", std::process::id()));
    let (old, new) = (Key::generate(), Key::generate());
    let mut f = FileConfig::default();
    f.cluster.keys = vec![old.to_base64()];
    f.agent.state_dir = Some(dir.clone());
    let c = f.validate().unwrap();
    assert!(!c.keys_from_state);
    assert_eq!(c.keyring.as_ref().unwrap().primary(), &old);
    // A live rotation through a keyring saved in the state directory.
    let shared = SharedKeyring::saved_to(
        c.keyring.clone().unwrap(),
        dir.join(hale_agent::KEYRING_FILE),
    );
    shared.update(|r| Ok(r.installing(new.clone()))).unwrap();
    shared.update(|r| r.using(&new)).unwrap();
    // Restarted with the same file: the rotated keys.
    let c = f.validate().unwrap();
    assert!(c.keys_from_state);
    let ring = c.keyring.unwrap();
    assert_eq!(ring.primary(), &new);
    assert_eq!(ring.keys(), &[new.clone(), old.clone()][..]);
    // A change that cannot be saved is not made.
    let unsaved = SharedKeyring::saved_to(
        Keyring::new(new.clone(), vec![]),
        dir.join("keyring").join("not-a-dir"),
    );
    assert!(unsaved.update(|r| Ok(r.installing(old.clone()))).is_err());
    assert_eq!(unsaved.current().len(), 1);
    // Deleted: back to the configured keys.
    std::fs::remove_file(dir.join(hale_agent::KEYRING_FILE)).unwrap();
    let c = f.validate().unwrap();
    assert_eq!(c.keyring.unwrap().primary(), &old);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_postgres_check_takes_its_servers_settings_from_the_role_it_names_and_an_unknown_role_is_an_error(
) {
    let file = |role: &str| {
        format!(
            r#"
            [[service]]
            name = "postgres"
            essential = true
            [[service.check]]
            postgres = "{role}"
            interval = "250ms"
            timeout = "500ms"
            [[role]]
            name = "db"
            service = "postgres"
            [role.postgres]
            data_dir = "/srv/pg/main"
            port = 5433
            strict = true
            "#
        )
    };
    let c = FileConfig::parse(&file("db"), "t")
        .unwrap()
        .validate()
        .unwrap();
    let check = &c.services[0].checks[0];
    assert_eq!(check.name, "postgres db");
    let hale_agent::config::Probe::Postgres { role, server } = &check.probe else {
        panic!("{:?}", check.probe);
    };
    assert_eq!(role, "db");
    assert_eq!((server.port, server.strict), (5433, true));
    assert_eq!(
        server.data_dir,
        std::path::PathBuf::from("/srv/pg/main"),
        "the role's own settings"
    );
    assert_eq!(bad_field(&file("cache")), "service[0].check[0].postgres");
    // strict needs synchronous.
    let lax = file("db").replace("strict = true", "strict = true\nsynchronous = false");
    assert_eq!(bad_field(&lax), "role[0].postgres");
}
