//! The HTTP/1.1 client side: one request written whole on a connection, the answer's
//! head read with httparse, and a body ([`UpBody`]) that reads the rest from the same
//! connection as it is polled. It is generic over the stream (TCP today; TLS and unix
//! sockets plug in the same way) and knows nothing of pools: a finished connection goes
//! back to its [`Home`], which decides whether to keep it.
//!
//! - Answer heads drop hop-by-hop fields (read for the framing first), with those a
//!   `Connection` field names.
//! - A connection is handed back only when its answer was read to the end and may be
//!   followed by another: not after `Connection: close`, an HTTP/1.0 answer without
//!   keep-alive, a body that ended at the close, or an answer with both a length and a
//!   transfer coding.
//! - A body dropped before its end (client gone, deadline) drops its connection, so
//!   nothing of an old answer is read as the next one's.
//! - A head larger than [`READ_BUFFER`] is refused; a body is read at most
//!   [`READ_BUFFER`] bytes at a time, so a large answer passes through in pieces.

use super::framing::{self, Chunk, ChunkStep, step_chunk, take_up_to};
use crate::http::fields::header_spans;
use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use std::io;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, Waker, ready};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// The largest answer head read, and the most read from a connection at a time. nginx's
/// `proxy_buffer_size` is 4 or 8 KiB; hyper's default grows to about 400 KiB.
pub const READ_BUFFER: usize = 64 << 10;
/// Headers an answer head may have (hyper's limit too).
const MAX_HEADERS: usize = 100;
/// Room made for reading an answer head when the buffer has less.
const READ_CHUNK: usize = 8 << 10;

/// Where a connection goes once its answer has been read to the end and it may be used
/// again (a pool).
pub trait Home<IO>: Send + Sync {
    fn put(&self, conn: Conn<IO>);
}

/// One connection to an upstream and the bytes read from it and not yet used.
pub struct Conn<IO> {
    io: IO,
    /// The rest of a head, or body bytes.
    buf: BytesMut,
}

/// Where an exchange failed, which tells whether the request may have been acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Writing the request failed.
    Write,
    /// The connection closed or failed before the first byte of an answer.
    NoAnswer,
    /// After part of an answer, or the answer could not be read.
    Answer,
}

/// An exchange that failed, and where.
#[derive(Debug)]
pub struct Failure {
    pub stage: Stage,
    pub error: io::Error,
}

impl Failure {
    fn answer(what: &str) -> Failure {
        Failure {
            stage: Stage::Answer,
            error: io::Error::new(io::ErrorKind::InvalidData, what.to_string()),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> Conn<IO> {
    pub fn new(io: IO) -> Conn<IO> {
        Conn {
            io,
            buf: BytesMut::new(),
        }
    }

    /// Whether the connection looks usable: not closed by the upstream, nothing unasked
    /// waiting on it. A read that would wait says so without a system call unless the
    /// upstream did send something (the stream's readiness is known).
    pub fn alive(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut byte = [0u8; 1];
        let mut probe = ReadBuf::new(&mut byte);
        // Ready: the end of the stream, an error, or bytes nobody asked for.
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut probe)
            .is_pending()
    }

    /// Reads more into the buffer, making room for `want` bytes first if it has less;
    /// `Ok(0)` at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>, want: usize) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < want.min(READ_CHUNK) {
            self.buf.reserve(want);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }

    async fn fill(&mut self) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_fill(cx, READ_CHUNK)).await
    }

    /// Writes `request` (a whole HTTP/1.1 request, head and body) in one write and reads
    /// the answer's head; the body reads the rest and, at its end, hands the connection
    /// to `home` if it may be kept.
    pub async fn exchange(
        mut self,
        method: &Method,
        request: &[u8],
        home: Weak<dyn Home<IO>>,
    ) -> Result<Response<UpBody<IO>>, Failure> {
        if let Err(error) = self.io.write_all(request).await {
            return Err(Failure {
                stage: Stage::Write,
                error,
            });
        }
        loop {
            if let Some((response, head)) = parse_head(&mut self.buf, method)? {
                let mut body = UpBody {
                    conn: Some(self),
                    framing: head.framing,
                    keep: head.keep,
                    home,
                };
                body.finish_if_done();
                return Ok(response.map(|()| body));
            }
            if self.buf.len() > READ_BUFFER {
                return Err(Failure::answer("answer head too large"));
            }
            let got_before = !self.buf.is_empty();
            let error = match self.fill().await {
                Ok(n) if n > 0 => continue,
                Ok(_) => io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before a complete answer head",
                ),
                Err(e) => e,
            };
            let stage = if got_before {
                Stage::Answer
            } else {
                Stage::NoAnswer
            };
            return Err(Failure { stage, error });
        }
    }
}

