//! `[upstreams.*]`: where requests go (HTTP endpoints, stdio commands), their TLS,
//! health checks, balancing and session keys.

use super::{
    Compiler, DEFAULT_CONNECT_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TIMEOUT, Fail, at, fail,
};
use crate::config::raw::{self, S};
use crate::config::tls::Pem;
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

/// The URL as written: `http://host:port/path`, `https://…`, or `unix:/socket:/path` for a
/// unix socket. Also whether it is https.
pub(super) fn parse_url(text: &str) -> Result<(Address, Uri, bool), String> {
    if let Some(rest) = text.strip_prefix("unix:") {
        const FORM: &str = "a unix socket upstream is written unix:/path/to/socket:/request/path";
        let (socket, path) = rest.split_once(':').ok_or(FORM)?;
        if !socket.starts_with('/') || !path.starts_with('/') {
            return Err(FORM.to_string());
        }
        let url: Uri = format!("http://localhost{path}")
            .parse()
            .map_err(|e| format!("bad request path {path:?}: {e}"))?;
        return Ok((Address::Unix(socket.into()), url, false));
    }
    let url: Uri = text.parse().map_err(|e| format!("bad upstream url: {e}"))?;
    let https = match url.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err("upstream url must start with http://, https:// or unix:".into()),
    };
    let Some(host) = url.host() else {
        return Err("upstream url needs a host and port".into());
    };
    if url.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(
            "an upstream url cannot carry credentials; send them with headers (see upstreams.*.headers)"
                .into(),
        );
    }
    let address = Address::Tcp {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: url.port_u16().unwrap_or(if https { 443 } else { 80 }),
    };
    Ok((address, url, https))
}

/// A duration key's value, or `default` when it is absent.
fn pin_mode(u: &raw::RawUpstream) -> Result<crate::config::pins::PinMode, Fail> {
    match &u.pin {
        Some(v) => at(v, crate::config::pins::PinMode::parse(v.get_ref())),
        None => Ok(Default::default()),
    }
}

fn duration_or(v: &Option<S<String>>, default: Duration) -> Result<Duration, Fail> {
    match v {
        Some(v) => at(v, parse_duration(v.get_ref())),
        None => Ok(default),
    }
}

/// Whether `program` names an executable file: a path as given, or a bare name found in
/// `PATH`, as the process will be started.
fn runnable(program: &str) -> bool {
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

fn health_check(raw: &S<raw::RawHealth>) -> Result<HealthCheck, Fail> {
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

fn outlier(raw: &S<raw::RawOutlier>) -> Result<Outlier, Fail> {
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

/// A session key from its base64 text (standard or URL-safe alphabet, padded or not).
fn session_key(text: &str) -> Result<SessionKey, String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(text).ok())
        .ok_or("not base64 (make one with `openssl rand -base64 32`)")?;
    let key: [u8; 32] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("{} bytes; a key is 32", b.len()))?;
    Ok(SessionKey(key))
}

