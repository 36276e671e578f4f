//! Who is calling: the token from the route's `{token}` segment or from
//! `Authorization: Bearer`, hashed at once and looked up among the registered hashes.
//! Refusals differ by route kind on purpose: a path-token route answers 404 so a wrong URL
//! looks like no URL; a bearer route answers 401 with `WWW-Authenticate` as RFC 6750 asks.

use super::{Ctx, Peer};
use crate::config::token::Secret;
use crate::config::{Auth, Route, Snapshot, TokenEntry};
use crate::error::GateError;
use crate::gateway::Live;
use crate::http::fields::{Fields, Kind};
use std::time::SystemTime;
use subtle::ConstantTimeEq;

/// The auth stage: an address that failed too often is refused before its token is even
/// looked at; a failed authentication counts against it. The caller's token id and expiry
/// are noted in `ctx`.
pub(super) fn check<'s>(
    live: &'s Live,
    route: &Route,
    path_token: Option<&str>,
    fields: &Fields,
    peer: &Peer,
    ctx: &mut Ctx<'s>,
) -> Result<(), GateError> {
    if route.auth != Auth::None {
        live.limiter.auth_guard(peer.addr.ip())?;
    }
    let token = authenticate(live, route, path_token, fields, SystemTime::now())
        .map_err(|e| live.limiter.auth_failed(peer.addr.ip()).unwrap_or(e))?;
    ctx.token_id = token.map(|(_, t)| &*t.id);
    ctx.token = token.map(|(hash, t)| (*hash, t.not_after));
    Ok(())
}

/// The caller's token (its hash and entry), or `None` on an `auth = "none"` route.
pub fn authenticate<'s>(
    snapshot: &'s Snapshot,
    route: &Route,
    path_token: Option<&str>,
    fields: &Fields,
    now: SystemTime,
) -> Result<Option<(&'s [u8; 32], &'s TokenEntry)>, GateError> {
    let (secret, refusal) = match route.auth {
        Auth::None => return Ok(None),
        Auth::Path => (path_token.map(Secret), GateError::BadPathToken),
        Auth::Bearer => (bearer(fields).map(Secret), GateError::Unauthorized),
    };
    let Some(secret) = secret else {
        return Err(refusal);
    };
    let hash = secret.hash();
    // The map is keyed by the SHA-256 of the token, so its lookup time tells an attacker
    // nothing about any token; the constant-time compare guards the final equality anyway.
    let found = snapshot
        .tokens
        .get_key_value(&hash)
        .filter(|(key, _)| bool::from(key.ct_eq(&hash)));
    match found {
        Some((key, t))
            if t.valid_at(now) && t.profiles.iter().any(|p| **p == *route.profile.name) =>
        {
            Ok(Some((key, t)))
        }
        _ => Err(refusal),
    }
}

fn bearer(fields: &Fields) -> Option<&str> {
    let value = fields.get_str(Kind::Authorization)?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderMap, HeaderValue};

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&Fields::from_map(&h)), None);
        let cases = [
            ("Bearer abc", Some("abc")),
            ("bearer  abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearer ", None),
        ];
        for (value, token) in cases {
            h.insert("authorization", HeaderValue::from_static(value));
            assert_eq!(bearer(&Fields::from_map(&h)), token, "{value:?}");
        }
    }
}