/// How an answer's body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
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
fn parse_head(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<(Response<()>, Head)>, Failure> {
    loop {
        // Slots httparse fills; left uninitialised, as zeroing them costs more than parsing.
        let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
        let mut head = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default()
            .parse_response_with_uninit_headers(&mut head, buf, &mut slots);
        let len = match parsed {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(Failure::answer(&format!("answer head: {e}"))),
        };
        let code = head.code.unwrap_or(0);
        if (100..200).contains(&code) {
            if code == 101 {
                return Err(Failure::answer("answer switched protocols unasked"));
            }
            buf.advance(len);
            continue;
        }
        let status = StatusCode::from_u16(code).map_err(|_| Failure::answer("answer status"))?;
        let http10 = head.version == Some(0);
        let spans = header_spans(buf, head.headers);
        let bytes = buf.split_to(len).freeze();

        let spans = spans.as_slice();
        let mut headers = HeaderMap::with_capacity(spans.len());
        let mut length: Option<u64> = None;
        let mut chunked = false;
        let mut encoded = false;
        let mut keep = !http10;
        // Whether a `Connection` field names other fields to remove.
        let mut names_fields = false;
        for &span in spans {
            let name = crate::http::headval::name(&bytes[span.name()])
                .map_err(|_| Failure::answer("header name"))?;
            let value = HeaderValue::from_maybe_shared(bytes.slice(span.value()))
                .map_err(|_| Failure::answer("header value"))?;
            if name == header::CONTENT_LENGTH {
                let n = framing::content_length(value.as_bytes())
                    .ok_or_else(|| Failure::answer("Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Failure::answer("conflicting Content-Length"));
                }
                length = Some(n);
            } else if name == header::TRANSFER_ENCODING {
                encoded = true;
                // Chunked must be the last coding; anything after it is read to the close.
                chunked = value
                    .to_str()
                    .ok()
                    .and_then(|v| crate::http::headval::items(v).next_back())
                    .is_some_and(|last| last.eq_ignore_ascii_case("chunked"));
            } else if name == header::CONNECTION {
                let listed = |token: &str| {
                    value
                        .to_str()
                        .is_ok_and(|v| crate::http::headval::lists(v, token))
                };
                if listed("close") {
                    keep = false;
                } else if http10 && listed("keep-alive") {
                    keep = true;
                }
                // Kept for now only when it names other fields, to remove them by it below.
                let names_others = value.to_str().is_ok_and(|v| {
                    crate::http::headval::items(v).any(|t| {
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
            Framing::Done
        } else if encoded {
            // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3); a connection
            // that carried both is not trusted with another request.
            if length.is_some() {
                keep = false;
            }
            if chunked {
                Framing::Chunked(Chunk::Size)
            } else {
                Framing::Close
            }
        } else {
            match length {
                Some(0) => Framing::Done,
                Some(n) => Framing::Length(n),
                None => Framing::Close,
            }
        };
        // A body that ends at the close leaves nothing to keep.
        let keep = keep && framing != Framing::Close;
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
struct Head {
    framing: Framing,
    keep: bool,
}

/// The body of an upstream's answer, read from its connection as it is polled.
pub struct UpBody<IO> {
    /// Until the end: then back to the pool, or closed.
    conn: Option<Conn<IO>>,
    framing: Framing,
    /// Whether the connection may take another request once the body has been read.
    keep: bool,
    home: Weak<dyn Home<IO>>,
}

/// The upstream broke off its answer, or sent one this client cannot read.
#[derive(Debug, thiserror::Error)]
#[error("upstream answer body: {0}")]
pub struct BodyError(&'static str);

impl From<framing::ChunkError> for BodyError {
    fn from(e: framing::ChunkError) -> BodyError {
        BodyError(e.0)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> UpBody<IO> {
    /// At the end of the body, the connection goes back to the pool if it may be kept.
    fn finish_if_done(&mut self) {
        if self.framing == Framing::Done
            && let Some(conn) = self.conn.take()
            && self.keep
            && let Some(home) = self.home.upgrade()
        {
            home.put(conn);
        }
    }

    fn end(&mut self) {
        self.framing = Framing::Done;
        self.finish_if_done();
    }

    fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BodyError>>> {
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match self.framing {
                Framing::Done => return Poll::Ready(None),
                Framing::Length(left) => {
                    if !conn.buf.is_empty() {
                        let (data, left) = take_up_to(&mut conn.buf, left);
                        self.framing = Framing::Length(left);
                        if left == 0 {
                            self.end();
                        }
                        return Poll::Ready(Some(Ok(data)));
                    }
                }
                Framing::Close => {
                    if !conn.buf.is_empty() {
                        return Poll::Ready(Some(Ok(conn.buf.split().freeze())));
                    }
                }
                Framing::Chunked(state) => {
                    match step_chunk(&mut conn.buf, state).map_err(BodyError::from)? {
                        ChunkStep::Data(data, next) => {
                            self.framing = Framing::Chunked(next);
                            return Poll::Ready(Some(Ok(data)));
                        }
                        ChunkStep::Moved(next) => {
                            self.framing = Framing::Chunked(next);
                            continue;
                        }
                        ChunkStep::Ended => {
                            self.end();
                            return Poll::Ready(None);
                        }
                        ChunkStep::NeedMore => {
                            if conn.buf.len() > READ_BUFFER {
                                return Poll::Ready(Some(Err(BodyError("chunk line too long"))));
                            }
                        }
                    }
                }
            }
            // Nothing usable buffered: read more, in reads as large as the body needs up
            // to READ_BUFFER (a large answer then takes few reads).
            let want = match self.framing {
                Framing::Length(left) => (left as usize).min(READ_BUFFER),
                _ => READ_BUFFER,
            };
            let conn = self.conn.as_mut().expect("checked above");
            match ready!(conn.poll_fill(cx, want)) {
                Ok(n) if n > 0 => {}
                Ok(_) if self.framing == Framing::Close => {
                    self.end();
                    return Poll::Ready(None);
                }
                Ok(_) => return Poll::Ready(Some(Err(BodyError("connection closed mid-answer")))),
                Err(_) => return Poll::Ready(Some(Err(BodyError("connection failed mid-answer")))),
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> Body for UpBody<IO> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        let r = ready!(this.poll_step(cx));
        if let Some(Err(_)) = &r {
            // A broken answer's connection is closed, never kept.
            this.conn = None;
            this.framing = Framing::Done;
        }
        Poll::Ready(r.map(|r| r.map(Frame::data)))
    }

    fn is_end_stream(&self) -> bool {
        self.framing == Framing::Done || self.conn.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.framing {
            Framing::Length(n) => SizeHint::with_exact(n),
            Framing::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str, method: Method) -> Result<Option<(Response<()>, Head)>, Failure> {
        parse_head(&mut BytesMut::from(text), &method)
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
            framing(&format!("{ok}transfer-encoding: gzip, chunked\r\n\r\n")),
            (Framing::Chunked(Chunk::Size), true)
        );
        // Chunked not last, or no length at all: the body runs to the close.
        assert_eq!(
            framing(&format!("{ok}transfer-encoding: chunked, gzip\r\n\r\n")),
            (Framing::Close, false)
        );
        assert_eq!(framing(&format!("{ok}\r\n")), (Framing::Close, false));
        // Both: the coding wins and the connection is not trusted again.
        assert_eq!(
            framing(&format!(
                "{ok}content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n"
            )),
            (Framing::Chunked(Chunk::Size), false)
        );
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
        let (r, h) = parse_head(&mut buf, &Method::POST).unwrap().unwrap();
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
            let (r, h) = parse_head(&mut BytesMut::from(text.as_str()), &Method::POST)
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
