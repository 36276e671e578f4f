//! Token exchange for upstream identity (docs/oauth.md, `mode = "exchange"`): the caller's
//! access token is exchanged at the `[oauth]` issuer's token endpoint (RFC 8693) for one
//! meant for the upstream, which gets it as `Authorization: Bearer`. The caller's own
//! token never goes upstream.
//!
//! - The exchanged token is kept per caller token until shortly before it expires (its
//!   `exp` when it is a JWT, else `expires_in`), so a caller costs the issuer one exchange
//!   per token life, not one per call. Callers asking at once for the same token share
//!   one exchange (single flight). At most [`MOST_KEPT`] are kept per upstream.
//! - The issuer refusing (4xx): the call is refused 403 with the issuer's `error` and
//!   `error_description`, stripped of anything secret. The issuer failing, slow (past
//!   [`EXCHANGE_TIMEOUT`]) or answering with a token that is not for the upstream's
//!   audience or has expired: 503. Neither is kept: the next call asks again.

use super::Verifier;
use crate::config::identity::{ClientAuth, Exchange, Grant, SigningKey};
use http::HeaderValue;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::OnceCell;

/// The longest an exchange may take.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// A kept token is not used in its last seconds: it must not expire on the way.
const MARGIN: Duration = Duration::from_secs(10);
/// The most caller tokens whose exchanges are kept per upstream.
const MOST_KEPT: usize = 10_000;

/// Why an exchange gave no token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failed {
    /// The issuer refused: its reason.
    Refused(String),
    /// The issuer could not be asked, failed, or gave an unusable token: why.
    Unavailable(String),
}

#[derive(Clone)]
struct Kept {
    value: HeaderValue,
    until: Instant,
}

type Cell = Arc<OnceCell<Result<Kept, Failed>>>;

/// An upstream's exchanges.
pub struct Exchanges {
    settings: Arc<Exchange>,
    kept: Mutex<HashMap<[u8; 32], Cell>>,
}

#[derive(serde::Deserialize)]
struct Issued {
    access_token: Option<String>,
    /// Signed: an issuer may say a token is already past its time.
    expires_in: Option<i64>,
}

#[derive(serde::Deserialize)]
struct Refusal {
    error: Option<String>,
    error_description: Option<String>,
}

impl Exchanges {
    pub fn new(settings: Arc<Exchange>) -> Exchanges {
        Exchanges {
            settings,
            kept: Mutex::default(),
        }
    }

