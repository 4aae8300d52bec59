//! The stream side of the runtime: accepting TCP connections, reading
//! their length-prefixed sealed frames within bounds (connections, per
//! source, time, a shared byte budget), opening them on the connection's
//! own task, and queueing what opened for the driver.

use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

use hale_core::wire::MAX_STREAM_FRAME;
use hale_keyring::{SharedKeyring, OVERHEAD};

use super::{
    unopened, Counter, Shared, FIRST_FRAME_MAX, MAX_IN_PER_SOURCE, MAX_IN_STREAMS, PREAMBLE_AAD,
    STREAM_BUDGET, STREAM_TIMEOUT,
};

/// A stream frame, authenticated and opened, waiting for the driver. It
/// holds its share of [`STREAM_BUDGET`] until the driver has handled it.
pub(crate) struct Frame {
    /// The frame's opened bytes.
    pub(super) plain: Vec<u8>,
    _budget: tokio::sync::OwnedSemaphorePermit,
}

/// Connections being read from one source address, released on drop.
struct SourceSlot {
    ip: std::net::IpAddr,
    open: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

impl Drop for SourceSlot {
    fn drop(&mut self) {
        let mut m = self.open.lock().expect("sources lock");
        if let Some(n) = m.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

/// Accepts stream connections and queues their frames for the driver.
///
/// Bounded before authenticated: with a keyring, the first frame of a
/// connection is at most [`FIRST_FRAME_MAX`] bytes and must open, as
/// gossip or as the sealed preamble that lets one larger frame follow (a
/// big full-state sync). At most [`MAX_IN_STREAMS`] connections
/// are read at once, at most [`MAX_IN_PER_SOURCE`] from one address (other
/// than this host's own), each
/// within [`STREAM_TIMEOUT`]; a frame's bytes are taken from a budget of
/// [`STREAM_BUDGET`] (shared by frames being read and frames queued for the
/// driver) *before* they are allocated, so a stranger announcing huge
/// frames from many connections gets refusals, not memory. Frames are
/// authenticated here, on the connection's own task: junk never reaches
/// the task that runs the failure detector. Every refusal is counted by
/// reason.
pub(super) async fn accept_streams(
    listener: TcpListener,
    frames: mpsc::Sender<Frame>,
    shared: Arc<Shared>,
    keys: Option<SharedKeyring>,
) {
    let slots = Arc::new(Semaphore::new(MAX_IN_STREAMS));
    let budget = Arc::new(Semaphore::new(STREAM_BUDGET));
    let sources = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let limit = MAX_STREAM_FRAME + if keys.is_some() { OVERHEAD } else { 0 };
    loop {
        let Ok((mut sock, from)) = listener.accept().await else {
            continue;
        };
        // Agents on this very host (same address: a loopback cluster, a
        // demo) are not limited per source; every other address is.
        let same_host = sock.local_addr().is_ok_and(|l| l.ip() == from.ip());
        let source = if same_host {
            None
        } else {
            let mut m = sources.lock().expect("sources lock");
            let n = m.entry(from.ip()).or_insert(0);
            if *n >= MAX_IN_PER_SOURCE {
                drop(m);
                shared.counters.bump(Counter::StreamsInPerSource);
                continue;
            }
            *n += 1;
            Some(SourceSlot {
                ip: from.ip(),
                open: sources.clone(),
            })
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            shared.counters.bump(Counter::StreamsInRefused);
            continue;
        };
        let (frames, shared, budget, keys) =
            (frames.clone(), shared.clone(), budget.clone(), keys.clone());
        tokio::spawn(async move {
            let _source = source;
            let r = tokio::time::timeout(STREAM_TIMEOUT, async {
                let Some(k) = &keys else {
                    // Plaintext (insecure_plaintext): nothing authenticates.
                    return read_frame(&mut sock, limit, &budget).await;
                };
                let (first, share) = read_frame(&mut sock, FIRST_FRAME_MAX, &budget).await?;
                let ring = k.current();
                match ring.open(&first) {
                    Ok(plain) => return Ok((plain, share)),
                    Err(hale_keyring::OpenError::Malformed) => return Err(Counter::SealMalformed),
                    Err(hale_keyring::OpenError::Auth) => {}
                }
                if ring.open_with(PREAMBLE_AAD, &first).is_err() {
                    return Err(Counter::AuthFailed);
                }
                drop(share);
                let (body, share) = read_frame(&mut sock, limit, &budget).await?;
                ring.open(&body)
                    .map(|plain| (plain, share))
                    .map_err(unopened)
            })
            .await;
            let (plain, share) = match r {
                Ok(Ok(x)) => x,
                Ok(Err(refused)) => return shared.counters.bump(refused),
                Err(_) => return shared.counters.bump(Counter::StreamErrors),
            };
            drop(permit);
            let frame = Frame {
                plain,
                _budget: share,
            };
            if frames.try_send(frame).is_err() {
                shared.counters.bump(Counter::StreamsInRefused);
            }
        });
    }
}

/// Reads one length-prefixed frame of at most `cap` bytes, its bytes taken
/// from `budget` before they are allocated; refused, what the refusal
/// counts as.
async fn read_frame(
    sock: &mut TcpStream,
    cap: usize,
    budget: &Arc<Semaphore>,
) -> Result<(Vec<u8>, tokio::sync::OwnedSemaphorePermit), Counter> {
    let mut len = [0u8; 4];
    sock.read_exact(&mut len)
        .await
        .map_err(|_| Counter::StreamErrors)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > cap {
        return Err(Counter::StreamsInOversize);
    }
    let Ok(share) = budget.clone().try_acquire_many_owned(len.max(1) as u32) else {
        return Err(Counter::StreamsInBudget);
    };
    let mut body = vec![0u8; len];
    sock.read_exact(&mut body)
        .await
        .map_err(|_| Counter::StreamErrors)?;
    Ok((body, share))
}
