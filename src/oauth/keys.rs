//! The issuer's signing keys: where they are (RFC 8414 or OpenID discovery), and the JWKS
//! read into keys a JWT can be checked with.
//!
//! Only public signature keys are kept: RSA, EC P-256/P-384 and Ed25519. A symmetric
//! (`oct`) key, an encryption key (`use = "enc"`) or one of a kind this build cannot use
//! is skipped, so no JWKS can turn HMAC on.

use super::fetch::IdpClient;
use crate::config::compile::{IdpUrl, OAuthSettings, idp_url};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

/// Where the issuer's keys and introspection are, from its metadata.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub jwks_uri: IdpUrl,
    pub introspection: Option<IdpUrl>,
    /// Where tokens are exchanged (RFC 8693) for upstream identity (docs/oauth.md).
    pub token_endpoint: Option<IdpUrl>,
}

#[derive(Deserialize)]
struct Metadata {
    issuer: String,
    jwks_uri: Option<String>,
    introspection_endpoint: Option<String>,
    token_endpoint: Option<String>,
}

/// The metadata URLs of `issuer`, in the order MCP clients try them: RFC 8414 with the
/// well-known segment before the issuer's path, then OpenID discovery after it.
fn metadata_urls(issuer: &str) -> Vec<String> {
    let base = issuer.trim_end_matches('/');
    let (origin, path) = match base.find("://").map(|i| i + 3) {
        Some(start) => match base[start..].find('/') {
            Some(slash) => base.split_at(start + slash),
            None => (base, ""),
        },
        None => (base, ""),
    };
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{base}/.well-known/openid-configuration"),
    ]
}

/// Reads the issuer's metadata: the first URL that answers 200 with a document for this
/// issuer (its `issuer` equal to the configured one, RFC 8414 §3.3).
pub async fn discover(client: &IdpClient, settings: &OAuthSettings) -> Result<Discovered, String> {
    let mut tried = Vec::new();
    for url in metadata_urls(&settings.issuer) {
        let parsed = idp_url(&url, "issuer metadata url")?;
        let (status, body) = match client.get(&parsed).await {
            Ok(answer) => answer,
            Err(e) => {
                tried.push(format!("{url}: {e}"));
                continue;
            }
        };
        if status != http::StatusCode::OK {
            tried.push(format!("{url}: status {status}"));
            continue;
        }
        let doc: Metadata = serde_json::from_slice(&body)
            .map_err(|e| format!("{url}: not issuer metadata: {e}"))?;
        if doc.issuer != *settings.issuer {
            return Err(format!(
                "{url} names issuer {:?}, not {:?}: refusing its keys",
                doc.issuer, settings.issuer
            ));
        }
        let jwks = doc
            .jwks_uri
            .ok_or_else(|| format!("{url}: the metadata has no jwks_uri"))?;
        let introspection = match doc.introspection_endpoint {
            Some(u) => Some(idp_url(&u, "introspection endpoint")?),
            None => None,
        };
        let token_endpoint = match doc.token_endpoint {
            Some(u) => Some(idp_url(&u, "token endpoint")?),
            None => None,
        };
        return Ok(Discovered {
            jwks_uri: idp_url(&jwks, "jwks_uri")?,
            introspection,
            token_endpoint,
        });
    }
    Err(format!("no issuer metadata: {}", tried.join("; ")))
}

/// One usable key of the JWKS.
pub struct Key {
    pub kid: Option<String>,
    /// The algorithms it can check: its own `alg` when it names one, else those of its
    /// type and curve.
    algorithms: &'static [Algorithm],
    pub decoding: DecodingKey,
}

impl Key {
    pub fn checks(&self, alg: Algorithm) -> bool {
        self.algorithms.contains(&alg)
    }
}

/// The keys of one JWKS fetch.
#[derive(Default)]
pub struct KeySet {
    pub keys: Vec<Key>,
    /// Entries left out, for the log.
    pub skipped: usize,
}

const RSA: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];

impl KeySet {
    /// Reads a JWKS document. Entries that are not usable public signature keys are
    /// skipped (counted); a document that is not a JWKS is an error.
    pub fn parse(body: &[u8]) -> Result<KeySet, String> {
        #[derive(Deserialize)]
        struct Set {
            keys: Vec<serde_json::Value>,
        }
        let set: Set = serde_json::from_slice(body).map_err(|e| format!("not a JWKS: {e}"))?;
        let mut out = KeySet::default();
        for entry in set.keys {
            match serde_json::from_value::<Jwk>(entry)
                .ok()
                .and_then(|jwk| usable(&jwk))
            {
                Some(key) => out.keys.push(key),
                None => out.skipped += 1,
            }
        }
        Ok(out)
    }

    /// The key for a token's `kid` and `alg`. Without a `kid`, the one key that can check
    /// `alg`, if there is exactly one.
    pub fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<&Key> {
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|k| k.kid.as_deref() == Some(kid) && k.checks(alg)),
            None => {
                let mut fitting = self.keys.iter().filter(|k| k.checks(alg));
                let first = fitting.next();
                if fitting.next().is_some() {
                    None
                } else {
                    first
                }
            }
        }
    }
}

fn usable(jwk: &Jwk) -> Option<Key> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let by_type: &'static [Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => RSA,
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => &[Algorithm::ES256],
            EllipticCurve::P384 => &[Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) => match p.curve {
            EllipticCurve::Ed25519 => &[Algorithm::EdDSA],
            _ => return None,
        },
        // A shared secret has no place in a public key set.
        AlgorithmParameters::OctetKey(_) => return None,
    };
    let algorithms = match jwk.common.key_algorithm {
        Some(named) => {
            let alg = named.to_string().parse::<Algorithm>().ok()?;
            let i = by_type.iter().position(|a| *a == alg)?;
            &by_type[i..=i]
        }
        None => by_type,
    };
    Some(Key {
        kid: jwk.common.key_id.clone(),
        algorithms,
        decoding: DecodingKey::from_jwk(jwk).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_put_the_well_known_segment_where_each_spec_says() {
        assert_eq!(
            metadata_urls("https://idp.example.com/realms/mcp"),
            [
                "https://idp.example.com/.well-known/oauth-authorization-server/realms/mcp",
                "https://idp.example.com/realms/mcp/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://tenant.auth0.com/"),
            [
                "https://tenant.auth0.com/.well-known/oauth-authorization-server",
                "https://tenant.auth0.com/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn only_public_signature_keys_are_kept() {
        let jwks = br#"{"keys":[
            {"kty":"oct","k":"c2VjcmV0","kid":"hmac"},
            {"kty":"EC","crv":"P-256","kid":"ec","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty":"EC","crv":"P-256","kid":"enc","use":"enc","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
            {"kty":"OKP","crv":"Ed25519","kid":"ed","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty":"XYZ","kid":"odd"}
        ]}"#;
        let set = KeySet::parse(jwks).unwrap();
        let kids: Vec<_> = set.keys.iter().map(|k| k.kid.as_deref().unwrap()).collect();
        assert_eq!(kids, ["ec", "ed"]);
        assert_eq!(set.skipped, 3);
        assert!(set.find(Some("ec"), Algorithm::ES256).is_some());
        assert!(set.find(Some("ec"), Algorithm::RS256).is_none());
        assert!(set.find(Some("hmac"), Algorithm::HS256).is_none());
        // Without a kid, only when exactly one key fits.
        assert!(set.find(None, Algorithm::EdDSA).is_some());
        assert!(KeySet::parse(b"{\"nokeys\":1}").is_err());
    }
}