    /// The `Authorization` value for a call by the holder of `subject` (its access token).
    pub async fn bearer(&self, verifier: &Verifier, subject: &str) -> Result<HeaderValue, Failed> {
        let key: [u8; 32] = Sha256::digest(subject.as_bytes()).into();
        let now = Instant::now();
        let cell = {
            let mut kept = self.lock();
            let fresh = |c: &Cell| match c.get() {
                None => true,
                Some(Ok(k)) => k.until > now,
                Some(Err(_)) => false,
            };
            match kept.get(&key).filter(|c| fresh(c)) {
                Some(c) => c.clone(),
                None => {
                    if kept.len() >= MOST_KEPT {
                        kept.retain(|_, c| fresh(c));
                        if kept.len() >= MOST_KEPT {
                            kept.clear();
                        }
                    }
                    let c = Cell::default();
                    kept.insert(key, c.clone());
                    c
                }
            }
        };
        let result = cell
            .get_or_init(|| self.exchange(verifier, subject))
            .await
            .clone();
        match result {
            Ok(k) => Ok(k.value),
            Err(e) => {
                // A failure is not kept: the next call asks again.
                let mut kept = self.lock();
                if kept.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                    kept.remove(&key);
                }
                Err(e)
            }
        }
    }

    async fn exchange(&self, verifier: &Verifier, subject: &str) -> Result<Kept, Failed> {
        let s = &*self.settings;
        let endpoint = verifier
            .token_endpoint()
            .await
            .map_err(Failed::Unavailable)?;
        let client = verifier.client();
        let asked = async {
            match &s.auth {
                ClientAuth::Secret(secret) => {
                    let form = request_form(s, subject, &[]);
                    client
                        .post_form(&endpoint, (&s.client_id, secret), &form)
                        .await
                }
                ClientAuth::Key(key) => {
                    let assertion = client_assertion(key, &s.client_id, &endpoint.uri.to_string())
                        .map_err(|e| format!("the client assertion could not be signed: {e}"))?;
                    let form = request_form(
                        s,
                        subject,
                        &[
                            ("client_id", &s.client_id),
                            (
                                "client_assertion_type",
                                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                            ),
                            ("client_assertion", &assertion),
                        ],
                    );
                    client.post_form_alone(&endpoint, &form).await
                }
            }
        };
        let (status, body) = match tokio::time::timeout(EXCHANGE_TIMEOUT, asked).await {
            Err(_) => {
                return Err(Failed::Unavailable(format!(
                    "the issuer did not answer the exchange within {}s",
                    EXCHANGE_TIMEOUT.as_secs()
                )));
            }
            Ok(Err(e)) => return Err(Failed::Unavailable(self.clean(&e, subject))),
            Ok(Ok(answer)) => answer,
        };
        if status.is_client_error() {
            let said: Refusal = serde_json::from_slice(&body).unwrap_or(Refusal {
                error: None,
                error_description: None,
            });
            let why = match (said.error, said.error_description) {
                (Some(e), Some(d)) => format!("{e}: {d}"),
                (Some(e), None) => e,
                (None, _) => format!("status {status}"),
            };
            return Err(Failed::Refused(self.clean(&why, subject)));
        }
        if !status.is_success() {
            return Err(Failed::Unavailable(format!(
                "the issuer answered the exchange with status {status}"
            )));
        }
        let issued: Issued = serde_json::from_slice(&body).map_err(|_| {
            Failed::Unavailable("the issuer's exchange answer is not a token response".into())
        })?;
        let Some(token) = issued.access_token.filter(|t| !t.is_empty()) else {
            return Err(Failed::Unavailable(
                "the issuer's exchange answer has no access_token".into(),
            ));
        };
        let exp = verifier
            .check_issued(&token, &s.audience)
            .await
            .map_err(|why| {
                Failed::Unavailable(format!("the issuer's exchanged token is unusable: {why}"))
            })?;
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let life = match (exp, issued.expires_in) {
            (Some(exp), _) => exp.saturating_sub(now_unix),
            (None, Some(secs)) => secs.max(0) as u64,
            (None, None) => 60,
        };
        let life = Duration::from_secs(life).saturating_sub(MARGIN);
        if life.is_zero() {
            return Err(Failed::Unavailable(
                "the issuer's exchanged token has expired, or expires within seconds".into(),
            ));
        }
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            Failed::Unavailable("the issuer's exchanged token is not a header value".into())
        })?;
        Ok(Kept {
            value,
            until: Instant::now() + life,
        })
    }

    /// The issuer's text as a client may read it: no caller token, no client secret, no
    /// control character, at most 300 characters.
    fn clean(&self, text: &str, subject: &str) -> String {
        let mut t = text.replace(subject, "(the caller's token)");
        if let ClientAuth::Secret(secret) = &self.settings.auth
            && !secret.is_empty()
        {
            t = t.replace(secret, "(secret)");
        }
        let t: String = t
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .take(300)
            .collect();
        t
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Cell>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The exchange request's form, with `extra` pairs (a client assertion): RFC 8693 §2.1, or
/// Entra ID's on-behalf-of request.
fn request_form(s: &Exchange, subject: &str, extra: &[(&str, &str)]) -> String {
    let mut form = form_urlencoded::Serializer::new(String::new());
    if s.grant == Grant::OnBehalfOf {
        form.append_pair("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer")
            .append_pair("assertion", subject)
            .append_pair("requested_token_use", "on_behalf_of");
        if let Some(scope) = &s.scope {
            form.append_pair("scope", scope);
        }
        for (k, v) in extra {
            form.append_pair(k, v);
        }
        return form.finish();
    }
    form.append_pair(
        "grant_type",
        "urn:ietf:params:oauth:grant-type:token-exchange",
    )
    .append_pair("subject_token", subject)
    .append_pair(
        "subject_token_type",
        "urn:ietf:params:oauth:token-type:access_token",
    )
    .append_pair(
        "requested_token_type",
        "urn:ietf:params:oauth:token-type:access_token",
    )
    .append_pair("audience", &s.audience);
    if let Some(r) = &s.resource {
        form.append_pair("resource", r);
    }
    if let Some(scope) = &s.scope {
        form.append_pair("scope", scope);
    }
    for (k, v) in extra {
        form.append_pair(k, v);
    }
    form.finish()
}

/// A `private_key_jwt` client assertion (RFC 7523 §3): by and about `client_id`, for the
/// token endpoint, one minute of life, a fresh `jti`.
fn client_assertion(key: &SigningKey, client_id: &str, endpoint: &str) -> Result<String, String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let mut jti = [0u8; 16];
    getrandom::fill(&mut jti).expect("the system has a source of randomness");
    let claims = serde_json::json!({
        "iss": client_id,
        "sub": client_id,
        "aud": endpoint,
        "jti": crate::config::pins::hex(&jti),
        "iat": now,
        "exp": now + 60,
    });
    let mut header = jsonwebtoken::Header::new(key.alg);
    header.kid = Some(key.kid.clone());
    jsonwebtoken::encode(&header, &claims, &key.encoding).map_err(|e| e.to_string())
}
