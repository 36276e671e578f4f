//! `[oauth]` (docs/oauth.md): the issuer whose access tokens `auth = "oauth"` routes accept,
//! this server's resource id, what a JWT may be signed with, introspection for opaque
//! tokens, and `[[oauth.grants]]`, which map a token's scopes or a claim to profiles.

use super::endpoints::parse_url;
use super::profiles::Profile;
use super::upstreams::Address;
use super::{Compiler, Fail, at, fail};
use crate::config::raw::{self, S};
use crate::config::units::{parse_duration, resolve_secrets_noting};
use http::Uri;
use jsonwebtoken::Algorithm;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);
/// The least time between two JWKS fetches tokens cause (docs/oauth.md: once per 30 s).
pub const DEFAULT_REFETCH_AFTER: Duration = Duration::from_secs(30);
pub const DEFAULT_ALGORITHMS: [Algorithm; 3] =
    [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA];

/// The compiled `[oauth]` table.
pub struct OAuthSettings {
    /// As written: what a token's `iss` and the issuer's metadata must equal.
    pub issuer: Arc<str>,
    pub issuer_url: IdpUrl,
    /// This server's resource id: the audience a token must name.
    pub resource: Arc<str>,
    /// `scheme://host[:port]` of `resource`: where the metadata URLs of 401s point.
    pub resource_origin: String,
    /// What a token's `aud` must hold one of: `resource`, then `audiences`.
    pub audiences: Box<[String]>,
    /// The path of `resource` (`""` for its root).
    pub resource_path: String,
    pub scopes_supported: Box<[String]>,
    pub leeway: Duration,
    /// The least time between two JWKS fetches tokens cause (`jwks_refetch_after`).
    pub refetch_after: Duration,
    pub algorithms: Box<[Algorithm]>,
    pub introspection: Option<Introspection>,
    /// TLS towards the issuer's hosts: Mozilla's roots, `tls.ca`, `tls.cert` + `key`.
    pub tls: Arc<rustls::ClientConfig>,
    pub grants: Box<[Grant]>,
    /// The protected resource metadata document (RFC 9728) listeners serve.
    pub metadata: bytes::Bytes,
    /// SHA-256 over everything above but the grants: equal for settings whose keys and
    /// verified tokens stay good, so a reload that keeps it keeps them.
    pub identity: [u8; 32],
}

/// An http(s) URL at the authorization server.
#[derive(Debug, Clone)]
pub struct IdpUrl {
    pub address: Address,
    pub uri: Uri,
    pub https: bool,
}

pub struct Introspection {
    /// `None`: the issuer metadata's `introspection_endpoint`.
    pub url: Option<IdpUrl>,
    pub client_id: String,
    pub client_secret: String,
}

impl fmt::Debug for Introspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Introspection")
            .field("url", &self.url.as_ref().map(|u| u.uri.to_string()))
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .finish()
    }
}

/// One `[[oauth.grants]]`: when its conditions hold, the token may use `profiles`.
#[derive(Debug)]
pub struct Grant {
    /// Every one must be among the token's scopes.
    pub scopes: Box<[Box<str>]>,
    /// A claim and the value it must hold (equal, or among its items).
    pub claim: Option<(Box<str>, Box<str>)>,
    pub profiles: Box<[Arc<str>]>,
}

impl fmt::Debug for OAuthSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthSettings")
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .field("algorithms", &self.algorithms)
            .field("grants", &self.grants)
            .finish_non_exhaustive()
    }
}

impl OAuthSettings {
    /// The grant that decides what `scopes` and `claim` give: the first that matches.
    pub fn grant_for<'g>(
        &'g self,
        scopes: &[Box<str>],
        claim: impl Fn(&str, &str) -> bool,
    ) -> Option<&'g Grant> {
        self.grants.iter().find(|g| {
            g.scopes.iter().all(|s| scopes.contains(s))
                && g.claim
                    .as_ref()
                    .is_none_or(|(name, value)| claim(name, value))
        })
    }

    /// The scopes a client should ask for to use `profile`, for the `scope` of a 401 or
    /// 403: those of the grant that gives it with the least besides (fewest other
    /// profiles, then fewest scopes, then the first written).
    pub fn scope_for(&self, profile: &str) -> Option<String> {
        self.grants
            .iter()
            .filter(|g| g.profiles.iter().any(|p| **p == *profile) && !g.scopes.is_empty())
            .min_by_key(|g| (g.profiles.len(), g.scopes.len()))
            .map(|g| g.scopes.join(" "))
    }

    /// The URL of this server's protected resource metadata for a route at `path`
    /// (RFC 9728 §3.1: the well-known segment goes between the origin and the path).
    pub fn metadata_url(&self, path: &str) -> String {
        let path = if path == "/" { "" } else { path };
        format!(
            "{}/.well-known/oauth-protected-resource{path}",
            self.resource_origin
        )
    }
}

