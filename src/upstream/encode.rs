//! The HTTP/1.1 request an upstream is sent, with the header hygiene of docs/behaviour.md: the
//! client's credentials (`Authorization`, `Cookie`) and hop-by-hop headers stay here,
//! configured upstream headers are added, `X-Forwarded-*` and `X-Request-Id` are set,
//! everything else (all `Mcp-*` headers included) passes, in the client's order and
//! spelling.

use crate::config::generation::MODERN;
use crate::config::{Endpoint, Upstream};
use crate::error::GateError;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Uri};
use std::borrow::Cow;
use wire::fields::{FieldKind, Fields};
use wire::h1::framing::named_by_connection;

// Made at compile time: a name given as a `&str` is parsed on every request.
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Fields of the client's request that never reach the upstream: hop-by-hop ones, the
/// client's credentials, and those mcpgate sets itself.
fn stays_here(kind: FieldKind) -> bool {
    kind.is_hop_by_hop()
        || matches!(
            kind,
            FieldKind::Host
                | FieldKind::Authorization
                | FieldKind::Cookie
                | FieldKind::ContentLength
                | FieldKind::AcceptEncoding
                | FieldKind::XForwardedFor
                | FieldKind::XForwardedProto
                | FieldKind::XForwardedHost
                | FieldKind::Forwarded
                | FieldKind::XRequestId
                // Answered by the server that read the body (mcpgate), not passed on.
                | FieldKind::Expect
        )
}

/// The field names the client's `Connection` fields list; those fields stay here too. (A
/// hop-by-hop name listed stays here anyway.)
fn listed_by_connection(fields: &Fields) -> smallvec::SmallVec<[&str; 2]> {
    let values = fields
        .all(FieldKind::Connection)
        .filter_map(wire::fields::visible);
    named_by_connection(values)
        .filter(|n| !FieldKind::of(n.as_bytes()).is_hop_by_hop())
        .collect()
}

pub use super::bridged::InSession;

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
    /// Whether fields whose names hold `_` go upstream (`server.underscores_in_headers`).
    pub underscores: bool,
    /// With tracing on: the request's trace context, whose `traceparent` replaces the
    /// client's (and whose `tracestate` goes only with a continued trace).
    pub trace: Option<&'a crate::http::traceparent::Context>,
    /// The endpoint a multi round-trip retry goes back to, when it is still there.
    pub pinned: Option<crate::upstream::session::EndpointId>,
    /// The request's protocol generation.
    pub era: crate::config::generation::Era,
    /// A modern request to a stdio upstream: who calls, for the process it goes to.
    pub caller: Option<super::session::CallerKey>,
    /// Replaces the client's `Mcp-Name` (a task request's: the server's own task id, as
    /// the header carries it).
    pub mcp_name: Option<String>,
    /// A legacy client's request bridged to a 2026-07-28 server, as a POST of this method:
    /// the client's session and version headers stay here, and the request gets the
    /// 2026-07-28 ones (`MCP-Protocol-Version`, `Mcp-Method`; `Mcp-Name` from `mcp_name`).
    pub bridged: Option<&'a str>,
    /// A 2026-07-28 client's request bridged to a legacy server: sent in the session
    /// mcpgate holds for the caller there (`upstream::bridged`).
    pub in_session: Option<InSession<'a>>,
    /// Who calls, for an upstream with `identity` (docs/oauth.md); `None`: mcpgate itself.
    pub who: Option<super::identity::Who>,
    /// The `Authorization` the upstream gets: its identity token (set by the forward
    /// stage from `who`).
    pub authorization: Option<HeaderValue>,
}

