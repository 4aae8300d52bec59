//! The agent's end of its watchdog's order pipe.
//!
//! An order is written into the pipe by the thread that gives it, before
//! that call returns: an agent frozen (SIGSTOP, a stalled host) a moment
//! after it guarded or renewed a holding has still told its watchdog, so
//! the watchdog fences on time. A new process's first orders are written
//! before it is even started, so no instant exists at which it runs
//! without knowing what to guard. Only what a full pipe (a frozen
//! watchdog) does not take waits here, in order, for the flusher thread:
//! no role manager and no runtime thread ever blocks on the pipe.

use std::io::{ErrorKind, PipeReader, PipeWriter, Write};
use std::sync::{mpsc, Arc};

/// What fits a pipe without asking for a larger one (Linux's default).
const DEFAULT_PIPE: usize = 64 * 1024;
/// The largest pipe asked for (Linux's default `pipe-max-size`).
const LARGEST_PIPE: usize = 1024 * 1024;

/// The write end of one watchdog process's order pipe, and what it has
/// not taken yet.
pub(super) struct Outbox {
    /// Non-blocking; shared with the flusher (the pipe closes when both
    /// let go).
    pipe: Arc<PipeWriter>,
    /// Bytes the pipe had no room for, oldest first.
    pending: Vec<u8>,
    /// A write failed (the process closed its end): nothing more is sent.
    broken: bool,
    /// Wakes the flusher (a full wake-up is as good as two).
    wake: mpsc::SyncSender<()>,
}

/// The thread that writes what the pipe did not take at once.
pub(super) struct Flusher {
    pipe: Arc<PipeWriter>,
    wake: mpsc::Receiver<()>,
}

impl Outbox {
    /// A new pipe with room for `bytes` (as far as the kernel grants):
    /// its outbox, the read end to give the process as its standard
    /// input, and the flusher to run once the process is started.
    pub(super) fn new(bytes: usize) -> std::io::Result<(Outbox, PipeReader, Flusher)> {
        let (reader, writer) = std::io::pipe()?;
        if bytes > DEFAULT_PIPE {
            // Best effort: what does not fit waits for the flusher.
            let _ = rustix::pipe::fcntl_setpipe_size(&writer, bytes.min(LARGEST_PIPE));
        }
        rustix::io::ioctl_fionbio(&writer, true)?;
        let pipe = Arc::new(writer);
        let (wake, woken) = mpsc::sync_channel(1);
        let outbox = Outbox {
            pipe: pipe.clone(),
            pending: Vec::new(),
            broken: false,
            wake,
        };
        let flusher = Flusher { pipe, wake: woken };
        Ok((outbox, reader, flusher))
    }

    /// Writes `line` (and a newline) after whatever still waits; false if
    /// the pipe is broken (the process is gone).
    pub(super) fn send(&mut self, line: &str) -> bool {
        if self.broken {
            return false;
        }
        self.pending.extend_from_slice(line.as_bytes());
        self.pending.push(b'\n');
        if !self.flush() {
            let _ = self.wake.try_send(());
        }
        !self.broken
    }

    /// Writes what waits as far as the pipe takes it: true when nothing is
    /// left to write (all written, or the pipe is broken).
    pub(super) fn flush(&mut self) -> bool {
        while !self.broken && !self.pending.is_empty() {
            match (&*self.pipe).write(&self.pending) {
                Ok(0) => self.broken = true,
                Ok(n) => drop(self.pending.drain(..n)),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
                Err(_) => self.broken = true,
            }
        }
        true
    }

    /// Lets go of the pipe: what still waits is written by a thread of its
    /// own, waiting as long as it takes, then the pipe closes (the process
    /// reads its end, fences what it still guards, and exits).
    pub(super) fn close(self) {
        let Outbox {
            pipe,
            pending,
            broken,
            ..
        } = self;
        if broken || pending.is_empty() {
            return;
        }
        std::thread::spawn(move || {
            if rustix::io::ioctl_fionbio(&*pipe, false).is_ok() {
                let _ = (&*pipe).write_all(&pending);
            }
        });
    }
}

impl Flusher {
    /// Until its outbox is dropped: once woken, calls `flush` (which flushes
    /// the outbox under its lock and says whether it is done) whenever the
    /// pipe has room, until it is done.
    pub(super) fn run(self, mut flush: impl FnMut() -> bool) {
        use rustix::event::{poll, PollFd, PollFlags};
        let wait = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 250_000_000,
        };
        while self.wake.recv().is_ok() {
            while !flush() {
                let mut fds = [PollFd::new(&*self.pipe, PollFlags::OUT)];
                let _ = poll(&mut fds, Some(&wait));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // In tests a panic is the failure report.
    use super::*;
    use std::io::Read;

    #[test]
    fn what_a_full_pipe_does_not_take_waits_in_order_and_the_flusher_writes_it_once_read() {
        let (mut out, mut reader, flusher) = Outbox::new(0).unwrap();
        let line = "x".repeat(1000);
        // Far more than a 64 KiB pipe holds: the calls return at once.
        for _ in 0..200 {
            assert!(out.send(&line));
        }
        assert!(!out.pending.is_empty(), "the pipe is full");
        let out = Arc::new(std::sync::Mutex::new(out));
        let o = Arc::downgrade(&out);
        let t = std::thread::spawn(move || {
            flusher.run(|| o.upgrade().is_none_or(|o| o.lock().unwrap().flush()))
        });
        let mut got = vec![0u8; 200 * 1001];
        reader.read_exact(&mut got).unwrap();
        assert!(got
            .chunks(1001)
            .all(|c| c[..1000] == *line.as_bytes() && c[1000] == b'\n'));
        drop(out);
        t.join().unwrap();
    }

    #[test]
    fn a_closed_outbox_still_delivers_what_waited_then_the_pipe_closes() {
        let (mut out, mut reader, _flusher) = Outbox::new(0).unwrap();
        let line = "y".repeat(999);
        for _ in 0..100 {
            out.send(&line);
        }
        drop(_flusher);
        out.close();
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), 100 * 1000);
    }

    #[test]
    fn orders_sent_to_a_process_that_is_gone_are_refused() {
        let (mut out, reader, _flusher) = Outbox::new(0).unwrap();
        drop(reader);
        assert!(!out.send("{}"));
        assert!(!out.send("{}"));
    }
}
