//! The sessions mcpgate holds on a legacy endpoint for its 2026-07-28 clients (docs/protocol.md,
//! the bridge): one per caller and client (its capabilities and info), opened with the
//! first request that needs it and kept while it is used. Kept on the endpoint's state, so
//! a reload that keeps the endpoint keeps them.
//!
//! At most [`MAX_SESSIONS`] per endpoint: opening one more lets the one used longest ago
//! go (the caller's next request opens it anew). Two requests of one caller at once open
//! one session: the second waits for the first's `initialize`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The most sessions one endpoint holds for bridged clients.
pub const MAX_SESSIONS: usize = 4_096;

/// Which session a request is served in: its caller key, then its client's digest
/// (`ClientMeta::digest`).
pub type Key = [u8; 32];

/// Where a request bridged to a legacy server goes: the endpoint its session is on (none
/// yet for the `initialize` that opens it), the server's session id (none for a server
/// without sessions) and the revision it chose. The client's 2026-07-28 header fields
/// (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`) stay here; the request gets the
/// revision's.
#[derive(Clone, Copy)]
pub struct InSession<'a> {
    pub endpoint: Option<super::session::EndpointId>,
    pub session: Option<&'a [u8]>,
    pub version: &'a str,
}

/// What a legacy server's answer to mcpgate's `initialize` says: the revision it chose
/// and its result, as JSON text.
#[derive(Debug, Clone)]
pub struct Initialized {
    pub version: String,
    pub result: String,
}

/// An opened session.
#[derive(Debug)]
pub struct Opened {
    /// The server's session id; `None` for a server that gave none (it keeps no session).
    pub id: Option<Box<[u8]>>,
    /// What the server answered mcpgate's `initialize`.
    pub init: Initialized,
}

/// A session being opened or open.
pub type Slot = Arc<tokio::sync::OnceCell<Arc<Opened>>>;

#[derive(Default)]
pub struct Sessions {
    map: Mutex<HashMap<Key, (Slot, Instant)>>,
}

impl Sessions {
    /// The slot of `key`, made if it has none; and the session let go to make room, which
    /// the caller ends upstream.
    pub fn slot(&self, key: &Key) -> (Slot, Option<Arc<Opened>>) {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((slot, used)) = map.get_mut(key) {
            *used = now;
            return (slot.clone(), None);
        }
        let mut evicted = None;
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
        {
            evicted = map
                .remove(&oldest)
                .and_then(|(slot, _)| slot.get().cloned());
        }
        let slot = Slot::default();
        map.insert(*key, (slot.clone(), now));
        (slot, evicted)
    }

    /// Forgets `key`'s session if it is still `opened` (the server no longer knows it).
    pub fn forget(&self, key: &Key, opened: &Arc<Opened>) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map
            .get(key)
            .and_then(|(slot, _)| slot.get())
            .is_some_and(|o| Arc::ptr_eq(o, opened))
        {
            map.remove(key);
        }
    }

    /// How many it holds, open or opening.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(id: &str) -> Arc<Opened> {
        Arc::new(Opened {
            id: Some(id.as_bytes().into()),
            init: Initialized {
                version: "2025-11-25".into(),
                result: "{}".into(),
            },
        })
    }

    #[test]
    fn one_slot_per_key_and_forget_only_the_same_session() {
        let s = Sessions::default();
        let (a, gone) = s.slot(&[1; 32]);
        assert!(gone.is_none());
        a.set(opened("a")).unwrap();
        let (again, _) = s.slot(&[1; 32]);
        assert!(Arc::ptr_eq(&a, &again));
        let stale = opened("old");
        s.forget(&[1; 32], &stale);
        assert_eq!(s.len(), 1);
        s.forget(&[1; 32], a.get().unwrap());
        assert!(s.is_empty());
    }

    #[test]
    fn the_least_recently_used_goes_when_full() {
        let s = Sessions::default();
        for i in 0..MAX_SESSIONS {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64).to_be_bytes());
            let (slot, _) = s.slot(&k);
            slot.set(opened(&i.to_string())).unwrap();
        }
        // Key 0 is used again: key 1 is now the oldest.
        s.slot(&[0; 32]);
        let (_, gone) = s.slot(&[9; 32]);
        assert_eq!(gone.unwrap().id.as_deref(), Some(&b"1"[..]));
        assert_eq!(s.len(), MAX_SESSIONS);
    }
}
