//! Sends an admitted request to its upstream over a pooled keep-alive connection, with the
//! header hygiene of SPEC §5: the client's credentials (`Authorization`, `Cookie`) and
//! hop-by-hop headers stay here, configured upstream headers are added, `X-Forwarded-*`
//! and `X-Request-Id` are set, everything else (all `Mcp-*` headers included) passes.
//! It returns the upstream's response head; the body is streamed by `respond`.

use crate::config::Upstream;
use crate::error::GateError;
use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use std::pin::Pin;
use tokio::time::Sleep;

// Made at compile time: a name given as a `&str` is parsed on every request.
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers mcpgate sets or strips itself; an upstream's `headers` table may not name them.
pub fn is_managed_header(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
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

/// The header names the `Connection` headers list (hop-by-hop by declaration).
fn connection_listed(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect()
}

/// Removes hop-by-hop headers, including any the `Connection` header names.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut doomed = connection_listed(headers);
    // One pass to find them; most answers carry at most `transfer-encoding`.
    doomed.extend(
        headers
            .keys()
            .filter(|n| HOP_BY_HOP.contains(&n.as_str()))
            .cloned(),
    );
    for name in doomed {
        headers.remove(name);
    }
}

/// Headers of the client's request that never reach the upstream: hop-by-hop ones, the
/// client's credentials, and those mcpgate sets itself.
fn stays_here(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
        || matches!(
            name.as_str(),
            "host"
                | "authorization"
                | "cookie"
                | "content-length"
                | "accept-encoding"
                | "x-forwarded-for"
                | "x-forwarded-proto"
                | "x-forwarded-host"
                | "x-request-id"
        )
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
    pub response: Response<Incoming>,
    pub deadline: Option<Pin<Box<Sleep>>>,
    /// How long the upstream took to send the head.
    pub took: std::time::Duration,
}

pub async fn send(upstream: &Upstream, out: Outgoing<'_>) -> Result<Answer, GateError> {
    let uri = origin_form(&upstream.url, out.query)?;
    // Built in one pass over the client's headers rather than copied and then pruned.
    let listed = connection_listed(out.headers);
    let post = out.method == Method::POST;
    let mut headers = HeaderMap::with_capacity(out.headers.len() + 8);
    for (name, value) in out.headers {
        if stays_here(name)
            || (post && name == header::ACCEPT)
            || listed.contains(name)
            || upstream.headers.contains_key(name)
        {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    if let Some(host) = out.headers.get(header::HOST) {
        headers.insert(X_FORWARDED_HOST, host.clone());
    }
    headers.insert(X_FORWARDED_FOR, out.forwarded_for.clone());
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(out.proto));
    headers.insert(X_REQUEST_ID, header_value(out.request_id));
    if post {
        // SDK servers answer 406 unless both are acceptable; the gateway converts later.
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
    }
    for (name, value) in &upstream.headers {
        headers.append(name, value.clone());
    }
    headers.insert(header::HOST, upstream.host.clone());

    let body_deadline = out.body_deadline;
    let mut request = Request::new(Full::new(out.body));
    *request.method_mut() = out.method;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;

    let started = std::time::Instant::now();
    let mut deadline = Box::pin(tokio::time::sleep(out.timeout));
    let response = tokio::select! {
        r = upstream.pool().send(request) => r.map_err(|e| upstream_error(&upstream.name, e))?,
        _ = deadline.as_mut() => return Err(GateError::UpstreamTimeout),
    };
    Ok(Answer {
        response,
        deadline: body_deadline.then_some(deadline),
        took: started.elapsed(),
    })
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

/// The request target sent upstream (`/path?query`): the upstream URL's path and query,
/// with the client's query string appended.
fn origin_form(base: &Uri, query: Option<&str>) -> Result<Uri, GateError> {
    let path = base.path_and_query().map_or("/", |p| p.as_str());
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(match base.path_and_query() {
            Some(p) => Uri::from(p.clone()),
            None => Uri::from_static("/"),
        });
    };
    let joined = match base.query() {
        Some(_) => format!("{path}&{query}"),
        None => format!("{path}?{query}"),
    };
    joined
        .parse()
        .map_err(|_| GateError::InvalidRequest("bad query string".into()))
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
