//! `[[listen]]` and `[[routes]]`: sockets, their Host and Origin rules, and the route
//! table each listener matches request paths against.

use super::oauth::OAuthSettings;
use super::profiles::Profile;
use super::stages::{Head, Sections, Stages};
use super::{Compiler, Fail, at, check_patterns, fail};
use crate::config::raw::{self, S};
use crate::config::tls::{TlsFiles, TlsMaterial};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// The token is the `{token}` segment of the path; a bad one answers 404.
    Path,
    /// `Authorization: Bearer <token>`; a bad one answers 401.
    Bearer,
    /// An OAuth access token from the `[oauth]` issuer in `Authorization: Bearer`; a
    /// missing or bad one answers 401 pointing at the protected resource metadata.
    OAuth,
    /// No token: anyone who reaches the listener.
    None,
}

#[derive(Debug)]
pub struct Route {
    pub listener: String,
    /// The path template, as written; what logs show instead of the request path.
    pub template: Arc<str>,
    pub profile: Arc<Profile>,
    pub auth: Auth,
    /// The stages its requests go through, in order.
    pub stages: Stages,
}

#[derive(Debug)]
pub(super) enum Segment {
    Literal(String),
    Token,
}

#[derive(Debug, Default)]
pub(super) struct RouteTable {
    pub(super) exact: HashMap<String, usize>,
    pub(super) templated: Vec<(Vec<Segment>, usize)>,
}

#[derive(Debug)]
pub struct Listener {
    pub name: Arc<str>,
    pub addr: SocketAddr,
    pub tls: Option<TlsMaterial>,
    pub hosts: HostRules,
    pub origins: OriginRules,
    pub(super) table: RouteTable,
    /// The paths under which this listener serves the protected resource metadata
    /// (RFC 9728): none without an oauth route, else the bare well-known path and it
    /// followed by each oauth route's path and the resource's path.
    pub metadata_paths: Vec<Box<str>>,
}

/// Accepted `Host` values (DNS-rebinding defence).
#[derive(Debug, Clone)]
pub struct HostRules(Vec<String>);

/// Accepted `Origin` values (DNS-rebinding and cross-site defence).
#[derive(Debug, Clone)]
pub struct OriginRules(Vec<String>);

/// Where RFC 9728 puts a resource's metadata: this, then the resource's path.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

const LOCAL_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

impl HostRules {
    /// `host` is a `Host` header or `:authority`: `name`, `name:port`, `[v6]:port`.
    /// Compared without case and without a lowercased copy (the rules are lowercase).
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim_ascii();
        // `name:port` when what follows the last colon is all digits (so not `[v6]`).
        let name = match host.bytes().rposition(|b| b == b':') {
            Some(colon)
                if colon > 0 && host.as_bytes()[colon + 1..].iter().all(u8::is_ascii_digit) =>
            {
                &host[..colon]
            }
            _ => host,
        };
        self.0
            .iter()
            .any(|r| r == "*" || r.eq_ignore_ascii_case(host) || r.eq_ignore_ascii_case(name))
    }

    pub fn describe(&self) -> String {
        self.0.join(", ")
    }
}

impl OriginRules {
    pub fn allows(&self, origin: &str) -> bool {
        let origin = origin.trim().to_ascii_lowercase();
        self.0.iter().any(|r| {
            if r == "*" || *r == origin {
                return true;
            }
            // "scheme://host:*" accepts the host with any port or none.
            let Some(base) = r.strip_suffix(":*") else {
                return false;
            };
            match origin.strip_prefix(base) {
                Some("") => true,
                Some(rest) => rest
                    .strip_prefix(':')
                    .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())),
                None => false,
            }
        })
    }

    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            "(none)".to_string()
        } else {
            self.0.join(", ")
        }
    }
}

