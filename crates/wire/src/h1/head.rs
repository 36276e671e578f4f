//! HTTP/1.1 heads, both directions: a client's request head and an upstream's answer
//! head, each parsed once with httparse, and how its body is framed and whether its
//! connection may be kept, by the rules of `framing` (RFC 9112 §6, §9.3).

use super::framing::{self, Chunk};
use crate::fields::{FieldKind, Fields, header_spans};
use crate::target::Target;
use bytes::{Buf, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Version};
use std::io;

/// Header fields a request head may have (hyper's limit too).
pub const MAX_HEADERS: usize = 100;
/// The longest field name taken (the `http` crate's limit, so hyper's for HTTP/2 too).
const MAX_NAME: usize = (1 << 16) - 1;
/// Headers an answer head may have (hyper's limit too).
const MAX_ANSWER_HEADERS: usize = 100;

/// How a request's body is framed (RFC 9112 §6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RequestFraming {
    None,
    Length(u64),
    Chunked,
}

#[derive(Debug)]
pub struct Parsed {
    pub method: Method,
    pub target: Target,
    pub fields: Fields,
    pub framing: RequestFraming,
    pub keep_alive: bool,
    pub expect_continue: bool,
    pub http10: bool,
}

pub fn has_token(value: &[u8], token: &str) -> bool {
    crate::fields::visible(value).is_some_and(|v| crate::headval::lists(v, token))
}

/// Parses a request head at the start of `buf`. `Ok(None)`: not complete yet. On success
/// the head's bytes are taken off `buf`. `Err`: the status to refuse it with, and why.
pub fn parse_request(
    buf: &mut BytesMut,
    max_head: usize,
) -> Result<Option<Parsed>, (StatusCode, &'static str)> {
    let bad = |why| (StatusCode::BAD_REQUEST, why);
    let too_large = (
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
        "head too large",
    );
    // Slots httparse fills; left uninitialised, as zeroing them costs more than parsing.
    let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut []);
    let len = match head.parse_with_uninit_headers(buf, &mut slots) {
        Ok(httparse::Status::Complete(len)) if len <= max_head => len,
        Ok(httparse::Status::Complete(_)) => return Err(too_large),
        Ok(httparse::Status::Partial) if buf.len() >= max_head => return Err(too_large),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(too_large),
        Err(httparse::Error::Version) => {
            return Err((StatusCode::HTTP_VERSION_NOT_SUPPORTED, "HTTP version"));
        }
        Err(_) => return Err(bad("malformed head")),
    };
    let method =
        Method::from_bytes(head.method.unwrap_or("").as_bytes()).map_err(|_| bad("method"))?;
    let http10 = head.version == Some(0);
    // A complete head always has a target; an empty one is no URI either.
    let path = head.path.filter(|p| !p.is_empty()).ok_or(bad("target"))?;
    let target = Target::parse(path).ok_or(bad("target"))?;
    let spans = header_spans(buf, head.headers);
    let bytes = buf.split_to(len).freeze();

    let fields = Fields::from_spans(bytes, spans.as_slice());
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut hosts = 0;
    let mut keep_alive = !http10;
    let mut expect_continue = false;
    for (kind, name, value) in fields.iter() {
        // Longer names than HTTP/2 and the `http` crate carry are refused here too, so a
        // field that reaches the pipeline could be put in a `HeaderName`.
        if name.len() > MAX_NAME {
            return Err(bad("field name"));
        }
        match kind {
            FieldKind::ContentLength => {
                let n = framing::content_length(value).ok_or(bad("Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(bad("conflicting Content-Length"));
                }
                length = Some(n);
            }
            FieldKind::TransferEncoding => {
                if http10 || chunked {
                    return Err(bad("Transfer-Encoding"));
                }
                if !value.eq_ignore_ascii_case(b"chunked") {
                    return Err((StatusCode::NOT_IMPLEMENTED, "transfer coding"));
                }
                chunked = true;
            }
            FieldKind::Host => hosts += 1,
            FieldKind::Connection => {
                if has_token(value, "close") {
                    keep_alive = false;
                } else if http10 && has_token(value, "keep-alive") {
                    keep_alive = true;
                }
            }
            FieldKind::Expect => expect_continue = value.eq_ignore_ascii_case(b"100-continue"),
            _ => {}
        }
    }
    // RFC 9112 §3.2: exactly one Host on HTTP/1.1 (an absolute target carries its own too).
    if hosts > 1 || (hosts == 0 && !http10 && target.authority().is_none()) {
        return Err(bad("Host"));
    }
    // Both framings at once is how requests are smuggled past a proxy (RFC 9112 §6.3).
    if chunked && length.is_some() {
        return Err(bad("Transfer-Encoding with Content-Length"));
    }
    let framing = match (chunked, length) {
        (true, _) => RequestFraming::Chunked,
        (false, Some(0) | None) => RequestFraming::None,
        (false, Some(n)) => RequestFraming::Length(n),
    };
    Ok(Some(Parsed {
        method,
        target,
        fields,
        framing,
        keep_alive,
        expect_continue: expect_continue && !http10,
        http10,
    }))
}

/// An answer head this client cannot read.
fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// How an answer's body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnswerFraming {
    /// `Content-Length`: this many bytes are left.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(Chunk),
    /// Neither: the body ends when the upstream closes; the connection is not kept.
    Close,
    /// Read to its end.
    Done,
}

