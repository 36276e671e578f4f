//! Sealed session ids (docs/configuration.md): the `Mcp-Session-Id` a client holds is the upstream's own
//! id and the endpoint that made it, encrypted and authenticated with the upstream's
//! `session_key`. Any mcpgate with the key opens it and routes the session to its
//! endpoint; nothing is stored anywhere.
//!
//! - ChaCha20-Poly1305 (ring). The nonce is synthetic: an HMAC of what is sealed, under a
//!   key of its own, so sealing the same id twice gives the same text (a server that
//!   repeats its session id on every answer shows the client one id, from every mcpgate)
//!   and two different ids never share a nonce.
//! - Both keys derive from the configured one by HMAC-SHA256 with fixed labels.
//! - The upstream's name is the associated data: an id sealed for one upstream does not
//!   open for another that shares the key.
//! - The text is `base64url(nonce ‖ ciphertext ‖ tag)`, no padding: visible ASCII, as the
//!   MCP spec asks of a session id.
//! - Keys rotate: the first seals, each one opens.

use crate::config::SessionKey;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::hmac;

/// What a sealed id names: a digest of the endpoint's url as written (the same in every
/// mcpgate that has the configuration).
pub type EndpointId = [u8; 8];

/// Who is asking, as a seal binds it and a stdio upstream's process per caller is keyed: a
/// digest of the caller's credential, or of the route when it has none.
pub type CallerKey = [u8; 16];

/// The longest sealed id opened; anything longer is not one of ours. It bounds the work a
/// forged header can cause (base64 of 12 + 8 + 1024 + 16 bytes is 1,414 characters).
#[cfg(test)]
const MAX_SEALED: usize = 1_414;
/// The longest upstream session id sealed. The MCP spec sets no bound; servers use UUIDs
/// or 32-byte tokens.
pub const MAX_INNER: usize = 1_024;

const TAG_LEN: usize = 16;

struct Keys {
    seal: LessSafeKey,
    nonce: hmac::Key,
}

pub struct Sealer {
    /// Newest first.
    keys: Box<[Keys]>,
    upstream: Box<[u8]>,
    /// The longest inner text sealed, and the longest sealed text opened.
    max_inner: usize,
    max_sealed: usize,
}

/// What a sealer seals: each purpose has keys of its own, so what is sealed for one never
/// opens as the other.
#[derive(Clone, Copy)]
pub enum Purpose {
    /// `Mcp-Session-Id`, at most [`MAX_INNER`] bytes inside.
    SessionId,
    /// A multi round-trip request's `requestState` (MCP 2026-07-28), at most
    /// [`MAX_STATE`] bytes inside.
    RequestState,
    /// A task id of the tasks extension (MCP 2026-07-28), at most [`MAX_TASK`] bytes
    /// inside.
    TaskId,
    /// A bridged legacy session's id (a legacy client in front of a 2026-07-28 server):
    /// what the server is told of the client on each request, at most [`MAX_BRIDGED`]
    /// bytes.
    BridgedSession,
    /// What a federated profile seals (docs/federation.md): its lists' cursors (each member's own)
    /// and its legacy sessions' ids, at most [`MAX_FEDERATION`] bytes.
    Federation,
    /// What an approval's `requestState` holds (docs/approvals.md), at most [`MAX_APPROVAL`]
    /// bytes.
    Approval,
}

/// The longest approval state sealed: expiry, caller, digest, nonce and rule.
pub const MAX_APPROVAL: usize = 128;

/// The longest federated cursor or session sealed: the members' cursors, or the client's
/// capabilities and info, with the profile's name.
pub const MAX_FEDERATION: usize = 4_096;

/// The longest bridged session sealed: the client's capabilities and info, with the
/// caller and revision.
pub const MAX_BRIDGED: usize = 2_048 + 64;

/// The longest task id (with what mcpgate binds to it) sealed: a server's ids are UUIDs
/// or tokens of a few dozen bytes.
pub const MAX_TASK: usize = 2_048;

