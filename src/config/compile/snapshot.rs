//! The compiled configuration the request path reads: `Snapshot`, and the settings of
//! the sections too small for a file of their own (`[server]`, `[log]`).

use super::audit::AuditSettings;
use super::limits::LimitRules;
use super::profiles::Profile;
use super::routes::{Auth, Listener, Route, Segment};
use super::tokens::{TokenEntry, TokenMap};
use super::upstreams::Upstream;
use crate::config::glob::Matcher;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod describe;

/// Connection hygiene and shutdown (`[server]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    pub shutdown_grace: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_header_size: usize,
    pub max_chunk_overhead: usize,
    /// Whether request fields with `_` in their names reach the upstream.
    pub underscores_in_headers: bool,
    /// Proxies whose account of the client's address is believed (docs/configuration.md).
    pub trusted_proxies: crate::config::proxies::TrustedProxies,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            shutdown_grace: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            max_connections: 4096,
            max_header_size: 64 << 10,
            max_chunk_overhead: 16 << 10,
            underscores_in_headers: false,
            trusted_proxies: Default::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Auto,
    Json,
    Pretty,
    /// The access log in nginx's `combined` format on stdout; other events as JSON.
    Combined,
}

/// `[telemetry]`: where spans go and how many. Fixed at start, like `[log]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// The collector's traces URL (`…/v1/traces`).
    pub otlp: String,
    pub sampling: f64,
    pub service_name: String,
    pub queue: usize,
}

/// The operational log (`[log]`); format and level apply at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: Option<String>,
    pub slow_request: Duration,
}

pub const DEFAULT_SLOW_REQUEST: Duration = Duration::from_secs(1);

/// The result of matching a request path on a listener.
pub struct RouteMatch<'a, 'p> {
    pub route: &'a Arc<Route>,
    /// The `{token}` segment, if the template has one.
    pub path_token: Option<&'p str>,
}

#[derive(Debug)]
pub struct Snapshot {
    pub source: String,
    pub listeners: Vec<Listener>,
    pub routes: Vec<Arc<Route>>,
    pub upstreams: BTreeMap<String, Arc<Upstream>>,
    pub profiles: BTreeMap<String, Arc<Profile>>,
    pub tokens: TokenMap,
    pub hidden: Matcher,
    pub deny_code: i64,
    /// `[[tools.arguments]]`, in the order written.
    pub argument_rules: Vec<super::arguments::ArgumentRule>,
    /// By `Upstream::index`: whether a profile of it has annotation rules.
    pub hinted: Box<[bool]>,
    /// `[tools.deprecated.NAME]`, by name.
    pub deprecated: BTreeMap<Box<str>, super::arguments::Deprecation>,
    pub max_body: u64,
    pub limits: LimitRules,
    pub sse_keepalive: Duration,
    /// `[transport] list_ttl`: the most `ttlMs` a list answer carries (docs/protocol.md).
    pub list_ttl: Duration,
    /// `[transport] input_timeout`: how long a sealed `requestState` opens (docs/protocol.md).
    pub input_timeout: Duration,
    /// `[transport] fanout_timeout`: how long a federated list waits for a member (docs/federation.md).
    pub fanout_timeout: Duration,
    /// The approved definitions of pinned upstreams (docs/pinning.md); empty without `[pins]`
    /// or before the file is first written.
    pub pins: Arc<crate::config::pins::PinBook>,
    /// `[pins] path`.
    pub pins_path: Option<PathBuf>,
    /// The public keys of every upstream `identity` (docs/oauth.md) as a JWKS, and the paths
    /// the MCP listeners serve it at; `None` without identity.
    pub identity_jwks: Option<Arc<IdentityJwks>>,
    pub admin: Option<SocketAddr>,
    pub audit: Option<AuditSettings>,
    /// `[oauth]`, when routes take OAuth access tokens.
    pub oauth: Option<Arc<super::oauth::OAuthSettings>>,
    pub server: ServerSettings,
    pub log: LogSettings,
    /// `[telemetry]` with an `otlp` address: traces are exported.
    pub telemetry: Option<TelemetrySettings>,
    /// The config file and every file it references (secrets, certificates): what the
    /// reload watcher watches.
    pub files: Vec<PathBuf>,
    /// Things `check` should tell the operator that are not errors.
    pub warnings: Vec<String>,
}

