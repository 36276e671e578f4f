//! HTTP/1.1 connections from clients, served by our own code: reading request heads and
//! bodies, writing answers, keep-alive and pipelining, marking the waits for a request head
//! (the header-read timeout is enforced by the connection's watch, `server.rs`), noticing a
//! client that hangs up, and closing without losing the last answer. It knows nothing of
//! MCP: every request goes to the service it is given. HTTP/2 stays with hyper
//! (`server.rs`); a connection that opens with the HTTP/2 preface is handed back for it.
//!
//! Why our own: a request's head is parsed once, with httparse, into the field list the
//! pipeline reads; its body is read before the service is called; the answer's head and
//! first bytes go out in one write; and no task, channel or timer is made per request.
//!
//! Rules, stricter than hyper's where RFC 9112 allows a choice:
//! - A head larger than `max_head` or with more than [`MAX_HEADERS`] fields: 431. A head
//!   that does not parse, an HTTP/1.1 request without exactly one `Host`, a bad or
//!   conflicting `Content-Length`, `Transfer-Encoding` together with `Content-Length` or
//!   on HTTP/1.0: 400. A transfer coding other than `chunked`: 501. The connection closes
//!   after each of these.
//! - A body is read whole before the request is handed on, up to `max_body`; a longer one
//!   is not read (the service answers 413) and its connection closes after the answer.
//!   `Expect: 100-continue` is answered only for a body that will be read.
//! - While the service works and while an answer streams, the connection is watched: a
//!   client that closes it drops the request (the service's futures are dropped, which is
//!   how the audit trail learns of it).
//! - Keep-alive unless the client or the answer says `close`, an HTTP/1.0 client did not
//!   ask for it, or the gateway drains. A draining connection closes between requests.
//! - A connection that closes with request bytes it did not read first reads (and drops)
//!   what the client still sends for up to [`LINGER`], so the answer is not lost to a reset.

use crate::http::request::{ClientBody, ClientRequest};
use bytes::{Bytes, BytesMut};
use http::header;
use http::{Method, Response, StatusCode};
use http_body::Body;
use std::future::{Future, poll_fn};
use std::io::{self, Write as _};
use std::pin::{Pin, pin};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use wire::h1::framing::{Chunk, ChunkStep, Overhead, step_chunk};
use wire::h1::head::{Parsed, RequestFraming as Framing, has_token, parse_request};

pub use super::drain::{Drain, DrainSignal, HeadWaits};

/// What a client with HTTP/2 prior knowledge sends first (RFC 9113 §3.4).
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Room made for a read when the buffer has less.
const READ_CHUNK: usize = 8 << 10;
/// Answer bytes gathered before they are written even if more are ready.
const WRITE_BATCH: usize = 64 << 10;
/// How long a closing connection goes on reading what the client still sends (nginx's
/// `lingering_time` does the same, with 30 s).
pub const LINGER: Duration = Duration::from_secs(2);
/// The most a closing connection reads and drops.
const LINGER_BYTES: usize = 1 << 20;

/// A connection's limits, fixed when it opens.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub max_head: usize,
    /// What a chunked request body may carry in chunk extensions and trailer fields.
    pub max_chunk_overhead: usize,
}

/// How a connection ended.
pub enum Ended<I> {
    Closed,
    /// The client opened with the HTTP/2 preface: serve it over HTTP/2 with these bytes,
    /// already read, first.
    H2(I, Bytes),
}

