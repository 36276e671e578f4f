//! Validation and compilation of a `RawConfig` into a `Snapshot`: every reference resolved
//! (listener, upstream, profile names), every secret read, routes indexed for lookup,
//! tokens in a map keyed by their 32-byte hash, patterns compiled. A `Snapshot` is never
//! changed after it is built; the request path only reads it. Errors carry the position
//! of the offending value so `mcpgate check` can print `FILE:LINE:COL: message`.

use super::glob::Matcher;
use super::raw::{self, RawConfig, S};
use super::units::{parse_duration, parse_size, parse_time, resolve_secrets_noting};
use crate::http::tls::{TlsFiles, TlsMaterial};
use crate::pipeline::limits::{self, ConcurrencyRule, KeyKind, Limits, RateRule};
use crate::upstream::pool::Pool;
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use std::collections::{BTreeMap, HashMap};
use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

pub const DEFAULT_MAX_BODY: u64 = 1 << 20;
pub const DEFAULT_DENY_CODE: i64 = -32602;
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
pub const DEFAULT_SSE_KEEPALIVE: Duration = Duration::from_secs(15);
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:9901";

/// Connection hygiene and shutdown (`[server]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    pub shutdown_grace: Duration,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_header_size: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            shutdown_grace: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            max_connections: 4096,
            max_header_size: 64 << 10,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Auto,
    Json,
    Pretty,
}

/// The operational log (`[log]`); format and level apply at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    pub format: LogFormat,
    pub level: Option<String>,
    pub slow_request: Duration,
}

pub const DEFAULT_SLOW_REQUEST: Duration = Duration::from_secs(1);

/// A configuration error with its position in the file, when there is one.
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub file: String,
    pub position: Option<(usize, usize)>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            Some((line, col)) => write!(f, "{}:{}:{}: {}", self.file, line, col, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

pub struct Upstream {
    pub name: Arc<str>,
    pub url: Uri,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub stream_idle_timeout: Duration,
    /// Configured headers with secrets resolved. Never printed.
    pub headers: HeaderMap,
    /// The `Host` header the upstream is sent: its URL's host, and port unless 80.
    pub host: HeaderValue,
    /// One connection pool per worker (see `workers::slot`), made on first use, so an
    /// upstream connection is only ever driven by the worker whose requests use it.
    pools: Box<[OnceLock<Arc<Pool>>]>,
}

impl Upstream {
    /// This thread's pool of keep-alive connections to the upstream.
    pub fn pool(&self) -> &Arc<Pool> {
        let slot = crate::runtime::workers::slot() % self.pools.len();
        self.pools[slot].get_or_init(|| {
            let host = self.url.host().unwrap_or_default();
            // A bracketed IPv6 literal is looked up without its brackets.
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Pool::new(
                host,
                self.url.port_u16().unwrap_or(80),
                self.connect_timeout,
            )
        })
    }
}

/// `Host` for an upstream URL: the host as written, with the port unless it is 80.
fn host_header(url: &Uri) -> HeaderValue {
    let host = url.host().unwrap_or_default();
    let text = match url.port_u16() {
        Some(port) if port != 80 => format!("{host}:{port}"),
        _ => host.to_string(),
    };
    HeaderValue::from_str(&text).expect("a URI's host and port make a valid header value")
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("headers", &"<redacted>")
            .finish()
    }
}

#[derive(Debug)]
pub struct Profile {
    pub name: Arc<str>,
    pub upstream: Arc<Upstream>,
    pub allow: Matcher,
    pub deny: Matcher,
    /// `None`: every method may be sent.
    pub methods: Option<Matcher>,
}

impl Profile {
    /// Whether this profile may call `tool`, before the global hidden list.
    pub fn allows_tool(&self, tool: &str) -> bool {
        self.allow.matches(tool) && !self.deny.matches(tool)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// The token is the `{token}` segment of the path; a bad one answers 404.
    Path,
    /// `Authorization: Bearer <token>`; a bad one answers 401.
    Bearer,
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
}

#[derive(Debug)]
enum Segment {
    Literal(String),
    Token,
}

#[derive(Debug, Default)]
struct RouteTable {
    exact: HashMap<String, usize>,
    templated: Vec<(Vec<Segment>, usize)>,
}

#[derive(Debug)]
pub struct Listener {
    pub name: Arc<str>,
    pub addr: SocketAddr,
    pub tls: Option<TlsMaterial>,
    pub hosts: HostRules,
    pub origins: OriginRules,
    table: RouteTable,
}

/// Accepted `Host` values (DNS-rebinding defence).
#[derive(Debug, Clone)]
pub struct HostRules(Vec<String>);

/// Accepted `Origin` values (DNS-rebinding and cross-site defence).
#[derive(Debug, Clone)]
pub struct OriginRules(Vec<String>);

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

/// A registered token. The token itself is never stored, only its hash (the map key).
pub struct TokenEntry {
    pub id: Arc<str>,
    pub profiles: Vec<String>,
    pub not_before: Option<SystemTime>,
    pub not_after: Option<SystemTime>,
}

impl fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenEntry")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl TokenEntry {
    pub fn valid_at(&self, now: SystemTime) -> bool {
        self.not_before.is_none_or(|t| now >= t) && self.not_after.is_none_or(|t| now < t)
    }

