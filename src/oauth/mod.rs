//! The OAuth 2.1 resource server (docs/oauth.md): access tokens from the `[oauth]` issuer,
//! checked and turned into a [`Caller`].
//!
//! - A JWT is checked against the issuer's JWKS (`keys`): its `alg` allow-listed and
//!   fitting the key its `kid` names, the signature, `iss`, `aud` (the resource), `exp`
//!   and `nbf` within the leeway. Any other token goes to introspection when it is
//!   configured (`introspect`).
//! - A verified token is cached by its SHA-256 until it expires, so a repeat costs a hash
//!   and a lookup (`cache`).
//! - The keys are fetched when the verifier starts (at start, or on a reload that changes
//!   the `[oauth]` table), again every hour, and when a token names a `kid` the set does
//!   not have, at most once per `[oauth] jwks_refetch_after` (30 s unless set) whatever
//!   the tokens say. A failed fetch keeps the keys there are and logs a warning; with
//!   none at all, tokens are refused with a 503 and a fetch is tried again as often.

mod cache;
pub mod caller;
pub mod exchange;
pub mod fetch;
mod introspect;
pub mod keys;

pub use caller::{Caller, Why};

use crate::config::compile::{IdpUrl, OAuthSettings};
use arc_swap::ArcSwapOption;
use cache::TokenCache;
use fetch::IdpClient;
use jsonwebtoken::{Algorithm, Validation};
use keys::{Discovered, KeySet};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use sha2::{Digest, Sha256};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime};

/// How often the keys are read again when nothing asks sooner.
pub const REFRESH_EVERY: Duration = Duration::from_secs(3600);

/// What the verifier counts: JWKS fetches by result, the keys it holds, and the requests
/// on oauth routes refused, by reason.
#[derive(Clone, Default)]
pub struct OAuthMetrics {
    pub fetched: Counter,
    pub fetch_failed: Counter,
    pub keys: Gauge,
    failures: Family<ReasonLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

impl OAuthMetrics {
    pub fn register(registry: &mut Registry) -> OAuthMetrics {
        let failures = Family::default();
        registry.register(
            "oauth_failures",
            "Requests on oauth routes refused, by reason",
            failures.clone(),
        );
        let fetches = Family::<ResultLabels, Counter>::default();
        registry.register(
            "oauth_key_fetches",
            "Fetches of the issuer's signing keys (JWKS), by result",
            fetches.clone(),
        );
        let keys = Gauge::default();
        registry.register(
            "oauth_signing_keys",
            "Signing keys of the issuer in hand (0: oauth routes answer 503)",
            keys.clone(),
        );
        // One handle per statement (a family's read guard lives through its expression).
        let fetched = fetches
            .get_or_create(&ResultLabels { result: "ok" })
            .clone();
        let fetch_failed = fetches
            .get_or_create(&ResultLabels { result: "error" })
            .clone();
        OAuthMetrics {
            fetched,
            fetch_failed,
            keys,
            failures,
        }
    }

    /// Counts a request on an oauth route refused for `reason` ([`caller::Why::reason`]).
    pub fn count_refusal(&self, reason: &'static str) {
        self.failures.get_or_create(&ReasonLabels { reason }).inc();
    }
}

/// The fetch state: only one fetch runs at a time; requests that need one wait for it.
#[derive(Default)]
struct Refresh {
    last: Option<Instant>,
    discovered: Option<Discovered>,
}

pub struct Verifier {
    pub settings: Arc<OAuthSettings>,
    keys: ArcSwapOption<KeySet>,
    refresh: tokio::sync::Mutex<Refresh>,
    cache: TokenCache,
    client: IdpClient,
    metrics: OAuthMetrics,
}

impl Verifier {
    /// Counts a request on an oauth route refused for `reason`.
    pub fn count_refusal(&self, reason: &'static str) {
        self.metrics.count_refusal(reason);
    }