/// The whole HTTP/1.1 request the upstream is sent, head and body, written straight from
/// the client's headers: those that stay here are left out, the ones mcpgate sets are
/// added. Header values cannot hold CR or LF (`HeaderValue` refuses them), so nothing a
/// client sends can end a line early.
///
/// `session` replaces the client's `Mcp-Session-Id` (the upstream's own id, opened from a
/// sealed one).
pub fn encode(
    upstream: &Upstream,
    endpoint: &Endpoint,
    out: &Outgoing<'_>,
    session: Option<&[u8]>,
) -> Result<Vec<u8>, GateError> {
    let target = origin_form(&endpoint.url, out.query)?;
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
    line(b"host", endpoint.host.as_bytes());
    if let Some(id) = session {
        line(b"mcp-session-id", id);
    }
    // Names are sent as the client wrote them, as nginx sends them.
    for (kind, name, value) in out.fields.iter() {
        if !passed_on(upstream, out, session, &listed, kind, name) {
            continue;
        }
        line(name, value);
    }
    if let Some(host) = out.fields.get(FieldKind::Host) {
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
        wire::headval::X_REQUEST_ID.as_str().as_bytes(),
        if id_ok { id } else { b"-" },
    );
    if let Some(t) = out.trace {
        line(b"traceparent", &t.header);
    }
    if let Some(name) = &out.mcp_name {
        line(b"mcp-name", name.as_bytes());
    }
    if let Some(method) = out.bridged {
        line(b"mcp-protocol-version", MODERN.as_bytes());
        line(b"mcp-method", method.as_bytes());
        if !out.fields.has(FieldKind::ContentType) {
            line(b"content-type", b"application/json");
        }
    }
    if let Some(to) = &out.in_session {
        line(b"mcp-protocol-version", to.version.as_bytes());
    }
    if post {
        // SDK servers answer 406 unless both are acceptable; the gateway converts later.
        line(b"accept", b"application/json, text/event-stream");
    }
    for (name, value) in &upstream.headers {
        line(name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(token) = &out.authorization {
        line(b"authorization", token.as_bytes());
    }
    // A length for every request that can carry a body, 0 included, so no upstream waits
    // for a body that is not coming.
    if !out.body.is_empty() || matches!(out.method, Method::POST | Method::PUT | Method::PATCH) {
        let mut n = itoa::Buffer::new();
        line(b"content-length", n.format(out.body.len()).as_bytes());
    }
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(&out.body);
    Ok(buf)
}

/// Whether the client's field `name` goes to the upstream: not one that stays here, nor
/// one mcpgate sets itself for this request (its `Accept`, a session's or a bridge's MCP
/// fields, a trace, the upstream's configured headers), nor one `Connection` lists, nor a
/// name with `_` unless the listener allows those.
#[inline]
fn passed_on(
    upstream: &Upstream,
    out: &Outgoing<'_>,
    session: Option<&[u8]>,
    listed: &[&str],
    kind: FieldKind,
    name: &[u8],
) -> bool {
    let mcp = matches!(
        kind,
        FieldKind::McpSessionId
            | FieldKind::McpProtocolVersion
            | FieldKind::McpMethod
            | FieldKind::McpName
    );
    !(stays_here(kind)
        || (out.method == Method::POST && kind == FieldKind::Accept)
        || (session.is_some() && kind == FieldKind::McpSessionId)
        || (out.in_session.is_some() && mcp)
        || (out.bridged.is_some() && (mcp || name.eq_ignore_ascii_case(b"last-event-id")))
        || (out.mcp_name.is_some() && kind == FieldKind::McpName)
        || out.trace.is_some_and(|t| {
            kind == FieldKind::Traceparent || (kind == FieldKind::Tracestate && !t.continued())
        })
        || (!out.underscores && name.contains(&b'_'))
        || listed
            .iter()
            .any(|l| l.as_bytes().eq_ignore_ascii_case(name))
        || (!upstream.headers.is_empty()
            && upstream
                .headers
                .keys()
                .any(|k| k.as_str().as_bytes().eq_ignore_ascii_case(name))))
}

/// The health check's request to `endpoint` (`upstream::health`): a JSON-RPC `ping`, with
/// the upstream's configured headers (an upstream that wants an API key wants it here too).
pub fn ping(upstream: &Upstream, endpoint: &Endpoint) -> Vec<u8> {
    const PING: &[u8] = br#"{"jsonrpc":"2.0","id":"mcpgate-health","method":"ping"}"#;
    request_of_own(
        upstream,
        endpoint,
        &Method::POST,
        None,
        PING,
        "mcpgate-health",
        &[],
    )
}

/// `request` (one of mcpgate's own, made by this module) with `Authorization: Bearer` and a
/// token for `sub = mcpgate` when `upstream` has `identity` (docs/oauth.md): every request
/// mcpgate sends to such an upstream carries one, its health checks and era probes
/// included. Signed afresh, as these requests are seldom (a check every few seconds).
pub fn authorized<'r>(request: &'r [u8], upstream: &Upstream) -> std::borrow::Cow<'r, [u8]> {
    let Some(identity) = upstream
        .identity
        .as_ref()
        .filter(|_| upstream.stdio.is_none())
    else {
        return std::borrow::Cow::Borrowed(request);
    };
    let tokens = super::identity::Tokens::new(identity.clone());
    let value = match tokens.jwt(&super::identity::Who::gateway()) {
        Ok(token) => token,
        Err(e) => {
            tracing::error!(upstream = %upstream.name, error = %e, "identity token");
            return std::borrow::Cow::Borrowed(request);
        }
    };
    // After the request line: the head's fields follow it.
    let Some(line) = request.windows(2).position(|w| w == b"\r\n") else {
        return std::borrow::Cow::Borrowed(request);
    };
    let mut out = Vec::with_capacity(request.len() + value.len() + 32);
    out.extend_from_slice(&request[..line + 2]);
    out.extend_from_slice(b"authorization: Bearer ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&request[line + 2..]);
    std::borrow::Cow::Owned(out)
}

/// The `params._meta` mcpgate's own 2026-07-28 requests carry.
pub const OWN_META: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"mcpgate","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

/// The health check and era probe of a server that may speak 2026-07-28: a stateless
/// `server/discover`. A modern server answers it with a result; a legacy one with an error
/// (a JSON-RPC message all the same, which is what a check asks of it).
pub fn discover(upstream: &Upstream, endpoint: &Endpoint) -> Vec<u8> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":"mcpgate-health","method":"server/discover","params":{{"_meta":{OWN_META}}}}}"#
    );
    request_of_own(
        upstream,
        endpoint,
        &Method::POST,
        None,
        body.as_bytes(),
        "mcpgate-health",
        &modern_fields("server/discover"),
    )
}