/// Serves HTTP/1.1 on `io` until the client leaves, an error, or the drain: every request
/// goes to `service`, whose answer is written back. `max_body` gives the current limit
/// on request bodies. Waits for a request head are marked in `waits`.
pub async fn serve<I, S, F, B>(
    io: I,
    settings: Settings,
    waits: &HeadWaits,
    drain: Drain,
    max_body: impl Fn() -> u64,
    mut service: S,
) -> Ended<I>
where
    I: AsyncRead + AsyncWrite + Unpin,
    S: FnMut(ClientRequest) -> F,
    F: Future<Output = Response<B>>,
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut c = Conn {
        io,
        buf: BytesMut::with_capacity(READ_CHUNK),
        out: Vec::new(),
        drain,
        waits,
        settings,
    };
    let mut first = true;
    loop {
        let head = match c.next_head(first).await {
            Next::Head(head) => head,
            Next::Closed => return Ended::Closed,
            Next::H2 => return Ended::H2(c.io, c.buf.freeze()),
            Next::Refuse(status, why) => {
                tracing::debug!(status = status.as_u16(), why, "request head refused");
                c.refuse(status).await;
                return Ended::Closed;
            }
        };
        first = false;
        let Parsed {
            method,
            target,
            fields,
            framing,
            mut keep_alive,
            expect_continue,
            http10,
        } = head;
        let body = match c.read_body(framing, expect_continue, &max_body).await {
            Ok(body) => body,
            Err(BodyFailure::Gone) => return Ended::Closed,
            Err(BodyFailure::Malformed(why)) => {
                tracing::debug!(why, "request body refused");
                c.refuse(StatusCode::BAD_REQUEST).await;
                return Ended::Closed;
            }
        };
        let unread = matches!(body, ClientBody::TooLarge);
        keep_alive &= !unread;
        let head_only = method == Method::HEAD;
        let request = ClientRequest {
            method,
            target,
            fields,
            body,
        };
        let answer = {
            let mut call = pin!(service(request));
            poll_fn(|cx| {
                if let Poll::Ready(answer) = call.as_mut().poll(cx) {
                    return Poll::Ready(Some(answer));
                }
                if c.poll_gone(cx) {
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await
        };
        // The client left first: the service's futures are dropped with `call`.
        let Some(answer) = answer else {
            return Ended::Closed;
        };
        keep_alive &= !c.drain.draining();
        if let Err(e) = c.respond(answer, head_only, http10, &mut keep_alive).await {
            tracing::debug!(error = %e, "answer not delivered");
            return Ended::Closed;
        }
        if !keep_alive {
            c.close(unread).await;
            return Ended::Closed;
        }
    }
}

struct Conn<'w, I> {
    io: I,
    /// Bytes read and not yet used.
    buf: BytesMut,
    /// The answer being written.
    out: Vec<u8>,
    drain: Drain,
    waits: &'w HeadWaits,
    settings: Settings,
}

// A head is moved once, from the parser to `serve`: not worth an allocation per request.
#[allow(clippy::large_enum_variant)]
enum Next {
    Head(Parsed),
    Closed,
    H2,
    Refuse(StatusCode, &'static str),
}

enum Wait {
    Read,
    /// The client closed or the drain began (between requests).
    End,
}

enum BodyFailure {
    Gone,
    Malformed(&'static str),
}

/// How an answer's body is framed on the wire.
#[derive(Clone, Copy, PartialEq)]
enum Out {
    None,
    Length(u64),
    Chunked,
    /// To the close (an HTTP/1.0 client, length unknown).
    Close,
}

impl<I: AsyncRead + AsyncWrite + Unpin> Conn<'_, I> {
    /// Reads more into the buffer; `Ok(0)` at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK / 2 {
            self.buf.reserve(READ_CHUNK);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf)
    }

    async fn fill(&mut self) -> io::Result<usize> {
        poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// Whether the client closed the connection. Bytes it sent meanwhile (a pipelined
    /// request) are kept, up to a head's size; past that the socket is not read.
    fn poll_gone(&mut self, cx: &mut Context<'_>) -> bool {
        while self.buf.len() < self.settings.max_head {
            match self.poll_fill(cx) {
                Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return true,
                Poll::Ready(Ok(_)) => {}
                Poll::Pending => return false,
            }
        }
        false
    }

    async fn next_head(&mut self, first: bool) -> Next {
        let next = self.read_head(first).await;
        self.waits.end();
        next
    }

    async fn read_head(&mut self, first: bool) -> Next {
        loop {
            if !self.buf.is_empty() {
                let seen = &self.buf[..self.buf.len().min(H2_PREFACE.len())];
                if first && H2_PREFACE.starts_with(seen) {
                    if seen.len() == H2_PREFACE.len() {
                        return Next::H2;
                    }
                } else {
                    match parse_request(&mut self.buf, self.settings.max_head) {
                        Ok(Some(head)) => return Next::Head(head),
                        Ok(None) => {}
                        Err((status, why)) => return Next::Refuse(status, why),
                    }
                }
            }
            // The first time round, the wait begins; after that it goes on.
            self.waits.begin();
            // A client that stops halfway through a head gets no answer, as with nginx.
            if let Wait::End = poll_fn(|cx| self.poll_wait(cx)).await {
                return Next::Closed;
            }
        }
    }

    /// Waits for request bytes or the drain (only between requests).
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<Wait> {
        if self.buf.is_empty() && self.drain.poll(cx) {
            return Poll::Ready(Wait::End);
        }
        match ready!(self.poll_fill(cx)) {
            Ok(0) | Err(_) => Poll::Ready(Wait::End),
            Ok(_) => Poll::Ready(Wait::Read),
        }
    }

    async fn read_body(
        &mut self,
        framing: Framing,
        expect_continue: bool,
        max_body: &impl Fn() -> u64,
    ) -> Result<ClientBody, BodyFailure> {
        let limit = match framing {
            Framing::None => return Ok(ClientBody::Read(Bytes::new())),
            _ => max_body(),
        };
        if let Framing::Length(n) = framing
            && n > limit
        {
            return Ok(ClientBody::TooLarge);
        }
        let waiting = match framing {
            Framing::Length(n) => (self.buf.len() as u64) < n,
            _ => true,
        };
        if expect_continue && waiting {
            self.io
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .await
                .map_err(|_| BodyFailure::Gone)?;
        }
        if let Framing::Length(n) = framing {
            let n = n as usize;
            while self.buf.len() < n {
                self.buf.reserve(n - self.buf.len());
                if self.fill().await.unwrap_or(0) == 0 {
                    return Err(BodyFailure::Gone);
                }
            }
            return Ok(ClientBody::Read(self.buf.split_to(n).freeze()));
        }
        let mut data = BytesMut::new();
        let mut state = Chunk::Size;
        let mut overhead = Overhead::new(self.settings.max_chunk_overhead);
        loop {
            match step_chunk(&mut self.buf, state, &mut overhead) {
                Ok(ChunkStep::Data(bytes, next)) => {
                    if (data.len() + bytes.len()) as u64 > limit {
                        return Ok(ClientBody::TooLarge);
                    }
                    data.extend_from_slice(&bytes);
                    state = next;
                    continue;
                }
                Ok(ChunkStep::Moved(next)) => {
                    state = next;
                    continue;
                }
                Ok(ChunkStep::Ended) => return Ok(ClientBody::Read(data.freeze())),
                Ok(ChunkStep::NeedMore) if self.buf.len() > self.settings.max_head => {
                    return Err(BodyFailure::Malformed("chunk line too long"));
                }
                Ok(ChunkStep::NeedMore) => {}
                Err(_) => return Err(BodyFailure::Malformed("bad chunked framing")),
            }
            if self.fill().await.unwrap_or(0) == 0 {
                return Err(BodyFailure::Gone);
            }
        }
    }

    /// Writes `answer`: its head and, unless the request was HEAD or the status has none,
    /// its body, framed by length, in chunks, or to the close.
    async fn respond<B>(
        &mut self,
        answer: Response<B>,
        head_only: bool,
        http10: bool,
        keep_alive: &mut bool,
    ) -> io::Result<()>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, mut body) = answer.into_parts();
        let exact = body.size_hint().exact();
        let framing = write_head(&mut self.out, &parts, exact, http10, keep_alive);
        if head_only || framing == Out::None {
            drop(body);
            return self.io.write_all(&self.out).await;
        }
        let mut written = 0;
        let mut sent = 0u64;
        let mut done = false;
        poll_fn(|cx| {
            loop {
                let mut moved = false;
                while !done && self.out.len() - written < WRITE_BATCH {
                    match Pin::new(&mut body).poll_frame(cx) {
                        Poll::Ready(Some(Ok(frame))) => {
                            moved = true;
                            let Ok(data) = frame.into_data() else {
                                continue; // trailers are not passed on
                            };
                            if data.is_empty() {
                                continue;
                            }
                            sent += data.len() as u64;
                            if let Err(e) = put_data(&mut self.out, framing, sent, &data) {
                                return Poll::Ready(Err(e));
                            }
                        }
                        Poll::Ready(None) => {
                            moved = true;
                            done = true;
                            match framing {
                                Out::Chunked => self.out.extend_from_slice(b"0\r\n\r\n"),
                                Out::Length(n) if sent != n => {
                                    return Poll::Ready(Err(io::Error::other(
                                        "the answer body ended before its Content-Length",
                                    )));
                                }
                                _ => {}
                            }
                        }
                        // Cut off: the client sees an incomplete body (no last chunk).
                        Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(io::Error::other(e))),
                        Poll::Pending => break,
                    }
                }
                while written < self.out.len() {
                    match Pin::new(&mut self.io).poll_write(cx, &self.out[written..]) {
                        Poll::Ready(Ok(0)) => {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        Poll::Ready(Ok(n)) => {
                            written += n;
                            moved = true;
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => break,
                    }
                }
                if written == self.out.len() {
                    self.out.clear();
                    written = 0;
                    // Whatever was written reaches the client now (TLS buffers otherwise).
                    match Pin::new(&mut self.io).poll_flush(cx) {
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Ready(Ok(())) if done => return Poll::Ready(Ok(())),
                        _ => {}
                    }
                }
                if self.poll_gone(cx) {
                    return Poll::Ready(Err(io::Error::other("the client closed the connection")));
                }
                if !moved {
                    return Poll::Pending;
                }
            }
        })
        .await
    }

    /// Answers a head or body that cannot be served, and closes.
    async fn refuse(&mut self, status: StatusCode) {
        self.out.clear();
        let _ = write!(
            self.out,
            "HTTP/1.1 {} {}\r\n",
            status.as_str(),
            status.canonical_reason().unwrap_or("")
        );
        DATE.with_borrow_mut(|date| put_header(&mut self.out, b"date", date.now()));
        self.out
            .extend_from_slice(b"content-length: 0\r\nconnection: close\r\n\r\n");
        if self.io.write_all(&self.out).await.is_ok() {
            self.close(true).await;
        }
    }

    /// Ends the connection. With `unread` bytes the client may still be sending, reads
    /// and drops them first (up to [`LINGER`]), so the kernel does not answer them with
    /// a reset that would take the answer with it.
    async fn close(&mut self, unread: bool) {
        if self.io.shutdown().await.is_err() || !unread {
            return;
        }
        let _ = tokio::time::timeout(LINGER, async {
            let mut dropped = 0;
            while dropped < LINGER_BYTES {
                self.buf.clear();
                match self.fill().await {
                    Ok(n) if n > 0 => dropped += n,
                    _ => return,
                }
            }
        })
        .await;
    }
}