    /// [`TokenEntry::valid_at`] the time `now` gives, which is asked only of a token with
    /// a validity window: most have none, and a clock read costs more than the rest of
    /// the check.
    pub fn valid_when(&self, now: impl FnOnce() -> SystemTime) -> bool {
        (self.not_before.is_none() && self.not_after.is_none()) || self.valid_at(now())
    }
}

/// Tokens by the SHA-256 of the token. The key is a digest already, so the map's hash is
/// its four words folded together and mixed once ([`DigestHasher`]) instead of SipHash
/// over all 32 bytes, which cost a few hundred instructions per request. Clients only look
/// keys up; the keys are the configuration's. Those are meant to be SHA-256 outputs, but
/// nothing makes them so (the benchmark registers 10,000 hashes that are small numbers),
/// so every byte counts: a hash of the first eight bytes alone put all of those in one
/// bucket and made the reload quadratic (212 ms).
pub type TokenMap = HashMap<[u8; 32], TokenEntry, std::hash::BuildHasherDefault<DigestHasher>>;

/// The hasher of [`TokenMap`]: the key's 64-bit words XORed, then one folded multiply, so
/// that both the low bits (the bucket) and the high bits (the tag) of the hash depend on
/// every bit of every word.
#[derive(Default)]
pub struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn write(&mut self, bytes: &[u8]) {
        // An array is hashed as its length, then its bytes: only the bytes count here.
        for word in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..word.len()].copy_from_slice(word);
            self.0 ^= u64::from_le_bytes(w);
        }
    }

    fn write_usize(&mut self, _length: usize) {}

    fn finish(&self) -> u64 {
        // The full 128-bit product, folded: its high half brings the word's high bits
        // down to the low ones, its low half the low bits up.
        let m = u128::from(self.0) * 0x9e37_79b9_7f4a_7c15;
        (m as u64) ^ ((m >> 64) as u64)
    }
}

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
    pub max_body: u64,
    pub limits: Limits,
    pub sse_keepalive: Duration,
    pub admin: Option<SocketAddr>,
    pub audit: Option<crate::observe::audit::AuditSettings>,
    pub server: ServerSettings,
    pub log: LogSettings,
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
            let mut names: Vec<&str> = u.headers.keys().map(HeaderName::as_str).collect();
            names.dedup();
            let _ = writeln!(
                out,
                "  {:<12} {} connect_timeout={} timeout={} stream_idle_timeout={} headers=[{}]",
                u.name,
                u.url,
                humantime::format_duration(u.connect_timeout),
                humantime::format_duration(u.timeout),
                humantime::format_duration(u.stream_idle_timeout),
                names.join(", ")
            );
        }
        let _ = writeln!(out, "\nprofiles:");
        for p in self.profiles.values() {
            let _ = writeln!(out, "  {:<12} upstream={}", p.name, p.upstream.name);
            let _ = writeln!(out, "    allow:   {}", p.allow.patterns().join(", "));
            if !p.deny.is_empty() {
                let _ = writeln!(out, "    deny:    {}", p.deny.patterns().join(", "));
            }
            if let Some(m) = &p.methods {
                let _ = writeln!(out, "    methods: {}", m.patterns().join(", "));
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
        let _ = writeln!(out, "\ntools:");
        let _ = writeln!(out, "  hidden:    {}", self.hidden.patterns().join(", "));
        let _ = writeln!(out, "  deny_code: {}", self.deny_code);
        let _ = writeln!(out, "\nlimits:");
        let _ = writeln!(out, "  max_body:  {} bytes", self.max_body);
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
                r.burst
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
                let _ = writeln!(out, "  http://{a}  /healthz /readyz /metrics, POST /reload");
            }
            None => {
                let _ = writeln!(out, "  (none)");
            }
        }
        let sv = &self.server;
        let _ = writeln!(out, "\nserver:");
        let _ = writeln!(
            out,
            "  shutdown_grace={} header_read_timeout={} idle_timeout={} max_connections={} max_header_size={}",
            humantime::format_duration(sv.shutdown_grace),
            humantime::format_duration(sv.header_read_timeout),
            humantime::format_duration(sv.idle_timeout),
            sv.max_connections,
            sv.max_header_size
        );
        let _ = writeln!(out, "\ntransport:");
        let _ = writeln!(
            out,
            "  sse_keepalive: {}",
            humantime::format_duration(self.sse_keepalive)
        );
        for w in &self.warnings {
            let _ = writeln!(out, "\nwarning: {w}");
        }
        out
    }
}

/// Reads and compiles the file at `path`.
pub fn load(path: &Path) -> Result<Snapshot, ConfigError> {
    load_after(path, None)
}

/// `load` for a reload: rate-limit and concurrency rules unchanged from `previous` keep
/// their state (counters, calls in flight).
pub fn load_after(path: &Path, previous: Option<&Snapshot>) -> Result<Snapshot, ConfigError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: file.clone(),
        position: None,
        message: format!("cannot read configuration: {e}"),
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut snapshot = compile_text(&text, &file, &base, previous)?;
    snapshot.files.insert(0, path.to_path_buf());
    Ok(snapshot)
}

/// Compiles configuration text; `file` names it in errors. Relative paths in it are taken
/// from the current folder.
pub fn load_str(text: &str, file: &str) -> Result<Snapshot, ConfigError> {
    compile_text(text, file, Path::new(""), None)
}