impl Compiler<'_> {
    fn tls(&self, t: &S<raw::RawTls>) -> Result<TlsMaterial, Fail> {
        let raw = t.get_ref();
        let files = TlsFiles {
            cert: self.path(raw.cert.get_ref()),
            key: self.path(raw.key.get_ref()),
            client_ca: raw.client_ca.as_ref().map(|c| self.path(c.get_ref())),
        };
        crate::config::tls::load(&files).map_err(|m| (t.span(), m))
    }

    pub(super) fn listeners(&self, raw: &[S<raw::RawListen>]) -> Result<Vec<Listener>, Fail> {
        let mut out: Vec<Listener> = Vec::new();
        for l in raw {
            let l = l.get_ref();
            let tls = match &l.tls {
                Some(t) => Some(self.tls(t)?),
                None => None,
            };
            let name = l.name.get_ref();
            if out.iter().any(|o| *o.name == **name) {
                return fail(l.name.span(), format!("duplicate listener name {name:?}"));
            }
            let addr: SocketAddr = at(
                &l.addr,
                l.addr.get_ref().parse().map_err(|_| {
                    format!(
                        "bad listen address {:?}; write IP:PORT, e.g. \"127.0.0.1:8001\"",
                        l.addr.get_ref()
                    )
                }),
            )?;
            if addr.port() != 0 && out.iter().any(|o| o.addr == addr) {
                return fail(
                    l.addr.span(),
                    format!("address {addr} is used by two listeners"),
                );
            }
            let loopback = addr.ip().is_loopback();
            let hosts = match &l.allowed_hosts {
                Some(list) => {
                    check_patterns(list)?;
                    HostRules(
                        list.iter()
                            .map(|h| h.get_ref().trim().to_ascii_lowercase())
                            .collect(),
                    )
                }
                None if loopback => HostRules(LOCAL_HOSTS.iter().map(|h| h.to_string()).collect()),
                None => HostRules(vec!["*".to_string()]),
            };
            let origins = match &l.allowed_origins {
                Some(list) => {
                    for o in list {
                        let v = o.get_ref();
                        if v != "*" && v != "null" && !v.contains("://") {
                            return fail(
                                o.span(),
                                format!(
                                    "origin {v:?} must be \"*\" or scheme://host[:port], e.g. \"https://claude.ai\""
                                ),
                            );
                        }
                    }
                    OriginRules(
                        list.iter()
                            .map(|o| {
                                o.get_ref()
                                    .trim()
                                    .trim_end_matches('/')
                                    .to_ascii_lowercase()
                            })
                            .collect(),
                    )
                }
                None if loopback => OriginRules(
                    LOCAL_HOSTS
                        .iter()
                        .flat_map(|h| [format!("http://{h}:*"), format!("https://{h}:*")])
                        .collect(),
                ),
                None => OriginRules(Vec::new()),
            };
            out.push(Listener {
                name: name.as_str().into(),
                addr,
                tls,
                hosts,
                origins,
                table: RouteTable::default(),
                metadata_paths: Vec::new(),
            });
        }
        Ok(out)
    }

    pub(super) fn routes(
        &self,
        raw: &[S<raw::RawRoute>],
        listeners: &mut [Listener],
        profiles: &BTreeMap<String, Arc<Profile>>,
        oauth: Option<&OAuthSettings>,
        sections: &Sections<'_>,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<Arc<Route>>, Fail> {
        let mut out = Vec::new();
        for r in raw {
            let r = r.get_ref();
            let listener = listeners
                .iter_mut()
                .find(|l| *l.name == **r.listen.get_ref())
                .ok_or_else(|| {
                    (
                        r.listen.span(),
                        format!("no listener named {:?}", r.listen.get_ref()),
                    )
                })?;
            let profile = profiles.get(r.profile.get_ref()).ok_or_else(|| {
                (
                    r.profile.span(),
                    format!("no profile named {:?}", r.profile.get_ref()),
                )
            })?;
            let template = r.path.get_ref();
            let segments = at(&r.path, parse_template(template))?;
            let has_token = segments.iter().any(|s| matches!(s, Segment::Token));
            let auth = auth_of(r, has_token)?;
            let auth_span = r.auth.as_ref().map_or(r.path.span(), S::span);
            if auth == Auth::OAuth {
                oauth_route(r, oauth, listener, auth_span.clone())?;
            }
            if auth == Auth::Path && !has_token {
                return fail(
                    auth_span,
                    "auth = \"path\" needs a {token} segment in the path",
                );
            }
            if auth != Auth::Path && has_token {
                return fail(auth_span, "a path with {token} must use auth = \"path\"");
            }
            if auth == Auth::None && !listener.addr.ip().is_loopback() {
                warnings.push(format!(
                    "route {template} on listener {:?} has auth = \"none\" on a non-loopback address {}",
                    listener.name, listener.addr
                ));
            }
            let index = out.len();
            let duplicate = if has_token {
                let dup = listener
                    .table
                    .templated
                    .iter()
                    .any(|(s, _)| same_template(s, &segments));
                listener.table.templated.push((segments, index));
                dup
            } else {
                listener
                    .table
                    .exact
                    .insert(template.clone(), index)
                    .is_some()
            };
            if duplicate {
                return fail(
                    r.path.span(),
                    format!(
                        "listener {:?} already has a route {template}",
                        listener.name
                    ),
                );
            }
            out.push(Arc::new(Route {
                listener: listener.name.to_string(),
                template: template.as_str().into(),
                profile: profile.clone(),
                auth,
                stages: Stages::of(auth.head(), profile, sections),
            }));
        }
        Ok(out)
    }
}