/// The header fields a 2026-07-28 request of `method` carries (it names nothing).
pub fn modern_fields(method: &str) -> [(&'static str, &str); 2] {
    [
        ("mcp-protocol-version", crate::config::generation::MODERN),
        ("mcp-method", method),
    ]
}

/// A request of mcpgate's own to `endpoint` (`upstream::hints`): `body` (none for a
/// DELETE), in `session`, with the upstream's configured headers.
pub fn own(
    upstream: &Upstream,
    endpoint: &Endpoint,
    method: &Method,
    session: Option<&str>,
    body: &[u8],
    fields: &[(&str, &str)],
) -> Vec<u8> {
    request_of_own(upstream, endpoint, method, session, body, "mcpgate", fields)
}

fn request_of_own(
    upstream: &Upstream,
    endpoint: &Endpoint,
    method: &Method,
    session: Option<&str>,
    body: &[u8],
    agent: &str,
    fields: &[(&str, &str)],
) -> Vec<u8> {
    let target = endpoint.url.path_and_query().map_or("/", |p| p.as_str());
    let mut buf = Vec::with_capacity(256 + body.len());
    buf.extend_from_slice(method.as_str().as_bytes());
    buf.push(b' ');
    buf.extend_from_slice(target.as_bytes());
    buf.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    buf.extend_from_slice(endpoint.host.as_bytes());
    buf.extend_from_slice(b"\r\nuser-agent: ");
    buf.extend_from_slice(agent.as_bytes());
    buf.extend_from_slice(
        b"\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\n",
    );
    if let Some(id) = session.filter(|s| s.bytes().all(|b| b.is_ascii_graphic())) {
        buf.extend_from_slice(b"mcp-session-id: ");
        buf.extend_from_slice(id.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    for (name, value) in &upstream.headers {
        buf.extend_from_slice(name.as_str().as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(value.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    for (name, value) in fields {
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(b": ");
        buf.extend_from_slice(value.as_bytes());
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(b"content-length: ");
    buf.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    buf.extend_from_slice(b"\r\n\r\n");
    buf.extend_from_slice(body);
    buf
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

#[cfg(test)]
mod tests {
    use super::*;
    use wire::h1::framing::is_hop_by_hop;

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
            "Expect: 100-continue\r\n",
            "X_Forwarded_For: 6.6.6.6\r\n",
            "Transfer_Encoding: chunked\r\n",
            "Content_Length: 99\r\n",
            "x_custom: kept?\r\n",
            "\r\n",
        ));
        let forwarded_for = HeaderValue::from_static("127.0.0.1");
        let mut out = Outgoing {
            method: Method::POST,
            body_deadline: true,
            query: Some("a=1"),
            fields: &fields,
            body: Bytes::from_static(b"{}"),
            forwarded_for: &forwarded_for,
            timeout: std::time::Duration::from_secs(1),
            proto: "https",
            trace: None,
            request_id: "rid-1",
            underscores: false,
            pinned: None,
            era: crate::config::generation::Era::Legacy,
            caller: None,
            mcp_name: None,
            bridged: None,
            in_session: None,
            who: None,
            authorization: None,
        };
        let sent =
            String::from_utf8(encode(upstream, upstream.first(), &out, None).unwrap()).unwrap();
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
        // With `underscores_in_headers`, such names pass as written (nginx's switch).
        out.underscores = true;
        let sent =
            String::from_utf8(encode(upstream, upstream.first(), &out, None).unwrap()).unwrap();
        for kept in [
            "X_Forwarded_For: 6.6.6.6\r\n",
            "Transfer_Encoding: chunked\r\n",
            "x_custom: kept?\r\n",
        ] {
            assert!(sent.contains(kept), "{kept:?} in {sent}");
        }
        assert!(
            !sent.contains("Expect"),
            "Expect is answered here, never passed on"
        );
        // A task request's Mcp-Name is the server's task id.
        out.mcp_name = Some("srv-1".into());
        let sent =
            String::from_utf8(encode(upstream, upstream.first(), &out, None).unwrap()).unwrap();
        assert!(sent.contains("\r\nmcp-name: srv-1\r\n"), "{sent}");
        // With identity (docs/oauth.md): mcpgate's token, after the configured headers; the
        // client's own `Authorization` still stays here.
        out.authorization = Some(HeaderValue::from_static("Bearer minted"));
        let sent =
            String::from_utf8(encode(upstream, upstream.first(), &out, None).unwrap()).unwrap();
        assert!(
            sent.contains("x-api-key: from-config\r\nauthorization: Bearer minted\r\n"),
            "{sent}"
        );
        assert!(!sent.contains("secret"), "{sent}");
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
            assert!(stays_here(FieldKind::of(n.as_bytes())), "{n}");
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
            assert!(stays_here(FieldKind::of(n.as_bytes())), "{n}");
        }
        for n in [
            "content-type",
            "accept",
            "mcp-session-id",
            "keep-alive-x",
            "x-te",
        ] {
            assert!(!stays_here(FieldKind::of(n.as_bytes())), "{n}");
        }
    }
}
