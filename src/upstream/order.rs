//! Per-session order: the requests of one MCP session (one `Mcp-Session-Id`) go to the
//! upstream in the order they became ready to go, each once the one before it has been
//! written (a GET: answered, see `pipeline::forward`). It owns the queue of turns per
//! session id and nothing else; no request waits for another's answer body, so one slow
//! call never holds up its session's other calls.
//!
//! Why: a client opens its GET stream and, without waiting, sends a call whose server
//! asks the client something on that stream (elicitation, sampling). Sent directly, the
//! GET reaches the server first. Through a gateway the two go on different workers, and
//! the GET, which needs a fresh upstream connection while the call takes a kept one,
//! could arrive second; the server's question then had no stream to go on.
//!
//! Requests without a session id (the first `initialize`, stateless servers) wait for
//! nothing. A session's entry lives while one of its requests holds or waits for a turn,
//! so the table is never larger than the requests in flight, whatever ids clients send.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::OwnedMutexGuard;

/// One session's queue: tokio's mutex hands itself out in the order it was asked for.
type Queue = Arc<tokio::sync::Mutex<()>>;

/// The sessions with a request on its way to one upstream, by session id.
#[derive(Default)]
pub struct Order {
    sessions: Mutex<HashMap<Box<[u8]>, Queue>>,
}

/// A request's turn to be written upstream. The next request of its session goes once
/// this is dropped (see [`Turn::written`]). The default turn waits for nothing.
#[derive(Default)]
pub struct Turn<'a> {
    held: Option<Held<'a>>,
}

/// A place in a session's queue: waiting for the turn (`guard` empty) or holding it.
struct Held<'a> {
    queue: Queue,
    guard: Option<OwnedMutexGuard<()>>,
    session: &'a [u8],
    order: &'a Order,
}

impl Order {
    /// Waits for the requests of `session` that became ready before this one to be
    /// written; `None` (no session) waits for nothing. Turns are handed out first come,
    /// first served (tokio's mutex queues its waiters in order). A wait given up (the
    /// request's deadline, the client gone) leaves the queue as a finished turn does.
    pub async fn turn<'a>(&'a self, session: Option<&'a [u8]>) -> Turn<'a> {
        let Some(session) = session else {
            return Turn::default();
        };
        let queue = self.lock().entry(Box::from(session)).or_default().clone();
        let mut turn = Turn {
            held: Some(Held {
                queue: queue.clone(),
                guard: None,
                session,
                order: self,
            }),
        };
        let guard = queue.lock_owned().await;
        if let Some(held) = &mut turn.held {
            held.guard = Some(guard);
        }
        turn
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Box<[u8]>, Queue>> {
        // Nothing panics while holding the lock; recover the table if something ever did.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sessions with a request holding or waiting for a turn.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Turn<'_> {
    /// The request has been written: the session's next request may go.
    pub fn written(&mut self) {
        let Some(Held {
            queue,
            guard,
            session,
            order,
        }) = self.held.take()
        else {
            return;
        };
        // Let go of the queue before looking: whoever drops the last hold on it besides
        // the table's own removes the entry.
        drop(guard);
        drop(queue);
        let mut sessions = order.lock();
        if sessions
            .get(session)
            .is_some_and(|q| Arc::strong_count(q) == 1)
        {
            sessions.remove(session);
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.written();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Turns of one session come in the order they were asked for, each after the one
    /// before is written; other sessions and requests without one do not wait; the table
    /// is empty once nobody holds or waits.
    #[tokio::test]
    async fn a_session_goes_in_order_and_its_entry_goes_with_it() {
        let order = Order::default();
        let first = order.turn(Some(b"s1")).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let waiting = async {
            let mut later = Vec::new();
            for n in 2..=4 {
                let tx = tx.clone();
                let order = &order;
                later.push(async move {
                    let _turn = order.turn(Some(b"s1")).await;
                    tx.send(n).unwrap();
                });
            }
            futures_util::future::join_all(later).await;
        };
        let other = async {
            let _a = order.turn(Some(b"s2")).await;
            let _b = order.turn(None).await;
            tx.send(0).unwrap();
        };
        let release = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(rx.try_recv().ok(), Some(0), "another session went at once");
            assert!(rx.try_recv().is_err(), "s1 waits for its first request");
            drop(first);
        };
        tokio::join!(waiting, other, release);
        let seen: Vec<i32> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(seen, [2, 3, 4]);
        assert_eq!(order.len(), 0);
    }

    /// A wait given up, before or after the turn before it is done, leaves no entry
    /// behind: a client cannot grow the table by sending ids and leaving.
    #[tokio::test]
    async fn a_wait_given_up_leaves_nothing() {
        let order = Order::default();
        let first = order.turn(Some(b"s")).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(10), order.turn(Some(b"s"))).await;
        assert!(gave_up.is_err(), "waited for the first");
        drop(first);
        assert_eq!(order.len(), 0);

        let first = order.turn(Some(b"s")).await;
        let mut second = Box::pin(order.turn(Some(b"s")));
        assert!(futures_util::poll!(second.as_mut()).is_pending());
        drop(first); // the turn passes to the second, which never takes it
        drop(second);
        assert_eq!(order.len(), 0);
        let _again = order.turn(Some(b"s")).await;
        assert_eq!(order.len(), 1);
    }
}
