//! The member sessions of federated legacy sessions (docs/federation.md), per replica: under the
//! digest of the client's sealed session id, each member's own session id, once opened.
//! The sealed id holds what opens them (the client's `initialize`), so a replica that has
//! none opens its own; the table is bounded and forgets the least recently used first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The most federated sessions kept per replica.
pub const MAX_SESSIONS: usize = 4_096;

/// The digest of a client's sealed session id.
pub type Key = [u8; 32];

#[derive(Default)]
pub struct MemberSessions {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    entries: HashMap<Key, Entry>,
    tick: u64,
}

struct Entry {
    ids: Vec<Option<Arc<str>>>,
    used: u64,
}

impl MemberSessions {
    /// Member `member`'s session id in the federated session `key`, if this replica
    /// opened one.
    pub fn get(&self, key: &Key, member: usize) -> Option<Arc<str>> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.tick += 1;
        let tick = t.tick;
        let e = t.entries.get_mut(key)?;
        e.used = tick;
        e.ids.get(member).cloned().flatten()
    }

    /// Keeps member `member`'s session id `id` in the federated session `key` (of
    /// `members` members).
    pub fn set(&self, key: &Key, members: usize, member: usize, id: Arc<str>) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.tick += 1;
        let tick = t.tick;
        if !t.entries.contains_key(key) && t.entries.len() >= MAX_SESSIONS {
            let oldest = t
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                t.entries.remove(&k);
            }
        }
        let e = t.entries.entry(*key).or_insert_with(|| Entry {
            ids: vec![None; members],
            used: tick,
        });
        e.used = tick;
        if let Some(slot) = e.ids.get_mut(member) {
            *slot = Some(id);
        }
    }

    /// Forgets member `member`'s session (it ended it).
    pub fn forget(&self, key: &Key, member: usize) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = t.entries.get_mut(key).and_then(|e| e.ids.get_mut(member)) {
            *slot = None;
        }
    }

    /// Ends the federated session `key`: its member sessions, by member.
    pub fn end(&self, key: &Key) -> Vec<(usize, Arc<str>)> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.entries.remove(key).map_or_else(Vec::new, |e| {
            e.ids
                .into_iter()
                .enumerate()
                .filter_map(|(m, id)| id.map(|id| (m, id)))
                .collect()
        })
    }

    /// The members whose sessions this replica holds for `key`.
    pub fn opened(&self, key: &Key) -> Vec<(usize, Arc<str>)> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.entries.get(key).map_or_else(Vec::new, |e| {
            e.ids
                .iter()
                .enumerate()
                .filter_map(|(m, id)| id.clone().map(|id| (m, id)))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_kept_per_member_and_bounded() {
        let s = MemberSessions::default();
        let k = [1; 32];
        assert_eq!(s.get(&k, 0), None);
        s.set(&k, 2, 1, "b".into());
        assert_eq!(s.get(&k, 1).as_deref(), Some("b"));
        assert_eq!(s.get(&k, 0), None);
        s.set(&k, 2, 0, "a".into());
        assert_eq!(s.opened(&k).len(), 2);
        s.forget(&k, 0);
        assert_eq!(s.get(&k, 0), None);
        assert_eq!(s.end(&k).len(), 1);
        assert_eq!(s.get(&k, 1), None);
        for i in 0..MAX_SESSIONS + 10 {
            let mut key = [0; 32];
            key[..8].copy_from_slice(&(i as u64).to_le_bytes());
            s.set(&key, 1, 0, "x".into());
        }
        assert_eq!(s.table.lock().unwrap().entries.len(), MAX_SESSIONS);
    }
}