/// Writes an answer's head into `out` (the status line, its fields but the hop-by-hop
/// ones, its framing, `Date`, `Connection`), and returns how its body is framed: by its
/// `Content-Length` or `exact` size, chunked, or to the close on HTTP/1.0. An answer that
/// says `close` clears `keep_alive`.
fn write_head(
    out: &mut Vec<u8>,
    parts: &http::response::Parts,
    exact: Option<u64>,
    http10: bool,
    keep_alive: &mut bool,
) -> Out {
    let status = parts.status;
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut length = None;
    let mut dated = false;
    for (name, value) in &parts.headers {
        if *name == header::TRANSFER_ENCODING {
            continue;
        }
        if *name == header::CONNECTION {
            if has_token(value.as_bytes(), "close") {
                *keep_alive = false;
            }
            continue;
        }
        if *name == header::CONTENT_LENGTH {
            if bodiless {
                continue;
            }
            length = std::str::from_utf8(value.as_bytes())
                .ok()
                .and_then(|v| v.parse::<u64>().ok());
        }
        dated |= *name == header::DATE;
        put_header(out, name.as_str().as_bytes(), value.as_bytes());
    }
    let framing = if bodiless {
        Out::None
    } else if let Some(n) = length {
        Out::Length(n)
    } else if let Some(n) = exact {
        put_header(
            out,
            b"content-length",
            itoa::Buffer::new().format(n).as_bytes(),
        );
        Out::Length(n)
    } else if http10 {
        *keep_alive = false;
        Out::Close
    } else {
        put_header(out, b"transfer-encoding", b"chunked");
        Out::Chunked
    };
    if !dated {
        DATE.with_borrow_mut(|date| put_header(out, b"date", date.now()));
    }
    if !*keep_alive {
        put_header(out, b"connection", b"close");
    } else if http10 {
        put_header(out, b"connection", b"keep-alive");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

/// Appends a piece of an answer's body to `out` as `framing` frames it; `sent` is the
/// body's length so far, this piece included. Longer than its `Content-Length`: an error.
fn put_data(out: &mut Vec<u8>, framing: Out, sent: u64, data: &[u8]) -> io::Result<()> {
    match framing {
        Out::Length(n) if sent > n => Err(io::Error::other(
            "the answer body is longer than its Content-Length",
        )),
        Out::Chunked => {
            let _ = write!(out, "{:x}\r\n", data.len());
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
            Ok(())
        }
        _ => {
            out.extend_from_slice(data);
            Ok(())
        }
    }
}

fn put_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

thread_local! {
    /// The `Date` value, made again when the second changes (hyper caches it the same way).
    static DATE: std::cell::RefCell<DateCache> = const {
        std::cell::RefCell::new(DateCache { second: u64::MAX, text: [0; 29] })
    };
}

struct DateCache {
    second: u64,
    text: [u8; 29],
}

impl DateCache {
    fn now(&mut self) -> &[u8] {
        let now = std::time::SystemTime::now();
        let second = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if second != self.second {
            self.second = second;
            self.text
                .copy_from_slice(httpdate::fmt_http_date(now).as_bytes());
        }
        &self.text
    }
}
