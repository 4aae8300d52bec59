//! Grants, renewals, releases and expiry on a real etcd: never two holders,
//! epochs that only go up, a holding that never ends before its holder's
//! own reckoning of it.

use std::time::{Duration, Instant};

use hale_etcd::{GrantError, Holding, ReleaseError, RenewError};

use crate::cluster::{skip_reason, Etcd};

const LEASE: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_racing_for_a_free_role_never_both_get_it_and_each_grant_is_the_next_epoch() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/race", LEASE).await;
    let b = etcd.store("/hale/race", LEASE).await;
    for round in 1..=30u64 {
        let (ra, rb) = tokio::join!(a.grant("db", "a", 0), b.grant("db", "b", 0));
        let (winner, store, lost) = match (&ra, &rb) {
            (Ok(e), Err(l)) => (("a", *e), &a, l.clone()),
            (Err(l), Ok(e)) => (("b", *e), &b, l.clone()),
            _ => panic!("round {round}: exactly one grant, got {ra:?} and {rb:?}"),
        };
        assert_eq!(winner.1, round, "each grant is the next epoch");
        assert!(
            matches!(&lost, GrantError::Raced)
                || lost
                    == GrantError::Held(Holding {
                        holder: winner.0.into(),
                        epoch: round
                    }),
            "round {round}: {lost:?}"
        );
        let held = a.holding("db").await.unwrap().unwrap();
        assert_eq!((held.holder.as_str(), held.epoch), winner);
        store
            .release("db", winner.0, round, None, None)
            .await
            .unwrap();
    }
    assert_eq!(a.epoch("db").await.unwrap(), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holding_nobody_renews_ends_no_sooner_than_its_ttl_after_the_last_keep_alive_was_sent() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/expiry", LEASE).await;
    let b = etcd.store("/hale/expiry", LEASE).await;
    assert_eq!(a.grant("db", "a", 0).await, Ok(1));
    let renewed = a.renew().await.unwrap();
    assert_eq!(renewed.ttl, LEASE);
    // The holder's own reckoning: held until `sent + ttl` at the latest.
    // Neither a read saying the role is free nor a grant to b may come back
    // before it (either happened before it came back).
    let own_end = renewed.sent + renewed.ttl;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let held = a.holding("db").await.unwrap();
        let now = Instant::now();
        if held.is_none() {
            assert!(
                now >= own_end,
                "the holding ended {:?} before its holder's reckoning",
                own_end - now
            );
        }
        match b.grant("db", "b", 0).await {
            Ok(epoch) => {
                let now = Instant::now();
                assert!(
                    now >= own_end,
                    "granted to b {:?} before a's reckoning ended",
                    own_end - now
                );
                assert_eq!(epoch, 2, "the next epoch");
                break;
            }
            Err(GrantError::Held(h)) => assert_eq!(h.holder, "a"),
            Err(GrantError::Raced) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(Instant::now() < deadline, "the holding never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_a_role_held_for_many_leases_and_a_release_frees_it_at_once() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/renew", LEASE).await;
    let b = etcd.store("/hale/renew", LEASE).await;
    assert_eq!(a.grant("db", "a", 0).await, Ok(1));
    assert_eq!(
        a.grant("web", "a", 0).await,
        Ok(1),
        "one etcd lease, two roles"
    );
    let until = Instant::now() + LEASE * 3;
    while Instant::now() < until {
        a.renew().await.unwrap();
        for role in ["db", "web"] {
            assert!(
                matches!(b.grant(role, "b", 0).await, Err(GrantError::Held(_))),
                "{role} held by a"
            );
        }
        tokio::time::sleep(LEASE / 4).await;
    }
    // Only the holder at its epoch releases.
    assert_eq!(
        b.release("db", "b", 1, None, None).await,
        Err(ReleaseError::NotHolder {
            holder: "b".into(),
            epoch: 1
        })
    );
    assert!(
        a.release("db", "a", 2, None, None).await.is_err(),
        "a wrong epoch"
    );
    a.release("db", "a", 1, None, None).await.unwrap();
    assert_eq!(b.grant("db", "b", 0).await, Ok(2));
    assert!(matches!(
        b.grant("web", "b", 0).await,
        Err(GrantError::Held(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_lease_ran_out_is_told_so_and_holds_nothing_until_granted_again() {
    if skip_reason().is_some() {
        return;
    }
    let etcd = Etcd::start(1).await;
    let a = etcd.store("/hale/lapse", LEASE).await;
    assert_eq!(a.grant("db", "a", 0).await, Ok(1));
    // Silent past its lease (a frozen agent): etcd drops the holding.
    let deadline = Instant::now() + Duration::from_secs(15);
    while a.holding("db").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(a.renew().await, Err(RenewError::Expired));
    // A new etcd lease is in place: granted again at the next epoch, renewed.
    assert_eq!(a.grant("db", "a", 0).await, Ok(2));
    a.renew().await.unwrap();
    assert_eq!(
        a.holding("db").await.unwrap(),
        Some(Holding {
            holder: "a".into(),
            epoch: 2
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holding_renewed_through_the_loss_of_the_etcd_leader_never_ends() {
    if skip_reason().is_some() {
        return;
    }
    let mut etcd = Etcd::start(3).await;
    let a = etcd.store("/hale/leader", LEASE).await;
    let b = etcd.store("/hale/leader", LEASE).await;
    assert_eq!(a.grant("db", "a", 0).await, Ok(1));
    a.renew().await.unwrap();
    let leader = etcd.leader().await.expect("a leader");
    etcd.kill(leader);
    // The holder renews as it would (every quarter lease); a renewal may
    // fail while etcd elects, but the holding never ends and nobody else
    // gets the role.
    let until = Instant::now() + LEASE * 4;
    let mut renewed = 0;
    while Instant::now() < until {
        if a.renew().await.is_ok() {
            renewed += 1;
        }
        match b.grant("db", "b", 0).await {
            Ok(e) => panic!("granted to b at epoch {e} while a renews"),
            Err(GrantError::Held(h)) => assert_eq!(h.holder, "a"),
            Err(_) => {}
        }
        tokio::time::sleep(LEASE / 4).await;
    }
    assert!(renewed > 0, "no renewal went through the remaining members");
    let held = a.holding("db").await.unwrap();
    assert_eq!(held.map(|h| h.epoch), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_granting_and_releasing_in_a_tight_loop_never_get_the_same_epoch_twice() {
    if skip_reason().is_some() {
        return;
    }
    // A grant reads the last epoch, then writes the next one: between the
    // two another agent may be granted and release. The write must find
    // the epoch it read, or a freed role would get an epoch again.
    let etcd = Etcd::start(1).await;
    let mut tasks = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let store = std::sync::Arc::new(etcd.store("/hale/churn", LEASE).await);
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            let until = Instant::now() + Duration::from_secs(4);
            while Instant::now() < until {
                // Its etcd lease kept alive, as an agent's always is.
                let _ = store.renew().await;
                if let Ok(epoch) = store.grant("db", name, 0).await {
                    got.push(epoch);
                    store.release("db", name, epoch, None, None).await.unwrap();
                }
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "an epoch granted twice");
    assert!(n > 20, "only {n} grants");
    assert_eq!(
        all.last(),
        Some(&(n as u64)),
        "epochs 1..={n}, none skipped"
    );
}