/// Whether `host` (as in a URL, IPv6 without brackets) is this machine.
fn loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An http(s) URL of the authorization server: https, or http on a loopback address.
pub fn idp_url(text: &str, what: &str) -> Result<IdpUrl, String> {
    if text.starts_with("unix:") {
        return Err(format!("the {what} must be an https URL"));
    }
    let (address, uri, https) = parse_url(text).map_err(|e| e.replace("upstream url", what))?;
    if let Address::Tcp { host, .. } = &address
        && !https
        && !loopback(host)
    {
        return Err(format!(
            "the {what} must be https (plain http only on a loopback address): tokens and keys would cross the network unprotected"
        ));
    }
    Ok(IdpUrl {
        address,
        uri,
        https,
    })
}

fn algorithm(name: &str) -> Result<Algorithm, String> {
    match name {
        "RS256" => Ok(Algorithm::RS256),
        "RS384" => Ok(Algorithm::RS384),
        "RS512" => Ok(Algorithm::RS512),
        "PS256" => Ok(Algorithm::PS256),
        "PS384" => Ok(Algorithm::PS384),
        "PS512" => Ok(Algorithm::PS512),
        "ES256" => Ok(Algorithm::ES256),
        "ES384" => Ok(Algorithm::ES384),
        "EdDSA" => Ok(Algorithm::EdDSA),
        "none" => Err("\"none\" is never accepted: an unsigned token proves nothing".into()),
        n if n.starts_with("HS") => Err(format!(
            "{n:?} is never accepted: HMAC needs a secret shared with the issuer, and a public key used as one lets anyone sign"
        )),
        n => Err(format!(
            "unknown algorithm {n:?}; use RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384 or EdDSA"
        )),
    }
}

impl Compiler<'_> {
    pub(super) fn oauth(
        &self,
        raw: &S<raw::RawOAuth>,
        profiles: &BTreeMap<String, Arc<Profile>>,
    ) -> Result<OAuthSettings, Fail> {
        let o = raw.get_ref();
        let issuer = o.issuer.get_ref().trim_end_matches('/').to_string();
        let issuer_url = at(&o.issuer, idp_url(&issuer, "issuer"))?;
        let resource = o.resource.get_ref().clone();
        let (resource_origin, resource_path) = at(&o.resource, resource_parts(&resource))?;
        let mut audiences = vec![resource.clone()];
        for a in o.audiences.iter().flatten() {
            if a.get_ref().is_empty() {
                return fail(a.span(), "an empty audience would match nothing");
            }
            audiences.push(a.get_ref().clone());
        }
        let leeway = match &o.leeway {
            Some(v) => at(v, parse_duration(v.get_ref()))?,
            None => DEFAULT_LEEWAY,
        };
        let refetch_after = refetch_after(o)?;
        let algorithms = algorithms(raw)?;
        let secret = |v: &S<String>| {
            at(
                v,
                resolve_secrets_noting(v.get_ref(), &mut self.files.borrow_mut()),
            )
        };
        let introspection = match &o.introspection {
            Some(i) => {
                let r = i.get_ref();
                Some(Introspection {
                    url: match &r.url {
                        Some(u) => Some(at(u, idp_url(u.get_ref(), "introspection url"))?),
                        None => None,
                    },
                    client_id: secret(&r.client_id)?,
                    client_secret: secret(&r.client_secret)?,
                })
            }
            None => None,
        };
        let host = match &issuer_url.address {
            Address::Tcp { host, .. } => host.clone(),
            Address::Unix(_) => unreachable!("idp_url refuses unix sockets"),
        };
        let tls = self.upstream_tls(&host, o.issuer.span(), o.tls.as_ref())?;
        let mut grants = Vec::new();
        for g in &o.grants {
            grants.push(grant(g, profiles)?);
        }
        let scopes_supported = scopes_supported(o, &grants);
        let mut id = Sha256::new();
        for part in std::iter::once(&issuer).chain(&audiences) {
            id.update(part.as_bytes());
            id.update([0]);
        }
        id.update(leeway.as_millis().to_le_bytes());
        id.update(refetch_after.as_millis().to_le_bytes());
        for a in &algorithms {
            id.update(format!("{a:?}\0").as_bytes());
        }
        if let Some(i) = &introspection {
            let url = i.url.as_ref().map_or(String::new(), |u| u.uri.to_string());
            for part in [url.as_str(), &i.client_id, &i.client_secret] {
                id.update(part.as_bytes());
                id.update([0]);
            }
        }
        id.update(tls.identity);
        let metadata = serde_json::to_vec(&serde_json::json!({
            "resource": resource,
            "authorization_servers": [issuer],
            "scopes_supported": scopes_supported,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcpgate",
        }))
        .expect("strings serialise");
        Ok(OAuthSettings {
            metadata: metadata.into(),
            issuer: issuer.into(),
            issuer_url,
            resource: resource.into(),
            resource_origin,
            audiences: audiences.into(),
            resource_path,
            scopes_supported,
            leeway,
            refetch_after,
            algorithms,
            introspection,
            tls: tls.config,
            grants: grants.into(),
            identity: id.finalize().into(),
        })
    }
}