/// Parses an answer head at the start of `buf`. `Ok(None)`: not complete yet. On success
/// the head's bytes are taken off `buf`; interim (1xx) heads are skipped.
pub fn parse_answer(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<(Response<()>, Head)>, io::Error> {
    loop {
        // Slots httparse fills; left uninitialised, as zeroing them costs more than parsing.
        let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_ANSWER_HEADERS];
        let mut head = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default()
            .parse_response_with_uninit_headers(&mut head, buf, &mut slots);
        let len = match parsed {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(malformed(&format!("answer head: {e}"))),
        };
        let code = head.code.unwrap_or(0);
        if (100..200).contains(&code) {
            if code == 101 {
                return Err(malformed("answer switched protocols unasked"));
            }
            buf.advance(len);
            continue;
        }
        let status = StatusCode::from_u16(code).map_err(|_| malformed("answer status"))?;
        let http10 = head.version == Some(0);
        let spans = header_spans(buf, head.headers);
        let bytes = buf.split_to(len).freeze();

        let spans = spans.as_slice();
        let mut headers = HeaderMap::with_capacity(spans.len());
        let mut length: Option<u64> = None;
        let mut encoded = false;
        let mut keep = !http10;
        // Whether a `Connection` field names other fields to remove.
        let mut names_fields = false;
        for &span in spans {
            let name =
                crate::headval::name(&bytes[span.name()]).map_err(|_| malformed("header name"))?;
            let value = HeaderValue::from_maybe_shared(bytes.slice(span.value()))
                .map_err(|_| malformed("header value"))?;
            if name == header::CONTENT_LENGTH {
                let n = framing::content_length(value.as_bytes())
                    .ok_or_else(|| malformed("Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(malformed("conflicting Content-Length"));
                }
                length = Some(n);
                // Written again once, normalised, if the length frames the body.
                continue;
            } else if name == header::TRANSFER_ENCODING {
                // Only `chunked` itself: a coding this client does not undo (`gzip,
                // chunked`) would reach the client as plain bytes with its name dropped.
                if encoded || !value.as_bytes().eq_ignore_ascii_case(b"chunked") {
                    return Err(malformed("transfer coding other than chunked"));
                }
                encoded = true;
            } else if name == header::CONNECTION {
                // Kept for now only when it names other fields, to remove them by it below.
                if !answer_connection(&value, http10, &mut keep) {
                    continue;
                }
                names_fields = true;
            }
            // The other hop-by-hop fields were read for the framing above; they end here.
            if name != header::CONNECTION && framing::is_hop_by_hop(&name) {
                continue;
            }
            headers.append(name, value);
        }
        // An answer head leaves the pool without hop-by-hop fields (RFC 9110 §7.6.1).
        if names_fields {
            framing::strip_hop_by_hop(&mut headers);
        }
        let no_body = *method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let framing = answer_framing(no_body, encoded, length, http10, &mut keep);
        // A body that ends at the close leaves nothing to keep.
        let keep = keep && framing != AnswerFraming::Close;
        // One `Content-Length`, as digits, where it still says something: the body's
        // length, or a HEAD answer's.
        if let Some(n) = length.filter(|_| !encoded) {
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.version_mut() = if http10 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        *response.headers_mut() = headers;
        return Ok(Some((response, Head { framing, keep })));
    }
}

/// An answer's `Connection` field: `close` ends the connection after it, `keep-alive` keeps
/// an HTTP/1.0 one. Whether it names other fields (which are then removed by it).
fn answer_connection(value: &HeaderValue, http10: bool, keep: &mut bool) -> bool {
    let listed = |token: &str| {
        value
            .to_str()
            .is_ok_and(|v| crate::headval::lists(v, token))
    };
    if listed("close") {
        *keep = false;
    } else if http10 && listed("keep-alive") {
        *keep = true;
    }
    value.to_str().is_ok_and(|v| {
        crate::headval::items(v).any(|t| {
            !(t.is_empty()
                || t.eq_ignore_ascii_case("close")
                || t.eq_ignore_ascii_case("keep-alive"))
        })
    })
}

/// How an answer's body is read: none (`no_body`: a HEAD's answer, 204, 304), chunked,
/// by its length, or to the close.
fn answer_framing(
    no_body: bool,
    encoded: bool,
    length: Option<u64>,
    http10: bool,
    keep: &mut bool,
) -> AnswerFraming {
    if no_body {
        AnswerFraming::Done
    } else if encoded {
        // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3), whose value is not
        // passed on; a connection that carried both is not trusted with another request,
        // nor is an HTTP/1.0 one that used a transfer coding (§6.1).
        if length.is_some() || http10 {
            *keep = false;
        }
        AnswerFraming::Chunked(Chunk::Size)
    } else {
        match length {
            Some(0) => AnswerFraming::Done,
            Some(n) => AnswerFraming::Length(n),
            None => AnswerFraming::Close,
        }
    }
}

/// How an answer's body is read, and whether its connection may be used again after it.
#[derive(Debug, PartialEq)]
pub struct Head {
    pub framing: AnswerFraming,
    pub keep: bool,
}

#[cfg(test)]
mod request_tests;

#[cfg(test)]
mod answer_tests;
