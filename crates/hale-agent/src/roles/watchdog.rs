//! The agent's side of one holding's fencing watchdog process.

use std::io::Write;
use std::process::Child;

use crate::watchdog::Order;

/// The watchdog process of one holding, and the thread reading its answers.
pub(super) struct Watchdog {
    pub(super) child: Child,
    /// Tells its answers from an earlier watchdog's.
    pub(super) gen: u64,
}

impl Watchdog {
    /// Sends one line; false if the watchdog is gone (its pipe is closed).
    pub(super) fn send(&mut self, order: Order) -> bool {
        match self.child.stdin.as_mut() {
            Some(stdin) => writeln!(stdin, "{}", order.line())
                .and_then(|()| stdin.flush())
                .is_ok(),
            None => false,
        }
    }

    /// Tells it to exit without fencing, and reaps it off the runtime.
    pub(super) fn stop(mut self) {
        self.send(Order::Stop);
        std::thread::spawn(move || {
            let _ = self.child.wait();
        });
    }
}
