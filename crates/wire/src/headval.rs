//! Reading header values a byte at a time: comma-separated lists and media types. The
//! values are a few dozen bytes, so `str::split` and its generic searcher cost more than
//! the reading itself; these loops do not. Header names the same way: the usual ones are
//! recognised before the general parse.

use http::header::{self, HeaderName, InvalidHeaderName};

/// The items of a comma-separated value (RFC 9110 §5.6.1), with the spaces and tabs
/// around each taken off. Empty items are kept (the list syntax allows them).
pub fn items(value: &str) -> impl DoubleEndedIterator<Item = &str> {
    // A one-char array is searched char by char, not with the memchr setup of `','`.
    value.split([',']).map(str::trim_ascii)
}

/// Whether a comma-separated value lists `token`, compared without case.
pub fn lists(value: &str, token: &str) -> bool {
    items(value).any(|t| t.eq_ignore_ascii_case(token))
}

/// The media type of a `Content-Type` value: what comes before its parameters, trimmed.
pub fn media_type(value: &str) -> &str {
    let end = value.bytes().position(|b| b == b';').unwrap_or(value.len());
    value[..end].trim_ascii()
}

/// What an answer's body is, by its `Content-Type`'s media type: the one test of "is this
/// answer SSE?" for every reader of upstream answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFormat {
    Json,
    Sse,
    Other,
}

pub fn body_format(headers: &http::HeaderMap) -> BodyFormat {
    let Some(ct) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return BodyFormat::Other;
    };
    let media = media_type(ct);
    if media.eq_ignore_ascii_case("application/json") {
        BodyFormat::Json
    } else if media.eq_ignore_ascii_case("text/event-stream") {
        BodyFormat::Sse
    } else {
        BodyFormat::Other
    }
}

/// A header field name as `HeaderName::from_bytes` reads it, but the names requests and
/// answers usually carry are recognised by their length and bytes (in any case) first:
/// the general parse costs several times more, and every request and answer has a few.
pub fn name(bytes: &[u8]) -> Result<HeaderName, InvalidHeaderName> {
    let is = |known: &[u8]| bytes.eq_ignore_ascii_case(known);
    let known = match bytes.len() {
        4 if is(b"host") => Some(header::HOST),
        4 if is(b"date") => Some(header::DATE),
        6 if is(b"accept") => Some(header::ACCEPT),
        6 if is(b"server") => Some(header::SERVER),
        6 if is(b"origin") => Some(header::ORIGIN),
        10 if is(b"connection") => Some(header::CONNECTION),
        10 if is(b"user-agent") => Some(header::USER_AGENT),
        12 if is(b"content-type") => Some(header::CONTENT_TYPE),
        12 if is(b"x-request-id") => Some(X_REQUEST_ID),
        13 if is(b"authorization") => Some(header::AUTHORIZATION),
        13 if is(b"cache-control") => Some(header::CACHE_CONTROL),
        13 if is(b"last-event-id") => Some(LAST_EVENT_ID),
        14 if is(b"content-length") => Some(header::CONTENT_LENGTH),
        14 if is(b"mcp-session-id") => Some(MCP_SESSION_ID),
        15 if is(b"accept-encoding") => Some(header::ACCEPT_ENCODING),
        16 if is(b"content-encoding") => Some(header::CONTENT_ENCODING),
        17 if is(b"transfer-encoding") => Some(header::TRANSFER_ENCODING),
        20 if is(b"mcp-protocol-version") => Some(MCP_PROTOCOL_VERSION),
        _ => None,
    };
    match known {
        Some(name) => Ok(name),
        None => HeaderName::from_bytes(bytes),
    }
}

const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
const MCP_SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
const MCP_PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name reads as `HeaderName::from_bytes` reads it: the known ones in any case,
    /// near misses, other names, and names that are not names at all.
    #[test]
    fn names_read_as_the_general_parse_reads_them() {
        let known = [
            "host",
            "date",
            "accept",
            "server",
            "origin",
            "connection",
            "user-agent",
            "content-type",
            "x-request-id",
            "authorization",
            "cache-control",
            "last-event-id",
            "content-length",
            "mcp-session-id",
            "accept-encoding",
            "content-encoding",
            "transfer-encoding",
            "mcp-protocol-version",
        ];
        let mut cases: Vec<Vec<u8>> = Vec::new();
        for k in known {
            cases.push(k.into());
            cases.push(k.to_ascii_uppercase().into());
            let mixed: Vec<u8> = k
                .bytes()
                .enumerate()
                .map(|(i, b)| {
                    if i % 2 == 0 {
                        b.to_ascii_uppercase()
                    } else {
                        b
                    }
                })
                .collect();
            cases.push(mixed);
            // Same length, one byte off; and one byte longer or shorter.
            let mut off = k.as_bytes().to_vec();
            off[0] = if off[0] == b'x' { b'y' } else { b'x' };
            cases.push(off);
            cases.push(format!("{k}s").into());
            cases.push(k[1..].into());
        }
        for other in [
            "",
            "x-custom",
            "Mcp-Method",
            "bad name",
            "host:",
            "h\u{e9}ost",
            "\0",
        ] {
            cases.push(other.into());
        }
        for case in cases {
            let ours = name(&case);
            let general = HeaderName::from_bytes(&case);
            assert_eq!(ours.is_ok(), general.is_ok(), "{case:?}");
            if let (Ok(a), Ok(b)) = (ours, general) {
                assert_eq!(a, b, "{case:?}");
                assert_eq!(a.as_str(), b.as_str());
            }
        }
    }

    #[test]
    fn lists_and_media_types() {
        assert_eq!(
            items(" a ,b,, \tc\t").collect::<Vec<_>>(),
            ["a", "b", "", "c"]
        );
        assert_eq!(items("gzip, chunked").next_back(), Some("chunked"));
        assert!(lists("keep-alive, Close", "close"));
        assert!(!lists("closed", "close"));
        assert_eq!(
            media_type(" application/json ; charset=utf-8"),
            "application/json"
        );
        assert_eq!(media_type("text/event-stream"), "text/event-stream");
        assert_eq!(media_type(";x"), "");
    }
}
