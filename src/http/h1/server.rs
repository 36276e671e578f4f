//! HTTP/1.1 connections from clients, served by our own code: reading request heads and
//! bodies, writing answers, keep-alive and pipelining, marking the waits for a request head
//! (the header-read timeout is enforced by the connection's watch, `server.rs`), noticing a
//! client that hangs up, and closing without losing the last answer. It knows nothing of
//! MCP: every request goes to the service it is given. HTTP/2 stays with hyper
//! (`server.rs`); a connection that opens with the HTTP/2 preface is handed back for it.
//!
//! Why our own: with hyper's server, a connection task and its dispatcher, the header map
//! built twice and timers re-armed for every request cost more than nginx spends on a
//! whole proxied call (docs/benchmarks.md). Here a request's head is parsed once with
//! httparse, its body read before the service is called, and the answer's head and first
//! bytes go out in one write.
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

use super::framing::{self, Chunk, ChunkStep, step_chunk};
use crate::http::fields::{Fields, Kind, header_spans};
use crate::http::request::ClientBody;
use crate::http::request::{ClientRequest, Target};
use bytes::{Bytes, BytesMut};
use futures_util::task::AtomicWaker;
use http::header;
use http::{Method, Response, StatusCode};
use http_body::Body;
use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::io::{self, Write as _};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// What a client with HTTP/2 prior knowledge sends first (RFC 9113 §3.4).
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Header fields a request head may have (hyper's limit too).
pub const MAX_HEADERS: usize = 100;
/// The longest field name taken (the `http` crate's limit, so hyper's for HTTP/2 too).
const MAX_NAME: usize = (1 << 16) - 1;
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
}

/// Which wait for a request head a connection is in, if any. The connection marks its waits
/// with a plain store (no clock, no timer); a watch that looks every so often closes a
/// connection whose wait has lasted longer than the header-read timeout (`server.rs`). A
/// wait begins when the connection first needs bytes for a head: on a kept connection,
/// after the previous answer.
///
/// One count, moved on by each start and each end of a wait (only the connection writes
/// it): odd while a wait is under way, and a different odd number for each wait.
#[derive(Debug, Default)]
pub struct HeadWaits(AtomicU32);

impl HeadWaits {
    /// The wait under way, by a number of its own (never 0); 0 when the connection is not
    /// waiting for a head.
    pub fn current(&self) -> u32 {
        let count = self.0.load(Ordering::Relaxed);
        if count % 2 == 1 { count } else { 0 }
    }

    fn begin(&self) {
        let count = self.0.load(Ordering::Relaxed);
        if count % 2 == 0 {
            self.0.store(count.wrapping_add(1), Ordering::Relaxed);
        }
    }

    fn end(&self) {
        let count = self.0.load(Ordering::Relaxed);
        if count % 2 == 1 {
            self.0.store(count.wrapping_add(1), Ordering::Relaxed);
        }
    }
}

/// How a connection ended.
pub enum Ended<I> {
    Closed,
    /// The client opened with the HTTP/2 preface: serve it over HTTP/2 with these bytes,
    /// already read, first.
    H2(I, Bytes),
}

/// The gateway's signal to finish and close, given once for all connections. A
/// connection reads the flag with a plain load on every request (the line is only ever
/// written once), and one waiting between requests leaves its waker here to be woken.
/// (A `watch` channel, as before, took a lock shared by every connection of both workers
/// each time one looked.)
#[derive(Default)]
pub struct DrainSignal {
    given: AtomicBool,
    waiting: std::sync::Mutex<HashMap<u64, Arc<AtomicWaker>>>,
    next: AtomicU64,
}

impl DrainSignal {
    /// Gives the signal: every connection finishes its request in progress and closes;
    /// idle ones are woken to close at once.
    pub fn give(&self) {
        self.given.store(true, Ordering::SeqCst);
        let waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        for waker in waiting.values() {
            waker.wake();
        }
    }
}

/// One connection's view of the [`DrainSignal`].
pub struct Drain {
    signal: Arc<DrainSignal>,
    id: u64,
    waker: Arc<AtomicWaker>,
    /// The waker last registered: a connection's task keeps one waker, so registering it
    /// again on every wait (an atomic exchange and a clone) is skipped. `give` is the
    /// only one to wake it, and after it the flag answers every look.
    registered: Option<std::task::Waker>,
}

