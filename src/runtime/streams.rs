//! Open SSE streams, so a reload can close the ones whose token was removed or has
//! expired (docs/operations.md), so `/metrics` can count them, and so a change of what a profile may
//! see reaches its clients' GET streams as a `notifications/*/list_changed` (docs/policy.md). A
//! relayed stream registers itself with its token's hash (and, for a GET stream, its
//! profile) and holds a guard that unregisters it when the stream ends.
//!
//! A call held for someone's answer (an approval, a bridged question) registers too, as a
//! hold ([`StreamRegistry::hold`]): not counted as a stream, but ended by the same
//! revocation, so nothing of a revoked caller runs after the reload (docs/operations.md).

use prometheus_client::metrics::gauge::Gauge;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::SystemTime;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::sync::WaitForCancellationFutureOwned;

#[derive(Debug)]
struct Entry {
    token: Option<[u8; 32]>,
    /// A stream (counted in `mcpgate_open_streams`), not a hold.
    counted: bool,
    cancel: CancellationToken,
    /// A GET stream's profile and where its notices go.
    notices: Option<(Arc<str>, mpsc::UnboundedSender<&'static str>)>,
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
    notices: Option<mpsc::UnboundedReceiver<&'static str>>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let mut open = self.registry.open.lock().expect("stream registry lock");
        if open.remove(&self.id).is_some_and(|e| e.counted) {
            self.registry.gauge.dec();
        }
    }
}

/// What a relayed stream polls to learn it must end (its token revoked by a reload, or
/// past its `not_after`) and, on a GET stream, what it must tell its client.
pub struct StreamWatch {
    guard: StreamGuard,
    revoked: Pin<Box<WaitForCancellationFutureOwned>>,
    expires: Option<Pin<Box<Sleep>>>,
}

impl StreamWatch {
    /// The next notice for the client (the method of a notification without params), if
    /// one is waiting.
    pub fn poll_notice(&mut self, cx: &mut Context<'_>) -> Poll<Option<&'static str>> {
        match &mut self.guard.notices {
            Some(rx) => rx.poll_recv(cx),
            None => Poll::Pending,
        }
    }

    pub fn new(guard: StreamGuard, not_after: Option<SystemTime>) -> Self {
        let revoked = Box::pin(guard.cancel.clone().cancelled_owned());
        let expires = not_after.map(|t| {
            let left = t.duration_since(SystemTime::now()).unwrap_or_default();
            Box::pin(tokio::time::sleep_until(Instant::now() + left))
        });
        StreamWatch {
            guard,
            revoked,
            expires,
        }
    }

    /// Resolves when the stream's token may no longer be used.
    pub async fn revoked(&mut self) {
        std::future::poll_fn(|cx| self.poll_revoked(cx)).await
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

/// Resolves when `watch`'s token may no longer be used; never without a watch.
pub async fn until_revoked(watch: &mut Option<StreamWatch>) {
    match watch {
        Some(w) => w.revoked().await,
        None => std::future::pending().await,
    }
}

impl StreamRegistry {
    /// A registry whose count is `mcpgate_open_streams`, registered in `registry`.
    pub fn registered(registry: &mut prometheus_client::registry::Registry) -> Arc<Self> {
        let gauge = Gauge::default();
        registry.register(
            "open_streams",
            "SSE streams being relayed now",
            gauge.clone(),
        );
        Self::new(gauge)
    }

    pub fn new(gauge: Gauge) -> Arc<Self> {
        Arc::new(StreamRegistry {
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            gauge,
        })
    }

    /// Registers a stream; with `profile` (a GET stream's), it also receives the notices
    /// [`notify`](Self::notify) sends that profile.
    pub fn register(
        self: &Arc<Self>,
        token: Option<[u8; 32]>,
        profile: Option<Arc<str>>,
    ) -> StreamGuard {
        self.enter(token, profile, true)
    }

    /// What a call held for an answer waits on besides the answer: ready when its caller's
    /// credential is revoked by a reload (`token`: a configured token's hash) or passes
    /// `not_after`. `None` when there is nothing to watch.
    pub fn hold(
        self: &Arc<Self>,
        token: Option<[u8; 32]>,
        not_after: Option<SystemTime>,
    ) -> Option<StreamWatch> {
        if token.is_none() && not_after.is_none() {
            return None;
        }
        Some(StreamWatch::new(self.enter(token, None, false), not_after))
    }

    fn enter(
        self: &Arc<Self>,
        token: Option<[u8; 32]>,
        profile: Option<Arc<str>>,
        counted: bool,
    ) -> StreamGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let (notices, rx) = match profile {
            Some(p) => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some((p, tx)), Some(rx))
            }
            None => (None, None),
        };
        let mut open = self.open.lock().expect("stream registry lock");
        open.insert(
            id,
            Entry {
                token,
                counted,
                cancel: cancel.clone(),
                notices,
            },
        );
        if counted {
            self.gauge.inc();
        }
        StreamGuard {
            id,
            registry: self.clone(),
            cancel,
            notices: rx,
        }
    }

