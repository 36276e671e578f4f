//! Calls held for a 2026-07-28 client's retry: a legacy server asked the client something
//! during a call, the client was answered `input_required`, and the call waits upstream
//! until the client retries with its answer (SPEC §15, the bridge). Each is kept here
//! under a number until the retry takes it, or until its time is up: it is then dropped,
//! which ends it upstream (what is held decides how, when it is dropped).
//!
//! A held call costs no CPU while it waits: one timer, and what the call holds.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// What is held: the pipeline's call, opaque here.
pub type Call = Box<dyn Any + Send>;

#[derive(Default)]
pub struct Held {
    calls: Mutex<HashMap<u64, Call>>,
    next: AtomicU64,
}

impl Held {
    /// Holds `call` for at most `life`: its number.
    pub fn hold(self: &Arc<Self>, call: Call, life: Duration) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(n, call);
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

    /// Takes call `n` if it still waits.
    pub fn take(&self, n: u64) -> Option<Call> {
        self.lock().remove(&n)
    }

    /// Gives back call `n`, taken by a retry that could not use it. Its timer still runs.
    pub fn give_back(&self, n: u64, call: Call) {
        self.lock().insert(n, call);
    }

    /// How many calls wait.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Call>> {
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
        let a = held.hold(Box::new(Noted(dropped.clone())), Duration::from_secs(5));
        let b = held.hold(Box::new(Noted(dropped.clone())), Duration::from_secs(5));
        let taken = held.take(a).expect("waits");
        assert!(held.take(a).is_none(), "taken once");
        held.give_back(a, taken);
        assert_eq!(held.len(), 2);
        tokio::time::sleep(Duration::from_secs(6)).await;
        tokio::task::yield_now().await;
        assert!(held.is_empty());
        assert!(held.take(b).is_none());
        assert_eq!(dropped.load(Ordering::Relaxed), 2);
    }
}