impl Snapshot {
    pub fn listener(&self, name: &str) -> Option<&Listener> {
        self.listeners.iter().find(|l| *l.name == *name)
    }

    /// Exact match of `path` against the listener's templates. The query string must
    /// already be removed.
    pub fn match_route<'a, 'p>(
        &'a self,
        listener: usize,
        path: &'p str,
    ) -> Option<RouteMatch<'a, 'p>> {
        let table = &self.listeners.get(listener)?.table;
        if let Some(&i) = table.exact.get(path) {
            return Some(RouteMatch {
                route: &self.routes[i],
                path_token: None,
            });
        }
        // The segments are the texts between slashes, as `path.split('/')` gives them, but
        // taken a byte at a time: a path is a few dozen bytes, and the generic searcher's
        // setup cost more than the search.
        'templates: for (segments, i) in &table.templated {
            let mut token = None;
            let mut rest = path;
            for (n, seg) in segments.iter().enumerate() {
                if n > 0 {
                    match rest.strip_prefix('/') {
                        Some(after) => rest = after,
                        None => continue 'templates,
                    }
                }
                let end = rest.bytes().position(|b| b == b'/').unwrap_or(rest.len());
                let (part, after) = rest.split_at(end);
                rest = after;
                match seg {
                    Segment::Literal(lit) if lit == part => {}
                    Segment::Literal(_) => continue 'templates,
                    Segment::Token if !part.is_empty() => token = Some(part),
                    Segment::Token => continue 'templates,
                }
            }
            // Nothing may follow the last segment (a further slash is a further segment).
            if rest.is_empty() {
                return Some(RouteMatch {
                    route: &self.routes[*i],
                    path_token: token,
                });
            }
        }
        None
    }

    /// Whether a profile of `upstream` judges tools by their annotations (then mcpgate
    /// keeps what the upstream says of its tools).
    pub fn judges_hints(&self, upstream: &super::upstreams::Upstream) -> bool {
        self.hinted.get(upstream.index).copied().unwrap_or(false)
    }

    /// Whether mcpgate reads `upstream`'s lists itself: a profile judges its tools by
    /// annotations, or it is pinned.
    pub fn reads_lists(&self, upstream: &super::upstreams::Upstream) -> bool {
        self.judges_hints(upstream) || upstream.pin != crate::config::pins::PinMode::Off
    }

    /// `tool`'s deprecation, if it has one.
    /// How long a list answered now may be cached (docs/protocol.md): `[transport] list_ttl`, or
    /// less when a sunset comes sooner and will change the list.
    pub fn list_fresh_for(&self, now: std::time::SystemTime) -> Duration {
        self.deprecated
            .values()
            .filter_map(|d| d.sunset.duration_since(now).ok())
            .fold(self.list_ttl, Duration::min)
    }

    pub fn deprecation(&self, tool: &str) -> Option<&super::arguments::Deprecation> {
        if self.deprecated.is_empty() {
            return None;
        }
        self.deprecated.get(tool)
    }

    /// Whether any profile names `tool` in its allow or deny list, so a refusal can say
    /// "not allowed" for names the configuration knows and "unknown" for the rest.
    pub fn knows_tool(&self, tool: &str) -> bool {
        self.profiles
            .values()
            .any(|p| p.allow.matches(tool) || p.deny.matches(tool))
    }
}

/// The JWKS of the upstreams' identity keys, and where the MCP listeners serve it.
#[derive(Debug)]
pub struct IdentityJwks {
    pub json: bytes::Bytes,
    pub paths: Box<[String]>,
}

impl IdentityJwks {
    /// Of `upstreams`' identities, if any has one.
    pub fn of<'a>(
        upstreams: impl Iterator<Item = &'a super::Upstream> + Clone,
    ) -> Option<IdentityJwks> {
        let identities: Vec<&crate::config::identity::Identity> =
            upstreams.filter_map(|u| u.identity.as_deref()).collect();
        if identities.is_empty() {
            return None;
        }
        let json = crate::config::identity::jwks(identities.iter().flat_map(|i| i.keys.iter()));
        let mut paths: Vec<String> = identities
            .iter()
            .filter_map(|i| i.jwks_path.clone())
            .collect();
        paths.sort();
        paths.dedup();
        Some(IdentityJwks {
            json: bytes::Bytes::from(json),
            paths: paths.into(),
        })
    }
}