    /// Sends `method` (a notification without params) to the GET streams of `profile`;
    /// returns to how many.
    pub fn notify(&self, profile: &str, method: &'static str) -> usize {
        let open = self.open.lock().expect("stream registry lock");
        open.values()
            .filter_map(|e| e.notices.as_ref())
            .filter(|(p, _)| **p == *profile)
            .filter(|(_, tx)| tx.send(method).is_ok())
            .count()
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

    /// How many streams are open (holds are not counted).
    pub fn len(&self) -> usize {
        self.open
            .lock()
            .expect("stream registry lock")
            .values()
            .filter(|e| e.counted)
            .count()
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
        let a = r.register(Some([1; 32]), None);
        let b = r.register(Some([2; 32]), None);
        let open = r.register(None, None);
        assert_eq!(r.len(), 3);
        assert_eq!(r.revoke(|t| *t == [1; 32]), 1);
        assert!(!a.cancel.is_cancelled());
        assert!(b.cancel.is_cancelled());
        assert!(!open.cancel.is_cancelled());
        drop(b);
        assert_eq!(r.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_ends_with_its_token_and_is_not_a_stream() {
        let gauge = Gauge::default();
        let r = StreamRegistry::new(gauge.clone());
        assert!(r.hold(None, None).is_none(), "nothing to watch");
        let mut removed = r.hold(Some([1; 32]), None).unwrap();
        let mut kept = r.hold(Some([2; 32]), None).unwrap();
        let soon = SystemTime::now() + std::time::Duration::from_secs(5);
        let mut expiring = r.hold(None, Some(soon)).unwrap();
        let _stream = r.register(Some([1; 32]), None);
        assert_eq!((r.len(), gauge.get()), (1, 1), "holds are not streams");
        assert_eq!(
            r.revoke(|t| *t == [2; 32]),
            2,
            "the stream and the hold of [1]"
        );
        removed.revoked().await;
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(kept.poll_revoked(&mut cx).is_pending());
        assert!(expiring.poll_revoked(&mut cx).is_pending());
        tokio::time::advance(std::time::Duration::from_secs(6)).await;
        expiring.revoked().await;
        drop((removed, kept, expiring, _stream));
        assert_eq!((r.len(), gauge.get()), (0, 0));
    }

    #[tokio::test]
    async fn notices_reach_the_get_streams_of_their_profile_only() {
        let r = StreamRegistry::new(Gauge::default());
        let mut a = StreamWatch::new(r.register(None, Some("readonly".into())), None);
        let mut b = StreamWatch::new(r.register(None, Some("gpt".into())), None);
        let _post = r.register(None, None);
        assert_eq!(r.notify("readonly", "notifications/tools/list_changed"), 1);
        let got = std::future::poll_fn(|cx| a.poll_notice(cx)).await;
        assert_eq!(got, Some("notifications/tools/list_changed"));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(b.poll_notice(&mut cx).is_pending());
    }
}
