//! Who a verified access token speaks for ([`Caller`]), read from its claims or from an
//! introspection answer, and the reasons a token is refused ([`Why`]).

use crate::config::compile::OAuthSettings;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A verified token's caller. Cached by the token's hash until `expires`.
#[derive(Debug)]
pub struct Caller {
    pub sub: Option<Box<str>>,
    /// The `client_id` claim, else `azp`, else `appid` (Entra ID v1) or `cid` (Okta).
    pub client_id: Option<Box<str>>,
    /// `scope` (space-separated) or `scp` (a list or a space-separated string).
    pub scopes: Box<[Box<str>]>,
    /// Every claim, for grants that test one.
    claims: Map<String, Value>,
    /// `exp`; the token is good until `expires` plus the leeway.
    pub expires: SystemTime,
    /// SHA-256 of the issuer, client and subject: the key rate limits count this caller
    /// by, the same across the tokens the caller gets over time.
    pub key: [u8; 32],
}

/// Why a token was refused: the reason label of `mcpgate_oauth_failures_total` and the
/// logs, and the `error_description` the client gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Missing,
    Malformed,
    Algorithm,
    UnknownKey,
    Signature,
    Issuer,
    Audience,
    Expired,
    NotYetValid,
    /// Introspection says the token is not active.
    Inactive,
    /// An opaque token and no introspection configured.
    Opaque,
    /// No signing keys have been fetched from the issuer yet: 503, never an allow.
    NoKeys,
    /// The introspection endpoint could not be asked: 503.
    IntrospectionFailed,
    /// The token is good but grants no profile of the route: 403.
    InsufficientScope,
}

impl Why {
    /// Distinct from every other refusal reason of the logs.
    pub fn reason(self) -> &'static str {
        match self {
            Why::Missing => "missing_token",
            Why::Malformed => "malformed_token",
            Why::Algorithm => "algorithm_refused",
            Why::UnknownKey => "unknown_key",
            Why::Signature => "bad_signature",
            Why::Issuer => "wrong_issuer",
            Why::Audience => "wrong_audience",
            Why::Expired => "expired_token",
            Why::NotYetValid => "token_not_yet_valid",
            Why::Inactive => "inactive_token",
            Why::Opaque => "opaque_token",
            Why::NoKeys => "no_signing_keys",
            Why::IntrospectionFailed => "introspection_failed",
            Why::InsufficientScope => "insufficient_scope",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Why::Missing => "a bearer access token is required",
            Why::Malformed => "the token is not a well-formed access token",
            Why::Algorithm => "the token's signing algorithm is not accepted",
            Why::UnknownKey => "the token's signing key is not the issuer's",
            Why::Signature => "the token's signature does not verify",
            Why::Issuer => "the token is from another issuer",
            Why::Audience => "the token is for another resource",
            Why::Expired => "the token has expired",
            Why::NotYetValid => "the token is not valid yet",
            Why::Inactive => "the token is not active",
            Why::Opaque => "the token is not a JWT and this server does not introspect",
            Why::NoKeys => "the issuer's signing keys could not be fetched",
            Why::IntrospectionFailed => "the token could not be introspected",
            Why::InsufficientScope => "the token's scopes do not grant this route",
        }
    }

    /// Whether the fault is on this side (the issuer could not be asked): a 503.
    pub fn unavailable(self) -> bool {
        matches!(self, Why::NoKeys | Why::IntrospectionFailed)
    }
}

impl Caller {
    /// The caller a verified token's claims describe. `exp` must be there (the JWT check
    /// or the introspection answer made sure of it).
    pub fn from_claims(claims: Map<String, Value>, settings: &OAuthSettings) -> Caller {
        let text = |name: &str| claims.get(name).and_then(Value::as_str).map(Box::from);
        let sub = text("sub");
        let client_id = ["client_id", "azp", "appid", "cid"]
            .into_iter()
            .find_map(text);
        let mut scopes: Vec<Box<str>> = Vec::new();
        for name in ["scope", "scp"] {
            match claims.get(name) {
                Some(Value::String(s)) => scopes.extend(s.split_ascii_whitespace().map(Box::from)),
                Some(Value::Array(items)) => {
                    scopes.extend(items.iter().filter_map(Value::as_str).map(Box::from));
                }
                _ => {}
            }
        }
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        let mut key = Sha256::new();
        for part in [
            Some(&*settings.issuer),
            client_id.as_deref(),
            sub.as_deref(),
        ] {
            key.update(part.unwrap_or("").as_bytes());
            key.update([0]);
        }
        Caller {
            sub,
            client_id,
            scopes: scopes.into(),
            claims,
            expires: UNIX_EPOCH + Duration::from_secs(exp),
            key: key.finalize().into(),
        }
    }