fn compile_text(
    text: &str,
    file: &str,
    base: &Path,
    previous: Option<&Snapshot>,
) -> Result<Snapshot, ConfigError> {
    let located = |span: Option<Range<usize>>, message: String| ConfigError {
        file: file.to_string(),
        position: span.map(|s| line_col(text, s.start)),
        message,
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        let message = e.message().trim_end().replace('\n', " ");
        located(e.span(), message)
    })?;
    Compiler {
        source: file,
        base,
        previous,
        files: std::cell::RefCell::new(Vec::new()),
    }
    .compile(raw)
    .map_err(|(span, message)| located(Some(span), message))
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

type Fail = (Range<usize>, String);

fn fail<T>(span: Range<usize>, message: impl Into<String>) -> Result<T, Fail> {
    Err((span, message.into()))
}

/// Wraps a value-parsing error with the span of the value.
fn at<T, U>(v: &S<T>, r: Result<U, String>) -> Result<U, Fail> {
    r.map_err(|m| (v.span(), m))
}

struct Compiler<'a> {
    source: &'a str,
    /// Relative file paths in the config are taken from here (the config's folder).
    base: &'a Path,
    previous: Option<&'a Snapshot>,
    files: std::cell::RefCell<Vec<PathBuf>>,
}

impl Compiler<'_> {
    fn compile(&self, raw: RawConfig) -> Result<Snapshot, Fail> {
        let mut warnings = Vec::new();

        let listeners = self.listeners(&raw.listen)?;
        let upstreams = self.upstreams(&raw.upstreams)?;
        let profiles = self.profiles(&raw.profiles, &upstreams, &mut warnings)?;

        let (hidden, deny_code) = match &raw.tools {
            Some(t) => {
                let t = t.get_ref();
                check_patterns(&t.hidden)?;
                let hidden = Matcher::new(t.hidden.iter().map(|s| s.get_ref().as_str()));
                (
                    hidden,
                    t.deny_code
                        .as_ref()
                        .map_or(DEFAULT_DENY_CODE, |c| *c.get_ref()),
                )
            }
            None => (Matcher::default(), DEFAULT_DENY_CODE),
        };

        let (max_body, limits) = match &raw.limits {
            Some(l) => {
                let l = l.get_ref();
                let max_body = match &l.max_body {
                    Some(v) => at(v, parse_size(v.get_ref()))?,
                    None => DEFAULT_MAX_BODY,
                };
                (max_body, self.limits(l)?)
            }
            None => (DEFAULT_MAX_BODY, Limits::default()),
        };

        let sse_keepalive = match raw
            .transport
            .as_ref()
            .and_then(|t| t.get_ref().sse_keepalive.as_ref())
        {
            Some(v) => at(v, parse_duration(v.get_ref()))?,
            None => DEFAULT_SSE_KEEPALIVE,
        };
        let admin = match &raw.admin {
            Some(a) => {
                let addr: SocketAddr = match &a.get_ref().addr {
                    Some(v) => at(
                        v,
                        v.get_ref().parse().map_err(|_| {
                            format!("bad admin address {:?}; write IP:PORT", v.get_ref())
                        }),
                    )?,
                    None => DEFAULT_ADMIN_ADDR.parse().expect("a valid default"),
                };
                if !addr.ip().is_loopback() {
                    warnings.push(format!("the admin listener {addr} is not on a loopback address: /reload and /metrics are reachable from the network"));
                }
                Some(addr)
            }
            None => None,
        };
        let server = match &raw.server {
            Some(sv) => self.server(sv.get_ref())?,
            None => ServerSettings::default(),
        };
        if server.idle_timeout <= sse_keepalive {
            warnings.push("server.idle_timeout is not longer than transport.sse_keepalive: quiet SSE streams will be cut".into());
        }
        for u in upstreams.values() {
            if server.idle_timeout <= u.timeout {
                warnings.push(format!(
                    "server.idle_timeout is not longer than upstream {:?} timeout: a slow JSON answer may be cut as idle",
                    u.name
                ));
            }
        }
        let log = match &raw.log {
            Some(l) => {
                let l = l.get_ref();
                let format = match l.format.as_ref().map(|f| (f, f.get_ref().as_str())) {
                    None | Some((_, "auto")) => LogFormat::Auto,
                    Some((_, "json")) => LogFormat::Json,
                    Some((_, "pretty")) => LogFormat::Pretty,
                    Some((f, other)) => {
                        return fail(
                            f.span(),
                            format!(
                                "unknown log format {other:?}; use \"auto\", \"json\" or \"pretty\""
                            ),
                        );
                    }
                };
                let level = match &l.level {
                    Some(v) => {
                        at(
                            v,
                            tracing_subscriber::EnvFilter::try_new(v.get_ref())
                                .map(|_| ())
                                .map_err(|e| format!("bad log level: {e}")),
                        )?;
                        Some(v.get_ref().clone())
                    }
                    None => None,
                };
                let slow_request = match &l.slow_request {
                    Some(v) => at(v, parse_duration(v.get_ref()))?,
                    None => DEFAULT_SLOW_REQUEST,
                };
                LogSettings {
                    format,
                    level,
                    slow_request,
                }
            }
            None => LogSettings {
                format: LogFormat::Auto,
                level: None,
                slow_request: DEFAULT_SLOW_REQUEST,
            },
        };
        let audit = match &raw.audit {
            Some(a) => Some(self.audit(a.get_ref())?),
            None => None,
        };

        let mut listeners = listeners;
        let routes = self.routes(&raw.routes, &mut listeners, &profiles, &mut warnings)?;
        let tokens = self.tokens(&raw.tokens, &profiles)?;

        Ok(Snapshot {
            source: self.source.to_string(),
            listeners,
            routes,
            upstreams,
            profiles,
            tokens,
            hidden,
            deny_code,
            max_body,
            limits,
            sse_keepalive,
            admin,
            audit,
            server,
            log,
            files: self.files.take(),
            warnings,
        })
    }

    fn limits(&self, l: &raw::RawLimits) -> Result<Limits, Fail> {
        let old = self.previous.map(|p| &p.limits);
        let mut out = Limits::default();
        for r in &l.rate {
            let span = r.span();
            let r = r.get_ref();
            let key = match r.key.get_ref().as_str() {
                "token" => KeyKind::Token,
                "profile" => KeyKind::Profile,
                "token+tool" => KeyKind::TokenTool,
                "global" => KeyKind::Global,
                "client_ip" => KeyKind::ClientIp,
                other => {
                    return fail(
                        r.key.span(),
                        format!(
                            "unknown rate key {other:?}; use token, profile, token+tool, global or client_ip"
                        ),
                    );
                }
            };
            let auth_failure = match r.on.as_ref().map(|o| (o, o.get_ref().as_str())) {
                None => false,
                Some((_, "auth_failure")) if key == KeyKind::ClientIp && r.tools.is_none() => true,
                Some((o, "auth_failure")) => {
                    return fail(
                        o.span(),
                        "on = \"auth_failure\" needs key = \"client_ip\" and no tools",
                    );
                }
                Some((o, other)) => {
                    return fail(
                        o.span(),
                        format!("unknown on = {other:?}; the only one is \"auth_failure\""),
                    );
                }
            };
            let quota = at(
                &r.rate,
                limits::parse_rate(r.rate.get_ref(), r.burst.as_ref().map(|b| *b.get_ref())),
            )?;
            let tools = match &r.tools {
                Some(t) => {
                    check_patterns(t)?;
                    Some(Matcher::new(t.iter().map(|s| s.get_ref().as_str())))
                }
                None => None,
            };
            let signature = format!(
                "{}|{}|{}|{}|{}",
                key.name(),
                r.rate.get_ref(),
                quota.burst_size(),
                tools
                    .as_ref()
                    .map(|t| t.patterns().join(","))
                    .unwrap_or_default(),
                auth_failure
            );
            let _ = span;
            let reused =
                old.and_then(|o| o.rate.iter().find(|x| x.signature == signature).cloned());
            out.rate.push(reused.unwrap_or_else(|| {
                Arc::new(RateRule::new(
                    signature,
                    key,
                    tools,
                    auth_failure,
                    quota,
                    r.rate.get_ref().clone(),
                ))
            }));
        }
        for c in &l.concurrency {
            let c = c.get_ref();
            check_patterns(&c.tools)?;
            if c.tools.is_empty() {
                return fail(
                    c.max_in_flight.span(),
                    "concurrency needs at least one tool",
                );
            }
            let max = *c.max_in_flight.get_ref();
            if max == 0 {
                return fail(c.max_in_flight.span(), "max_in_flight must be at least 1");
            }
            let tools = Matcher::new(c.tools.iter().map(|s| s.get_ref().as_str()));
            let signature = format!("{}|{max}", tools.patterns().join(","));
            let reused = old.and_then(|o| {
                o.concurrency
                    .iter()
                    .find(|x| x.signature == signature)
                    .cloned()
            });
            out.concurrency.push(
                reused.unwrap_or_else(|| Arc::new(ConcurrencyRule::new(signature, tools, max))),
            );
        }
        if let Some(t) = &l.timeouts {
            let mut exact = Vec::new();
            let mut globs = Vec::new();
            for (name, value) in t.get_ref() {
                let Some(text) = value.as_str() else {
                    return fail(
                        t.span(),
                        format!("timeouts.{name} must be a duration string like \"10s\""),
                    );
                };
                let d = parse_duration(text)
                    .map_err(|m| (t.span(), format!("timeouts.{name}: {m}")))?;
                let entry = (Matcher::new([name.as_str()]), name.clone(), d);
                if name.contains('*') {
                    globs.push(entry)
                } else {
                    exact.push(entry)
                }
            }
            out.timeouts = exact.into_iter().chain(globs).collect();
        }
        Ok(out)
    }

    fn audit(&self, a: &raw::RawAudit) -> Result<crate::observe::audit::AuditSettings, Fail> {
        check_patterns(&a.durable)?;
        check_patterns(&a.redact)?;
        let max_size = a
            .max_size
            .as_ref()
            .map(|v| at(v, parse_size(v.get_ref())))
            .transpose()?;
        let keep = a.keep.as_ref().map_or(5, |k| *k.get_ref());
        let queue = a.queue.as_ref().map_or(8192, |q| *q.get_ref());
        if let Some(q) = a.queue.as_ref().filter(|q| *q.get_ref() == 0) {
            return fail(q.span(), "queue must be at least 1");
        }
        Ok(crate::observe::audit::AuditSettings {
            // Not added to the watched files: the audit file changes with every record.
            path: self.base.join(a.path.get_ref()),
            durable: a.durable.iter().map(|d| d.get_ref().clone()).collect(),
            redact: a.redact.iter().map(|d| d.get_ref().clone()).collect(),
            max_size,
            keep,
            queue: queue as usize,
        })
    }

    fn path(&self, p: &str) -> PathBuf {
        let path = self.base.join(p);
        self.files.borrow_mut().push(path.clone());
        path
    }

    fn tls(&self, t: &S<raw::RawTls>) -> Result<TlsMaterial, Fail> {
        let raw = t.get_ref();
        let files = TlsFiles {
            cert: self.path(raw.cert.get_ref()),
            key: self.path(raw.key.get_ref()),
            client_ca: raw.client_ca.as_ref().map(|c| self.path(c.get_ref())),
        };
        crate::http::tls::load(&files).map_err(|m| (t.span(), m))
    }

    fn server(&self, sv: &raw::RawServer) -> Result<ServerSettings, Fail> {
        let d = ServerSettings::default();
        let duration = |v: &Option<S<String>>, default| match v {
            Some(v) => at(v, parse_duration(v.get_ref())),
            None => Ok(default),
        };
        let max_connections = match &sv.max_connections {
            Some(v) if *v.get_ref() == 0 => {
                return fail(v.span(), "max_connections must be at least 1");
            }
            Some(v) => *v.get_ref() as usize,
            None => d.max_connections,
        };
        let max_header_size = match &sv.max_header_size {
            Some(v) => {
                let n = at(v, parse_size(v.get_ref()))?;
                if !(8192..=16 << 20).contains(&n) {
                    return fail(v.span(), "max_header_size must be between 8KiB and 16MiB");
                }
                n as usize
            }
            None => d.max_header_size,
        };
        Ok(ServerSettings {
            shutdown_grace: duration(&sv.shutdown_grace, d.shutdown_grace)?,
            header_read_timeout: duration(&sv.header_read_timeout, d.header_read_timeout)?,
            idle_timeout: duration(&sv.idle_timeout, d.idle_timeout)?,
            max_connections,
            max_header_size,
        })
    }

    fn listeners(&self, raw: &[S<raw::RawListen>]) -> Result<Vec<Listener>, Fail> {
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
            });
        }
        Ok(out)
    }

    fn upstreams(
        &self,
        raw: &BTreeMap<String, S<raw::RawUpstream>>,
    ) -> Result<BTreeMap<String, Arc<Upstream>>, Fail> {
        let mut out = BTreeMap::new();
        for (name, u) in raw {
            let u = u.get_ref();
            let url: Uri = at(
                &u.url,
                u.url
                    .get_ref()
                    .parse()
                    .map_err(|e| format!("bad upstream url: {e}")),
            )?;
            match url.scheme_str() {
                Some("http") => {}
                Some("https") => {
                    return fail(
                        u.url.span(),
                        "https upstreams are not supported yet in this version of mcpgate",
                    );
                }
                _ => return fail(u.url.span(), "upstream url must start with http://"),
            }
            if url.authority().is_none() {
                return fail(u.url.span(), "upstream url needs a host and port");
            }
            let connect_timeout = match &u.connect_timeout {
                Some(v) => at(v, parse_duration(v.get_ref()))?,
                None => DEFAULT_CONNECT_TIMEOUT,
            };
            let timeout = match &u.timeout {
                Some(v) => at(v, parse_duration(v.get_ref()))?,
                None => DEFAULT_TIMEOUT,
            };
            let stream_idle_timeout = match &u.stream_idle_timeout {
                Some(v) => at(v, parse_duration(v.get_ref()))?,
                None => DEFAULT_STREAM_IDLE_TIMEOUT,
            };
            let mut headers = HeaderMap::new();
            for (k, v) in &u.headers {
                let hname = HeaderName::from_bytes(k.as_bytes())
                    .map_err(|_| (v.span(), format!("bad header name {k:?}")))?;
                if crate::pipeline::forward::is_managed_header(&hname) {
                    return fail(
                        v.span(),
                        format!("header {k:?} is set by mcpgate and cannot be configured"),
                    );
                }
                let value = at(
                    v,
                    resolve_secrets_noting(v.get_ref(), &mut self.files.borrow_mut()),
                )?;
                let hvalue = HeaderValue::from_str(&value).map_err(|_| {
                    (
                        v.span(),
                        format!("header {k:?}: value is not a valid header value"),
                    )
                })?;
                headers.append(hname, hvalue);
            }
            out.insert(
                name.clone(),
                Arc::new(Upstream {
                    name: name.as_str().into(),
                    host: host_header(&url),
                    url,
                    connect_timeout,
                    timeout,
                    stream_idle_timeout,
                    headers,
                    pools: (0..=crate::runtime::workers::count())
                        .map(|_| OnceLock::new())
                        .collect(),
                }),
            );
        }
        Ok(out)
    }

    fn profiles(
        &self,
        raw: &BTreeMap<String, S<raw::RawProfile>>,
        upstreams: &BTreeMap<String, Arc<Upstream>>,
        warnings: &mut Vec<String>,
    ) -> Result<BTreeMap<String, Arc<Profile>>, Fail> {
        let mut out = BTreeMap::new();
        for (name, p) in raw {
            let p = p.get_ref();
            let upstream = upstreams.get(p.upstream.get_ref()).ok_or_else(|| {
                (
                    p.upstream.span(),
                    format!(
                        "profile {name:?}: no upstream named {:?}",
                        p.upstream.get_ref()
                    ),
                )
            })?;
            check_patterns(&p.allow)?;
            check_patterns(&p.deny)?;
            let allow = Matcher::new(p.allow.iter().map(|s| s.get_ref().as_str()));
            if allow.is_empty() {
                warnings.push(format!("profile {name:?} allows no tool (allow is empty)"));
            }
            let methods = match &p.methods {
                Some(list) => {
                    check_patterns(list)?;
                    let m = Matcher::new(list.iter().map(|s| s.get_ref().as_str()));
                    if !m.matches("initialize") {
                        warnings.push(format!(
                            "profile {name:?}: methods does not include \"initialize\"; MCP clients cannot connect"
                        ));
                    }
                    Some(m)
                }
                None => None,
            };
            out.insert(
                name.clone(),
                Arc::new(Profile {
                    name: name.as_str().into(),
                    upstream: upstream.clone(),
                    allow,
                    deny: Matcher::new(p.deny.iter().map(|s| s.get_ref().as_str())),
                    methods,
                }),
            );
        }
        Ok(out)
    }

    fn routes(
        &self,
        raw: &[S<raw::RawRoute>],
        listeners: &mut [Listener],
        profiles: &BTreeMap<String, Arc<Profile>>,
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
            let auth = match r.auth.as_ref().map(|a| a.get_ref().as_str()) {
                None if has_token => Auth::Path,
                None => Auth::Bearer,
                Some("path") => Auth::Path,
                Some("bearer") => Auth::Bearer,
                Some("none") => Auth::None,
                Some(other) => {
                    return fail(
                        r.auth.as_ref().map(S::span).unwrap_or_default(),
                        format!("unknown auth {other:?}; use \"path\", \"bearer\" or \"none\""),
                    );
                }
            };
            let auth_span = r.auth.as_ref().map_or(r.path.span(), S::span);
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
            }));
        }
        Ok(out)
    }

    fn tokens(
        &self,
        raw: &[S<raw::RawToken>],
        profiles: &BTreeMap<String, Arc<Profile>>,
    ) -> Result<TokenMap, Fail> {
        let mut out = TokenMap::with_capacity_and_hasher(raw.len(), Default::default());
        let mut ids: std::collections::HashSet<&str> =
            std::collections::HashSet::with_capacity(raw.len());
        for t in raw {
            let t = t.get_ref();
            let id = t.id.get_ref();
            if id.is_empty()
                || !id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return fail(
                    t.id.span(),
                    "token id must be non-empty and use only letters, digits, '-', '_' and '.'",
                );
            }
            if !ids.insert(id.as_str()) {
                return fail(t.id.span(), format!("duplicate token id {id:?}"));
            }
            // `${file:…}` lets the hash live in a Kubernetes Secret (watched like any file).
            let hex = at(
                &t.sha256,
                resolve_secrets_noting(t.sha256.get_ref(), &mut self.files.borrow_mut()),
            )?;
            let hash = at(&t.sha256, crate::config::token::parse_hex32(&hex))?;
            for p in t.profiles.get_ref() {
                if !profiles.contains_key(p) {
                    return fail(
                        t.profiles.span(),
                        format!("token {id:?}: no profile named {p:?}"),
                    );
                }
            }
            let not_before = t
                .not_before
                .as_ref()
                .map(|v| at(v, parse_time(v.get_ref())))
                .transpose()?;
            let not_after = t
                .not_after
                .as_ref()
                .map(|v| at(v, parse_time(v.get_ref())))
                .transpose()?;
            if let (Some(b), Some(a), Some(span)) =
                (not_before, not_after, t.not_after.as_ref().map(S::span))
            {
                if a <= b {
                    return fail(span, "not_after must be later than not_before");
                }
            }
            let entry = TokenEntry {
                id: id.as_str().into(),
                profiles: t.profiles.get_ref().clone(),
                not_before,
                not_after,
            };
            if out.insert(hash, entry).is_some() {
                return fail(
                    t.sha256.span(),
                    format!("token {id:?}: the same sha256 is registered twice"),
                );
            }
        }
        Ok(out)
    }
}

