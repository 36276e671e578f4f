//! Sends an admitted request to its upstream over a pooled keep-alive connection, with the
//! header hygiene of SPEC §5: the client's credentials (`Authorization`, `Cookie`) and
//! hop-by-hop headers stay here, configured upstream headers are added, `X-Forwarded-*`
//! and `X-Request-Id` are set, everything else (all `Mcp-*` headers included) passes.
//! It returns the upstream's response head; the body is streamed by `respond`.

use crate::config::Upstream;
use crate::deadline::Deadline;
use crate::error::GateError;
use crate::pool::UpBody;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, Uri};
use std::borrow::Cow;

// Made at compile time: a name given as a `&str` is parsed on every request.
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Whether `name` is a hop-by-hop field (RFC 9110 §7.6.1, and the legacy ones). Compared
/// as header names: a standard name is one small number, so most comparisons are one
/// byte, with no text compared.
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    static HOP_BY_HOP: [HeaderName; 9] = [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHENTICATE,
        header::PROXY_AUTHORIZATION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ];
    HOP_BY_HOP.contains(name)
}

/// Headers mcpgate sets or strips itself; an upstream's `headers` table may not name them.
pub fn is_managed_header(name: &HeaderName) -> bool {
    is_hop_by_hop(name)
        || matches!(
            name.as_str(),
            "host"
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

/// The header names the `Connection` headers list (hop-by-hop by declaration), but for
/// `close` and the hop-by-hop names, which go anyway: the usual `keep-alive` or `close`
/// costs no name made and nothing allocated.
fn connection_listed(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(crate::headval::items)
        .filter(|n| !n.eq_ignore_ascii_case("close") && !n.eq_ignore_ascii_case("keep-alive"))
        .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .filter(|n| !is_hop_by_hop(n))
        .collect()
}

/// Removes hop-by-hop headers, including any the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in connection_listed(headers) {
        headers.remove(name);
    }
    // Most answers carry none, or `connection` or `transfer-encoding` alone: remove the
    // ones present (a removal by a name given as text would parse and hash it first).
    while let Some(name) = headers.keys().find(|n| is_hop_by_hop(n)).cloned() {
        headers.remove(&name);
    }
}

/// Headers of the client's request that never reach the upstream: hop-by-hop ones, the
/// client's credentials, and those mcpgate sets itself.
fn stays_here(name: &HeaderName) -> bool {
    static SET_HERE: [HeaderName; 9] = [
        header::HOST,
        header::AUTHORIZATION,
        header::COOKIE,
        header::CONTENT_LENGTH,
        header::ACCEPT_ENCODING,
        X_FORWARDED_FOR,
        X_FORWARDED_PROTO,
        X_FORWARDED_HOST,
        X_REQUEST_ID,
    ];
    is_hop_by_hop(name) || SET_HERE.contains(name)
}

pub struct Outgoing<'a> {
    pub method: Method,
    /// Whether the request deadline also bounds the answer's body. Not for long-lived
    /// streams (GET, `subscriptions/listen`), which an idle timeout governs instead.
    pub body_deadline: bool,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
    pub body: Bytes,
    /// The client's address, as `X-Forwarded-For` carries it.
    pub forwarded_for: &'a HeaderValue,
    /// The request deadline (the upstream's `timeout`, or a per-tool one).
    pub timeout: std::time::Duration,
    /// `https` on a TLS listener, else `http`: what `X-Forwarded-Proto` says.
    pub proto: &'static str,
    pub request_id: &'a str,
}

/// The upstream's response head and, when the deadline bounds the body too, what is left
/// of it.
pub struct Answer {
    pub response: Response<UpBody>,
    pub deadline: Option<Deadline>,
    /// How long the upstream took to send the head.
    pub took: std::time::Duration,
}

pub async fn send(upstream: &Upstream, out: Outgoing<'_>) -> Result<Answer, GateError> {
    let request = encode(upstream, &out)?;
    // One reading of the clock for the deadline and the upstream's time.
    let started = tokio::time::Instant::now();
    let mut deadline = Deadline::at(started + out.timeout);
    // The answer first: once it is in, the deadline is not looked at again (nor a random
    // branch order drawn), and an answer that comes as the deadline passes is used.
    let response = tokio::select! {
        biased;
        r = upstream.pool().send(&out.method, &request) => r.map_err(|e| upstream_error(&upstream.name, e))?,
        _ = &mut deadline => return Err(GateError::UpstreamTimeout),
    };
    Ok(Answer {
        response,
        deadline: out.body_deadline.then_some(deadline),
        took: started.elapsed(),
    })
}

