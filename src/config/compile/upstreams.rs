//! `[upstreams.*]`: where requests go (HTTP endpoints, stdio commands), their TLS,
//! health checks, balancing and session keys.

use super::{
    Compiler, DEFAULT_CONNECT_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TIMEOUT, Fail, at, fail,
};
use crate::config::raw::{self, S};
use crate::config::units::{parse_duration, resolve_secrets_noting};
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// `[upstreams.X] protocol`: which generation of MCP an upstream speaks, for mcpgate's own
/// requests to it (health checks, hint reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Probed with `server/discover`: an answer with a result is a modern server.
    Auto,
    Modern,
    Legacy,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Auto => "auto",
            Protocol::Modern => "modern",
            Protocol::Legacy => "legacy",
        }
    }
}

pub struct Upstream {
    pub name: Arc<str>,
    /// `protocol`: which generation mcpgate's own requests to it speak (docs/protocol.md).
    pub protocol: Protocol,
    /// Where its requests go: the one `url`, or the `endpoints` (replicas), in the order
    /// written.
    pub endpoints: Box<[Arc<Endpoint>]>,
    /// How a request without a session picks among several endpoints.
    pub balance: Balance,
    /// Active checks, when configured.
    pub health: Option<HealthCheck>,
    /// Passive checks: with several endpoints only (one endpoint is never left out, as
    /// nginx never marks down the only server of a group).
    pub outlier: Option<Outlier>,
    /// The keys that seal the session ids clients receive, newest first: the first seals,
    /// each opens. Empty: session ids pass through as the upstream made them.
    pub session_keys: Box<[SessionKey]>,
    /// A stdio server (`command`): mcpgate runs it and is its Streamable HTTP front.
    /// `endpoints` is empty then.
    pub stdio: Option<Arc<StdioCommand>>,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub stream_idle_timeout: Duration,
    /// Configured headers with secrets resolved. Never printed.
    pub headers: HeaderMap,
    /// `pin`: whether its tools' definitions are pinned (docs/pinning.md).
    pub pin: crate::config::pins::PinMode,
    /// `identity`: what tells the upstream who is calling (docs/oauth.md); `None`: nothing.
    pub identity: Option<Arc<crate::config::identity::Identity>>,
    /// `identity` with `mode = "exchange"`: the caller's token exchanged for the upstream.
    pub exchange: Option<Arc<crate::config::identity::Exchange>>,
    /// Its place in the snapshot's upstreams (name order): where the gateway keeps the
    /// upstream's runtime state (pools, health) for this snapshot.
    pub index: usize,
}

/// One MCP server an upstream's requests may go to.
pub struct Endpoint {
    /// Where connections are made.
    pub address: Address,
    /// For an `https://` url: how its connections are secured. Never plaintext then.
    pub tls: Option<Arc<crate::config::tls::UpstreamTls>>,
    /// The request target's path (and query) and the `Host` come from this; for a unix
    /// socket it is `http://localhost` with the configured path, as nginx sends it.
    pub url: Uri,
    /// The `Host` header the upstream is sent: its URL's host, and port unless 80 (443).
    pub host: HeaderValue,
    /// The url as written without its query: what metrics and logs call it, and (hashed)
    /// what a sealed session id names. Upstream urls cannot carry user info (see
    /// `parse_url`).
    pub label: Arc<str>,
}

/// `command = [...]`: a local MCP server spoken to over its stdin and stdout.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct StdioCommand {
    pub program: String,
    pub args: Vec<String>,
    /// Given to the child beside PATH, HOME and LANG; secrets resolved. Never printed.
    pub env: Vec<(String, String)>,
    pub cwd: std::path::PathBuf,
    pub sessions: Sharing,
    pub max_processes: usize,
    pub idle_timeout: Duration,
    /// Whether its processes are told who they serve (`identity`, docs/oauth.md): adding or
    /// removing it restarts them; a new key or audience does not.
    pub identity: bool,
}

