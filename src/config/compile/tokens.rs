//! `[[tokens]]`: token digests, the profiles each may use, and validity windows.

use super::profiles::Profile;
use super::{Compiler, Fail, at, fail};
use crate::config::raw::{self, S};
use crate::config::units::{parse_time, resolve_secrets_noting};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

/// A registered token. The token itself is never stored, only its hash (the map key).
pub struct TokenEntry {
    pub id: Arc<str>,
    pub profiles: Vec<String>,
    pub not_before: Option<SystemTime>,
    pub not_after: Option<SystemTime>,
}

impl fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenEntry")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl TokenEntry {
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.not_before.is_none_or(|t| now >= t) && self.not_after.is_none_or(|t| now < t)
    }
}

/// Tokens by the SHA-256 of the token. The key is a digest already, so the map's hash is
/// its four words folded together and mixed once ([`DigestHasher`]) instead of SipHash
/// over all 32 bytes. Clients only look keys up; the keys are the configuration's. Those
/// are meant to be SHA-256 outputs, but nothing makes them so (a configuration may list
/// hashes that differ in one word only), so every byte counts: a hash of part of the key
/// would put such keys in one bucket.
pub type TokenMap = HashMap<[u8; 32], TokenEntry, std::hash::BuildHasherDefault<DigestHasher>>;

/// The hasher of [`TokenMap`]: the key's 64-bit words XORed, then one folded multiply, so
/// that both the low bits (the bucket) and the high bits (the tag) of the hash depend on
/// every bit of every word.
#[derive(Default)]
pub struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        // An array is hashed as its length, then its bytes: only the bytes count here.
        for word in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..word.len()].copy_from_slice(word);
            self.0 ^= u64::from_le_bytes(w);
        }
    }

    fn write_usize(&mut self, _length: usize) {}

    fn finish(&self) -> u64 {
        // The full 128-bit product, folded: its high half brings the word's high bits
        // down to the low ones, its low half the low bits up.
        let m = u128::from(self.0) * 0x9e37_79b9_7f4a_7c15;
        (m as u64) ^ ((m >> 64) as u64)
    }
}

impl Compiler<'_> {
    pub(super) fn tokens(
        &self,
        raw: &[S<raw::RawToken>],
        profiles: &BTreeMap<String, Arc<Profile>>,
    ) -> Result<TokenMap, Fail> {
        let mut out = TokenMap::with_capacity_and_hasher(raw.len(), Default::default());
        let mut ids: std::collections::HashSet<&str> =
            std::collections::HashSet::with_capacity(raw.len());
        for t in raw {
            let t = t.get_ref();
            let id = t.id.get_ref();
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return fail(
                    t.id.span(),
                    "token id must be non-empty and use only letters, digits, '-', '_' and '.'",
                );
            }
            if !ids.insert(id.as_str()) {
                return fail(t.id.span(), format!("duplicate token id {id:?}"));
            }
            // `${file:…}` lets the hash live in a Kubernetes Secret (watched like any file).
            let hex = at(
                &t.sha256,
                resolve_secrets_noting(t.sha256.get_ref(), &mut self.files.borrow_mut()),
            )?;
            let hash = at(&t.sha256, crate::config::token::parse_hex32(&hex))?;
            for p in t.profiles.get_ref() {
                if !profiles.contains_key(p) {
                    return fail(
                        t.profiles.span(),
                        format!("token {id:?}: no profile named {p:?}"),
                    );
                }
            }
            let not_before = t
                .not_before
                .as_ref()
                .map(|v| at(v, parse_time(v.get_ref())))
                .transpose()?;
            let not_after = t
                .not_after
                .as_ref()
                .map(|v| at(v, parse_time(v.get_ref())))
                .transpose()?;
            if let (Some(b), Some(a), Some(span)) =
                (not_before, not_after, t.not_after.as_ref().map(S::span))
            {
                if a <= b {
                    return fail(span, "not_after must be later than not_before");
                }
            }
            let entry = TokenEntry {
                id: id.as_str().into(),
                profiles: t.profiles.get_ref().clone(),
                not_before,
                not_after,
            };
            if out.insert(hash, entry).is_some() {
                return fail(
                    t.sha256.span(),
                    format!("token {id:?}: the same sha256 is registered twice"),
                );
            }
        }
        Ok(out)
    }
}
