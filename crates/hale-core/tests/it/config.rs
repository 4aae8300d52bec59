//! Configuration validation names the bad field and builds nothing.

use std::time::Duration;

use hale_core::{Config, Node, Profile, Time};

use crate::support::id;

#[test]
fn every_profile_is_valid() {
    for p in [Profile::Lan, Profile::Wan, Profile::Local] {
        Config::new(p).validate().unwrap();
    }
}

#[test]
fn the_lan_profile_has_memberlists_probe_timings() {
    let c = Config::new(Profile::Lan);
    assert_eq!(c.probe_interval, Duration::from_secs(1));
    assert_eq!(c.probe_timeout, Duration::from_millis(500));
    assert_eq!(c.indirect_probes, 3);
}

#[test]
fn a_probe_timeout_not_shorter_than_the_interval_is_rejected_by_name() {
    let c = Config {
        probe_timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let e = Node::new(id("a", 1), c, Time::ZERO).unwrap_err();
    assert_eq!(e.field, "probe_timeout");
    assert!(e.to_string().contains("shorter than probe_interval"), "{e}");
}

#[test]
fn oversize_metadata_is_rejected_by_name() {
    let c = Config {
        meta: vec![0; 513],
        ..Config::default()
    };
    assert_eq!(c.validate().unwrap_err().field, "meta");
}

#[test]
fn unknown_profiles_are_rejected() {
    let e = "lan2".parse::<Profile>().unwrap_err();
    assert_eq!(e.field, "profile");
}

#[test]
fn a_running_node_takes_new_tuning_and_a_refused_one_changes_nothing() {
    let mut n = Node::new(id("a", 1), Config::default(), Time::ZERO).unwrap();
    let before = n.config().clone();
    let mut t = n.config().tuning();
    t.gossip_fanout = 5;
    t.push_pull_interval = Duration::from_secs(60);
    n.retune(t).unwrap();
    assert_eq!(n.config().gossip_fanout, 5);
    assert_eq!(n.config().push_pull_interval, Duration::from_secs(60));
    assert_eq!(n.config().probe_interval, before.probe_interval);
    let mut bad = t;
    bad.gossip_fanout = 0;
    bad.tombstone_ttl = Duration::from_secs(1);
    let e = n.retune(bad).unwrap_err();
    assert_eq!(e.field, "gossip_fanout");
    assert_eq!(
        n.config().tuning(),
        t,
        "nothing of a refused tuning was taken"
    );
}

#[test]
fn the_tuning_names_its_fields_as_the_configuration_does() {
    let c = Config::default();
    assert_eq!(c.clone().with_tuning(c.tuning()).tuning(), c.tuning());
    for f in hale_core::Tuning::FIELDS {
        assert!(format!("{c:?}").contains(&format!("{f}: ")), "{f}");
    }
}