/// The variable a stdio process with `identity` finds its token in, at its start.
pub const IDENTITY_TOKEN_VAR: &str = "MCPGATE_IDENTITY_TOKEN";
/// The variable naming the file mcpgate keeps a fresh token in, for the process's life.
pub const IDENTITY_FILE_VAR: &str = "MCPGATE_IDENTITY_TOKEN_FILE";

impl fmt::Debug for StdioCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("env", &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .field("cwd", &self.cwd)
            .field("sessions", &self.sessions)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// A process per MCP session.
    PerClient,
    /// One process for every session, request ids rewritten.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Power of two choices: of two endpoints drawn at random, the one with fewer requests
    /// in flight.
    LeastRequests,
    RoundRobin,
}

/// `health = { … }`: a JSON-RPC ping to each endpoint every `interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HealthCheck {
    pub interval: Duration,
    pub timeout: Duration,
    pub unhealthy_after: u32,
    pub healthy_after: u32,
}

/// `outlier = { … }`: failures in a row that leave an endpoint out, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outlier {
    pub consecutive_failures: u32,
    pub eject_for: Duration,
}

/// A 32-byte session key. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKey(pub [u8; 32]);

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(<redacted>)")
    }
}

impl Upstream {
    /// The only endpoint of an upstream configured with `url` (the first otherwise).
    pub fn first(&self) -> &Endpoint {
        &self.endpoints[0]
    }

    fn with_index(mut self, index: usize) -> Upstream {
        self.index = index;
        self
    }
}

/// Where an upstream's connections go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// A host name or IP address (an IPv6 literal without its brackets) and a port.
    Tcp { host: String, port: u16 },
    /// The path of a unix socket (`unix:/path:/mcp`).
    Unix(std::path::PathBuf),
}

/// A duration key's value, or `default` when it is absent.
pub(super) fn pin_mode(u: &raw::RawUpstream) -> Result<crate::config::pins::PinMode, Fail> {
    match &u.pin {
        Some(v) => at(v, crate::config::pins::PinMode::parse(v.get_ref())),
        None => Ok(Default::default()),
    }
}

pub(super) fn duration_or(v: &Option<S<String>>, default: Duration) -> Result<Duration, Fail> {
    match v {
        Some(v) => at(v, parse_duration(v.get_ref())),
        None => Ok(default),
    }
}

