//! openraft's async runtime: tokio, except that no timeout openraft sets is
//! shorter than [`RPC_TIMEOUT_FLOOR`].
//!
//! openraft 0.9 gives every append (heartbeats included) one heartbeat
//! interval to answer (`replication/mod.rs`: 100 ms here) and every vote
//! request the shortest election timeout (200 ms), and the answer comes
//! only after the follower or voter has written the entries or the vote to
//! disk. On a disk whose `fsync` takes longer than that (another writer
//! saturating it, a cloud volume's hiccup), every append and every vote
//! timed out and was sent again: nothing committed and no election could
//! finish for as long as the disk stayed slow, and every lease lapsed
//! (the `slow-disk` test in `crates/hale/tests/it/slow_hooks.rs`). With the
//! floor a slow disk slows commits down; it does not stop them. Elections
//! do not wait on these timeouts: each vote request runs on its own task.

use std::future::Future;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioInstant, TokioRuntime};

use crate::election::RPC_TIMEOUT_FLOOR;

/// tokio, with openraft's timeouts floored at [`RPC_TIMEOUT_FLOOR`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Runtime;

impl AsyncRuntime for Runtime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = <TokioRuntime as AsyncRuntime>::ThreadLocalRng;
    type OneshotSender<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiver<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration.max(RPC_TIMEOUT_FLOOR), future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        let floor = TokioInstant::now() + RPC_TIMEOUT_FLOOR;
        TokioRuntime::timeout_at(deadline.max(floor), future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        TokioRuntime::thread_rng()
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        TokioRuntime::oneshot()
    }
}
