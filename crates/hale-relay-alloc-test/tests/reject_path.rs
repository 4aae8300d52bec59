// In tests a panic is the failure report: unwrapping is how a test fails.
#![allow(clippy::unwrap_used)]
// A counting global allocator is an `unsafe impl GlobalAlloc`; it only
// forwards to `System` and counts, per thread, calls that obtain memory.
#![allow(unsafe_code)]
//! `Reporter::report` never allocates when it refuses an event: counted on
//! the caller's thread with a counting global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use hale_relay::fake::{FakeSentry, Mode};
use hale_relay::{Event, PipelineConfig, Rejected, Reporter, UpstreamConfig};

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; counting touches only a const-initialised thread-local Cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn rejecting_an_event_allocates_nothing_on_the_callers_thread() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(FakeSentry::start(Mode::HalfDead)).unwrap();
    let mut up = UpstreamConfig::new(fake.dsn());
    up.member = Some("sink".into());
    let mut cfg = PipelineConfig::new(up);
    cfg.queue_bytes = 16 << 10;
    let r = Reporter::start(cfg).unwrap();
    r.member_dead("sink");
    while r.report(Event::error("fill")).is_ok() {}
    // Events built beforehand: some with static, some with owned strings
    // (dropping those frees memory, which is not allocating).
    let events: Vec<Event> = (0..20_000)
        .map(|i| {
            if i % 2 == 0 {
                Event::error("database failover")
            } else {
                Event::error(format!("database failover {i}")).tag("n", i.to_string())
            }
        })
        .collect();
    // The worker keeps draining the queue (the breaker is open, so it drops
    // what it takes), so a few reports may be accepted: count allocations per
    // call, and sum them over the refused calls only.
    let mut refused = 0u32;
    let mut allocated_while_refusing = 0u64;
    for e in events {
        let before = allocations();
        let outcome = r.report(e);
        let after = allocations();
        if outcome == Err(Rejected::Overflow) {
            refused += 1;
            allocated_while_refusing += after - before;
        }
    }
    assert!(
        refused >= 10_000,
        "only {refused} of 20000 refused: the queue was not full"
    );
    assert_eq!(allocated_while_refusing, 0, "the reject path allocated");
    // The accept path may allocate (the caller's event is moved into a
    // preallocated slot; nothing else) — not asserted.
}
