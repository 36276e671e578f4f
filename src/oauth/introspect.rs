//! RFC 7662 introspection of tokens that are not JWTs: the token is posted to the
//! issuer's introspection endpoint with this server's client credentials, and an active
//! answer for this issuer and resource becomes a [`Caller`], cached until the token's
//! `exp` and at most [`CACHE_AT_MOST`].

use super::{Caller, Verifier, Why};
use serde_json::{Map, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const CACHE_AT_MOST: Duration = Duration::from_secs(300);

impl Verifier {
    /// The caller of an opaque token and how long the answer may be cached.
    pub(super) async fn introspect(
        &self,
        token: &str,
        now: SystemTime,
    ) -> Result<(Caller, SystemTime), Why> {
        let Some(settings) = &self.settings.introspection else {
            return Err(Why::Opaque);
        };
        let url = match &settings.url {
            Some(u) => u.clone(),
            None => self
                .discovered()
                .await
                .ok()
                .and_then(|d| d.introspection)
                .ok_or(Why::IntrospectionFailed)?,
        };
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("token_type_hint", "access_token")
            .finish();
        let answer = self
            .client
            .post_form(&url, (&settings.client_id, &settings.client_secret), &form)
            .await;
        let body = match answer {
            Ok((status, body)) if status == http::StatusCode::OK => body,
            Ok((status, _)) => {
                tracing::warn!(url = %url.uri, %status, "token introspection refused");
                return Err(Why::IntrospectionFailed);
            }
            Err(error) => {
                tracing::warn!(url = %url.uri, %error, "token introspection failed");
                return Err(Why::IntrospectionFailed);
            }
        };
        let Ok(claims) = serde_json::from_slice::<Map<String, Value>>(&body) else {
            tracing::warn!(url = %url.uri, "token introspection answered something other than a JSON object");
            return Err(Why::IntrospectionFailed);
        };
        self.judge(claims, now)
    }

    /// An introspection answer's verdict: active, for this issuer and resource when it
    /// names them, and within its times.
    fn judge(
        &self,
        claims: Map<String, Value>,
        now: SystemTime,
    ) -> Result<(Caller, SystemTime), Why> {
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(Why::Inactive);
        }
        if let Some(iss) = claims.get("iss")
            && iss.as_str() != Some(&*self.settings.issuer)
        {
            return Err(Why::Issuer);
        }
        let ours = |a: &Value| {
            a.as_str()
                .is_some_and(|a| self.settings.audiences.iter().any(|o| o == a))
        };
        let for_us = match claims.get("aud") {
            None => true,
            Some(Value::Array(list)) => list.iter().any(ours),
            Some(one) => ours(one),
        };
        if !for_us {
            return Err(Why::Audience);
        }
        let leeway = self.settings.leeway;
        let at = |name: &str| {
            claims
                .get(name)
                .and_then(Value::as_u64)
                .map(|s| UNIX_EPOCH + Duration::from_secs(s))
        };
        let most = now + CACHE_AT_MOST;
        let until = match at("exp") {
            Some(exp) if exp + leeway <= now => return Err(Why::Expired),
            Some(exp) => exp.min(most),
            None => most,
        };
        if at("nbf").is_some_and(|nbf| nbf > now + leeway) {
            return Err(Why::NotYetValid);
        }
        let mut claims = claims;
        // A token without `exp` is cached as if it ended with the cache time.
        if !claims.contains_key("exp") {
            let secs = until.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
            claims.insert("exp".into(), Value::from(secs));
        }
        Ok((Caller::from_claims(claims, &self.settings), until))
    }
}
