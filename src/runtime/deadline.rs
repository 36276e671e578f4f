//! Request deadlines whose timers are used again. A tokio timer costs most when it is
//! made and dropped: each time it is put into the runtime's timer wheel and taken out,
//! under the wheel's lock. A worker keeps the timers of finished requests and gives the
//! next request one of them, moved to its new deadline; a deadline later than the one the
//! timer is registered for is only noted (one atomic write), and the wheel moves the timer
//! when its old time comes. Off the workers (tests, the control thread) every deadline
//! has a timer of its own.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Spare timers a worker keeps: more than the requests it has in flight at once under
/// any ordinary load; past it, timers are dropped as usual.
const MAX_SPARE: usize = 256;

thread_local! {
    static SPARE: RefCell<Vec<Pin<Box<Sleep>>>> = const { RefCell::new(Vec::new()) };
}

/// Resolves when its time comes; hands its timer back to the worker when dropped.
pub struct Deadline {
    timer: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    /// A deadline `after` from now. Must be made inside a tokio runtime with time enabled.
    pub fn after(after: Duration) -> Deadline {
        Deadline::at(Instant::now() + after)
    }

    /// A deadline at `at`. Must be made inside a tokio runtime with time enabled.
    pub fn at(at: Instant) -> Deadline {
        let spare = if crate::runtime::workers::slot() != 0 {
            SPARE
                .try_with(|s| s.try_borrow_mut().ok()?.pop())
                .ok()
                .flatten()
        } else {
            None
        };
        let timer = match spare {
            Some(mut timer) => {
                timer.as_mut().reset(at);
                timer
            }
            None => Box::pin(tokio::time::sleep_until(at)),
        };
        Deadline { timer: Some(timer) }
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.timer.as_mut() {
            Some(timer) => timer.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        let Some(timer) = self.timer.take() else {
            return;
        };
        // A worker's runtime lives as long as its thread, so its timers stay usable.
        if crate::runtime::workers::slot() != 0 {
            let _ = SPARE.try_with(|s| {
                if let Ok(mut spare) = s.try_borrow_mut()
                    && spare.len() < MAX_SPARE
                {
                    spare.push(timer);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a worker thread a dropped deadline's timer serves the next one, which fires at
    /// its own time, whether earlier or later than the timer's last, and never before.
    #[tokio::test]
    async fn timers_are_used_again_and_keep_time() {
        let workers = crate::runtime::workers::Workers::start().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        workers.spawn(async move {
            let first = Deadline::after(Duration::from_secs(60));
            let made: *const Sleep = &**first.timer.as_ref().unwrap();
            drop(first);
            let kept = SPARE.with_borrow(Vec::len);

            let start = Instant::now();
            let second = Deadline::after(Duration::from_millis(50));
            let reused = std::ptr::eq(made, &**second.timer.as_ref().unwrap());
            second.await;
            let earlier = start.elapsed();

            let start = Instant::now();
            Deadline::after(Duration::from_millis(80)).await;
            let later = start.elapsed();
            let _ = tx.send((kept, reused, earlier, later, SPARE.with_borrow(Vec::len)));
        });
        let (kept, reused, earlier, later, spare) = rx.await.unwrap();
        workers.stop().await;
        assert_eq!(kept, 1);
        assert!(reused, "the spare timer is used");
        assert!(earlier >= Duration::from_millis(50), "{earlier:?}");
        assert!(later >= Duration::from_millis(80), "{later:?}");
        assert_eq!(spare, 1);
    }

    /// Off the workers nothing is kept.
    #[tokio::test]
    async fn other_threads_keep_nothing() {
        Deadline::after(Duration::from_millis(1)).await;
        drop(Deadline::after(Duration::from_secs(1)));
        assert_eq!(SPARE.with_borrow(Vec::len), 0);
    }
}
