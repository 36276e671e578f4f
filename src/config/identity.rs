//! `[upstreams.NAME.identity]` (docs/oauth.md): how the upstream learns who is calling without
//! the caller's token. This part builds `mode = "jwt"`: mcpgate signs a short-lived JWT
//! per caller (ES256 or EdDSA, keys from PEM), and publishes the public keys as a JWKS.
//!
//! A key's id (`kid`) is its RFC 7638 thumbprint, so the same key has the same id in every
//! replica and after every reload. The first key signs; every listed key is published, so
//! keys rotate by listing the new one first and dropping the old one once the tokens it
//! signed have expired (60 s).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// How long a token mcpgate signs is good for.
pub const JWT_LIFE: std::time::Duration = std::time::Duration::from_secs(60);

/// An upstream's identity settings.
#[derive(Debug)]
pub struct Identity {
    /// `iss` of the tokens.
    pub issuer: String,
    /// `aud` of the tokens: the upstream's URL unless configured.
    pub audience: String,
    /// Newest first: the first signs, all are published.
    pub keys: Box<[SigningKey]>,
    /// Where a route listener serves the JWKS too (besides the admin listener's
    /// `/.well-known/jwks.json`).
    pub jwks_path: Option<String>,
}

/// `mode = "exchange"`: the caller's access token exchanged at the `[oauth]` issuer (RFC
/// 8693) for one meant for the upstream.
pub struct Exchange {
    /// `audience` of the exchange, and what the issued token's `aud` must hold.
    pub audience: String,
    /// `resource` (RFC 8707), when the issuer wants it.
    pub resource: Option<String>,
    pub scope: Option<String>,
    pub client_id: String,
    /// How mcpgate's client proves itself to the issuer.
    pub auth: ClientAuth,
    /// Which exchange the issuer speaks.
    pub grant: Grant,
}

/// The exchange's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// RFC 8693 token exchange (Keycloak, Okta, and most).
    TokenExchange,
    /// The on-behalf-of flow of Microsoft Entra ID: a JWT bearer assertion (RFC 7523)
    /// with `requested_token_use=on_behalf_of`; the upstream is named by `scope`.
    OnBehalfOf,
}

/// mcpgate's client authentication at the issuer's token endpoint.
pub enum ClientAuth {
    /// `client_secret`, sent with HTTP Basic (`client_secret_basic`). Never printed.
    Secret(String),
    /// `client_key`: a JWT signed with it (`private_key_jwt`, RFC 7523).
    Key(SigningKey),
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("audience", &self.audience)
            .field("resource", &self.resource)
            .field("scope", &self.scope)
            .field("client_id", &self.client_id)
            .field("grant", &self.grant)
            .field(
                "auth",
                &match &self.auth {
                    ClientAuth::Secret(_) => "client_secret_basic",
                    ClientAuth::Key(_) => "private_key_jwt",
                },
            )
            .finish()
    }
}

