//! The tokens that tell an upstream who is calling (docs/oauth.md, `mode = "jwt"`): a JWT
//! signed by mcpgate per caller, `{iss, aud, sub, client_id, profile, jti, iat, exp}`, 60 s
//! of life, sent as `Authorization: Bearer`.
//!
//! A signature costs more than the rest of a call, so a caller's token is kept and sent
//! again until half its life has passed, then a new one is signed: a `jti` names a token,
//! not a request. The tokens kept are bounded ([`MOST_KEPT`]).

use crate::config::identity::{Identity, JWT_LIFE};
use http::HeaderValue;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most callers whose tokens are kept per upstream.
const MOST_KEPT: usize = 10_000;

/// Who a token speaks for. `sub`: the token id, or the OAuth caller's subject (its client
/// when it has none); `None` for mcpgate's own requests (`sub` is then `mcpgate`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Who {
    pub sub: Arc<str>,
    pub client_id: Option<Arc<str>>,
    /// The profile of the route the request came by.
    pub profile: Option<Arc<str>>,
}

impl Who {
    /// mcpgate itself (its reads of lists and definitions).
    pub fn gateway() -> Who {
        Who {
            sub: Arc::from("mcpgate"),
            client_id: None,
            profile: None,
        }
    }
}

pub struct Tokens {
    identity: Arc<Identity>,
    kept: Mutex<HashMap<Who, (HeaderValue, Instant)>>,
}

#[derive(serde::Serialize)]
struct Claims<'a> {
    iss: &'a str,
    aud: &'a str,
    sub: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<&'a str>,
    jti: String,
    iat: u64,
    exp: u64,
}

impl Tokens {
    pub fn new(identity: Arc<Identity>) -> Tokens {
        Tokens {
            identity,
            kept: Mutex::default(),
        }
    }

    /// The `Authorization` value for a request by `who`: a kept token while more than
    /// half its life is left, else a new one.
    pub fn bearer(&self, who: &Who) -> Result<HeaderValue, String> {
        let now = Instant::now();
        if let Some((value, renew)) = self.lock().get(who)
            && *renew > now
        {
            return Ok(value.clone());
        }
        let value = self.sign(who)?;
        let mut kept = self.lock();
        if kept.len() >= MOST_KEPT {
            kept.retain(|_, (_, renew)| *renew > now);
            if kept.len() >= MOST_KEPT {
                kept.clear();
            }
        }
        kept.insert(who.clone(), (value.clone(), now + JWT_LIFE / 2));
        Ok(value)
    }

    fn sign(&self, who: &Who) -> Result<HeaderValue, String> {
        let token = self.jwt(who)?;
        HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| "the identity token is not a header value".into())
    }

    /// A new token for `who`, with its whole life ahead.
    pub fn jwt(&self, who: &Who) -> Result<String, String> {
        let key = &self.identity.keys[0];
        let iat = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).expect("the system has a source of randomness");
        let claims = Claims {
            iss: &self.identity.issuer,
            aud: &self.identity.audience,
            sub: &who.sub,
            client_id: who.client_id.as_deref(),
            profile: who.profile.as_deref(),
            jti: crate::config::pins::hex(&jti),
            iat,
            exp: iat + JWT_LIFE.as_secs(),
        };
        let mut header = jsonwebtoken::Header::new(key.alg);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, &claims, &key.encoding)
            .map_err(|e| format!("signing the identity token failed: {e}"))
    }

    /// Whether `other` signs the same tokens: the same issuer, audience and keys.
    pub fn same_as(identity: &Identity, other: &Identity) -> bool {
        identity.issuer == other.issuer
            && identity.audience == other.audience
            && identity.keys.len() == other.keys.len()
            && identity
                .keys
                .iter()
                .zip(other.keys.iter())
                .all(|(a, b)| a.kid == b.kid)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Who, (HeaderValue, Instant)>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::identity::SigningKey;
    use serde_json::Value;

    fn tokens() -> (Tokens, Arc<Identity>) {
        let key = SigningKey::from_pem(&crate::config::identity::tests::pem_key(true)).unwrap();
        let identity = Arc::new(Identity {
            issuer: "https://gate".into(),
            audience: "http://kb/mcp".into(),
            keys: vec![key].into(),
            jwks_path: None,
        });
        (Tokens::new(identity.clone()), identity)
    }

    fn claims(identity: &Identity, value: &HeaderValue) -> Value {
        let token = value.to_str().unwrap().strip_prefix("Bearer ").unwrap();
        let jwk: jsonwebtoken::jwk::Jwk =
            serde_json::from_value(identity.keys[0].jwk.clone()).unwrap();
        let mut v = jsonwebtoken::Validation::new(identity.keys[0].alg);
        v.set_audience(&["http://kb/mcp"]);
        v.set_issuer(&["https://gate"]);
        jsonwebtoken::decode::<Value>(
            token,
            &jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap(),
            &v,
        )
        .unwrap()
        .claims
    }

    #[test]
    fn each_caller_gets_its_own_token_kept_for_half_its_life() {
        let (t, identity) = tokens();
        let alice = Who {
            sub: "alice".into(),
            client_id: Some("chatgpt".into()),
            profile: Some("gpt".into()),
        };
        let bob = Who {
            sub: "bob".into(),
            client_id: None,
            profile: Some("gpt".into()),
        };
        let a = t.bearer(&alice).unwrap();
        assert_eq!(t.bearer(&alice).unwrap(), a, "kept");
        let b = t.bearer(&bob).unwrap();
        let (ca, cb) = (claims(&identity, &a), claims(&identity, &b));
        assert_eq!(
            (ca["sub"].as_str(), ca["client_id"].as_str()),
            (Some("alice"), Some("chatgpt"))
        );
        assert_eq!(
            (cb["sub"].as_str(), cb.get("client_id")),
            (Some("bob"), None)
        );
        assert_eq!(ca["profile"], "gpt");
        assert_eq!(
            ca["exp"].as_u64().unwrap() - ca["iat"].as_u64().unwrap(),
            60
        );
        assert_ne!(ca["jti"], cb["jti"]);
        let own = claims(&identity, &t.bearer(&Who::gateway()).unwrap());
        assert_eq!(
            (own["sub"].as_str(), own.get("profile")),
            (Some("mcpgate"), None)
        );
    }
}