    /// Whether claim `name` is `value`, or a list holding it.
    pub fn has_claim(&self, name: &str, value: &str) -> bool {
        match self.claims.get(name) {
            Some(Value::String(s)) => s == value,
            Some(Value::Array(items)) => items.iter().any(|i| i.as_str() == Some(value)),
            Some(Value::Bool(b)) => value == if *b { "true" } else { "false" },
            Some(Value::Number(n)) => n.to_string() == value,
            _ => false,
        }
    }

    /// The profiles this caller may use under `settings`' grants: those of the first
    /// grant that matches.
    pub fn profiles<'s>(&self, settings: &'s OAuthSettings) -> &'s [std::sync::Arc<str>] {
        settings
            .grant_for(&self.scopes, |name, value| self.has_claim(name, value))
            .map_or(&[], |g| &g.profiles)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> std::sync::Arc<OAuthSettings> {
        let text = r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"
[upstreams.u]
url = "http://127.0.0.1:9/mcp"
[profiles.full]
upstream = "u"
allow = ["*"]
[profiles.read]
upstream = "u"
allow = ["get"]
[profiles.admin]
upstream = "u"
allow = ["*"]
[oauth]
issuer = "http://127.0.0.1:1"
resource = "http://127.0.0.1:2/mcp"
[[oauth.grants]]
claim = "groups"
value = "kb-admins"
profiles = ["admin"]
[[oauth.grants]]
scope = "kb.write kb.read"
profiles = ["full", "read"]
[[oauth.grants]]
scope = "kb.read"
profiles = ["read"]
"#;
        crate::config::load_str(text, "t.toml")
            .unwrap()
            .oauth
            .unwrap()
    }

    fn caller(claims: serde_json::Value, s: &OAuthSettings) -> Caller {
        let serde_json::Value::Object(map) = claims else {
            panic!()
        };
        Caller::from_claims(map, s)
    }

    #[test]
    fn the_first_grant_that_matches_decides() {
        let s = settings();
        let names =
            |c: &Caller| -> Vec<String> { c.profiles(&s).iter().map(|p| p.to_string()).collect() };
        // A claim in a list wins before any scope.
        let admin = caller(
            serde_json::json!({"groups": ["x", "kb-admins"], "scope": "kb.read kb.write", "exp": 9}),
            &s,
        );
        assert_eq!(names(&admin), ["admin"]);
        // Every scope of a grant must be there, from `scope` or `scp`.
        let both = caller(serde_json::json!({"scp": ["kb.write", "kb.read"]}), &s);
        assert_eq!(names(&both), ["full", "read"]);
        let write_only = caller(serde_json::json!({"scp": "kb.write"}), &s);
        assert!(names(&write_only).is_empty());
        let read = caller(serde_json::json!({"scope": "openid kb.read"}), &s);
        assert_eq!(names(&read), ["read"]);
        // The scope a 401 names: the grant giving the profile with the least besides.
        assert_eq!(s.scope_for("read").as_deref(), Some("kb.read"));
        assert_eq!(s.scope_for("full").as_deref(), Some("kb.write kb.read"));
        assert_eq!(s.scope_for("admin"), None);
    }

    #[test]
    fn who_is_calling() {
        let s = settings();
        let c = caller(
            serde_json::json!({"sub": "u", "cid": "okta-app", "exp": 5}),
            &s,
        );
        assert_eq!(c.client_id.as_deref(), Some("okta-app"));
        assert_eq!(c.expires, UNIX_EPOCH + Duration::from_secs(5));
        let d = caller(
            serde_json::json!({"sub": "u", "client_id": "a", "azp": "b"}),
            &s,
        );
        assert_eq!(d.client_id.as_deref(), Some("a"));
        // The rate-limit key follows the caller, not the token.
        let again = caller(
            serde_json::json!({"sub": "u", "client_id": "a", "exp": 99}),
            &s,
        );
        assert_eq!(d.key, again.key);
        assert_ne!(c.key, d.key);
    }
}