/// The longest `requestState` (with what mcpgate binds to it) sealed.
pub const MAX_STATE: usize = 64 << 10;

impl Sealer {
    /// A sealer of session ids: `keys` newest first; `upstream` the upstream's name,
    /// bound into every id.
    pub fn new(upstream: &str, keys: &[SessionKey]) -> Sealer {
        Sealer::for_purpose(upstream, keys, Purpose::SessionId)
    }

    pub fn for_purpose(upstream: &str, keys: &[SessionKey], purpose: Purpose) -> Sealer {
        let (seal_label, nonce_label, max_inner): (&[u8], &[u8], usize) = match purpose {
            Purpose::SessionId => (
                b"mcpgate session id: seal",
                b"mcpgate session id: nonce",
                MAX_INNER,
            ),
            Purpose::RequestState => (
                b"mcpgate request state: seal",
                b"mcpgate request state: nonce",
                MAX_STATE,
            ),
            Purpose::TaskId => (
                b"mcpgate task id: seal",
                b"mcpgate task id: nonce",
                MAX_TASK,
            ),
            Purpose::BridgedSession => (
                b"mcpgate bridged session: seal",
                b"mcpgate bridged session: nonce",
                MAX_BRIDGED,
            ),
            Purpose::Federation => (
                b"mcpgate federation: seal",
                b"mcpgate federation: nonce",
                MAX_FEDERATION,
            ),
            Purpose::Approval => (
                b"mcpgate approval: seal",
                b"mcpgate approval: nonce",
                MAX_APPROVAL,
            ),
        };
        let derive = |key: &SessionKey, label: &[u8]| {
            hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key.0), label)
        };
        let keys = keys
            .iter()
            .map(|k| Keys {
                seal: LessSafeKey::new(
                    UnboundKey::new(&CHACHA20_POLY1305, derive(k, seal_label).as_ref())
                        .expect("HMAC-SHA256 gives the 32 bytes ChaCha20 takes"),
                ),
                nonce: hmac::Key::new(hmac::HMAC_SHA256, derive(k, nonce_label).as_ref()),
            })
            .collect();
        Sealer {
            keys,
            upstream: upstream.as_bytes().into(),
            max_inner,
            // base64 without padding of nonce, endpoint, inner text and tag.
            max_sealed: (NONCE_LEN + 8 + max_inner + TAG_LEN).div_ceil(3) * 4
                - (3 - (NONCE_LEN + 8 + max_inner + TAG_LEN) % 3) % 3,
        }
    }

    /// The id a client is given for the upstream's session `inner` on `endpoint`; `None`
    /// when `inner` is longer than [`MAX_INNER`].
    pub fn seal(&self, endpoint: &EndpointId, inner: &[u8]) -> Option<String> {
        if inner.len() > self.max_inner {
            return None;
        }
        let keys = &self.keys[0];
        let mut plain = Vec::with_capacity(NONCE_LEN + endpoint.len() + inner.len() + TAG_LEN);
        let mut context = hmac::Context::with_key(&keys.nonce);
        context.update(&self.upstream);
        context.update(endpoint);
        context.update(inner);
        let nonce: [u8; NONCE_LEN] = context.sign().as_ref()[..NONCE_LEN]
            .try_into()
            .expect("an HMAC-SHA256 is longer than a nonce");
        plain.extend_from_slice(endpoint);
        plain.extend_from_slice(inner);
        keys.seal
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&self.upstream[..]),
                &mut plain,
            )
            .expect("a session id is far below ChaCha20-Poly1305's length bound");
        let mut out = Vec::with_capacity(NONCE_LEN + plain.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&plain);
        Some(URL_SAFE_NO_PAD.encode(out))
    }

    /// The endpoint and the upstream's own id in a sealed id, if it opens with one of the
    /// keys and was sealed for this upstream.
    pub fn open(&self, sealed: &[u8]) -> Option<(EndpointId, Vec<u8>)> {
        if sealed.len() > self.max_sealed {
            return None;
        }
        let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
        if bytes.len() < NONCE_LEN + 8 + TAG_LEN {
            return None;
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        self.keys.iter().find_map(|keys| {
            let mut text = sealed.to_vec();
            let plain = keys
                .seal
                .open_in_place(
                    Nonce::assume_unique_for_key(nonce),
                    Aad::from(&self.upstream[..]),
                    &mut text,
                )
                .ok()?;
            let (endpoint, inner) = plain.split_at(8);
            Some((endpoint.try_into().ok()?, inner.to_vec()))
        })
    }
}