/// How long the verifier waits before fetching the issuer's keys again for a `kid` it does
/// not know: at least a second, so that unknown kids cannot make it fetch per request.
fn refetch_after(o: &raw::RawOAuth) -> Result<Duration, Fail> {
    Ok(match &o.jwks_refetch_after {
        Some(v) => {
            let d = at(v, parse_duration(v.get_ref()))?;
            if d < Duration::from_secs(1) {
                return fail(
                    v.span(),
                    "jwks_refetch_after must be at least 1s: an unknown kid could make the IdP fetch on every request",
                );
            }
            d
        }
        None => DEFAULT_REFETCH_AFTER,
    })
}

/// The signature algorithms an access token may use.
fn algorithms(raw: &S<raw::RawOAuth>) -> Result<Box<[Algorithm]>, Fail> {
    let o = raw.get_ref();
    Ok(match &o.algorithms {
        Some(list) if list.is_empty() => {
            return fail(raw.span(), "oauth.algorithms is empty: no token could pass");
        }
        Some(list) => list
            .iter()
            .map(|a| at(a, algorithm(a.get_ref())))
            .collect::<Result<_, _>>()?,
        None => DEFAULT_ALGORITHMS.into(),
    })
}

/// The scopes the resource metadata names: as given, or every grant's, each once.
fn scopes_supported(o: &raw::RawOAuth, grants: &[Grant]) -> Box<[String]> {
    match &o.scopes_supported {
        Some(list) => list.iter().map(|s| s.get_ref().clone()).collect(),
        None => {
            let mut all: Vec<String> = Vec::new();
            for s in grants.iter().flat_map(|g| g.scopes.iter()) {
                if !all.iter().any(|a| **a == **s) {
                    all.push(s.to_string());
                }
            }
            all.into()
        }
    }
}

/// The origin and path of a resource id: an absolute http(s) URL without query or
/// fragment (RFC 8707 §2), https unless on a loopback address.
fn resource_parts(text: &str) -> Result<(String, String), String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("bad resource URL {text:?}: {e}"))?;
    let https =
        match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(
                "the resource must be an absolute https URL, e.g. \"https://mcp.example.com/mcp\""
                    .into(),
            ),
        };
    let host = uri.host().ok_or("the resource URL needs a host")?;
    if text.contains(['#', '?']) {
        return Err("the resource URL must not have a query or a fragment (RFC 8707)".into());
    }
    if text.contains('@') {
        return Err("the resource URL must not carry credentials".into());
    }
    if !https && !loopback(host.trim_start_matches('[').trim_end_matches(']')) {
        return Err("the resource must be https (plain http only on a loopback address)".into());
    }
    let authority = uri.authority().map_or("", |a| a.as_str());
    let origin = format!("{}://{authority}", uri.scheme_str().unwrap_or("https"));
    let path = uri.path().trim_end_matches('/').to_string();
    Ok((origin, path))
}

fn grant(raw: &S<raw::RawGrant>, profiles: &BTreeMap<String, Arc<Profile>>) -> Result<Grant, Fail> {
    let g = raw.get_ref();
    let scopes: Box<[Box<str>]> = g
        .scope
        .as_ref()
        .map(|s| {
            s.get_ref()
                .split_ascii_whitespace()
                .map(Box::from)
                .collect()
        })
        .unwrap_or_default();
    // RFC 6749 §3.3: a scope token is printable ASCII but for `"` and `\`; it goes into
    // `WWW-Authenticate` as it is.
    if let Some(bad) = scopes.iter().find(|s| {
        !s.bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b'"' && b != b'\\')
    }) {
        return fail(
            g.scope.as_ref().map_or(raw.span(), S::span),
            format!("scope {bad:?} has a character a scope may not have (RFC 6749 §3.3)"),
        );
    }
    let claim = match (&g.claim, &g.value) {
        (Some(c), Some(v)) => Some((c.get_ref().as_str().into(), v.get_ref().as_str().into())),
        (None, None) => None,
        _ => return fail(raw.span(), "a grant's claim and value go together"),
    };
    if scopes.is_empty() && claim.is_none() {
        return fail(
            raw.span(),
            "a grant needs a scope, or a claim and value: one without would give every token its profiles",
        );
    }
    let mut out = Vec::new();
    for p in g.profiles.get_ref() {
        let Some((name, _)) = profiles.get_key_value(p) else {
            return fail(g.profiles.span(), format!("no profile named {p:?}"));
        };
        out.push(Arc::from(name.as_str()));
    }
    if out.is_empty() {
        return fail(g.profiles.span(), "a grant needs at least one profile");
    }
    Ok(Grant {
        scopes,
        claim,
        profiles: out.into(),
    })
}
