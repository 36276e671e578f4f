//! Open SSE streams, so a reload can close the ones whose token was removed or has
//! expired (SPEC §8), and so `/metrics` can count them. A relayed stream registers itself
//! with its token's hash and holds a guard that unregisters it when the stream ends.

use prometheus_client::metrics::gauge::Gauge;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::SystemTime;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::sync::WaitForCancellationFutureOwned;

#[derive(Debug)]
struct Entry {
    token: Option<[u8; 32]>,
    cancel: CancellationToken,
}

#[derive(Debug)]
pub struct StreamRegistry {
    open: Mutex<HashMap<u64, Entry>>,
    next: AtomicU64,
    gauge: Gauge,
}

/// Held by a stream for its whole life; dropping it unregisters the stream.
#[derive(Debug)]
pub struct StreamGuard {
    id: u64,
    registry: Arc<StreamRegistry>,
    pub cancel: CancellationToken,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut open = self.registry.open.lock().expect("stream registry lock");
        open.remove(&self.id);
        self.registry.gauge.set(open.len() as i64);
    }
}

/// What a relayed stream polls to learn it must end: its token revoked by a reload, or
/// past its `not_after`.
pub struct StreamWatch {
    _guard: StreamGuard,
    revoked: Pin<Box<WaitForCancellationFutureOwned>>,
    expires: Option<Pin<Box<Sleep>>>,
}

impl StreamWatch {
    pub fn new(guard: StreamGuard, not_after: Option<SystemTime>) -> Self {
        let revoked = Box::pin(guard.cancel.clone().cancelled_owned());
        let expires = not_after.map(|t| {
            let left = t.duration_since(SystemTime::now()).unwrap_or_default();
            Box::pin(tokio::time::sleep_until(Instant::now() + left))
        });
        StreamWatch {
            _guard: guard,
            revoked,
            expires,
        }
    }

    /// Ready when the stream's token may no longer be used.
    pub fn poll_revoked(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.revoked.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        match &mut self.expires {
            Some(e) => e.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl StreamRegistry {
    pub fn new(gauge: Gauge) -> Arc<Self> {
        Arc::new(StreamRegistry {
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            gauge,
        })
    }

    pub fn register(self: &Arc<Self>, token: Option<[u8; 32]>) -> StreamGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let mut open = self.open.lock().expect("stream registry lock");
        open.insert(
            id,
            Entry {
                token,
                cancel: cancel.clone(),
            },
        );
        self.gauge.set(open.len() as i64);
        StreamGuard {
            id,
            registry: self.clone(),
            cancel,
        }
    }

    /// Cancels every stream whose token `still_valid` rejects; returns how many.
    pub fn revoke(&self, still_valid: impl Fn(&[u8; 32]) -> bool) -> usize {
        let open = self.open.lock().expect("stream registry lock");
        let mut n = 0;
        for e in open.values() {
            if e.token.as_ref().is_some_and(|t| !still_valid(t)) && !e.cancel.is_cancelled() {
                e.cancel.cancel();
                n += 1;
            }
        }
        n
    }

    pub fn len(&self) -> usize {
        self.open.lock().expect("stream registry lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoke_cancels_only_streams_of_invalid_tokens() {
        let r = StreamRegistry::new(Gauge::default());
        let a = r.register(Some([1; 32]));
        let b = r.register(Some([2; 32]));
        let open = r.register(None);
        assert_eq!(r.len(), 3);
        assert_eq!(r.revoke(|t| *t == [1; 32]), 1);
        assert!(!a.cancel.is_cancelled());
        assert!(b.cancel.is_cancelled());
        assert!(!open.cancel.is_cancelled());
        drop(b);
        assert_eq!(r.len(), 2);
    }
}