/// The id a sealed session names for an endpoint: the first 8 bytes of the SHA-256 of its
/// url as written.
pub fn endpoint_id(label: &str) -> EndpointId {
    use sha2::{Digest, Sha256};
    Sha256::digest(label.as_bytes())[..8]
        .try_into()
        .expect("a SHA-256 is longer than 8 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> SessionKey {
        SessionKey([b; 32])
    }

    #[test]
    fn a_sealed_id_opens_to_its_endpoint_and_inner_id() {
        let s = Sealer::new("kb", &[key(1)]);
        let e = endpoint_id("http://127.0.0.1:8001/mcp");
        let id = s.seal(&e, b"3f2a-uuid").unwrap();
        assert!(
            id.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert!(!id.contains("3f2a"));
        assert_eq!(s.open(id.as_bytes()), Some((e, b"3f2a-uuid".to_vec())));
        // The same session seals to the same text; another to another.
        assert_eq!(s.seal(&e, b"3f2a-uuid").unwrap(), id);
        assert_ne!(s.seal(&e, b"3f2a-uuie").unwrap(), id);
        assert_ne!(
            s.seal(&endpoint_id("http://127.0.0.1:8002/mcp"), b"3f2a-uuid")
                .unwrap(),
            id
        );
    }

    #[test]
    fn ids_that_were_not_sealed_here_do_not_open() {
        let s = Sealer::new("kb", &[key(1)]);
        let e = endpoint_id("u");
        let id = s.seal(&e, b"inner").unwrap();
        // Another key, another upstream.
        assert_eq!(Sealer::new("kb", &[key(2)]).open(id.as_bytes()), None);
        assert_eq!(Sealer::new("other", &[key(1)]).open(id.as_bytes()), None);
        // Every single changed character.
        for i in 0..id.len() {
            let mut forged = id.clone().into_bytes();
            forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
            assert_eq!(s.open(&forged), None, "changed at {i}");
        }
        for junk in [
            &b""[..],
            b"sample-1",
            b"!!!!",
            &id.as_bytes()[..id.len() - 1],
            &[b'A'; MAX_SEALED + 4][..],
        ] {
            assert_eq!(s.open(junk), None);
        }
        assert!(s.seal(&e, &[b'x'; MAX_INNER + 1]).is_none());
        let longest = s.seal(&e, &[b'x'; MAX_INNER]).unwrap();
        assert_eq!(longest.len(), MAX_SEALED);
        assert!(s.open(longest.as_bytes()).is_some());
    }

    #[test]
    fn keys_rotate_the_first_seals_every_one_opens() {
        let old = Sealer::new("kb", &[key(1)]);
        let both = Sealer::new("kb", &[key(2), key(1)]);
        let e = endpoint_id("u");
        let by_old = old.seal(&e, b"s").unwrap();
        assert_eq!(both.open(by_old.as_bytes()), Some((e, b"s".to_vec())));
        let by_new = both.seal(&e, b"s").unwrap();
        assert_ne!(by_new, by_old);
        assert_eq!(old.open(by_new.as_bytes()), None);
        assert!(
            Sealer::new("kb", &[key(2)])
                .open(by_new.as_bytes())
                .is_some()
        );
    }

    proptest::proptest! {
        /// Whatever a client sends as a session id opens to nothing, without a panic.
        #[test]
        fn any_text_a_client_makes_up_opens_to_nothing(text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2000)) {
            let s = Sealer::new("kb", &[key(1)]);
            proptest::prop_assert_eq!(s.open(&text), None);
        }
    }
}