fn check_patterns(list: &[S<String>]) -> Result<(), Fail> {
    for p in list {
        if p.get_ref().is_empty() {
            return fail(p.span(), "empty name in list");
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.docs]
url = "http://127.0.0.1:9/mcp"

[profiles.gpt]
upstream = "docs"
allow = ["get_document", "delete_*"]

[[routes]]
listen = "main"
path = "/gpt-mcp/{token}/mcp"
profile = "gpt"

[[routes]]
listen = "main"
path = "/mcp"
profile = "gpt"

[[tokens]]
id = "t1"
sha256 = "0000000000000000000000000000000000000000000000000000000000000001"
profiles = ["gpt"]
"#;

    fn err(text: &str) -> String {
        load_str(text, "f.toml").unwrap_err().to_string()
    }

    #[test]
    fn routes_match_exactly() {
        let s = load_str(BASE, "f.toml").unwrap();
        let m = s.match_route(0, "/gpt-mcp/abc/mcp").unwrap();
        assert_eq!(m.path_token, Some("abc"));
        assert_eq!(m.route.auth, Auth::Path);
        assert!(s.match_route(0, "/gpt-mcp//mcp").is_none());
        assert!(s.match_route(0, "/gpt-mcp/abc/mcp/").is_none());
        assert!(s.match_route(0, "/gpt-mcp/abc/def/mcp").is_none());
        assert!(s.match_route(0, "/gpt-mcp/abc").is_none());
        let m = s.match_route(0, "/mcp").unwrap();
        assert_eq!(m.route.auth, Auth::Bearer);
        assert!(s.match_route(0, "/mcp/").is_none());
        assert!(s.match_route(0, "/MCP").is_none());
    }

    /// Matching reads segments as `split('/')` does: a reference matcher built on it
    /// agrees on every path made from the pieces templates and clients use.
    #[test]
    fn templates_match_as_split_segments_do() {
        let s = load_str(
            &format!(
                "{BASE}\n[[routes]]\nlisten = \"main\"\npath = \"/a/{{token}}\"\nprofile = \"gpt\"\n\n[[routes]]\nlisten = \"main\"\npath = \"/{{token}}/b/\"\nprofile = \"gpt\"\n"
            ),
            "f.toml",
        )
        .unwrap();
        let templates: Vec<&Vec<Segment>> = s.listeners[0]
            .table
            .templated
            .iter()
            .map(|(t, _)| t)
            .collect();
        assert_eq!(templates.len(), 3);
        fn reference<'p>(s: &Snapshot, path: &'p str) -> Option<(usize, Option<&'p str>)> {
            s.listeners[0]
                .table
                .templated
                .iter()
                .find_map(|(segments, i)| {
                    let parts: Vec<&str> = path.split('/').collect();
                    if parts.len() != segments.len() {
                        return None;
                    }
                    let mut token = None;
                    for (seg, part) in segments.iter().zip(&parts) {
                        match seg {
                            Segment::Literal(lit) if lit == part => {}
                            Segment::Token if !part.is_empty() => token = Some(*part),
                            _ => return None,
                        }
                    }
                    Some((*i, token))
                })
        }
        let pieces = ["", "/", "a", "b", "gpt-mcp", "mcp", "tok", "//", "/a", "b/"];
        let mut paths = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = paths
                .iter()
                .flat_map(|p| pieces.iter().map(move |x| format!("{p}{x}")))
                .collect();
            paths.extend(longer);
            paths.sort();
            paths.dedup();
            paths.truncate(20_000);
        }
        let mut matched = 0;
        for path in &paths {
            let ours = s.match_route(0, path).map(|m| {
                let i = s
                    .routes
                    .iter()
                    .position(|r| Arc::ptr_eq(r, m.route))
                    .unwrap();
                (i, m.path_token)
            });
            let exact = s.listeners[0]
                .table
                .exact
                .get(path.as_str())
                .map(|&i| (i, None));
            assert_eq!(ours, exact.or_else(|| reference(&s, path)), "{path:?}");
            matched += usize::from(ours.is_some());
        }
        assert!(matched > 10, "{matched} of {} paths matched", paths.len());
    }

    /// Every byte of a digest counts in its hash: digests that differ in one word only,
    /// whichever word, hash apart (as the benchmark's 10,000 registered hashes do, small
    /// numbers in the last word), and a map of them spreads out.
    #[test]
    fn token_digests_hash_on_every_word() {
        use std::hash::BuildHasher;
        let build = std::hash::BuildHasherDefault::<DigestHasher>::default();
        for word in 0..4 {
            let mut hashes = std::collections::HashSet::new();
            let mut low_bits = std::collections::HashSet::new();
            let mut tags = std::collections::HashSet::new();
            for i in 1..=10_000u64 {
                let mut digest = [0u8; 32];
                digest[word * 8..word * 8 + 8].copy_from_slice(&i.to_be_bytes());
                let h = build.hash_one(digest);
                hashes.insert(h);
                low_bits.insert(h & 0x3fff);
                tags.insert(h >> 57);
            }
            assert_eq!(hashes.len(), 10_000, "word {word}");
            assert!(
                low_bits.len() > 5_000,
                "word {word}: {} buckets",
                low_bits.len()
            );
            assert!(tags.len() > 100, "word {word}: {} tags", tags.len());
        }
        let s = load_str(BASE, "f.toml").unwrap();
        let mut t1 = [0u8; 32];
        t1[31] = 1;
        assert_eq!(s.tokens.get(&t1).map(|t| &*t.id), Some("t1"));
    }

    #[test]
    fn unknown_key_has_position() {
        let e = err(&format!("{BASE}\n[tools]\nhiden = [\"x\"]\n"));
        assert!(e.starts_with("f.toml:"), "{e}");
        assert!(e.contains("hiden"), "{e}");
        let line: usize = e.split(':').nth(1).unwrap().parse().unwrap();
        assert_eq!(line, BASE.lines().count() + 3);
    }

    #[test]
    fn limits_compile_and_keep_state_across_reloads() {
        let text = format!(
            "{BASE}\n[limits]\nrate = [ {{ key = \"token\", rate = \"20/s\", burst = 40 }}, {{ key = \"client_ip\", on = \"auth_failure\", rate = \"10/m\" }} ]\nconcurrency = [ {{ tools = [\"ingest\"], max_in_flight = 1 }} ]\ntimeouts = {{ search = \"10s\" }}\n"
        );
        let first = load_str(&text, "f.toml").unwrap();
        assert_eq!(first.limits.rate.len(), 2);
        assert!(
            first
                .describe()
                .contains("rate:      key=token 20/s burst=40")
        );
        let path = tempfile::NamedTempFile::new().unwrap();
        // Same rules: the very same state objects.
        std::fs::write(path.path(), &text).unwrap();
        let second = load_after(path.path(), Some(&first)).unwrap();
        assert!(Arc::ptr_eq(&first.limits.rate[0], &second.limits.rate[0]));
        assert!(Arc::ptr_eq(
            &first.limits.concurrency[0],
            &second.limits.concurrency[0]
        ));
        // A changed rule starts fresh; the unchanged one is still shared.
        std::fs::write(path.path(), text.replace("20/s", "30/s")).unwrap();
        let third = load_after(path.path(), Some(&second)).unwrap();
        assert!(!Arc::ptr_eq(&second.limits.rate[0], &third.limits.rate[0]));
        assert!(Arc::ptr_eq(&second.limits.rate[1], &third.limits.rate[1]));
        assert!(
            err(&text.replace("key = \"token\"", "key = \"user\"")).contains("unknown rate key")
        );
        assert!(
            err(&text.replace("key = \"client_ip\"", "key = \"token\""))
                .contains("needs key = \"client_ip\"")
        );
        assert!(err(&text.replace("\"20/s\"", "\"20/d\"")).contains("bad rate"));
        assert!(
            err(&text.replace("max_in_flight = 1", "max_in_flight = 0")).contains("at least 1")
        );
        assert!(err(&text.replace("\"10s\"", "\"soon\"")).contains("timeouts.search"));
    }

    #[test]
    fn references_are_checked() {
        assert!(
            err(&BASE.replace(
                "profile = \"gpt\"\n\n[[tokens]]",
                "profile = \"nope\"\n\n[[tokens]]"
            ))
            .contains("no profile named \"nope\"")
        );
        assert!(
            err(&BASE.replace("upstream = \"docs\"", "upstream = \"x\""))
                .contains("no upstream named")
        );
        assert!(
            err(&BASE.replace("profiles = [\"gpt\"]", "profiles = [\"gpx\"]"))
                .contains("no profile named \"gpx\"")
        );
        assert!(err(&BASE.replace("000000001\"", "00000001\"")).contains("64 hex"));
    }

    #[test]
    fn missing_secret_is_named() {
        let text = BASE.replace(
            "url = \"http://127.0.0.1:9/mcp\"",
            "url = \"http://127.0.0.1:9/mcp\"\nheaders = { \"X-API-Key\" = \"${env:MCPGATE_UNIT_MISSING}\" }",
        );
        let e = err(&text);
        assert!(e.contains("MCPGATE_UNIT_MISSING"), "{e}");
        assert!(e.starts_with("f.toml:8:"), "{e}");
    }

    #[test]
    fn host_and_origin_rules() {
        let s = load_str(BASE, "f.toml").unwrap();
        let l = &s.listeners[0];
        for ok in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1:1",
            "[::1]:443",
            "[::1]",
        ] {
            assert!(l.hosts.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:8080",
            "localhost.evil.com",
            "127.0.0.2",
        ] {
            assert!(!l.hosts.allows(bad), "{bad}");
        }
        for ok in [
            "http://localhost:3000",
            "http://localhost",
            "https://127.0.0.1:8443",
            "http://[::1]:1",
        ] {
            assert!(l.origins.allows(ok), "{ok}");
        }
        for bad in [
            "http://evil.example.com",
            "http://localhost.evil.com",
            "http://localhost:",
            "null",
            "http://localhost:80x",
        ] {
            assert!(!l.origins.allows(bad), "{bad}");
        }
        let public = load_str(&BASE.replace("127.0.0.1:0", "0.0.0.0:0"), "f.toml").unwrap();
        assert!(public.listeners[0].hosts.allows("mcp.example.com"));
        assert!(!public.listeners[0].origins.allows("https://claude.ai"));
        let listed = BASE.replace("addr = \"127.0.0.1:0\"", "addr = \"0.0.0.0:0\"\nallowed_origins = [\"https://claude.ai\"]\nallowed_hosts = [\"mcp.example.com\"]");
        let listed = load_str(&listed, "f.toml").unwrap();
        assert!(listed.listeners[0].origins.allows("https://Claude.ai"));
        assert!(
            !listed.listeners[0]
                .origins
                .allows("https://claude.ai.evil.com")
        );
        assert!(listed.listeners[0].hosts.allows("mcp.example.com:8443"));
        assert!(!listed.listeners[0].hosts.allows("other.example.com"));
    }

    #[test]
    fn describe_hides_secrets() {
        let s = load_str(BASE, "f.toml").unwrap();
        let d = s.describe();
        assert!(d.contains("/gpt-mcp/{token}/mcp"));
        assert!(!d.contains("0000000000000000000000000000000000000000000000000000000000000001"));
    }
}
