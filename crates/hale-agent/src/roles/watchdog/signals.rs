//! The watchdog outlives a hang-up and an interrupt (see [`super::run`]).

/// Replaces the default action (exit) of SIGHUP and SIGINT with a handler
/// that only sets a flag, which nothing reads: see [`super::run`].
pub(super) fn ignore_hang_up_and_interrupt() {
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGHUP, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(signal, seen.clone()) {
            eprintln!("hale watchdog: a hang-up or interrupt (signal {signal}) would end it: {e}");
        }
    }
}
