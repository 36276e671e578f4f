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

    /// The effective table printed by `mcpgate check`. Holds no secret: token hashes and
    /// upstream header values are left out.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "configuration {} is valid", self.source);
        let _ = writeln!(out, "\nlisteners:");
        for l in &self.listeners {
            let scheme = if l.tls.is_some() { "https" } else { "http" };
            let _ = writeln!(out, "  {:<12} {scheme}://{}", l.name, l.addr);
            if let Some(t) = &l.tls {
                let _ = writeln!(
                    out,
                    "    tls:             cert={} key={}",
                    t.files.cert.display(),
                    t.files.key.display()
                );
                if let Some(ca) = &t.files.client_ca {
                    let _ = writeln!(
                        out,
                        "    client_ca:       {} (client certificates required)",
                        ca.display()
                    );
                }
            }
            let _ = writeln!(out, "    allowed_hosts:   {}", l.hosts.describe());
            let _ = writeln!(out, "    allowed_origins: {}", l.origins.describe());
        }
        let _ = writeln!(out, "\nroutes:");
        for r in &self.routes {
            let auth = match r.auth {
                Auth::Path => "path token",
                Auth::Bearer => "bearer token",
                Auth::OAuth => "oauth",
                Auth::None => "no auth",
            };
            let _ = writeln!(
                out,
                "  {:<12} {:<28} -> profile {:<12} -> upstream {} ({auth})",
                r.listener, r.template, r.profile.name, r.profile.upstream.name
            );
        }
        let _ = writeln!(out, "\nupstreams:");
        for u in self.upstreams.values() {
            let mut names: Vec<&str> = u.headers.keys().map(http::HeaderName::as_str).collect();
            names.dedup();
            let url = match (&*u.endpoints, &u.stdio) {
                (_, Some(c)) => format!("command={}", c.program),
                ([one], None) => one.label.to_string(),
                (_, None) => format!("{} endpoints", u.endpoints.len()),
            };
            let _ = writeln!(
                out,
                "  {:<12} {url} connect_timeout={} timeout={} stream_idle_timeout={} headers=[{}]",
                u.name,
                humantime::format_duration(u.connect_timeout),
                humantime::format_duration(u.timeout),
                humantime::format_duration(u.stream_idle_timeout),
                names.join(", ")
            );
            let _ = writeln!(
                out,
                "    protocol: {}",
                match u.protocol {
                    super::upstreams::Protocol::Auto if u.stdio.is_some() => {
                        "auto (each request's own generation: a process for each)"
                    }
                    super::upstreams::Protocol::Legacy if u.stdio.is_some() => {
                        "legacy (sessions only; 2026-07-28 clients bridged)"
                    }
                    super::upstreams::Protocol::Modern if u.stdio.is_some() => {
                        "modern (2026-07-28; legacy clients bridged)"
                    }
                    super::upstreams::Protocol::Auto => {
                        "auto (probed with server/discover: 2026-07-28 if it answers, else legacy)"
                    }
                    super::upstreams::Protocol::Modern => "modern (2026-07-28)",
                    super::upstreams::Protocol::Legacy => {
                        "legacy (sessions; 2026-07-28 clients bridged)"
                    }
                }
            );
            if let Some(i) = &u.identity {
                let kids: Vec<String> = i
                    .keys
                    .iter()
                    .map(|k| format!("{:?} {}", k.alg, &k.kid[..8]))
                    .collect();
                let _ = writeln!(
                    out,
                    "    identity: jwt iss={} aud={} keys=[{}] (the first signs) jwks_path={}",
                    i.issuer,
                    i.audience,
                    kids.join(", "),
                    i.jwks_path.as_deref().unwrap_or("-")
                );
                if let Some(c) = &u.stdio {
                    let _ = writeln!(
                        out,
                        "      each process is told at its start whom it serves ({}), in {} and in the file {} names (renewed every 30s): not each caller",
                        match c.sessions {
                            super::upstreams::Sharing::PerClient => "the caller that started it",
                            super::upstreams::Sharing::Shared => "anyone: sub=mcpgate",
                        },
                        super::upstreams::IDENTITY_TOKEN_VAR,
                        super::upstreams::IDENTITY_FILE_VAR,
                    );
                }
            }
            if let Some(e) = &u.exchange {
                let _ = writeln!(
                    out,
                    "    identity: exchange ({}) at the [oauth] issuer, audience={} client_id={}{}{}",
                    match e.grant {
                        crate::config::identity::Grant::TokenExchange => "RFC 8693",
                        crate::config::identity::Grant::OnBehalfOf => "on-behalf-of",
                    },
                    e.audience,
                    e.client_id,
                    e.resource
                        .as_deref()
                        .map_or(String::new(), |r| format!(" resource={r}")),
                    e.scope
                        .as_deref()
                        .map_or(String::new(), |s| format!(" scope={s:?}"))
                );
            }
            if u.pin != crate::config::pins::PinMode::Off {
                let approved = self.pins.of_upstream(&u.name).count();
                let _ = writeln!(
                    out,
                    "    pin: {} ({approved} definitions approved in {})",
                    u.pin.name(),
                    self.pins_path
                        .as_ref()
                        .map_or("(no pins file)".into(), |p| p.display().to_string())
                );
            }
            if let Some(c) = &u.stdio {
                let mut names: Vec<&str> = c.env.iter().map(|(k, _)| k.as_str()).collect();
                names.sort_unstable();
                let _ = writeln!(
                    out,
                    "    stdio: args={:?} cwd={} sessions={} max_processes={} idle_timeout={} env=[{}]",
                    c.args,
                    c.cwd.display(),
                    match c.sessions {
                        super::upstreams::Sharing::PerClient => "per_client",
                        super::upstreams::Sharing::Shared => "shared",
                    },
                    c.max_processes,
                    humantime::format_duration(c.idle_timeout),
                    names.join(", ")
                );
            }
            if u.endpoints.len() > 1 {
                for e in &u.endpoints {
                    let _ = writeln!(out, "    endpoint: {}", e.label);
                }
                let _ = writeln!(
                    out,
                    "    balance: {}",
                    match u.balance {
                        super::upstreams::Balance::LeastRequests => "least_requests",
                        super::upstreams::Balance::RoundRobin => "round_robin",
                    }
                );
            }
            if let Some(h) = &u.health {
                let _ = writeln!(
                    out,
                    "    health: ping every {} (timeout {}), unhealthy after {}, healthy after {}",
                    humantime::format_duration(h.interval),
                    humantime::format_duration(h.timeout),
                    h.unhealthy_after,
                    h.healthy_after
                );
            }
            if let Some(o) = &u.outlier {
                let _ = writeln!(
                    out,
                    "    outlier: eject for {} after {} failures in a row",
                    humantime::format_duration(o.eject_for),
                    o.consecutive_failures
                );
            }
            if !u.session_keys.is_empty() {
                let _ = writeln!(
                    out,
                    "    sessions: sealed ({} key{})",
                    u.session_keys.len(),
                    if u.session_keys.len() == 1 { "" } else { "s" }
                );
            }
            // The TLS settings are one table for all of an upstream's https endpoints.
            if let Some(tls) = u.endpoints.iter().find_map(|e| e.tls.as_ref()) {
                let _ = writeln!(
                    out,
                    "    tls: server_name={} roots=mozilla{} client_cert={}",
                    tls.server_name.to_str(),
                    if tls.extra_ca { "+ca" } else { "" },
                    if tls.client_cert { "yes" } else { "no" },
                );
            }
        }
        let _ = writeln!(out, "\nprofiles:");
        for p in self.profiles.values() {
            match &p.federation {
                None => {
                    let _ = writeln!(out, "  {:<12} upstream={}", p.name, p.upstream.name);
                }
                Some(f) => {
                    let members: Vec<&str> = f.members.iter().map(|m| &*m.name).collect();
                    let prefix = match f.prefix {
                        crate::config::federation::Prefix::Always => "always",
                        crate::config::federation::Prefix::OnConflict => "on_conflict",
                        crate::config::federation::Prefix::Never => "never",
                    };
                    let _ = writeln!(
                        out,
                        "  {:<12} upstreams=[{}] prefix={prefix} separator={} (names: mcpgate check --probe)",
                        p.name,
                        members.join(", "),
                        f.separator
                    );
                }
            }
            let _ = writeln!(out, "    allow:   {}", p.allow.patterns().join(", "));
            if !p.deny.is_empty() {
                let _ = writeln!(out, "    deny:    {}", p.deny.patterns().join(", "));
            }
            if let Some(m) = &p.methods {
                let _ = writeln!(out, "    methods: {}", m.patterns().join(", "));
            }
            for (what, hints) in [
                ("allow_annotations", &p.allow_annotations),
                ("deny_annotations", &p.deny_annotations),
            ] {
                if !hints.is_empty() {
                    let list: Vec<String> =
                        hints.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    let _ = writeln!(out, "    {what}: {}", list.join(", "));
                }
            }
            for r in &p.approvals {
                let mut what = Vec::new();
                if let Some(t) = &r.tools {
                    what.push(format!("tools {}", t.patterns().join(", ")));
                }
                if !r.annotations.is_empty() {
                    let list: Vec<String> = r
                        .annotations
                        .iter()
                        .map(|(k, v)| format!("{k} = {v}"))
                        .collect();
                    what.push(format!("annotations {}", list.join(", ")));
                }
                let _ = writeln!(
                    out,
                    "    approval #{}: {}; approver={} timeout={}",
                    r.number,
                    what.join("; "),
                    r.approver.as_str(),
                    humantime::format_duration(r.timeout)
                );
            }
            for (what, rules) in [("resources", &p.resources), ("prompts", &p.prompts)] {
                let Some(r) = rules else { continue };
                let deny = if r.deny.is_empty() {
                    String::new()
                } else {
                    format!("; deny {}", r.deny.patterns().join(", "))
                };
                let _ = writeln!(
                    out,
                    "    {what}: allow {}{deny}",
                    r.allow.patterns().join(", ")
                );
            }
        }
        let _ = writeln!(out, "\ntokens:");
        let mut tokens: Vec<&TokenEntry> = self.tokens.values().collect();
        tokens.sort_by(|a, b| a.id.cmp(&b.id));
        for t in tokens {
            let when = |t: Option<SystemTime>| {
                t.map_or("-".to_string(), |t| {
                    humantime::format_rfc3339_seconds(t).to_string()
                })
            };
            let _ = writeln!(
                out,
                "  {:<16} profiles=[{}] not_before={} not_after={}",
                t.id,
                t.profiles.join(", "),
                when(t.not_before),
                when(t.not_after)
            );
        }
        if let Some(o) = &self.oauth {
            describe_oauth(&mut out, o);
        }
        let _ = writeln!(out, "\ntools:");
        let _ = writeln!(out, "  hidden:    {}", self.hidden.patterns().join(", "));
        let _ = writeln!(out, "  deny_code: {}", self.deny_code);
        for (name, d) in &self.deprecated {
            let _ = writeln!(
                out,
                "  deprecated: {name} -> {} (listed and marked until {}, hidden from then){}",
                d.replacement,
                d.sunset_text,
                if d.gone(SystemTime::now()) {
                    ": gone now"
                } else {
                    ""
                }
            );
        }
        for r in &self.argument_rules {
            let allow = r.allow.as_ref().map_or(String::new(), |a| {
                format!(" allow [{}]", a.patterns().join(", "))
            });
            let deny = if r.deny.is_empty() {
                String::new()
            } else {
                format!(" deny [{}]", r.deny.patterns().join(", "))
            };
            let _ = writeln!(
                out,
                "  arguments: {} {}{allow}{deny}",
                r.tool.patterns().join(", "),
                r.pointer
            );
        }
        let _ = writeln!(out, "\nlimits:");
        let _ = writeln!(out, "  max_body:  {} bytes", self.max_body);
        let _ = writeln!(out, "  max_json_depth: {}", self.limits.max_json_depth);
        for r in &self.limits.rate {
            let tools = r.tools.as_ref().map_or(String::new(), |t| {
                format!(" tools=[{}]", t.patterns().join(", "))
            });
            let on = if r.auth_failure {
                " on=auth_failure"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  rate:      key={} {} burst={}{tools}{on}",
                r.key.name(),
                r.rate_text,
                r.quota.burst_size()
            );
        }
        if let Some(st) = &self.limits.store {
            let _ = writeln!(
                out,
                "  store:     {} timeout={} on_error={} prefix={:?}{}",
                st.url,
                humantime::format_duration(st.timeout),
                st.on_error.name(),
                st.prefix,
                if st.password.is_some() {
                    " password=<set>"
                } else {
                    ""
                }
            );
            let _ = writeln!(
                out,
                "             rate rules above are shared by every replica; client_ip on=auth_failure and concurrency stay per replica"
            );
        }
        for c in &self.limits.concurrency {
            let _ = writeln!(
                out,
                "  concurrency: tools=[{}] max_in_flight={}",
                c.tools.patterns().join(", "),
                c.max
            );
        }
        for (_, name, d) in &self.limits.timeouts {
            let _ = writeln!(
                out,
                "  timeout:   {name} = {}",
                humantime::format_duration(*d)
            );
        }
        if let Some(a) = &self.audit {
            let _ = writeln!(out, "\naudit:");
            let _ = writeln!(out, "  path:    {}", a.path.display());
            let _ = writeln!(out, "  durable: {}", a.durable.join(", "));
            let _ = writeln!(out, "  redact:  {}", a.redact.join(", "));
            let rotate = a.max_size.map_or("on SIGUSR1 only".to_string(), |m| {
                format!("at {m} bytes, keep {}", a.keep)
            });
            let _ = writeln!(out, "  rotate:  {rotate}");
        }
        let _ = writeln!(out, "\nadmin:");
        match self.admin {
            Some(a) => {
                let _ = writeln!(
                    out,
                    "  http://{a}  / (status page) /status /healthz /readyz /metrics, POST /reload"
                );
            }
            None => {
                let _ = writeln!(out, "  (none)");
            }
        }
        if let Some(t) = &self.telemetry {
            let _ = writeln!(out, "\ntelemetry:");
            let _ = writeln!(
                out,
                "  traces to {} (OTLP/HTTP), sampling {}, service.name {}, queue {}",
                t.otlp, t.sampling, t.service_name, t.queue
            );
        }
        let sv = &self.server;
        let _ = writeln!(out, "\nserver:");
        let _ = writeln!(
            out,
            "  shutdown_grace={} header_read_timeout={} idle_timeout={} max_connections={} max_header_size={} max_chunk_overhead={} underscores_in_headers={}",
            humantime::format_duration(sv.shutdown_grace),
            humantime::format_duration(sv.header_read_timeout),
            humantime::format_duration(sv.idle_timeout),
            sv.max_connections,
            sv.max_header_size,
            sv.max_chunk_overhead,
            sv.underscores_in_headers
        );
        if !sv.trusted_proxies.nets.is_empty() {
            let _ = writeln!(
                out,
                "  trusted_proxies={} client address from {}",
                sv.trusted_proxies
                    .nets
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                sv.trusted_proxies.header.describe()
            );
        }
        let _ = writeln!(out, "\ntransport:");
        let _ = writeln!(
            out,
            "  sse_keepalive: {}",
            humantime::format_duration(self.sse_keepalive)
        );
        let _ = writeln!(
            out,
            "  list_ttl: {}",
            humantime::format_duration(self.list_ttl)
        );
        let _ = writeln!(
            out,
            "  input_timeout: {}",
            humantime::format_duration(self.input_timeout)
        );
        let _ = writeln!(
            out,
            "  fanout_timeout: {}",
            humantime::format_duration(self.fanout_timeout)
        );
        for w in &self.warnings {
            let _ = writeln!(out, "\nwarning: {w}");
        }
        out
    }
}

