//! Server→client requests waiting for the client's answer: a legacy client bridged to a
//! 2026-07-28 server is asked for input on its call's stream, and answers in POSTs of its
//! own, which may reach another worker thread. Each question is registered here under the
//! id the client was given, with the session it was asked in, until it is answered, or its
//! call ends (the entry goes with its [`Waiter`]).

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Who may answer: a digest of the session the question was asked in.
pub type Owner = [u8; 32];

/// The questions waiting, by the id the client was given.
type Table = HashMap<Box<str>, (Owner, oneshot::Sender<Bytes>)>;

#[derive(Default)]
pub struct Waits {
    waiting: Mutex<Table>,
    next: AtomicU64,
}

/// One question's wait; dropping it forgets the question.
pub struct Waiter {
    waits: Arc<Waits>,
    id: Box<str>,
    pub answer: oneshot::Receiver<Bytes>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.lock().remove(&self.id);
    }
}

impl Waiter {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.waits.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why an answer was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// No question of that id waits (never asked, answered already, or its call ended).
    Unknown,
    /// The question was asked in another session.
    NotYours,
}

impl Waits {
    /// A number no other question of this process has.
    pub fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers the question `id` (JSON text of the id the client was given), asked in
    /// `owner`'s session.
    pub fn ask(self: &Arc<Self>, id: &str, owner: Owner) -> Waiter {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id.into(), (owner, tx));
        Waiter {
            waits: self.clone(),
            id: id.into(),
            answer: rx,
        }
    }

    /// Hands `answer` (the client's JSON-RPC response) to the question `id`, if it was
    /// asked in `owner`'s session and still waits.
    pub fn answer(&self, id: &str, owner: &Owner, answer: Bytes) -> Result<(), Refused> {
        let mut waiting = self.lock();
        match waiting.get(id) {
            None => return Err(Refused::Unknown),
            Some((o, _)) if o != owner => return Err(Refused::NotYours),
            Some(_) => {}
        }
        let (_, tx) = waiting.remove(id).expect("present above");
        tx.send(answer).map_err(|_| Refused::Unknown)
    }

    /// How many questions wait.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_session_asked_answers_once() {
        let waits = Arc::new(Waits::default());
        let mut w = waits.ask("\"q-1\"", [1; 32]);
        assert_eq!(
            waits.answer("\"q-1\"", &[2; 32], Bytes::from_static(b"x")),
            Err(Refused::NotYours)
        );
        assert_eq!(
            waits.answer("\"q-2\"", &[1; 32], Bytes::from_static(b"x")),
            Err(Refused::Unknown)
        );
        assert_eq!(
            waits.answer("\"q-1\"", &[1; 32], Bytes::from_static(b"y")),
            Ok(())
        );
        assert_eq!(w.answer.try_recv().unwrap(), Bytes::from_static(b"y"));
        assert_eq!(
            waits.answer("\"q-1\"", &[1; 32], Bytes::from_static(b"z")),
            Err(Refused::Unknown)
        );
        drop(w);
        let w = waits.ask("\"q-3\"", [1; 32]);
        assert_eq!(waits.len(), 1);
        drop(w);
        assert!(waits.is_empty());
    }
}