impl Auth {
    /// The stage that checks this kind of credential.
    fn head(self) -> Option<Head> {
        match self {
            Auth::Path | Auth::Bearer => Some(Head::Token),
            Auth::OAuth => Some(Head::OAuth),
            Auth::None => None,
        }
    }
}

/// A route's `auth`: as written, or by its path (`{token}` in it: the path's token).
fn auth_of(r: &raw::RawRoute, has_token: bool) -> Result<Auth, Fail> {
    Ok(match r.auth.as_ref().map(|a| a.get_ref().as_str()) {
        None if has_token => Auth::Path,
        None => Auth::Bearer,
        Some("token") if has_token => Auth::Path,
        Some("token") => Auth::Bearer,
        Some("path") => Auth::Path,
        Some("bearer") => Auth::Bearer,
        Some("oauth") => Auth::OAuth,
        Some("none") => Auth::None,
        Some(other) => {
            return fail(
                r.auth.as_ref().map(S::span).unwrap_or_default(),
                format!(
                    "unknown auth {other:?}; use \"token\", \"path\", \"bearer\", \"oauth\" or \"none\""
                ),
            );
        }
    })
}

/// An `auth = "oauth"` route: an `[oauth]` table, a grant that gives its profile, and its
/// listener serving the protected resource's metadata (RFC 9728) at the paths clients
/// look for it.
fn oauth_route(
    r: &raw::RawRoute,
    oauth: Option<&OAuthSettings>,
    listener: &mut Listener,
    auth_span: std::ops::Range<usize>,
) -> Result<(), Fail> {
    let Some(oauth) = oauth else {
        return fail(auth_span, "auth = \"oauth\" needs an [oauth] table");
    };
    let name = r.profile.get_ref();
    if !oauth
        .grants
        .iter()
        .any(|g| g.profiles.iter().any(|p| **p == **name))
    {
        return fail(
            r.profile.span(),
            format!("no [[oauth.grants]] gives profile {name:?}: no token could use this route"),
        );
    }
    if listener.metadata_paths.is_empty() {
        listener.metadata_paths.push(METADATA_PATH.into());
        if !oauth.resource_path.is_empty() {
            listener
                .metadata_paths
                .push(format!("{METADATA_PATH}{}", oauth.resource_path).into());
        }
    }
    let template = r.path.get_ref();
    let own = format!("{METADATA_PATH}{}", template.trim_end_matches('/'));
    if !listener.metadata_paths.iter().any(|p| **p == *own) {
        listener.metadata_paths.push(own.into());
    }
    Ok(())
}

fn parse_template(path: &str) -> Result<Vec<Segment>, String> {
    if !path.starts_with('/') {
        return Err(format!("route path {path:?} must start with '/'"));
    }
    if path.contains(['?', '#']) {
        return Err(format!("route path {path:?} must not contain '?' or '#'"));
    }
    let mut segments = Vec::new();
    let mut tokens = 0;
    for part in path.split('/') {
        if part == "{token}" {
            tokens += 1;
            segments.push(Segment::Token);
        } else if part.contains(['{', '}']) {
            return Err(format!(
                "route path {path:?}: the only placeholder is a whole {{token}} segment"
            ));
        } else {
            segments.push(Segment::Literal(part.to_string()));
        }
    }
    if tokens > 1 {
        return Err(format!("route path {path:?} has more than one {{token}}"));
    }
    Ok(segments)
}

fn same_template(a: &[Segment], b: &[Segment]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Segment::Token, Segment::Token) => true,
            (Segment::Literal(p), Segment::Literal(q)) => p == q,
            _ => false,
        })
}

/// Warnings about a configuration that serves nothing, or less than it names: no
/// listener, no route, a token without profiles, a profile no route reaches.
pub(super) fn reach_warnings(
    listeners: &[super::Listener],
    routes: &[Arc<Route>],
    profiles: &std::collections::BTreeMap<String, Arc<Profile>>,
    tokens: &super::TokenMap,
    warnings: &mut Vec<String>,
) {
    if listeners.is_empty() {
        warnings.push(
            "no [[listen]]: this configuration serves nothing (docs/configuration.md)".into(),
        );
    } else if routes.is_empty() {
        warnings
            .push("no [[routes]]: every request gets 404 (docs/configuration.md: routes)".into());
    }
    for name in profiles.keys() {
        if !routes.iter().any(|r| *r.profile.name == **name) {
            warnings.push(format!(
                "profile {name:?} is on no route: no request can use it"
            ));
        }
    }
    let mut empty: Vec<&str> = tokens
        .values()
        .filter(|t| t.profiles.is_empty())
        .map(|t| &*t.id)
        .collect();
    empty.sort_unstable();
    for id in empty {
        warnings.push(format!("token {id:?} has no profiles: it opens no route"));
    }
}