/// `Host` for an upstream URL: the host as written, with the port unless it is the
/// scheme's own (80, or 443 for https).
fn host_header(url: &Uri) -> HeaderValue {
    let host = url.host().unwrap_or_default();
    let default = if url.scheme_str() == Some("https") {
        443
    } else {
        80
    };
    let text = match url.port_u16() {
        Some(port) if port != default => format!("{host}:{port}"),
        _ => host.to_string(),
    };
    HeaderValue::from_str(&text).expect("a URI's host and port make a valid header value")
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
fn is_managed_header(name: &HeaderName) -> bool {
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
            let urls: Vec<&S<String>> = match (&u.url, &u.endpoints) {
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
            };
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
            let balance = match &u.balance {
                None => Balance::LeastRequests,
                Some(v) => match v.get_ref().as_str() {
                    "least_requests" => Balance::LeastRequests,
                    "round_robin" => Balance::RoundRobin,
                    _ => return fail(v.span(), "balance is \"least_requests\" or \"round_robin\""),
                },
            };
            let health = u.health.as_ref().map(health_check).transpose()?;
            let protocol = match &u.protocol {
                None => Protocol::Auto,
                Some(v) => match v.get_ref().as_str() {
                    "auto" => Protocol::Auto,
                    "modern" => Protocol::Modern,
                    "legacy" => Protocol::Legacy,
                    _ => {
                        return fail(v.span(), "protocol is \"auto\", \"modern\" or \"legacy\"");
                    }
                },
            };
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
            let stream_idle_timeout =
                duration_or(&u.stream_idle_timeout, DEFAULT_STREAM_IDLE_TIMEOUT)?;
            let (identity, exchange) = match &u.identity {
                Some(i) => self.identity(i, &endpoints[0].label)?,
                None => (None, None),
            };
            let mut headers = HeaderMap::new();
            for (k, v) in &u.headers {
                if (identity.is_some() || exchange.is_some())
                    && k.eq_ignore_ascii_case("authorization")
                {
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
            out.insert(
                name.clone(),
                Arc::new(Upstream {
                    name: name.as_str().into(),
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
                    index: out.len(),
                }),
            );
        }
        Ok(out)
    }

    /// `[upstreams.NAME.identity]`: `mode = "jwt"` with its issuer and keys, `exchange`
    /// with its client at the `[oauth]` issuer, or `none`. `audience` defaults to
    /// `default_audience`: the url, or a stdio upstream's name.
    #[allow(clippy::type_complexity)]
    fn identity(
        &self,
        raw: &S<raw::RawIdentity>,
        default_audience: &str,
    ) -> Result<
        (
            Option<Arc<crate::config::identity::Identity>>,
            Option<Arc<crate::config::identity::Exchange>>,
        ),
        Fail,
    > {
        use crate::config::identity::{Exchange, Identity, SigningKey};
        let i = raw.get_ref();
        match i.mode.as_ref().map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "none")) => return Ok((None, None)),
            Some((_, "jwt")) => {}
            Some((_, "exchange")) => {
                let Some(client_id) = &i.client_id else {
                    return fail(
                        raw.span(),
                        "identity mode = \"exchange\" needs client_id and client_secret (or client_key): mcpgate's client at the [oauth] issuer",
                    );
                };
                let auth = match (&i.client_secret, &i.client_key) {
                    (Some(secret), None) => crate::config::identity::ClientAuth::Secret(at(
                        secret,
                        resolve_secrets_noting(secret.get_ref(), &mut self.files.borrow_mut()),
                    )?),
                    (None, Some(key)) => {
                        let text = self.key_pem(key, key.get_ref(), "client_key")?;
                        crate::config::identity::ClientAuth::Key(
                            SigningKey::from_pem(&text)
                                .map_err(|e| (key.span(), format!("client_key: {e}")))?,
                        )
                    }
                    (Some(s), Some(_)) => {
                        return fail(s.span(), "client_secret or client_key, not both");
                    }
                    (None, None) => {
                        return fail(
                            raw.span(),
                            "identity mode = \"exchange\" needs client_id and client_secret (or client_key): mcpgate's client at the [oauth] issuer",
                        );
                    }
                };
                for (key, given) in [
                    ("key", i.key.as_ref().map(S::span)),
                    ("issuer", i.issuer.as_ref().map(S::span)),
                    ("jwks_path", i.jwks_path.as_ref().map(S::span)),
                ] {
                    if let Some(span) = given {
                        return fail(
                            span,
                            format!("{key} is for mode = \"jwt\", not \"exchange\""),
                        );
                    }
                }
                let grant = match i.grant.as_ref().map(|g| (g, g.get_ref().as_str())) {
                    None | Some((_, "token_exchange")) => {
                        crate::config::identity::Grant::TokenExchange
                    }
                    Some((g, "on_behalf_of")) => {
                        if i.scope.is_none() {
                            return fail(
                                g.span(),
                                "grant = \"on_behalf_of\" names the upstream by scope (Entra ID: scope = \"api://<its app id>/.default\")",
                            );
                        }
                        crate::config::identity::Grant::OnBehalfOf
                    }
                    Some((g, other)) => {
                        return fail(
                            g.span(),
                            format!(
                                "grant is \"token_exchange\" or \"on_behalf_of\", not {other:?}"
                            ),
                        );
                    }
                };
                return Ok((
                    None,
                    Some(Arc::new(Exchange {
                        grant,
                        audience: i
                            .audience
                            .as_ref()
                            .map_or_else(|| default_audience.to_string(), |a| a.get_ref().clone()),
                        resource: i.resource.as_ref().map(|r| r.get_ref().clone()),
                        scope: i.scope.as_ref().map(|s| s.get_ref().clone()),
                        client_id: client_id.get_ref().clone(),
                        auth,
                    })),
                ));
            }
            Some((m, other)) => {
                return fail(
                    m.span(),
                    format!("identity mode is \"jwt\", \"exchange\" or \"none\", not {other:?}"),
                );
            }
        }
        for (key, given) in [
            ("client_id", i.client_id.as_ref().map(S::span)),
            ("client_secret", i.client_secret.as_ref().map(S::span)),
            ("client_key", i.client_key.as_ref().map(S::span)),
            ("grant", i.grant.as_ref().map(S::span)),
            ("resource", i.resource.as_ref().map(S::span)),
            ("scope", i.scope.as_ref().map(S::span)),
        ] {
            if let Some(span) = given {
                return fail(
                    span,
                    format!("{key} is for mode = \"exchange\", not \"jwt\""),
                );
            }
        }
        let Some(issuer) = &i.issuer else {
            return fail(
                raw.span(),
                "identity mode = \"jwt\" needs issuer (the tokens' iss)",
            );
        };
        let Some(key) = &i.key else {
            return fail(
                raw.span(),
                "identity mode = \"jwt\" needs key: a PKCS#8 PEM private key, P-256 or Ed25519 (key = \"/etc/mcpgate/identity.pem\")",
            );
        };
        let texts: Vec<&str> = match key.get_ref() {
            toml::Value::String(s) => vec![s.as_str()],
            toml::Value::Array(list) => list.iter().filter_map(toml::Value::as_str).collect(),
            _ => return fail(key.span(), "key is a string or a list of strings"),
        };
        if texts.is_empty() {
            return fail(key.span(), "key lists no key");
        }
        let mut keys = Vec::new();
        for (n, text) in texts.iter().enumerate() {
            let text = self.key_pem(key, text, &format!("key {}", n + 1))?;
            let k = SigningKey::from_pem(&text)
                .map_err(|e| (key.span(), format!("key {}: {e}", n + 1)))?;
            keys.push(k);
        }
        if let Some(p) = &i.jwks_path
            && !p.get_ref().starts_with('/')
        {
            return fail(p.span(), "jwks_path is a path: it starts with /");
        }
        Ok((
            Some(Arc::new(Identity {
                issuer: issuer.get_ref().clone(),
                audience: i
                    .audience
                    .as_ref()
                    .map_or_else(|| default_audience.to_string(), |a| a.get_ref().clone()),
                keys: keys.into(),
                jwks_path: i.jwks_path.as_ref().map(|p| p.get_ref().clone()),
            })),
            None,
        ))
    }

    /// `command = [...]`: a stdio upstream. Keys of HTTP upstreams are refused with it.
    fn stdio_upstream(
        &self,
        name: &str,
        whole: &S<raw::RawUpstream>,
        command: &S<Vec<S<String>>>,
    ) -> Result<Upstream, Fail> {
        let u = whole.get_ref();
        for (key, given) in [
            ("url", u.url.as_ref().map(S::span)),
            ("endpoints", u.endpoints.as_ref().map(S::span)),
            ("balance", u.balance.as_ref().map(S::span)),
            ("health", u.health.as_ref().map(S::span)),
            ("outlier", u.outlier.as_ref().map(S::span)),
            ("session_key", u.session_key.as_ref().map(S::span)),
            ("tls", u.tls.as_ref().map(S::span)),
            ("connect_timeout", u.connect_timeout.as_ref().map(S::span)),
            ("headers", (!u.headers.is_empty()).then(|| whole.span())),
        ] {
            if let Some(span) = given {
                return fail(
                    span,
                    format!("{key} does not apply to a stdio upstream (command)"),
                );
            }
        }
        // A process gets its environment once, at its start, and serves every call after
        // it: it can be told who it serves (`jwt`), not who makes each call (`exchange`).
        let identity = match &u.identity {
            Some(i)
                if i.get_ref()
                    .mode
                    .as_ref()
                    .is_some_and(|m| m.get_ref() == "exchange") =>
            {
                return fail(
                    i.span(),
                    format!(
                        "identity mode = \"exchange\" does not apply to a stdio upstream: its process gets its environment once, at start, and serves every call after it, so no token can be exchanged per call; mode = \"jwt\" tells the process who it serves ({IDENTITY_TOKEN_VAR})"
                    ),
                );
            }
            Some(i) => self.identity(i, name)?.0,
            None => None,
        };
        let mut words = command.get_ref().iter();
        let Some(program) = words.next() else {
            return fail(command.span(), "command names no program");
        };
        if program.get_ref().is_empty() {
            return fail(program.span(), "command names no program");
        }
        let args = words.map(|w| w.get_ref().clone()).collect();
        let mut env = Vec::new();
        for (k, v) in &u.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return fail(v.span(), format!("env: {k:?} is not a variable name"));
            }
            if identity.is_some() && [IDENTITY_TOKEN_VAR, IDENTITY_FILE_VAR].contains(&k.as_str()) {
                return fail(
                    v.span(),
                    format!("env {k} is set by mcpgate for identity: name it otherwise"),
                );
            }
            let value = at(
                v,
                resolve_secrets_noting(v.get_ref(), &mut self.files.borrow_mut()),
            )?;
            if value.contains('\0') {
                return fail(v.span(), format!("env {k}: a value cannot hold a NUL byte"));
            }
            env.push((k.clone(), value));
        }
        let cwd = match &u.cwd {
            Some(c) => self.path(c.get_ref()),
            None => self.path("."),
        };
        let sessions = match &u.sessions {
            None => Sharing::PerClient,
            Some(v) => match v.get_ref().as_str() {
                // One name for each generation's unit: a legacy session, a modern caller.
                "per_client" | "per_caller" => Sharing::PerClient,
                "shared" => Sharing::Shared,
                _ => {
                    return fail(
                        v.span(),
                        "sessions is \"per_client\" (or \"per_caller\") or \"shared\"",
                    );
                }
            },
        };
        // A child runs in the generation of each request (`auto`), or speaks only 2026-07-28
        // (`modern`: legacy clients are bridged to it), or only the legacy protocol
        // (`legacy`: 2026-07-28 clients are bridged to it), docs/protocol.md.
        let protocol = match u.protocol.as_ref() {
            None => Protocol::Auto,
            Some(v) => match v.get_ref().as_str() {
                "auto" => Protocol::Auto,
                "modern" => Protocol::Modern,
                "legacy" => Protocol::Legacy,
                _ => {
                    return fail(
                        v.span(),
                        "protocol is \"auto\", \"modern\" or \"legacy\" on a stdio upstream",
                    );
                }
            },
        };
        let max_processes = match &u.max_processes {
            Some(n) if *n.get_ref() == 0 => return fail(n.span(), "max_processes is at least 1"),
            Some(n) => *n.get_ref() as usize,
            None => 16,
        };
        let idle_timeout = duration_or(&u.idle_timeout, Duration::from_secs(600))?;
        let timeout = duration_or(&u.timeout, DEFAULT_TIMEOUT)?;
        let stream_idle_timeout = duration_or(&u.stream_idle_timeout, DEFAULT_STREAM_IDLE_TIMEOUT)?;
        Ok(Upstream {
            name: name.into(),
            // mcpgate initializes each legacy child itself (docs/stdio.md).
            protocol,
            endpoints: Box::default(),
            balance: Balance::RoundRobin,
            health: None,
            outlier: None,
            session_keys: Box::default(),
            stdio: Some(Arc::new(StdioCommand {
                program: program.get_ref().clone(),
                args,
                env,
                cwd,
                sessions,
                max_processes,
                idle_timeout,
                identity: identity.is_some(),
            })),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            timeout,
            stream_idle_timeout,
            headers: HeaderMap::new(),
            pin: pin_mode(u)?,
            identity,
            exchange: None,
            index: 0,
        })
    }

    /// One url of `url` or `endpoints`, with its TLS settings if it is https.
    fn endpoint(
        &self,
        text: &S<String>,
        tls: Option<&S<raw::RawUpstreamTls>>,
    ) -> Result<Endpoint, Fail> {
        let (address, url, https) = at(text, parse_url(text.get_ref()))?;
        let tls = match &address {
            // https urls are TCP addresses; their host is the default name to verify.
            Address::Tcp { host, .. } if https => {
                Some(Arc::new(self.upstream_tls(host, text.span(), tls)?))
            }
            _ => None,
        };
        Ok(Endpoint {
            host: host_header(&url),
            address,
            tls,
            url,
            // Without its query, which may hold a key (`?api_key=…`): the label is shown
            // in metrics and logs.
            label: text
                .get_ref()
                .split_once('?')
                .map_or(text.get_ref().as_str(), |(before, _)| before)
                .into(),
        })
    }

    /// `session_key`: one key or a list, newest first; each 32 bytes in base64.
    /// A key's PEM text from what `written` says: a PEM file's path (relative to the
    /// configuration's folder), as the upstream `tls` keys take it, or the PEM itself
    /// through `${file:…}` or `${env:…}`. What a reference gives is never taken for a
    /// path: an error would then print it.
    fn key_pem<T>(&self, at_: &S<T>, written: &str, what: &str) -> Result<String, Fail> {
        if written.contains("${") || written.trim_start().starts_with("-----BEGIN") {
            return at(
                at_,
                resolve_secrets_noting(written, &mut self.files.borrow_mut()),
            );
        }
        let text = written;
        let path = self.path(text.trim());
        std::fs::read_to_string(&path).map_err(|e| {
            (
                at_.span(),
                format!(
                    "{what}: cannot read {}: {e} (write the PEM file's path, or its text as \"${{file:/etc/mcpgate/key.pem}}\" or \"${{env:NAME}}\")",
                    path.display()
                ),
            )
        })
    }

    fn session_keys(&self, v: &S<toml::Value>) -> Result<Box<[SessionKey]>, Fail> {
        let texts: Vec<&str> = match v.get_ref() {
            toml::Value::String(s) => vec![s],
            toml::Value::Array(list) => list
                .iter()
                .map(|k| k.as_str().ok_or(()))
                .collect::<Result<_, ()>>()
                .map_err(|()| {
                    (
                        v.span(),
                        "session_key is a string or a list of strings".to_string(),
                    )
                })?,
            _ => return fail(v.span(), "session_key is a string or a list of strings"),
        };
        if texts.is_empty() {
            return fail(v.span(), "session_key lists no key");
        }
        let mut keys: Vec<SessionKey> = Vec::with_capacity(texts.len());
        for (i, text) in texts.into_iter().enumerate() {
            let text = at(
                v,
                resolve_secrets_noting(text, &mut self.files.borrow_mut()),
            )?;
            // The key's text is never part of an error.
            let key = session_key(text.trim())
                .map_err(|why| (v.span(), format!("session_key (key {}): {why}", i + 1)))?;
            if keys.contains(&key) {
                return fail(
                    v.span(),
                    format!("session_key (key {}) is listed twice", i + 1),
                );
            }
            keys.push(key);
        }
        Ok(keys.into())
    }

    /// The TLS client for an https upstream, its material read now: a bad file or name is
    /// an error of the configuration, not of the first request.
    pub(super) fn upstream_tls(
        &self,
        host: &str,
        url_span: std::ops::Range<usize>,
        raw: Option<&S<raw::RawUpstreamTls>>,
    ) -> Result<crate::config::tls::UpstreamTls, Fail> {
        let Some(raw) = raw else {
            return crate::config::tls::upstream_client(host, None, None)
                .map_err(|e| (url_span, e));
        };
        let t = raw.get_ref();
        let pem = |v: &Option<S<String>>| -> Result<Option<Pem>, Fail> {
            let Some(v) = v else { return Ok(None) };
            let text = at(
                v,
                resolve_secrets_noting(v.get_ref(), &mut self.files.borrow_mut()),
            )?;
            if text.trim_start().starts_with("-----BEGIN") {
                return Ok(Some(Pem {
                    text: text.into_bytes(),
                    what: "the PEM text given".to_string(),
                }));
            }
            let path = self.path(&text);
            let bytes = std::fs::read(&path)
                .map_err(|e| (v.span(), format!("cannot read {}: {e}", path.display())))?;
            Ok(Some(Pem {
                text: bytes,
                what: path.display().to_string(),
            }))
        };
        if t.cert.is_some() != t.key.is_some() {
            return fail(raw.span(), "tls: cert and key go together");
        }
        let ca = pem(&t.ca)?;
        let client = pem(&t.cert)?.zip(pem(&t.key)?);
        let name = t
            .server_name
            .as_ref()
            .map_or(host, |n| n.get_ref().as_str());
        crate::config::tls::upstream_client(name, ca.as_ref(), client.as_ref().map(|(c, k)| (c, k)))
            .map_err(|e| (raw.span(), e))
    }
}
