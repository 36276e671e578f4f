//! Sends an admitted request to its upstream over a pooled keep-alive connection, with the
//! header hygiene of SPEC §5: the client's credentials (`Authorization`, `Cookie`) and
//! hop-by-hop headers stay here, configured upstream headers are added, `X-Forwarded-*`
//! and `X-Request-Id` are set, everything else (all `Mcp-*` headers included) passes.
//! It returns the upstream's response head; the body is streamed by `respond`.

use crate::config::Upstream;
use crate::error::GateError;
use crate::http::request::{Fields, Kind};
use crate::runtime::deadline::Deadline;
use crate::upstream::pool::UpBody;
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

/// The names `Connection` values list (fields hop-by-hop by declaration), but for the
/// `close` and `keep-alive` options, which name no field.
fn named_by_connection<'a>(values: impl Iterator<Item = &'a str>) -> impl Iterator<Item = &'a str> {
    values
        .flat_map(crate::http::headval::items)
        .filter(|n| !n.eq_ignore_ascii_case("close") && !n.eq_ignore_ascii_case("keep-alive"))
}

/// The header names an answer's `Connection` headers list, but for the hop-by-hop names,
/// which go anyway: the usual `keep-alive` or `close` costs no name made and nothing
/// allocated.
fn connection_listed(headers: &HeaderMap) -> Vec<HeaderName> {
    let values = headers.get_all(header::CONNECTION).iter();
    named_by_connection(values.filter_map(|v| v.to_str().ok()))
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

/// Fields of the client's request that never reach the upstream: hop-by-hop ones, the
/// client's credentials, and those mcpgate sets itself.
fn stays_here(kind: Kind) -> bool {
    kind.is_hop_by_hop()
        || matches!(
            kind,
            Kind::Host
                | Kind::Authorization
                | Kind::Cookie
                | Kind::ContentLength
                | Kind::AcceptEncoding
                | Kind::XForwardedFor
                | Kind::XForwardedProto
                | Kind::XForwardedHost
                | Kind::XRequestId
        )
}

/// The field names the client's `Connection` fields list; those fields stay here too. (A
/// hop-by-hop name listed stays here anyway.)
fn listed_by_connection(fields: &Fields) -> smallvec::SmallVec<[&str; 2]> {
    let values = fields
        .all(Kind::Connection)
        .filter_map(crate::http::request::visible);
    named_by_connection(values)
        .filter(|n| !Kind::of(n.as_bytes()).is_hop_by_hop())
        .collect()
}

pub struct Outgoing<'a> {
    pub method: Method,
    /// Whether the request deadline also bounds the answer's body. Not for long-lived
    /// streams (GET, `subscriptions/listen`), which an idle timeout governs instead.
    pub body_deadline: bool,
    pub query: Option<&'a str>,
    pub fields: &'a Fields,
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
    let listed = listed_by_connection(out.fields);
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
    // Names are sent as the client wrote them, as nginx sends them.
    for (kind, name, value) in out.fields.iter() {
        if stays_here(kind)
            || (post && kind == Kind::Accept)
            || listed
                .iter()
                .any(|l| l.as_bytes().eq_ignore_ascii_case(name))
            || (!upstream.headers.is_empty()
                && upstream
                    .headers
                    .keys()
                    .any(|k| k.as_str().as_bytes().eq_ignore_ascii_case(name)))
        {
            continue;
        }
        line(name, value);
    }
    if let Some(host) = out.fields.get(Kind::Host) {
        line(X_FORWARDED_HOST.as_str().as_bytes(), host);
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
fn upstream_error(upstream: &str, e: crate::upstream::pool::PoolError) -> GateError {
    let kind = match e {
        crate::upstream::pool::PoolError::Connect(_) => "connection failed",
        crate::upstream::pool::PoolError::Http(_) => "connection closed before a complete answer",
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

    /// The head sent upstream: the client's fields in their order and as written, but for
    /// those that stay here, those its `Connection` lists (in any case) and those the
    /// upstream's configured headers replace (in any case); then the ones mcpgate sets.
    #[test]
    fn the_head_sent_upstream() {
        let config = r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"
[upstreams.docs]
url = "http://127.0.0.1:9/mcp?k=v"
headers = { "x-api-key" = "from-config" }
[profiles.gpt]
upstream = "docs"
allow = ["*"]
[[routes]]
listen = "main"
path = "/mcp"
profile = "gpt"
auth = "none"
"#;
        let snapshot = crate::config::load_str(config, "t.toml").unwrap();
        let upstream = &snapshot.upstreams["docs"];
        let fields = Fields::from_head(concat!(
            "POST /mcp HTTP/1.1\r\n",
            "Host: gw.example:8443\r\n",
            "Content-Type: application/json\r\n",
            "Accept: application/json\r\n",
            "Authorization: Bearer secret\r\n",
            "Cookie: c=1\r\n",
            "Connection: keep-alive, X-HOP\r\n",
            "x-hop: gone\r\n",
            "X-Api-Key: client-own\r\n",
            "Mcp-Session-Id: s1\r\n",
            "X-Forwarded-For: 6.6.6.6\r\n",
            "TE: trailers\r\n",
            "Content-Length: 2\r\n",
            "User-Agent: t/1\r\n",
            "\r\n",
        ));
        let forwarded_for = HeaderValue::from_static("127.0.0.1");
        let out = Outgoing {
            method: Method::POST,
            body_deadline: true,
            query: Some("a=1"),
            fields: &fields,
            body: Bytes::from_static(b"{}"),
            forwarded_for: &forwarded_for,
            timeout: std::time::Duration::from_secs(1),
            proto: "https",
            request_id: "rid-1",
        };
        let sent = String::from_utf8(encode(upstream, &out).unwrap()).unwrap();
        assert_eq!(
            sent,
            concat!(
                "POST /mcp?k=v&a=1 HTTP/1.1\r\n",
                "host: 127.0.0.1:9\r\n",
                "Content-Type: application/json\r\n",
                "Mcp-Session-Id: s1\r\n",
                "User-Agent: t/1\r\n",
                "x-forwarded-host: gw.example:8443\r\n",
                "x-forwarded-for: 127.0.0.1\r\n",
                "x-forwarded-proto: https\r\n",
                "x-request-id: rid-1\r\n",
                "accept: application/json, text/event-stream\r\n",
                "x-api-key: from-config\r\n",
                "content-length: 2\r\n",
                "\r\n{}",
            )
        );
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
            assert!(stays_here(Kind::of(n.as_bytes())), "{n}");
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
            assert!(stays_here(Kind::of(n.as_bytes())), "{n}");
        }
        for n in [
            "content-type",
            "accept",
            "mcp-session-id",
            "keep-alive-x",
            "x-te",
        ] {
            assert!(!stays_here(Kind::of(n.as_bytes())), "{n}");
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