    /// A verifier for `settings`. Inside a runtime, its keys are fetched at once and then
    /// kept fresh on that runtime for as long as the verifier lives.
    pub fn start(settings: Arc<OAuthSettings>, metrics: OAuthMetrics) -> Arc<Verifier> {
        let verifier = Arc::new(Verifier {
            client: IdpClient::new(settings.tls.clone()),
            settings,
            keys: ArcSwapOption::empty(),
            refresh: tokio::sync::Mutex::new(Refresh::default()),
            cache: TokenCache::default(),
            metrics,
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(keep_fresh(Arc::downgrade(&verifier)));
        }
        verifier
    }

    /// Whether keys from the issuer are in hand.
    pub fn has_keys(&self) -> bool {
        self.keys.load().is_some()
    }

    /// The caller `token` speaks for, or why it is refused.
    pub async fn verify(&self, token: &str, now: SystemTime) -> Result<Arc<Caller>, Why> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(c) = self.cache.get(&hash, now, self.settings.leeway) {
            return Ok(c);
        }
        let (caller, until) = if token.bytes().filter(|b| *b == b'.').count() == 2 {
            let c = self.check_jwt(token).await?;
            let until = c.expires;
            (c, until)
        } else if self.settings.introspection.is_some() {
            self.introspect(token, now).await?
        } else {
            return Err(Why::Opaque);
        };
        let caller = Arc::new(caller);
        self.cache.put(hash, caller.clone(), until, now);
        Ok(caller)
    }

    async fn check_jwt(&self, token: &str) -> Result<Caller, Why> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| unreadable_header(token))?;
        let alg = header.alg;
        if !self.settings.algorithms.contains(&alg) {
            return Err(Why::Algorithm);
        }
        let keys = self.keys_with(header.kid.as_deref(), alg).await?;
        let key = keys
            .find(header.kid.as_deref(), alg)
            .ok_or(Why::UnknownKey)?;
        let mut rules = Validation::new(alg);
        rules.leeway = self.settings.leeway.as_secs();
        rules.validate_nbf = true;
        rules.set_required_spec_claims(&["exp", "iss", "aud"]);
        rules.set_issuer(&[&*self.settings.issuer]);
        rules.set_audience(&self.settings.audiences);
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &key.decoding,
            &rules,
        )
        .map_err(|e| why(e.kind()))?;
        Ok(Caller::from_claims(data.claims, &self.settings))
    }

    /// The key set, fetched anew first when it has no key for `kid` and `alg` and the
    /// last fetch is old enough.
    async fn keys_with(&self, kid: Option<&str>, alg: Algorithm) -> Result<Arc<KeySet>, Why> {
        if let Some(set) = self.keys.load_full()
            && set.find(kid, alg).is_some()
        {
            return Ok(set);
        }
        self.fetch_keys(false).await;
        self.keys.load_full().ok_or(Why::NoKeys)
    }

    /// Fetches the issuer's metadata (once) and keys, unless `force` is false and the
    /// last fetch began less than `settings.refetch_after` ago. A request that finds a
    /// fetch running waits for it instead of starting another.
    async fn fetch_keys(&self, force: bool) {
        let mut state = self.refresh.lock().await;
        if !force
            && state
                .last
                .is_some_and(|t| t.elapsed() < self.settings.refetch_after)
        {
            return;
        }
        state.last = Some(Instant::now());
        match self.fetch(&mut state).await {
            Ok(set) => {
                self.metrics.fetched.inc();
                self.metrics.keys.set(set.keys.len() as i64);
                if set.skipped > 0 {
                    tracing::debug!(
                        skipped = set.skipped,
                        "JWKS entries that are not public signature keys left out"
                    );
                }
                self.keys.store(Some(Arc::new(set)));
            }
            Err(e) => {
                self.metrics.fetch_failed.inc();
                // The metadata may have moved: look again next time.
                state.discovered = None;
                let kept = self.keys.load().as_ref().map_or(0, |k| k.keys.len());
                tracing::warn!(
                    issuer = %self.settings.issuer,
                    error = %e,
                    kept,
                    "cannot fetch the issuer's signing keys; keeping the last good ones"
                );
            }
        }
    }

    async fn fetch(&self, state: &mut Refresh) -> Result<KeySet, String> {
        let discovered = self.discovered_in(state).await?;
        let (status, body) = self.client.get(&discovered.jwks_uri).await?;
        if status != http::StatusCode::OK {
            return Err(format!("{}: status {status}", discovered.jwks_uri.uri));
        }
        let set = KeySet::parse(&body).map_err(|e| format!("{}: {e}", discovered.jwks_uri.uri))?;
        if set.keys.is_empty() {
            return Err(format!(
                "{}: no usable signing key in the JWKS",
                discovered.jwks_uri.uri
            ));
        }
        Ok(set)
    }

    /// Checks a token the issuer made for `audience` (an exchanged one, docs/oauth.md): a JWT
    /// is held to the issuer's keys, `iss`, `aud` and `exp`, and its `exp` returned; an
    /// opaque token cannot be read here (`Ok(None)`: its `expires_in` is what is known).
    pub async fn check_issued(&self, token: &str, audience: &str) -> Result<Option<u64>, String> {
        if token.bytes().filter(|b| *b == b'.').count() != 2 {
            return Ok(None);
        }
        let header = jsonwebtoken::decode_header(token)
            .map_err(|_| "its header does not read".to_string())?;
        let keys = self
            .keys_with(header.kid.as_deref(), header.alg)
            .await
            .map_err(|w| w.reason().to_string())?;
        let key = keys
            .find(header.kid.as_deref(), header.alg)
            .ok_or("it is signed with a key the issuer does not publish")?;
        let mut rules = Validation::new(header.alg);
        rules.leeway = self.settings.leeway.as_secs();
        rules.set_required_spec_claims(&["exp", "iss", "aud"]);
        rules.set_issuer(&[&*self.settings.issuer]);
        rules.set_audience(&[audience]);
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &key.decoding,
            &rules,
        )
        .map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidAudience => format!("it is not for {audience}"),
            jsonwebtoken::errors::ErrorKind::ExpiredSignature => "it has expired".to_string(),
            other => format!("it does not verify ({other:?})"),
        })?;
        Ok(data.claims.get("exp").and_then(serde_json::Value::as_u64))
    }

    /// The issuer's token endpoint, from its metadata.
    pub async fn token_endpoint(&self) -> Result<IdpUrl, String> {
        self.discovered()
            .await?
            .token_endpoint
            .ok_or_else(|| "the issuer's metadata has no token_endpoint".into())
    }

    /// The client that talks to the issuer.
    pub fn client(&self) -> &IdpClient {
        &self.client
    }

    /// The issuer's metadata, read now if it has not been.
    async fn discovered(&self) -> Result<Discovered, String> {
        self.discovered_in(&mut *self.refresh.lock().await).await
    }

    async fn discovered_in(&self, state: &mut Refresh) -> Result<Discovered, String> {
        if let Some(d) = &state.discovered {
            return Ok(d.clone());
        }
        let d = keys::discover(&self.client, &self.settings).await?;
        state.discovered = Some(d.clone());
        Ok(d)
    }
}