/// Whether `program` names an executable file: a path as given, or a bare name found in
/// `PATH`, as the process will be started.
pub(super) fn runnable(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(std::path::Path::new(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
}

pub(super) fn health_check(raw: &S<raw::RawHealth>) -> Result<HealthCheck, Fail> {
    let h = raw.get_ref();
    let count = |v: &Option<S<u32>>| match v {
        Some(n) if *n.get_ref() == 0 => fail(n.span(), "a count of pings is at least 1"),
        Some(n) => Ok(*n.get_ref()),
        None => Ok(2),
    };
    let check = HealthCheck {
        interval: duration_or(&h.interval, Duration::from_secs(5))?,
        timeout: duration_or(&h.timeout, Duration::from_secs(1))?,
        unhealthy_after: count(&h.unhealthy_after)?,
        healthy_after: count(&h.healthy_after)?,
    };
    if check.interval.is_zero() || check.timeout.is_zero() {
        return fail(raw.span(), "health: interval and timeout are more than 0s");
    }
    if check.timeout > check.interval {
        return fail(raw.span(), "health: timeout is at most the interval");
    }
    Ok(check)
}

pub(super) fn outlier(raw: &S<raw::RawOutlier>) -> Result<Outlier, Fail> {
    let o = raw.get_ref();
    let consecutive_failures = match &o.consecutive_failures {
        Some(n) if *n.get_ref() == 0 => {
            return fail(n.span(), "consecutive_failures is at least 1");
        }
        Some(n) => *n.get_ref(),
        None => 3,
    };
    let eject_for = duration_or(&o.eject_for, Duration::from_secs(30))?;
    Ok(Outlier {
        consecutive_failures,
        eject_for,
    })
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("name", &self.name)
            .field("endpoints", &self.endpoints)
            .field("balance", &self.balance)
            .field("headers", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("address", &self.address)
            .field("tls", &self.tls)
            .field("url", &self.url)
            .finish()
    }
}

/// Fields mcpgate sets or strips itself on the way upstream (hop-by-hop ones among them):
/// an upstream's `headers` table may not name them.
pub(super) fn is_managed_header(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "transfer-encoding"
            | "te"
            | "trailer"
            | "upgrade"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "keep-alive"
            | "proxy-connection"
            | "host"
            | "content-length"
            | "content-type"
            | "accept"
            | "accept-encoding"
            | "x-forwarded-for"
            | "x-forwarded-proto"
            | "x-forwarded-host"
            | "x-request-id"
            | "mcp-session-id"
            | "mcp-protocol-version"
    )
}

impl Compiler<'_> {
    pub(super) fn upstreams(
        &self,
        raw: &BTreeMap<String, S<raw::RawUpstream>>,
        warnings: &mut Vec<String>,
    ) -> Result<BTreeMap<String, Arc<Upstream>>, Fail> {
        let mut out = BTreeMap::new();
        for (name, whole) in raw {
            let u = whole.get_ref();
            if let Some(command) = &u.command {
                let stdio = self.stdio_upstream(name, whole, command)?;
                if let Some(c) = &stdio.stdio
                    && !runnable(&c.program)
                {
                    // A warning, not an error: the machine that runs it may have it.
                    warnings.push(format!(
                        "upstream {name:?}: command {:?} is not an executable file here (looked up in PATH when it has no '/')",
                        c.program
                    ));
                }
                out.insert(name.clone(), Arc::new(stdio.with_index(out.len())));
                continue;
            }
            let http = self.http_upstream(name, whole, warnings)?;
            out.insert(name.clone(), Arc::new(http.with_index(out.len())));
        }
        Ok(out)
    }

    /// An upstream of HTTP endpoints (`url` or `endpoints`), with its balancing, health
    /// checks, session keys, identity and headers.
    fn http_upstream(
        &self,
        name: &str,
        whole: &S<raw::RawUpstream>,
        warnings: &mut Vec<String>,
    ) -> Result<Upstream, Fail> {
        let u = whole.get_ref();
        let urls = urls(name, whole)?;
        let mut endpoints: Vec<Arc<Endpoint>> = Vec::with_capacity(urls.len());
        for text in urls {
            let endpoint = self.endpoint(text, u.tls.as_ref())?;
            if endpoints.iter().any(|e| e.label == endpoint.label) {
                return fail(text.span(), "this endpoint is listed twice");
            }
            endpoints.push(Arc::new(endpoint));
        }
        if let Some(t) = &u.tls
            && endpoints.iter().all(|e| e.tls.is_none())
        {
            return fail(t.span(), "tls applies to https:// upstreams only");
        }
        let (balance, protocol) = (balance(u)?, protocol(u)?);
        let health = u.health.as_ref().map(health_check).transpose()?;
        let outlier = match &u.outlier {
            Some(o) => Some(outlier(o)?),
            None => Some(Outlier {
                consecutive_failures: 3,
                eject_for: Duration::from_secs(30),
            }),
        }
        .filter(|_| endpoints.len() > 1);
        let session_keys = match &u.session_key {
            Some(v) => self.session_keys(v)?,
            None => Box::default(),
        };
        if endpoints.len() > 1 && session_keys.is_empty() {
            return fail(
                u.endpoints.as_ref().map_or(whole.span(), S::span),
                "several endpoints need session_key (32 bytes, base64): session ids are sealed with it so that any mcpgate routes a session to its endpoint",
            );
        }
        let connect_timeout = duration_or(&u.connect_timeout, DEFAULT_CONNECT_TIMEOUT)?;
        let timeout = duration_or(&u.timeout, DEFAULT_TIMEOUT)?;
        let stream_idle_timeout = duration_or(&u.stream_idle_timeout, DEFAULT_STREAM_IDLE_TIMEOUT)?;
        let (identity, exchange) = match &u.identity {
            Some(i) => self.identity(i, &endpoints[0].label)?,
            None => (None, None),
        };
        let headers = self.upstream_headers(u, identity.is_some() || exchange.is_some())?;
        if exchange.is_some() && (health.is_some() || protocol == Protocol::Auto) {
            // Exchanged tokens are a caller's: mcpgate has none of its own to send.
            warnings.push(format!(
                "upstream {name:?}: identity mode = \"exchange\" exchanges callers' tokens; mcpgate's own requests to it ({}) carry none: the upstream must answer them without one, or use mode = \"jwt\" (docs/oauth.md)",
                if health.is_some() {
                    "health checks, era probes"
                } else {
                    "the era probe of protocol = \"auto\": name the generation it speaks, protocol = \"modern\" or \"legacy\""
                }
            ));
        }
        Ok(Upstream {
            name: name.into(),
            protocol,
            endpoints: endpoints.into(),
            balance,
            health,
            outlier,
            session_keys,
            stdio: None,
            connect_timeout,
            timeout,
            stream_idle_timeout,
            headers,
            pin: pin_mode(u)?,
            identity,
            exchange,
            index: 0,
        })
    }

    /// The headers an upstream is sent besides the client's: none mcpgate sets itself,
    /// nor `Authorization` when `identity` sets it (`identity_set`).
    fn upstream_headers(
        &self,
        u: &raw::RawUpstream,
        identity_set: bool,
    ) -> Result<HeaderMap, Fail> {
        let mut headers = HeaderMap::new();
        for (k, v) in &u.headers {
            if identity_set && k.eq_ignore_ascii_case("authorization") {
                return fail(
                    v.span(),
                    "headers.Authorization and identity both set the upstream's Authorization: keep one",
                );
            }
            let hname = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| (v.span(), format!("bad header name {k:?}")))?;
            if is_managed_header(&hname) {
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
        Ok(headers)
    }
}

/// An HTTP upstream's URLs (`url` or `endpoints`); none of the stdio keys given.
fn urls<'r>(name: &str, whole: &'r S<raw::RawUpstream>) -> Result<Vec<&'r S<String>>, Fail> {
    let u = whole.get_ref();
    for (key, given) in [
        ("env", (!u.env.is_empty()).then(|| whole.span())),
        ("cwd", u.cwd.as_ref().map(S::span)),
        ("sessions", u.sessions.as_ref().map(S::span)),
        ("max_processes", u.max_processes.as_ref().map(S::span)),
        ("idle_timeout", u.idle_timeout.as_ref().map(S::span)),
    ] {
        if let Some(span) = given {
            return fail(
                span,
                format!("{key} applies to stdio upstreams (command) only"),
            );
        }
    }
    Ok(match (&u.url, &u.endpoints) {
        (Some(url), None) => vec![url],
        (None, Some(list)) if list.get_ref().is_empty() => {
            return fail(list.span(), "endpoints lists no url");
        }
        (None, Some(list)) => list.get_ref().iter().collect(),
        (Some(url), Some(_)) => {
            return fail(url.span(), "give url or endpoints, not both");
        }
        (None, None) => {
            return fail(
                whole.span(),
                format!("upstream {name:?} needs url, endpoints or command"),
            );
        }
    })
}

/// How an upstream's requests are spread over its endpoints.
fn balance(u: &raw::RawUpstream) -> Result<Balance, Fail> {
    Ok(match &u.balance {
        None => Balance::LeastRequests,
        Some(v) => match v.get_ref().as_str() {
            "least_requests" => Balance::LeastRequests,
            "round_robin" => Balance::RoundRobin,
            _ => return fail(v.span(), "balance is \"least_requests\" or \"round_robin\""),
        },
    })
}

/// Which generation of MCP an upstream speaks, or `auto`.
fn protocol(u: &raw::RawUpstream) -> Result<Protocol, Fail> {
    Ok(match &u.protocol {
        None => Protocol::Auto,
        Some(v) => match v.get_ref().as_str() {
            "auto" => Protocol::Auto,
            "modern" => Protocol::Modern,
            "legacy" => Protocol::Legacy,
            _ => {
                return fail(v.span(), "protocol is \"auto\", \"modern\" or \"legacy\"");
            }
        },
    })
}
