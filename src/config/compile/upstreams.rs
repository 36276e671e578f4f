//! `[upstreams.*]` and `[profiles.*]`: where requests go, and what each profile may send.

use super::{
    Compiler, DEFAULT_CONNECT_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT, DEFAULT_TIMEOUT, Fail, at,
    check_patterns, fail,
};
use crate::config::glob::Matcher;
use crate::config::raw::{self, S};
use crate::config::tls::Pem;
use crate::config::units::{parse_duration, resolve_secrets_noting};
use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub struct Upstream {
    pub name: Arc<str>,
    /// Where connections are made.
    pub address: Address,
    /// For an `https://` url: how its connections are secured. Never plaintext then.
    pub tls: Option<Arc<crate::config::tls::UpstreamTls>>,
    /// The request target's path (and query) and the `Host` come from this; for a unix
    /// socket it is `http://localhost` with the configured path, as nginx sends it.
    pub url: Uri,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub stream_idle_timeout: Duration,
    /// Configured headers with secrets resolved. Never printed.
    pub headers: HeaderMap,
    /// The `Host` header the upstream is sent: its URL's host, and port unless 80.
    pub host: HeaderValue,
    /// Its place in the snapshot's upstreams (name order): where the gateway keeps the
    /// upstream's connection pools for this snapshot.
    pub index: usize,
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
fn parse_url(text: &str) -> Result<(Address, Uri, bool), String> {
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
    let address = Address::Tcp {
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        port: url.port_u16().unwrap_or(if https { 443 } else { 80 }),
    };
    Ok((address, url, https))
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
            .field("address", &self.address)
            .field("tls", &self.tls)
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
    ) -> Result<BTreeMap<String, Arc<Upstream>>, Fail> {
        let mut out = BTreeMap::new();
        for (name, u) in raw {
            let u = u.get_ref();
            let (address, url, https) = at(&u.url, parse_url(u.url.get_ref()))?;
            let tls = match (&u.tls, https) {
                (Some(t), false) => {
                    return fail(t.span(), "tls applies to https:// upstreams only");
                }
                (t, true) => {
                    // https urls are TCP addresses; their host is the default name to verify.
                    let Address::Tcp { host, .. } = &address else {
                        return fail(u.url.span(), "https needs a host");
                    };
                    Some(Arc::new(self.upstream_tls(
                        host,
                        u.url.span(),
                        t.as_ref(),
                    )?))
                }
                (None, false) => None,
            };
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
            out.insert(
                name.clone(),
                Arc::new(Upstream {
                    name: name.as_str().into(),
                    host: host_header(&url),
                    address,
                    tls,
                    url,
                    connect_timeout,
                    timeout,
                    stream_idle_timeout,
                    headers,
                    index: out.len(),
                }),
            );
        }
        Ok(out)
    }

    /// The TLS client for an https upstream, its material read now: a bad file or name is
    /// an error of the configuration, not of the first request.
    fn upstream_tls(
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

    pub(super) fn profiles(
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
}