/// Fetches the keys now, again every [`REFRESH_EVERY`], and every `settings.refetch_after`
/// while there are none; ends when the verifier is gone.
async fn keep_fresh(verifier: Weak<Verifier>) {
    loop {
        let wait = {
            let Some(v) = verifier.upgrade() else { return };
            v.fetch_keys(true).await;
            if v.has_keys() {
                REFRESH_EVERY
            } else {
                v.settings.refetch_after
            }
        };
        tokio::time::sleep(wait).await;
    }
}

/// Why a JWT's header could not be read: an `alg` this build does not know (`none`
/// among them) is refused as an algorithm, anything else as malformed.
fn unreadable_header(token: &str) -> Why {
    use base64::Engine as _;
    let alg = token
        .split('.')
        .next()
        .and_then(|h| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(h)
                .ok()
        })
        .and_then(|h| serde_json::from_slice::<serde_json::Value>(&h).ok())
        .is_some_and(|h| h.get("alg").is_some_and(serde_json::Value::is_string));
    if alg { Why::Algorithm } else { Why::Malformed }
}

fn why(kind: &jsonwebtoken::errors::ErrorKind) -> Why {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::InvalidSignature => Why::Signature,
        K::ExpiredSignature => Why::Expired,
        K::ImmatureSignature => Why::NotYetValid,
        K::InvalidIssuer => Why::Issuer,
        K::InvalidAudience => Why::Audience,
        K::InvalidAlgorithm | K::MissingAlgorithm => Why::Algorithm,
        _ => Why::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use futures_util::FutureExt as _;
    use proptest::prelude::*;
    use ring::signature::KeyPair as _;
    use std::time::UNIX_EPOCH;

    const CONFIG: &str = r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"
[upstreams.docs]
url = "http://127.0.0.1:9/mcp"
[profiles.readonly]
upstream = "docs"
allow = ["*"]
[[routes]]
listen = "main"
path = "/mcp"
profile = "readonly"
auth = "oauth"
[oauth]
issuer = "http://127.0.0.1:1"
resource = "http://127.0.0.1:2/mcp"
audiences = ["api://kb"]
[[oauth.grants]]
scope = "kb.read"
profiles = ["readonly"]
"#;

    /// A verifier that holds one Ed25519 key (kid "ed") and will not fetch for a while,
    /// and the key to sign with.
    fn verifier() -> (Arc<Verifier>, jsonwebtoken::EncodingKey) {
        let settings = crate::config::load_str(CONFIG, "t.toml")
            .unwrap()
            .oauth
            .unwrap();
        let v = Verifier::start(settings, OAuthMetrics::default());
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = ring::signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = ring::signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key().as_ref());
        let jwks = format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","kid":"ed","x":"{x}"}}]}}"#);
        v.keys
            .store(Some(Arc::new(KeySet::parse(jwks.as_bytes()).unwrap())));
        v.refresh.try_lock().unwrap().last = Some(Instant::now());
        (v, jsonwebtoken::EncodingKey::from_ed_der(pkcs8.as_ref()))
    }

    fn sign(key: &jsonwebtoken::EncodingKey, claims: serde_json::Value) -> String {
        let mut header = jsonwebtoken::Header::new(Algorithm::EdDSA);
        header.kid = Some("ed".into());
        jsonwebtoken::encode(&header, &claims, key).unwrap()
    }

    fn now_secs() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn check(v: &Verifier, token: &str) -> Result<Arc<Caller>, Why> {
        v.verify(token, SystemTime::now())
            .now_or_never()
            .expect("no fetch is needed")
    }

    #[test]
    fn a_good_token_passes_once_and_is_then_cached() {
        let (v, key) = verifier();
        let token = sign(
            &key,
            serde_json::json!({
                "iss": "http://127.0.0.1:1", "aud": ["x", "http://127.0.0.1:2/mcp"],
                "exp": now_secs() + 60, "sub": "u1", "azp": "app", "scp": ["kb.read"],
            }),
        );
        let c = check(&v, &token).unwrap();
        assert_eq!(c.sub.as_deref(), Some("u1"));
        assert_eq!(c.client_id.as_deref(), Some("app"));
        assert_eq!(&*c.scopes, [Box::from("kb.read")]);
        assert!(Arc::ptr_eq(&c, &check(&v, &token).unwrap()), "cached");
        // Expired beyond the leeway: refused; within it: passes.
        let old = |ago: u64| {
            sign(
                &key,
                serde_json::json!({
                    "iss": "http://127.0.0.1:1", "aud": "http://127.0.0.1:2/mcp",
                    "exp": now_secs() - ago,
                }),
            )
        };
        assert_eq!(check(&v, &old(60)).unwrap_err(), Why::Expired);
        // Another audience named in `audiences` passes; any other does not.
        let for_aud = |aud: &str| {
            sign(
                &key,
                serde_json::json!({
                    "iss": "http://127.0.0.1:1", "aud": aud, "exp": now_secs() + 60,
                }),
            )
        };
        assert!(check(&v, &for_aud("api://kb")).is_ok());
        assert_eq!(
            check(&v, &for_aud("api://other")).unwrap_err(),
            Why::Audience
        );
        assert!(check(&v, &old(10)).is_ok(), "30 s of leeway");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever text comes as a token, it is refused for a reason, never let in.
        #[test]
        fn made_up_tokens_never_pass(text in "[A-Za-z0-9_.~+/=-]{0,300}") {
            let (v, _) = verifier();
            prop_assert!(check(&v, &text).is_err());
        }

        /// A good token with any one byte changed is refused.
        #[test]
        fn a_changed_byte_is_refused(at in 0usize..400, to in 33u8..127) {
            let (v, key) = verifier();
            let token = sign(
                &key,
                serde_json::json!({
                    "iss": "http://127.0.0.1:1", "aud": "http://127.0.0.1:2/mcp",
                    "exp": now_secs() + 60, "scope": "kb.read",
                }),
            );
            let at = at % token.len();
            prop_assume!(token.as_bytes()[at] != to);
            let mut bytes = token.into_bytes();
            bytes[at] = to;
            let changed = String::from_utf8(bytes).unwrap();
            prop_assert!(check(&v, &changed).is_err(), "{changed}");
        }
    }
}
