//! `flush` and `close` return by their deadline against a half-dead sink,
//! with the default timeouts (5 s per request, breaker after 2 s): the
//! deadline, not the sink, decides. Slack is generous (the machine is
//! shared); the benchmarks measure the real overrun.

use std::time::{Duration, Instant};

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{
    CloseError, DropReason, Event, FlushError, PipelineConfig, Reporter, UpstreamConfig,
};

const SLACK: Duration = Duration::from_millis(250);

fn half_dead() -> (tokio::runtime::Runtime, FakeSentry) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(FakeSentry::start(Mode::HalfDead)).unwrap();
    (rt, fake)
}

#[test]
fn flush_returns_by_its_deadline_and_loses_nothing() {
    let (_rt, fake) = half_dead();
    let r = Reporter::start(PipelineConfig::new(UpstreamConfig::new(fake.dsn()))).unwrap();
    for i in 0..100 {
        r.report(Event::error(format!("e{i}"))).unwrap();
    }
    let t = Instant::now();
    let res = r.flush(Duration::from_millis(300));
    let took = t.elapsed();
    assert!(matches!(res, Err(FlushError::TimedOut { pending }) if pending > 0));
    assert!(
        took < Duration::from_millis(300) + SLACK,
        "flush took {took:?}"
    );
    assert_eq!(r.counters().dropped_total(), 0, "a flush drops nothing");
}

#[test]
fn close_returns_by_its_deadline_and_counts_what_it_abandons() {
    let (_rt, fake) = half_dead();
    let r = Reporter::start(PipelineConfig::new(UpstreamConfig::new(fake.dsn()))).unwrap();
    for i in 0..100 {
        r.report(Event::error(format!("e{i}"))).unwrap();
    }
    let t = Instant::now();
    let res = r.close(Duration::from_millis(400));
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(400) + SLACK,
        "close took {took:?}"
    );
    assert!(matches!(res, Ok(()) | Err(CloseError::TimedOut { .. })));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !r.is_stopped() {
        assert!(Instant::now() < deadline, "the worker never stopped");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(r.counters().dropped(DropReason::Shutdown), 100);
    assert_eq!(
        r.report(Event::error("late")),
        Err(hale_relay::Rejected::Closed)
    );
    assert_eq!(r.counters().dropped(DropReason::Shutdown), 101);
}

#[test]
fn dropping_the_reporter_does_not_wait_for_the_sink() {
    let (_rt, fake) = half_dead();
    let r = Reporter::start(PipelineConfig::new(UpstreamConfig::new(fake.dsn()))).unwrap();
    for i in 0..10 {
        r.report(Event::error(format!("e{i}"))).unwrap();
    }
    let t = Instant::now();
    drop(r);
    assert!(t.elapsed() < SLACK);
}

#[test]
fn flush_succeeds_when_the_sink_is_up() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(FakeSentry::start(Mode::Up)).unwrap();
    let r = Reporter::start(PipelineConfig::new(UpstreamConfig::new(fake.dsn()))).unwrap();
    for i in 0..50 {
        r.report(Event::error(format!("e{i}")).tag("i", i.to_string()))
            .unwrap();
    }
    r.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(fake.events(), 50);
    assert_eq!(r.counters().forwarded(), 50);
    let body = String::from_utf8(fake.received()[0].body.clone()).unwrap();
    assert!(body.contains("\"level\":\"error\"") && body.contains("\"tags\""));
    r.close(Duration::from_secs(1)).unwrap();
}
