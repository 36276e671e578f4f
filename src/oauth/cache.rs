//! Verified tokens by their SHA-256, until they expire: a token seen before costs a hash
//! and a lookup. The map holds at most [`MAX_TOKENS`]; when full, the expired go first,
//! and if that frees nothing it starts over empty (every token is verified again once).

use super::Caller;
use crate::config::compile::DigestHasher;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

pub const MAX_TOKENS: usize = 10_000;

/// A token's hash → its caller and until when it may be used.
type Entries = HashMap<[u8; 32], (Arc<Caller>, SystemTime), BuildHasherDefault<DigestHasher>>;

#[derive(Default)]
pub struct TokenCache {
    map: RwLock<Entries>,
}

impl TokenCache {
    /// The caller cached for `hash`, while `now` is before its end plus `leeway`.
    pub fn get(&self, hash: &[u8; 32], now: SystemTime, leeway: Duration) -> Option<Arc<Caller>> {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        let (caller, until) = map.get(hash)?;
        (now < *until + leeway).then(|| caller.clone())
    }

    /// Keeps `caller` for `hash` until `until`.
    pub fn put(&self, hash: [u8; 32], caller: Arc<Caller>, until: SystemTime, now: SystemTime) {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_TOKENS {
            map.retain(|_, (_, end)| *end > now);
            if map.len() >= MAX_TOKENS {
                map.clear();
            }
        }
        map.insert(hash, (caller, until));
    }
}
