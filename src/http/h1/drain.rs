//! What a client connection watches besides its bytes: its waits for a request head,
//! marked for the watch that enforces the header-read timeout (`http::server`), and the
//! gateway's signal to drain, read with a plain load per request and waking the
//! connections that wait between requests.

use futures_util::task::AtomicWaker;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::Context;

/// Which wait for a request head a connection is in, if any. The connection marks its waits
/// with a plain store (no clock, no timer); a watch that looks every so often closes a
/// connection whose wait has lasted longer than the header-read timeout (`server.rs`). A
/// wait begins when the connection first needs bytes for a head: on a kept connection,
/// after the previous answer.
///
/// One count, moved on by each start and each end of a wait (only the connection writes
/// it): odd while a wait is under way, and a different odd number for each wait.
#[derive(Debug, Default)]
pub struct HeadWaits(AtomicU32);

impl HeadWaits {
    /// The wait under way, by a number of its own (never 0); 0 when the connection is not
    /// waiting for a head.
    pub fn current(&self) -> u32 {
        let count = self.0.load(Ordering::Relaxed);
        if count % 2 == 1 { count } else { 0 }
    }

    pub(super) fn begin(&self) {
        let count = self.0.load(Ordering::Relaxed);
        if count % 2 == 0 {
            self.0.store(count.wrapping_add(1), Ordering::Relaxed);
        }
    }

    pub(super) fn end(&self) {
        let count = self.0.load(Ordering::Relaxed);
        if count % 2 == 1 {
            self.0.store(count.wrapping_add(1), Ordering::Relaxed);
        }
    }
}

/// The gateway's signal to finish and close, given once for all connections. A
/// connection reads the flag with a plain load on every request (the line is only ever
/// written once), and one waiting between requests leaves its waker here to be woken.
/// (A `watch` channel would take a lock shared by every connection of both workers each
/// time one looked.)
#[derive(Default)]
pub struct DrainSignal {
    given: AtomicBool,
    waiting: std::sync::Mutex<HashMap<u64, Arc<AtomicWaker>>>,
    next: AtomicU64,
}

impl DrainSignal {
    /// Gives the signal: every connection finishes its request in progress and closes;
    /// idle ones are woken to close at once.
    pub fn give(&self) {
        self.given.store(true, Ordering::SeqCst);
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        for waker in waiting.values() {
            waker.wake();
        }
    }
}

/// One connection's view of the [`DrainSignal`].
pub struct Drain {
    signal: Arc<DrainSignal>,
    id: u64,
    waker: Arc<AtomicWaker>,
    /// The waker last registered: a connection's task keeps one waker, so registering it
    /// again on every wait (an atomic exchange and a clone) is skipped. `give` is the
    /// only one to wake it, and after it the flag answers every look.
    registered: Option<std::task::Waker>,
}

impl Drain {
    pub fn new(signal: Arc<DrainSignal>) -> Drain {
        let id = signal.next.fetch_add(1, Ordering::Relaxed);
        let waker = Arc::new(AtomicWaker::new());
        signal
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, waker.clone());
        Drain {
            signal,
            id,
            waker,
            registered: None,
        }
    }

    pub(super) fn draining(&self) -> bool {
        self.signal.given.load(Ordering::Acquire)
    }

    /// Whether the signal was given; if not, `cx` is woken when it is.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.draining() {
            return true;
        }
        if self
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return false;
        }
        self.waker.register(cx.waker());
        self.registered = Some(cx.waker().clone());
        // Given between the first look and the registration: `give` may have missed us.
        self.draining()
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        let mut waiting = self
            .signal
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        waiting.remove(&self.id);
    }
}
