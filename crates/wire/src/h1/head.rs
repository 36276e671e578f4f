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
                let listed = |token: &str| {
                    value
                        .to_str()
                        .is_ok_and(|v| crate::headval::lists(v, token))
                };
                if listed("close") {
                    keep = false;
                } else if http10 && listed("keep-alive") {
                    keep = true;
                }
                // Kept for now only when it names other fields, to remove them by it below.
                let names_others = value.to_str().is_ok_and(|v| {
                    crate::headval::items(v).any(|t| {
                        !(t.is_empty()
                            || t.eq_ignore_ascii_case("close")
                            || t.eq_ignore_ascii_case("keep-alive"))
                    })
                });
                if !names_others {
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
        let framing = if no_body {
            AnswerFraming::Done
        } else if encoded {
            // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3), whose value is
            // not passed on; a connection that carried both is not trusted with another
            // request, nor is an HTTP/1.0 one that used a transfer coding (§6.1).
            if length.is_some() || http10 {
                keep = false;
            }
            AnswerFraming::Chunked(Chunk::Size)
        } else {
            match length {
                Some(0) => AnswerFraming::Done,
                Some(n) => AnswerFraming::Length(n),
                None => AnswerFraming::Close,
            }
        };
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

/// How an answer's body is read, and whether its connection may be used again after it.
#[derive(Debug, PartialEq)]
pub struct Head {
    pub framing: AnswerFraming,
    pub keep: bool,
}

#[cfg(test)]
mod request_tests {
    use super::RequestFraming as Framing;
    use super::*;

    fn head(text: &str) -> Result<Option<Parsed>, (StatusCode, &'static str)> {
        parse_request(&mut BytesMut::from(text), 64 << 10)
    }

    fn status_of(text: &str) -> u16 {
        match head(text) {
            Err((status, _)) => status.as_u16(),
            Ok(Some(_)) => 200,
            Ok(None) => 0,
        }
    }

    #[test]
    fn request_heads_are_framed_as_rfc_9112_says() {
        let framing = |text: &str| head(text).unwrap().unwrap().framing;
        assert_eq!(
            framing("POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n"),
            Framing::Length(12)
        );
        assert_eq!(
            framing("POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"),
            Framing::None
        );
        assert_eq!(
            framing("POST /m HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Framing::Chunked
        );
        assert_eq!(framing("GET /m HTTP/1.1\r\nHost: a\r\n\r\n"), Framing::None);
        // The same length twice is one length.
        assert_eq!(
            framing(
                "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"
            ),
            Framing::Length(3)
        );
    }

    #[test]
    fn heads_that_could_smuggle_or_mislead_are_refused() {
        for (text, status) in [
            (
                "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                400,
            ),
            (
                "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n",
                400,
            ),
            (
                "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
                400,
            ),
            (
                "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
                400,
            ),
            (
                "POST /m HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                501,
            ),
            (
                "POST /m HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            (
                "POST /m HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
            ("GET /m HTTP/1.1\r\n\r\n", 400),
            ("GET /m HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
            ("GET /m HTTP/9.9\r\nHost: a\r\n\r\n", 505),
            ("\x00\x01garbage\r\n\r\n", 400),
            ("GET /m HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400),
        ] {
            assert_eq!(status_of(text), status, "{text:?}");
        }
        // A field name as long as the crate's header names may be, and one byte longer.
        for (len, refused) in [(MAX_NAME, false), (MAX_NAME + 1, true)] {
            let text = format!(
                "GET /m HTTP/1.1\r\nHost: a\r\n{}: v\r\n\r\n",
                "n".repeat(len)
            );
            let read = parse_request(&mut BytesMut::from(&text[..]), 1 << 20);
            assert_eq!(read.is_err(), refused, "{len}");
        }
        // HTTP/1.0 needs no Host; an absolute target carries its own.
        assert_eq!(status_of("GET /m HTTP/1.0\r\n\r\n"), 200);
        assert_eq!(status_of("GET http://a/m HTTP/1.1\r\n\r\n"), 200);
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            status_of(&format!("GET /m HTTP/1.1\r\nHost: a\r\n{many}\r\n")),
            431
        );
    }

    /// Every field of a head reaches the request, whether the spans fit on the stack
    /// (up to 16) or not, up to the 100 allowed.
    #[test]
    fn every_field_is_kept_however_many() {
        for n in [0usize, 1, 14, 15, 16, 99] {
            let mut text = String::from("GET /m HTTP/1.1\r\nHost: a\r\n");
            for i in 0..n {
                text.push_str(&format!("X-F{i}: v{i}\r\n"));
            }
            text.push_str("\r\n");
            let parsed = head(&text).unwrap().unwrap();
            let fields: Vec<(FieldKind, &[u8], &[u8])> = parsed.fields.iter().collect();
            assert_eq!(fields.len(), n + 1, "{n}");
            assert_eq!(fields[0], (FieldKind::Host, &b"Host"[..], &b"a"[..]));
            for i in 0..n {
                let (name, value) = (format!("X-F{i}"), format!("v{i}"));
                assert_eq!(
                    fields[i + 1],
                    (FieldKind::Other, name.as_bytes(), value.as_bytes())
                );
            }
        }
    }

    /// The target is read from the head's own bytes, and reads as parsing its text would:
    /// the same URI, or the same refusal.
    #[test]
    fn targets_read_as_their_text_parses() {
        for target in [
            "/m",
            "/gpt-mcp/abc/mcp?x=1&y=%20",
            "http://a:8/m?q",
            "*",
            "http://",
            "/a\"b",
            "/a<b>{c}",
            "//",
            "/%zz",
        ] {
            let parsed = target.parse::<http::Uri>();
            match head(&format!("GET {target} HTTP/1.1\r\nHost: a\r\n\r\n")) {
                Ok(Some(p)) => {
                    let uri = parsed.as_ref().expect(target);
                    assert_eq!(p.target.path(), uri.path(), "{target:?}");
                    assert_eq!(p.target.query(), uri.query(), "{target:?}");
                    let authority = uri.authority().map(|a| a.as_str());
                    assert_eq!(p.target.authority(), authority, "{target:?}");
                }
                Err((status, why)) => {
                    assert_eq!(status, 400, "{target:?}");
                    assert!(parsed.is_err() || why != "target", "{target:?}: {why}");
                }
                Ok(None) => panic!("{target:?}: a whole head read as partial"),
            }
        }
    }

    #[test]
    fn a_head_is_taken_whole_or_not_at_all() {
        let text = "POST /m?q=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}GET";
        for cut in 1..text.len() - 5 {
            let mut buf = BytesMut::from(&text[..cut]);
            assert!(parse_request(&mut buf, 1 << 16).unwrap().is_none(), "{cut}");
            assert_eq!(buf.len(), cut, "nothing taken from a partial head");
        }
        let mut buf = BytesMut::from(text);
        let p = parse_request(&mut buf, 1 << 16).unwrap().unwrap();
        assert_eq!(&buf[..], b"{}GET", "the body and what follows stay");
        assert_eq!(p.method, Method::POST);
        assert_eq!(p.target.query(), Some("q=1"));
        assert_eq!(p.fields.get(FieldKind::Host), Some(&b"a"[..]));
        assert_eq!(p.fields.get_str(FieldKind::Expect), Some("100-continue"));
        assert!(!p.keep_alive && p.expect_continue && !p.http10);
        // Over the size limit while still partial: refused rather than buffered.
        let mut big = BytesMut::from(&format!("GET /m HTTP/1.1\r\nX: {}", "a".repeat(100))[..]);
        assert_eq!(parse_request(&mut big, 64).unwrap_err().0, 431);
    }

    #[test]
    fn http10_keeps_alive_only_when_asked() {
        let keep = |text: &str| head(text).unwrap().unwrap().keep_alive;
        assert!(!keep("GET /m HTTP/1.0\r\n\r\n"));
        assert!(keep("GET /m HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
        assert!(keep("GET /m HTTP/1.1\r\nHost: a\r\n\r\n"));
        assert!(!keep(
            "GET /m HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n"
        ));
    }
}

#[cfg(test)]
mod answer_tests {
    use super::AnswerFraming as Framing;
    use super::*;

    fn head(text: &str, method: Method) -> Result<Option<(Response<()>, Head)>, io::Error> {
        parse_answer(&mut BytesMut::from(text), &method)
    }

    fn framing(text: &str) -> (Framing, bool) {
        let h = head(text, Method::POST).unwrap().unwrap().1;
        (h.framing, h.keep)
    }

    #[test]
    fn answers_are_framed_as_rfc_9112_says() {
        let ok = "HTTP/1.1 200 OK\r\n";
        assert_eq!(
            framing(&format!("{ok}content-length: 5\r\n\r\n")),
            (Framing::Length(5), true)
        );
        assert_eq!(
            framing(&format!("{ok}transfer-encoding: Chunked\r\n\r\n")),
            (Framing::Chunked(Chunk::Size), true)
        );
        // A coding this client does not undo, anywhere in the list, or two of them: the
        // answer is refused (502) rather than passed on as plain bytes.
        for coding in [
            "gzip, chunked",
            "chunked, gzip",
            "identity",
            "chunked, chunked",
        ] {
            let text = format!("{ok}transfer-encoding: {coding}\r\n\r\n");
            assert!(head(&text, Method::POST).is_err(), "{coding}");
        }
        let twice = format!("{ok}transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n\r\n");
        assert!(head(&twice, Method::POST).is_err());
        // No length at all: the body runs to the close.
        assert_eq!(framing(&format!("{ok}\r\n")), (Framing::Close, false));
        // Both: the coding wins, the length is not passed on, and the connection is not
        // trusted again.
        let both = format!("{ok}content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n");
        let (r, h) = head(&both, Method::POST).unwrap().unwrap();
        assert_eq!((h.framing, h.keep), (Framing::Chunked(Chunk::Size), false));
        assert!(r.headers().get("content-length").is_none());
        // HTTP/1.0 with a transfer coding: read, then closed, keep-alive or not.
        assert_eq!(
            framing(
                "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n"
            ),
            (Framing::Chunked(Chunk::Size), false)
        );
        // The same length twice is passed on once, as digits.
        let twice = format!("{ok}content-length: 5\r\nContent-Length: 5\r\n\r\n");
        let (r, h) = head(&twice, Method::POST).unwrap().unwrap();
        assert_eq!(h.framing, Framing::Length(5));
        let lengths: Vec<_> = r.headers().get_all("content-length").iter().collect();
        assert_eq!(lengths, ["5"]);
        assert_eq!(
            framing("HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n"),
            (Framing::Done, true)
        );
        assert_eq!(
            framing("HTTP/1.1 204 No Content\r\n\r\n"),
            (Framing::Done, true)
        );
        assert_eq!(
            framing(&format!(
                "{ok}connection: close\r\ncontent-length: 4\r\n\r\n"
            )),
            (Framing::Length(4), false)
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"),
            (Framing::Done, false)
        );
        assert_eq!(
            framing("HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n"),
            (Framing::Done, true)
        );
        let h = head(&format!("{ok}content-length: 9\r\n\r\n"), Method::HEAD)
            .unwrap()
            .unwrap()
            .1;
        assert_eq!(
            h,
            Head {
                framing: Framing::Done,
                keep: true
            }
        );
        assert!(
            head(
                &format!("{ok}content-length: 2\r\ncontent-length: 3\r\n\r\n"),
                Method::POST
            )
            .is_err()
        );
        // A length is digits only, read by the same rule as a request's.
        for bad in ["x", "+5", "-1", "5 5", "0x5", "", "99999999999999999999"] {
            let text = format!("{ok}content-length: {bad}\r\n\r\n");
            assert!(head(&text, Method::POST).is_err(), "{bad:?}");
        }
        assert!(head("HTTP/1.1 101 Switching\r\n\r\n", Method::GET).is_err());
        assert!(
            head("HTTP/1.1 200 OK\r\ncontent-le", Method::POST)
                .unwrap()
                .is_none()
        );
        assert!(head("HTTP/1.1 2000 OK\r\n\r\n", Method::POST).is_err());
    }

    #[test]
    fn interim_heads_are_skipped_and_headers_kept() {
        let mut buf = BytesMut::from(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nMcp-Session-Id: s1\r\nx-a: 1\r\nx-a: 2\r\ncontent-length: 2\r\n\r\n{}",
        );
        let (r, h) = parse_answer(&mut buf, &Method::POST).unwrap().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["mcp-session-id"], "s1");
        assert_eq!(r.headers().get_all("x-a").iter().count(), 2);
        assert_eq!(h.framing, Framing::Length(2));
        assert_eq!(&buf[..], b"{}");
    }

    /// An answer head leaves the pool without hop-by-hop fields: they are read for the
    /// framing and the keep-alive decision, and the fields a `Connection` names go with it.
    #[test]
    fn hop_by_hop_fields_are_not_kept() {
        let parsed = |extra: &str| {
            let text = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}transfer-encoding: chunked\r\nkeep-alive: timeout=5\r\nte: trailers\r\nupgrade: h2c\r\ntrailer: x\r\nproxy-connection: keep-alive\r\nx-kept: 2\r\n\r\n"
            );
            let (r, h) = parse_answer(&mut BytesMut::from(text.as_str()), &Method::POST)
                .unwrap()
                .unwrap();
            assert_eq!(h.framing, Framing::Chunked(Chunk::Size));
            let names: Vec<String> = r.headers().keys().map(|n| n.to_string()).collect();
            (names, h.keep)
        };
        let kept = || vec!["content-type".to_string(), "x-kept".to_string()];
        assert_eq!(parsed(""), (kept(), true));
        assert_eq!(parsed("connection: close\r\n"), (kept(), false));
        // Named before or after the `Connection` that lists it.
        assert_eq!(
            parsed("x-hop: 1\r\nconnection: keep-alive, X-Hop\r\nx-hop: 2\r\n"),
            (kept(), true)
        );
        assert_eq!(parsed("connection: X-Hop, te\r\n"), (kept(), true));
    }
}