/// The whole HTTP/1.1 request the upstream is sent, head and body, written straight from
/// the client's headers: those that stay here are left out, the ones mcpgate sets are
/// added. Header values cannot hold CR or LF (`HeaderValue` refuses them), so nothing a
/// client sends can end a line early.
fn encode(upstream: &Upstream, out: &Outgoing<'_>) -> Result<Vec<u8>, GateError> {
    let target = origin_form(&upstream.url, out.query)?;
    let listed = connection_listed(out.headers);
    let post = out.method == Method::POST;
    let mut buf = Vec::with_capacity(512 + out.body.len());
    buf.extend_from_slice(out.method.as_str().as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(target.as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\n");
    let mut line = |name: &[u8], value: &[u8]| {
        buf.extend_from_slice(name);
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(value);
        buf.extend_from_slice(b"\r\n");
    };
    line(b"host", upstream.host.as_bytes());
    // The client's Host, found on the way (the first, as `get` would give it).
    let mut client_host = None;
    for (name, value) in out.headers {
        if name == header::HOST && client_host.is_none() {
            client_host = Some(value);
        }
        if stays_here(name)
            || (post && name == header::ACCEPT)
            || listed.contains(name)
            || (!upstream.headers.is_empty() && upstream.headers.contains_key(name))
        {
            continue;
        }
        line(name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(host) = client_host {
        line(X_FORWARDED_HOST.as_str().as_bytes(), host.as_bytes());
    }
    line(
        X_FORWARDED_FOR.as_str().as_bytes(),
        out.forwarded_for.as_bytes(),
    );
    line(X_FORWARDED_PROTO.as_str().as_bytes(), out.proto.as_bytes());
    // Request ids are made of letters, digits and `._:-` (`pipeline::request_id`).
    let id = out.request_id.as_bytes();
    let id_ok = id.iter().all(|c| c.is_ascii_graphic());
    line(
        X_REQUEST_ID.as_str().as_bytes(),
        if id_ok { id } else { b"-" },
    );
    if post {
        // SDK servers answer 406 unless both are acceptable; the gateway converts later.
        line(b"accept", b"application/json, text/event-stream");
    }
    for (name, value) in &upstream.headers {
        line(name.as_str().as_bytes(), value.as_bytes());
    }
    // A length for every request that can carry a body, as hyper's client sent it.
    if !out.body.is_empty() || matches!(out.method, Method::POST | Method::PUT | Method::PATCH) {
        let mut n = itoa::Buffer::new();
        line(b"content-length", n.format(out.body.len()).as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(&out.body);
    Ok(buf)
}

/// The request target sent upstream (`/path?query`): the upstream URL's path and query,
/// with the client's query string appended.
/// Without a query it is the upstream URL's own text, borrowed: cloning its `Uri` would
/// write a count the worker threads share.
fn origin_form<'a>(base: &'a Uri, query: Option<&str>) -> Result<Cow<'a, str>, GateError> {
    let path = base.path_and_query().map_or("/", |p| p.as_str());
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(Cow::Borrowed(path));
    };
    let joined = match base.query() {
        Some(_) => format!("{path}&{query}"),
        None => format!("{path}?{query}"),
    };
    // It goes out on the request line: it must be a valid request target.
    match joined.parse::<http::uri::PathAndQuery>() {
        Ok(_) => Ok(Cow::Owned(joined)),
        Err(_) => Err(GateError::InvalidRequest("bad query string".into())),
    }
}

/// Names the kind of failure for the client; the detail goes to the log only.
fn upstream_error(upstream: &str, e: crate::pool::PoolError) -> GateError {
    let kind = match e {
        crate::pool::PoolError::Connect(_) => "connection failed",
        crate::pool::PoolError::Http(_) => "connection closed before a complete answer",
    };
    tracing::warn!(upstream, error = %e, detail = ?std::error::Error::source(&e), "upstream request failed");
    GateError::UpstreamUnreachable(kind.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_is_appended() {
        let base: Uri = "http://127.0.0.1:8000/mcp".parse().unwrap();
        assert_eq!(origin_form(&base, None).unwrap(), "/mcp");
        assert_eq!(origin_form(&base, Some("")).unwrap(), "/mcp");
        assert_eq!(origin_form(&base, Some("a=1")).unwrap(), "/mcp?a=1");
        let base: Uri = "http://127.0.0.1:8000/mcp?k=v".parse().unwrap();
        assert_eq!(origin_form(&base, None).unwrap(), "/mcp?k=v");
        assert_eq!(origin_form(&base, Some("a=1")).unwrap(), "/mcp?k=v&a=1");
        let bare: Uri = "http://127.0.0.1:8000".parse().unwrap();
        assert_eq!(origin_form(&bare, Some("a=1")).unwrap(), "/?a=1");
        assert!(origin_form(&base, Some("a=1 2")).is_err());
    }

    /// Names as they arrive (parsed from the wire, any case) are recognised, standard and
    /// custom ones alike.
    #[test]
    fn hop_by_hop_and_set_here_names() {
        let parsed = |n: &str| HeaderName::from_bytes(n.as_bytes()).unwrap();
        for n in [
            "Connection",
            "keep-alive",
            "Proxy-Connection",
            "proxy-authenticate",
            "Proxy-Authorization",
            "TE",
            "trailer",
            "Transfer-Encoding",
            "upgrade",
        ] {
            assert!(is_hop_by_hop(&parsed(n)), "{n}");
            assert!(stays_here(&parsed(n)), "{n}");
        }
        for n in [
            "host",
            "Authorization",
            "cookie",
            "content-length",
            "accept-encoding",
            "X-Forwarded-For",
            "x-forwarded-proto",
            "x-forwarded-host",
            "X-Request-Id",
        ] {
            assert!(!is_hop_by_hop(&parsed(n)), "{n}");
            assert!(stays_here(&parsed(n)), "{n}");
        }
        for n in [
            "content-type",
            "accept",
            "mcp-session-id",
            "keep-alive-x",
            "x-te",
        ] {
            assert!(!stays_here(&parsed(n)), "{n}");
        }
    }

    #[test]
    fn connection_listed_headers_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, X-Secret-Hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("mcp-session-id", HeaderValue::from_static("s"));
        h.insert("te", HeaderValue::from_static("trailers"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("mcp-session-id"));
    }
}
