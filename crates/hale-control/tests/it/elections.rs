//! Why two control-plane servers that campaign at the same moment cannot
//! split their votes for ever: openraft 0.9 (as hale builds it, without the
//! `single-term-leader` feature) orders votes by term *and then by
//! candidate id*, so of two candidates in the same term, the lower-numbered
//! one grants the higher-numbered one's request, and the higher refuses the
//! lower. The tie ends in the round it happened, whatever the election
//! timeouts were. `examples/election_split.rs` shows it in host-death
//! trials on real servers; these tests pin the rule itself, through the
//! same sealed `/raft/vote` route the servers use. Built with
//! `--features openraft/single-term-leader` (same-term votes incomparable,
//! the build in which the split does repeat), the first test fails.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use hale_control::raft::ControlPlane;
use hale_control::{ControlAuth, LeaseTiming};
use hale_keyring::{Key, Keyring};
use openraft::error::RaftError;
use openraft::raft::{VoteRequest, VoteResponse};
use openraft::{LogId, Vote};
use tokio::net::TcpListener;

/// A loopback address where nothing listens (connections are refused).
fn dead_address() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address")
}

/// Server `id` of three whose two peers are dead: it campaigns and can
/// never win. Returns it, its address and its auth.
async fn lone_candidate(id: u64, dir: &std::path::Path) -> (ControlPlane, SocketAddr, ControlAuth) {
    let auth = ControlAuth::sealed(Keyring::new(Key::generate(), vec![]));
    let cp = ControlPlane::start(id, dir, LeaseTiming::default(), auth.clone())
        .await
        .expect("the server starts");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("its address");
    let app = cp.routes();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let members: BTreeMap<u64, SocketAddr> = (1..=3)
        .map(|i| (i, if i == id { addr } else { dead_address() }))
        .collect();
    // Bootstrapping makes it campaign at once (and again after every
    // election timeout, as nobody answers).
    cp.bootstrap(members).await.expect("bootstrapped");
    (cp, addr, auth)
}

/// The term of `cp`'s current campaign, once it has voted for itself.
async fn campaign_term(cp: &ControlPlane) -> u64 {
    let mut rx = cp.raft_metrics();
    loop {
        {
            let m = rx.borrow_and_update();
            if m.vote.leader_id().voted_for() == Some(cp.id) && !m.vote.is_committed() {
                return m.vote.leader_id().term;
            }
        }
        rx.changed().await.expect("the server runs");
    }
}

/// Sends `cp` a vote request from candidate `from` in `cp`'s current term,
/// with the same log (the bootstrap entry), and returns the answer. If `cp`
/// moved to a new campaign meanwhile, asks again in the new term.
async fn same_term_request(
    cp: &ControlPlane,
    addr: SocketAddr,
    auth: &ControlAuth,
    from: u64,
) -> (u64, VoteResponse<u64>) {
    let http = reqwest::Client::new();
    loop {
        let term = campaign_term(cp).await;
        let req = VoteRequest::new(Vote::new(term, from), Some(LogId::default()));
        let answer: Result<VoteResponse<u64>, RaftError<u64>> = hale_seal::call(
            &http,
            auth,
            cp.id,
            &addr.to_string(),
            "/raft/vote",
            &req,
            Duration::from_secs(5),
        )
        .await
        .expect("the server answers");
        let resp = answer.expect("a vote answer");
        if resp.vote.leader_id().term == term {
            return (term, resp);
        }
    }
}

#[tokio::test]
async fn a_candidate_grants_its_vote_to_a_higher_numbered_candidate_of_the_same_term() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (cp, addr, auth) = lone_candidate(2, dir.path()).await;
    let (term, resp) = same_term_request(&cp, addr, &auth, 3).await;
    assert!(
        resp.vote_granted,
        "candidate 2 refused candidate 3 in term {term}: {resp:?}"
    );
    assert_eq!(resp.vote, Vote::new(term, 3), "it now votes for 3");
    cp.shutdown().await;
}

#[tokio::test]
async fn a_candidate_refuses_a_lower_numbered_candidate_of_the_same_term() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (cp, addr, auth) = lone_candidate(3, dir.path()).await;
    let (term, resp) = same_term_request(&cp, addr, &auth, 2).await;
    assert!(
        !resp.vote_granted,
        "candidate 3 granted candidate 2 in term {term}: {resp:?}"
    );
    assert_eq!(resp.vote, Vote::new(term, 3), "it keeps its own vote");
    cp.shutdown().await;
}