pub struct SigningKey {
    pub kid: String,
    pub alg: Algorithm,
    pub encoding: EncodingKey,
    /// The public key as a JWK (with `kid`, `alg` and `use`).
    pub jwk: Value,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A private key in PEM (PKCS#8: `BEGIN PRIVATE KEY`), P-256 or Ed25519. The error
    /// never holds the key.
    pub fn from_pem(text: &str) -> Result<SigningKey, String> {
        let block = pem::parse(text.trim())
            .map_err(|_| "the key is not PEM (-----BEGIN PRIVATE KEY-----)".to_string())?;
        if block.tag() != "PRIVATE KEY" {
            return Err(format!(
                "the key is a PEM {:?}; a PKCS#8 \"PRIVATE KEY\" (P-256 or Ed25519) is needed (openssl genpkey -algorithm ed25519, or -algorithm EC -pkeyopt ec_paramgen_curve:P-256)",
                block.tag()
            ));
        }
        let der = block.contents();
        let rng = ring::rand::SystemRandom::new();
        let (alg, public) = if let Ok(k) =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
        {
            let point = k.public_key().as_ref();
            // Uncompressed: 0x04, then x and y, 32 bytes each.
            let (x, y) = (&point[1..33], &point[33..65]);
            (
                Algorithm::ES256,
                json!({"crv": "P-256", "kty": "EC", "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y)}),
            )
        } else if let Ok(k) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            (
                Algorithm::EdDSA,
                json!({"crv": "Ed25519", "kty": "OKP", "x": URL_SAFE_NO_PAD.encode(k.public_key().as_ref())}),
            )
        } else {
            return Err(
                "the key is neither a P-256 (ES256) nor an Ed25519 (EdDSA) private key".into(),
            );
        };
        // RFC 7638: the SHA-256 of the required members, in order, without spaces (the
        // map is ordered, so the text is).
        let kid = URL_SAFE_NO_PAD.encode(Sha256::digest(public.to_string().as_bytes()));
        let encoding = match alg {
            Algorithm::ES256 => EncodingKey::from_ec_der(der),
            _ => EncodingKey::from_ed_der(der),
        };
        let mut jwk = public;
        jwk["kid"] = Value::from(kid.clone());
        jwk["alg"] = Value::from(if alg == Algorithm::ES256 {
            "ES256"
        } else {
            "EdDSA"
        });
        jwk["use"] = Value::from("sig");
        Ok(SigningKey {
            kid,
            alg,
            encoding,
            jwk,
        })
    }
}

/// The JWKS of `keys` (of every upstream with identity), each key once.
pub fn jwks<'a>(keys: impl Iterator<Item = &'a SigningKey>) -> String {
    let mut seen = std::collections::BTreeSet::new();
    let keys: Vec<&Value> = keys
        .filter(|k| seen.insert(k.kid.clone()))
        .map(|k| &k.jwk)
        .collect();
    json!({ "keys": keys }).to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh private key in PEM: P-256 (`ec`) or Ed25519.
    pub(crate) fn pem_key(ec: bool) -> String {
        let rng = ring::rand::SystemRandom::new();
        let der = if ec {
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                .unwrap()
                .as_ref()
                .to_vec()
        } else {
            Ed25519KeyPair::generate_pkcs8(&rng)
                .unwrap()
                .as_ref()
                .to_vec()
        };
        pem::encode(&pem::Pem::new("PRIVATE KEY", der))
    }

    /// The key is a PEM file's path (relative to the configuration's folder), as the
    /// upstream `tls` keys take it, or its text through a secret reference; a path that
    /// does not read says both ways.
    #[test]
    fn a_key_is_a_path_or_a_secret_reference() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("identity.pem"), pem_key(false)).unwrap();
        let text = |key: &str| {
            format!(
                "[[listen]]\nname = \"m\"\naddr = \"127.0.0.1:0\"\n\n[upstreams.kb]\nurl = \"http://127.0.0.1:9/mcp\"\n\n[upstreams.kb.identity]\nmode = \"jwt\"\nissuer = \"https://gate.example\"\nkey = {key}\n\n[profiles.p]\nupstream = \"kb\"\n\n[[routes]]\nlisten = \"m\"\npath = \"/mcp\"\nprofile = \"p\"\nauth = \"none\"\n"
            )
        };
        let load = |key: &str| {
            let path = dir.path().join("gate.toml");
            std::fs::write(&path, text(key)).unwrap();
            crate::config::compile::load(&path).map_err(|e| e.to_string())
        };
        let pem = dir.path().join("identity.pem").display().to_string();
        for key in [
            "\"identity.pem\"".to_string(),
            format!("{pem:?}"),
            format!("\"${{file:{pem}}}\""),
            format!("[\"identity.pem\", {pem:?}]"),
        ] {
            let s = load(&key).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert!(s.upstreams["kb"].identity.is_some(), "{key}");
        }
        let e = load("\"missing.pem\"").unwrap_err();
        assert!(e.contains("gate.toml:11:7: key 1: cannot read"), "{e}");
        assert!(e.contains("${file:"), "{e}");
    }

    #[test]
    fn a_token_signed_verifies_with_the_published_key() {
        for ec in [true, false] {
            let key = SigningKey::from_pem(&pem_key(ec)).unwrap();
            let mut header = jsonwebtoken::Header::new(key.alg);
            header.kid = Some(key.kid.clone());
            let claims = json!({"sub": "alice", "aud": "http://kb", "exp": 4_000_000_000u64});
            let token = jsonwebtoken::encode(&header, &claims, &key.encoding).unwrap();
            let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(key.jwk.clone()).unwrap();
            let decoding = jsonwebtoken::DecodingKey::from_jwk(&jwk).unwrap();
            let mut v = jsonwebtoken::Validation::new(key.alg);
            v.set_audience(&["http://kb"]);
            let got = jsonwebtoken::decode::<Value>(&token, &decoding, &v).unwrap();
            assert_eq!(got.claims["sub"], "alice");
            assert_eq!(got.header.kid.as_deref(), Some(key.kid.as_str()));
            // The same key, read again: the same id.
            assert_eq!(key.kid.len(), 43);
        }
        let a = pem_key(true);
        assert_eq!(
            SigningKey::from_pem(&a).unwrap().kid,
            SigningKey::from_pem(&a).unwrap().kid
        );
        let set: Value = serde_json::from_str(&jwks(
            [
                SigningKey::from_pem(&a).unwrap(),
                SigningKey::from_pem(&a).unwrap(),
            ]
            .iter(),
        ))
        .unwrap();
        assert_eq!(set["keys"].as_array().unwrap().len(), 1, "each key once");
        assert!(set["keys"][0].get("d").is_none(), "no private part");
    }

    #[test]
    fn bad_keys_are_named_without_their_text() {
        for (text, says) in [
            ("not a key", "not PEM"),
            (
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----",
                "a PKCS#8",
            ),
            (
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----",
                "neither",
            ),
        ] {
            let e = SigningKey::from_pem(text).unwrap_err();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("AAAA"), "{e}");
        }
    }
}