/// `[oauth]` for `mcpgate check`: the issuer and resource, and the grants table in the
/// order it is matched. The introspection secret is not shown.
fn describe_oauth(out: &mut String, o: &super::oauth::OAuthSettings) {
    let _ = writeln!(out, "\noauth:");
    let _ = writeln!(out, "  issuer:     {}", o.issuer);
    let _ = writeln!(out, "  resource:   {}", o.resource);
    if o.audiences.len() > 1 {
        let _ = writeln!(out, "  audiences:  {}", o.audiences.join(", "));
    }
    let _ = writeln!(out, "  metadata:   {}", o.metadata_url(&o.resource_path));
    let algorithms: Vec<String> = o.algorithms.iter().map(|a| format!("{a:?}")).collect();
    let _ = writeln!(
        out,
        "  algorithms: {} (leeway {})",
        algorithms.join(", "),
        humantime::format_duration(o.leeway)
    );
    if let Some(i) = &o.introspection {
        let url = i
            .url
            .as_ref()
            .map_or("the issuer's introspection_endpoint".to_string(), |u| {
                u.uri.to_string()
            });
        let _ = writeln!(out, "  introspection: {url} as client {}", i.client_id);
    }
    let _ = writeln!(out, "  grants (first match wins):");
    for (n, g) in o.grants.iter().enumerate() {
        let mut when = Vec::new();
        if !g.scopes.is_empty() {
            when.push(format!("scope {}", g.scopes.join(" ")));
        }
        if let Some((claim, value)) = &g.claim {
            when.push(format!("claim {claim} = {value:?}"));
        }
        let profiles: Vec<&str> = g.profiles.iter().map(|p| &**p).collect();
        let _ = writeln!(
            out,
            "    {}. {:<40} -> profiles [{}]",
            n + 1,
            when.join(" and "),
            profiles.join(", ")
        );
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
