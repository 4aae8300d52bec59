//! A stranger floods an agent's gossip port from several addresses: junk
//! datagrams, streams that announce huge frames, streams that trickle. The
//! agent's memory stays bounded, nobody suspects it, and `/metrics` counts
//! every refusal by reason.

use hale_agent::view::MemberState;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hale_agent::AgentEvent;

use crate::junk_flood::{start_flood, Sent};
use crate::support::{during, metric, Cluster};

#[test]
fn a_flood_of_junk_from_several_sources_leaves_memory_bounded_and_suspects_no_one() {
    let c = Cluster::start("flood", 3);
    let target = &c.agents[0];
    let (gossip, name) = (target.gossip, target.name.clone());
    let rss_before = target.rss_kib();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Sent::default());
    let threads = start_flood(gossip, &stop, &sent);
    // Twenty seconds of flood: the others keep seeing the target alive.
    let mut peak = rss_before;
    during(Duration::from_secs(20), Duration::from_millis(200), || {
        peak = peak.max(target.rss_kib());
        for a in &c.agents[1..] {
            if let Some(s) = a.state_of(&name) {
                assert_eq!(
                    s,
                    MemberState::Alive,
                    "{} sees the flooded agent as {s}",
                    a.name
                );
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let m = target.metrics().unwrap();
    let refused = |kind: &str| {
        metric(
            &m,
            "hale_stream_errors_total",
            &[&format!("kind=\"{kind}\"")],
        )
    };
    let dropped = |r: &str| {
        metric(
            &m,
            "hale_dropped_packets_total",
            &[&format!("reason=\"{r}\"")],
        )
    };
    eprintln!(
        "sent: {sent:?}; rss before {rss_before} KiB, peak {peak} KiB; \
         auth_failed {} seal_malformed {} per_source {} budget {} slots {} errors {}",
        dropped("auth_failed"),
        dropped("seal_malformed"),
        refused("in_refused_per_source"),
        refused("in_refused_budget"),
        refused("in_refused"),
        refused("error"),
    );
    // Memory: the stream budget (48 MiB) plus slack, not the 32 MiB × N announced.
    assert!(
        peak < rss_before + 120 * 1024,
        "RSS grew from {rss_before} KiB to {peak} KiB"
    );
    assert!(dropped("auth_failed") + dropped("seal_malformed") > 1000.0);
    assert!(
        refused("in_refused_per_source") > 0.0,
        "no per-source refusal"
    );
    assert!(
        refused("in_refused_budget") + refused("error") > 0.0,
        "no refused or failed big frame"
    );
    // Nobody suspected anyone.
    for a in &c.agents {
        let bad: Vec<_> = a
            .events()
            .unwrap_or_default()
            .into_iter()
            .filter(|e| matches!(e.event, AgentEvent::Suspected { .. } | AgentEvent::Dead(_)))
            .collect();
        assert!(bad.is_empty(), "{}: {bad:?}", a.name);
    }
}
