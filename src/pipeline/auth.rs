//! Who is calling: the token from the route's `{token}` segment or from
//! `Authorization: Bearer`, hashed at once and looked up among the registered hashes.
//! Refusals differ by route kind on purpose: a path-token route answers 404 so a wrong URL
//! looks like no URL; a bearer route answers 401 with `WWW-Authenticate` as RFC 6750 asks.
//!
//! An `auth = "oauth"` route ([`oauth`]) takes an access token of the `[oauth]` issuer
//! instead (docs/oauth.md): verified by `crate::oauth`, then its grants must include the
//! route's profile. Its refusals carry the challenge the MCP authorization spec asks for:
//! 401 with `resource_metadata` (and `error="invalid_token"` for a bad token), 403
//! `insufficient_scope` naming the scope that would do, 503 when the issuer's keys or
//! introspection cannot be had.

use super::{Ctx, Peer};
use crate::config::compile::OAuthSettings;
use crate::config::token::Secret;
use crate::config::{Auth, Route, Snapshot, TokenEntry};
use crate::error::{Challenge, GateError};
use crate::gateway::Live;
use crate::oauth::Why;
use http::{HeaderValue, StatusCode};
use std::time::SystemTime;
use subtle::ConstantTimeEq;
use wire::fields::{FieldKind, Fields};

/// What a request was let in with, for the streams it opens and the rate limits.
#[derive(Debug, Clone, Copy)]
pub struct Credential {
    /// A configured token's SHA-256, or an OAuth caller's key (`oauth::Caller::key`).
    pub key: [u8; 32],
    pub not_after: Option<std::time::SystemTime>,
    /// A configured token, which a reload may remove: its streams are watched for that.
    pub configured: bool,
}

impl Credential {
    /// What a call held for an answer (an approval, a question) waits on besides it: ready
    /// when a reload removes this token, or when it expires.
    pub(super) fn hold(
        token: Option<Credential>,
        gw: &crate::gateway::Gateway,
    ) -> Option<crate::runtime::streams::StreamWatch> {
        let t = token?;
        gw.streams.hold(t.configured.then_some(t.key), t.not_after)
    }
}

/// The auth stage. A failed authentication counts against the client's address; once that
/// address failed too often, its failures are answered 429 until the block ends. A valid
/// credential is never refused by the guard: behind a proxy many clients share an address,
/// and one broken client must not lock out the rest (docs/limits.md). The caller's token
/// id and expiry are noted in `ctx`.
pub(super) fn check<'s>(
    live: &'s Live,
    route: &Route,
    path_token: Option<&str>,
    fields: &Fields,
    peer: &Peer,
    ctx: &mut Ctx<'s>,
) -> Result<(), GateError> {
    let token = authenticate(live, route, path_token, fields, SystemTime::now())
        .map_err(|e| failed(live, peer, e))?;
    ctx.token_id = token.map(|(_, t)| &*t.id);
    ctx.token = token.map(|(hash, t)| Credential {
        key: *hash,
        not_after: t.not_after,
        configured: true,
    });
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
        // Checked by `oauth`, never against the token table.
        Auth::OAuth => return Err(GateError::Unauthorized),
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

/// The auth stage of an `auth = "oauth"` route. The caller is noted in `ctx`; failures
/// count in `mcpgate_oauth_failures` and, but for 503s and scope refusals, against the
/// address.
pub(super) async fn oauth<'s>(
    live: &'s Live,
    route: &Route,
    fields: &Fields,
    peer: &Peer,
    ctx: &mut Ctx<'s>,
) -> Result<(), GateError> {
    let (Some(settings), Some(verifier)) = (live.config.oauth.as_deref(), live.verifier.as_deref())
    else {
        // The configuration refuses an oauth route without `[oauth]`.
        return Err(GateError::Unauthorized);
    };
    let verdict = match bearer(fields) {
        None => Err(Why::Missing),
        Some(token) => verifier.verify(token, SystemTime::now()).await,
    };
    let refuse = |why: Why| {
        verifier.count_refusal(why.reason());
        challenge(settings, route, why)
    };
    let caller = match verdict {
        Ok(caller) => caller,
        Err(why) if why.unavailable() => return Err(refuse(why)),
        // No token at all: not an attempt to count, but a blocked address stays blocked.
        Err(Why::Missing) => {
            let e = refuse(Why::Missing);
            return Err(live.limiter.auth_guard(peer.addr.ip()).err().unwrap_or(e));
        }
        Err(why) => return Err(failed(live, peer, refuse(why))),
    };
    if !caller
        .profiles(settings)
        .iter()
        .any(|p| **p == *route.profile.name)
    {
        return Err(refuse(Why::InsufficientScope));
    }
    ctx.token = Some(Credential {
        key: caller.key,
        not_after: Some(caller.expires + settings.leeway),
        configured: false,
    });
    ctx.caller = Some(caller);
    Ok(())
}

/// The answer to a failed authentication from `peer`: `refusal`, or 429 once the address
/// failed too often (this failure counted).
fn failed(live: &Live, peer: &Peer, refusal: GateError) -> GateError {
    let ip = peer.addr.ip();
    match live.limiter.auth_guard(ip) {
        Err(blocked) => blocked,
        Ok(()) => live.limiter.auth_failed(ip).unwrap_or(refusal),
    }
}

/// The refusal for `why` on an oauth route, with its `WWW-Authenticate` challenge.
fn challenge(settings: &OAuthSettings, route: &Route, why: Why) -> GateError {
    let scope = settings.scope_for(&route.profile.name);
    let metadata = settings.metadata_url(&route.template);
    let (status, header, message) = match why {
        Why::Missing => (
            StatusCode::UNAUTHORIZED,
            match &scope {
                Some(s) => format!("Bearer resource_metadata=\"{metadata}\", scope=\"{s}\""),
                None => format!("Bearer resource_metadata=\"{metadata}\""),
            },
            format!("Unauthorized: {}", why.describe()),
        ),
        Why::InsufficientScope => {
            let needed = scope.as_deref().unwrap_or("");
            (
                StatusCode::FORBIDDEN,
                format!(
                    "Bearer error=\"insufficient_scope\", scope=\"{needed}\", resource_metadata=\"{metadata}\", error_description=\"{}\"",
                    why.describe()
                ),
                match &scope {
                    Some(s) => format!("Forbidden: {}; it needs scope {s}", why.describe()),
                    None => format!("Forbidden: {}", why.describe()),
                },
            )
        }
        _ if why.unavailable() => (
            StatusCode::SERVICE_UNAVAILABLE,
            String::new(),
            format!("Service unavailable: {}; try again later", why.describe()),
        ),
        _ => (
            StatusCode::UNAUTHORIZED,
            format!(
                "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{metadata}\"",
                why.describe()
            ),
            format!("Unauthorized: {}", why.describe()),
        ),
    };
    GateError::OAuth(Box::new(Challenge {
        status,
        // Built from validated configuration text; an empty one (503) is not sent.
        www_authenticate: (!header.is_empty())
            .then(|| HeaderValue::from_str(&header).ok())
            .flatten(),
        reason: why.reason(),
        message,
    }))
}

pub(super) fn bearer(fields: &Fields) -> Option<&str> {
    let value = fields.get_str(FieldKind::Authorization)?;
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
