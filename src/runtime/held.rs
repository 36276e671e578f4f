//! Calls held for a 2026-07-28 client's retry: a legacy server asked the client something
//! during a call, the client was answered `input_required`, and the call waits upstream
//! until the client retries with its answer (docs/protocol.md, the bridge). Each is kept here
//! under a number until the retry takes it, or until its time is up: it is then dropped,
//! which ends it upstream (what is held decides how, when it is dropped).
//!
//! A call is held for its caller: it is dropped as well when a reload removes the caller's
//! token ([`Held::revoke`]), and its time ends at the caller's credential's expiry, so
//! nothing of a revoked caller waits upstream (docs/operations.md).
//!
//! A held call costs no CPU while it waits: one timer, and what the call holds.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

/// What is held: the pipeline's call, opaque here.
pub type Call = Box<dyn Any + Send>;

/// Whose call it is: a configured token's hash (which a reload may remove), and when the
/// caller's credential expires.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caller {
    pub token: Option<[u8; 32]>,
    pub not_after: Option<SystemTime>,
}

struct Entry {
    call: Call,
    token: Option<[u8; 32]>,
}

#[derive(Default)]
pub struct Held {
    calls: Mutex<HashMap<u64, Entry>>,
    next: AtomicU64,
}

impl Held {
    /// Holds `caller`'s `call` for at most `life` (less when the caller's credential
    /// expires sooner): its number.
    pub fn hold(self: &Arc<Self>, call: Call, life: Duration, caller: Caller) -> u64 {
        let life = match caller.not_after {
            Some(t) => life.min(t.duration_since(SystemTime::now()).unwrap_or_default()),
            None => life,
        };
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(
            n,
            Entry {
                call,
                token: caller.token,
            },
        );
        let weak: Weak<Held> = Arc::downgrade(self);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                tokio::time::sleep(life).await;
                if let Some(held) = weak.upgrade() {
                    // Dropped outside the lock: ending a call may take its own time.
                    let expired = held.lock().remove(&n);
                    drop(expired);
                }
            });
        }
        n
    }

    /// Takes call `n` if it still waits, with the token it is held for.
    pub fn take(&self, n: u64) -> Option<(Call, Option<[u8; 32]>)> {
        self.lock().remove(&n).map(|e| (e.call, e.token))
    }

    /// Gives back call `n`, taken by a retry that could not use it. Its timer still runs.
    pub fn give_back(&self, n: u64, call: Call, token: Option<[u8; 32]>) {
        self.lock().insert(n, Entry { call, token });
    }

    /// Drops every call held for a token `still_valid` rejects; returns how many.
    pub fn revoke(&self, still_valid: impl Fn(&[u8; 32]) -> bool) -> usize {
        let gone: HashMap<u64, Entry> = {
            let mut calls = self.lock();
            let (gone, kept) = std::mem::take(&mut *calls)
                .into_iter()
                .partition(|(_, e)| e.token.as_ref().is_some_and(|t| !still_valid(t)));
            *calls = kept;
            gone
        };
        // Dropped outside the lock: ending a call may take its own time.
        let n = gone.len();
        drop(gone);
        n
    }

    /// How many calls wait.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Noted(Arc<AtomicU64>);

    impl Drop for Noted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_is_taken_once_or_dropped_when_its_time_is_up() {
        let held = Arc::new(Held::default());
        let dropped = Arc::new(AtomicU64::new(0));
        let life = Duration::from_secs(5);
        let a = held.hold(Box::new(Noted(dropped.clone())), life, Caller::default());
        let b = held.hold(Box::new(Noted(dropped.clone())), life, Caller::default());
        let (taken, token) = held.take(a).expect("waits");
        assert!(held.take(a).is_none(), "taken once");
        held.give_back(a, taken, token);
        assert_eq!(held.len(), 2);
        tokio::time::sleep(Duration::from_secs(6)).await;
        tokio::task::yield_now().await;
        assert!(held.is_empty());
        assert!(held.take(b).is_none());
        assert_eq!(dropped.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_revoked_or_expiring_callers_call_is_dropped() {
        let held = Arc::new(Held::default());
        let dropped = Arc::new(AtomicU64::new(0));
        let life = Duration::from_secs(300);
        let of = |t: u8| Caller {
            token: Some([t; 32]),
            not_after: None,
        };
        let alice = held.hold(Box::new(Noted(dropped.clone())), life, of(1));
        let bob = held.hold(Box::new(Noted(dropped.clone())), life, of(2));
        let soon = Caller {
            token: None,
            not_after: Some(SystemTime::now() + Duration::from_secs(2)),
        };
        let oauth = held.hold(Box::new(Noted(dropped.clone())), life, soon);
        assert_eq!(held.revoke(|t| *t == [2; 32]), 1);
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
        assert!(held.take(alice).is_none());
        tokio::time::sleep(Duration::from_secs(3)).await;
        tokio::task::yield_now().await;
        assert!(held.take(oauth).is_none(), "gone at its caller's expiry");
        assert!(held.take(bob).is_some());
    }
}