impl Drain {
    pub fn new(signal: Arc<DrainSignal>) -> Drain {
        let id = signal.next.fetch_add(1, Ordering::Relaxed);
        let waker = Arc::new(AtomicWaker::new());
        signal
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, waker.clone());
        Drain {
            signal,
            id,
            waker,
            registered: None,
        }
    }

    fn draining(&self) -> bool {
        self.signal.given.load(Ordering::Acquire)
    }

    /// Whether the signal was given; if not, `cx` is woken when it is.
    fn poll(&mut self, cx: &mut Context<'_>) -> bool {
        if self.draining() {
            return true;
        }
        if self
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return false;
        }
        self.waker.register(cx.waker());
        self.registered = Some(cx.waker().clone());
        // Given between the first look and the registration: `give` may have missed us.
        self.draining()
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        let mut waiting = self
            .signal
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        waiting.remove(&self.id);
    }
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

/// How a request's body is framed (RFC 9112 §6).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Framing {
    None,
    Length(u64),
    Chunked,
}

#[derive(Debug)]
struct Parsed {
    method: Method,
    target: Target,
    fields: Fields,
    framing: Framing,
    keep_alive: bool,
    expect_continue: bool,
    http10: bool,
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
                    match parse(&mut self.buf, self.settings.max_head) {
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
        loop {
            match step_chunk(&mut self.buf, state) {
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
        let status = parts.status;
        let bodiless = status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let out = &mut self.out;
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
        } else if let Some(n) = body.size_hint().exact() {
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
                            match framing {
                                Out::Length(n) if sent > n => {
                                    return Poll::Ready(Err(io::Error::other(
                                        "the answer body is longer than its Content-Length",
                                    )));
                                }
                                Out::Chunked => {
                                    let _ = write!(self.out, "{:x}\r\n", data.len());
                                    self.out.extend_from_slice(&data);
                                    self.out.extend_from_slice(b"\r\n");
                                }
                                _ => self.out.extend_from_slice(&data),
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

fn put_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn has_token(value: &[u8], token: &str) -> bool {
    crate::http::fields::visible(value).is_some_and(|v| crate::http::headval::lists(v, token))
}

/// Parses a request head at the start of `buf`. `Ok(None)`: not complete yet. On success
/// the head's bytes are taken off `buf`. `Err`: the status to refuse it with, and why.
fn parse(
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
        // field that reaches the pipeline could be put in a `HeaderName` (as it once was).
        if name.len() > MAX_NAME {
            return Err(bad("field name"));
        }
        match kind {
            Kind::ContentLength => {
                let n = framing::content_length(value).ok_or(bad("Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(bad("conflicting Content-Length"));
                }
                length = Some(n);
            }
            Kind::TransferEncoding => {
                if http10 || chunked {
                    return Err(bad("Transfer-Encoding"));
                }
                if !value.eq_ignore_ascii_case(b"chunked") {
                    return Err((StatusCode::NOT_IMPLEMENTED, "transfer coding"));
                }
                chunked = true;
            }
            Kind::Host => hosts += 1,
            Kind::Connection => {
                if has_token(value, "close") {
                    keep_alive = false;
                } else if http10 && has_token(value, "keep-alive") {
                    keep_alive = true;
                }
            }
            Kind::Expect => expect_continue = value.eq_ignore_ascii_case(b"100-continue"),
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
        (true, _) => Framing::Chunked,
        (false, Some(0) | None) => Framing::None,
        (false, Some(n)) => Framing::Length(n),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Option<Parsed>, (StatusCode, &'static str)> {
        parse(&mut BytesMut::from(text), 64 << 10)
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
            let read = parse(&mut BytesMut::from(&text[..]), 1 << 20);
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
            let fields: Vec<(Kind, &[u8], &[u8])> = parsed.fields.iter().collect();
            assert_eq!(fields.len(), n + 1, "{n}");
            assert_eq!(fields[0], (Kind::Host, &b"Host"[..], &b"a"[..]));
            for i in 0..n {
                let (name, value) = (format!("X-F{i}"), format!("v{i}"));
                assert_eq!(
                    fields[i + 1],
                    (Kind::Other, name.as_bytes(), value.as_bytes())
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
            assert!(parse(&mut buf, 1 << 16).unwrap().is_none(), "{cut}");
            assert_eq!(buf.len(), cut, "nothing taken from a partial head");
        }
        let mut buf = BytesMut::from(text);
        let p = parse(&mut buf, 1 << 16).unwrap().unwrap();
        assert_eq!(&buf[..], b"{}GET", "the body and what follows stay");
        assert_eq!(p.method, Method::POST);
        assert_eq!(p.target.query(), Some("q=1"));
        assert_eq!(p.fields.get(Kind::Host), Some(&b"a"[..]));
        assert_eq!(p.fields.get_str(Kind::Expect), Some("100-continue"));
        assert!(!p.keep_alive && p.expect_continue && !p.http10);
        // Over the size limit while still partial: refused rather than buffered.
        let mut big = BytesMut::from(&format!("GET /m HTTP/1.1\r\nX: {}", "a".repeat(100))[..]);
        assert_eq!(parse(&mut big, 64).unwrap_err().0, 431);
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
