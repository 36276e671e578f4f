//! Keep-alive HTTP/1.1 connections to one upstream, held by one worker thread, and the
//! small HTTP/1.1 client that uses them.
//!
//! Each worker has its own `Pool` per upstream (see `Upstream::pool`), so a connection is
//! only ever driven by the thread whose requests use it. The request task drives its
//! connection itself: it writes the whole request (head and body, built by `forward`) in
//! one write, reads the answer's head, and hands back an [`UpBody`] that reads the rest
//! from the same socket as it is polled. Once the body has been read to its end the
//! connection goes back to the pool. There is no task per connection and no channel
//! between a request and its connection; with hyper's client both were there, and they
//! cost about a tenth of a proxied call (see docs/benchmarks.md).
//!
//! - A kept connection the upstream has closed (or sent anything unasked on) is found out
//!   when a request wants it, from the socket's readiness, and dropped.
//! - If a kept connection fails before any byte of the answer came back, the request goes
//!   out once more on a fresh connection when that cannot do harm: when writing it failed
//!   (a closed peer processed nothing), or when its method is idempotent. A `POST` that may
//!   have reached the upstream is never sent twice; it fails with a 502.
//! - A connection unused for [`IDLE_SWEEPS`] sweeps of the pool (one every [`SWEEP`]:
//!   between 60 and 90 s) is closed, by the next request that looks or by the sweep.
//!   Ages are counted in sweeps, so using a connection reads no clock.
//! - At most [`MAX_KEPT`] connections are kept per worker; beyond that a connection
//!   serves its one request and closes.
//! - An answer head larger than [`READ_BUFFER`] is refused, and a body is read at most
//!   [`READ_BUFFER`] bytes at a time, so a large answer passes through in pieces instead
//!   of being held.
//! - A body dropped before its end (client gone, deadline) closes its connection: what is
//!   left of the answer is never read into the next request's.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// How often a pool counts a sweep and closes the connections unused for [`IDLE_SWEEPS`].
const SWEEP: Duration = Duration::from_secs(30);
/// Sweeps after which an unused connection is closed: it has then been unused for more
/// than 60 s and at most 90 s (hyper-util's pool kept them 90 s, nginx's upstream
/// `keepalive_timeout` is 60 s).
pub const IDLE_SWEEPS: u32 = 3;
/// Connections kept per worker and upstream.
pub const MAX_KEPT: usize = 256;
/// The largest answer head read, and the most read from a connection at a time. nginx's
/// `proxy_buffer_size` is 4 or 8 KiB; hyper's default grows to about 400 KiB.
pub const READ_BUFFER: usize = 64 << 10;
/// Headers an answer head may have (hyper's limit too).
const MAX_HEADERS: usize = 100;
/// Room made for reading an answer head when the buffer has less.
const READ_CHUNK: usize = 8 << 10;

struct Conn {
    io: TcpStream,
    /// Bytes read and not yet used: the rest of a head, or body bytes.
    buf: BytesMut,
    /// The pool's sweep count when it was last put back (or made).
    used: u32,
}

impl Conn {
    /// Whether the connection looks usable: not closed by the upstream, nothing unasked
    /// waiting on it. Asks the socket's readiness, which costs no system call unless the
    /// upstream did send something.
    fn alive(&mut self) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        match self.io.poll_read_ready(&mut cx) {
            Poll::Pending => true,
            Poll::Ready(Err(_)) => false,
            // Readable: the end of the stream, an error, or bytes nobody asked for.
            Poll::Ready(Ok(())) => {
                matches!(self.io.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
            }
        }
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
}

pub struct Pool {
    host: String,
    port: u16,
    connect_timeout: Duration,
    kept: Mutex<Vec<Conn>>,
    /// Sweeps so far: the clock kept connections' ages are counted by.
    sweeps: AtomicU32,
}

#[derive(Debug)]
pub enum PoolError {
    /// No connection could be made within the connect timeout.
    Connect(io::Error),
    /// The connection failed or closed before a complete answer head, or the head was
    /// not HTTP/1.1 this client can read.
    Http(io::Error),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::Connect(e) => write!(f, "connect: {e}"),
            PoolError::Http(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PoolError::Connect(e) | PoolError::Http(e) => Some(e),
        }
    }
}

/// The connection ended before the answer's head was complete.
fn closed_early() -> PoolError {
    PoolError::Http(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed before a complete answer head",
    ))
}

fn malformed(what: &str) -> PoolError {
    PoolError::Http(io::Error::new(io::ErrorKind::InvalidData, what.to_string()))
}

/// How a request failed, and whether it may go out again on a fresh connection.
enum Failed {
    /// On a kept connection, and nothing of it can have been acted on, or it is
    /// idempotent: send it again.
    Retry(PoolError),
    Fatal(PoolError),
}

impl Pool {
    /// A pool for `host:port`. When made inside a runtime, it sweeps idle connections on
    /// that runtime until the pool is dropped.
    pub fn new(host: &str, port: u16, connect_timeout: Duration) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            host: host.to_string(),
            port,
            connect_timeout,
            kept: Mutex::new(Vec::new()),
            sweeps: AtomicU32::new(0),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(sweep(Arc::downgrade(&pool)));
        }
        pool
    }

    /// Sends `request` (a whole HTTP/1.1 request, head and body, see `forward`) on a kept
    /// connection or a new one, and returns the answer's head with a body that reads the
    /// rest.
    pub async fn send(
        self: &Arc<Self>,
        method: &Method,
        request: &[u8],
    ) -> Result<Response<UpBody>, PoolError> {
        if let Some(conn) = self.take_alive() {
            match self.exchange(conn, method, request, true).await {
                Ok(response) => return Ok(response),
                Err(Failed::Retry(e)) => {
                    tracing::debug!(error = %e, "kept upstream connection failed; sending again");
                }
                Err(Failed::Fatal(e)) => return Err(e),
            }
        }
        let conn = self.connect().await?;
        match self.exchange(conn, method, request, false).await {
            Ok(response) => Ok(response),
            Err(Failed::Retry(e) | Failed::Fatal(e)) => Err(e),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Conn>> {
        // Nothing panics while holding the lock; recover the list if something ever did.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently used connection that is still usable. Closed and long-unused
    /// connections met on the way are dropped.
    fn take_alive(&self) -> Option<Conn> {
        let sweeps = self.sweeps.load(Ordering::Relaxed);
        let mut kept = self.lock();
        while let Some(mut conn) = kept.pop() {
            if fresh(sweeps, conn.used) && conn.alive() {
                return Some(conn);
            }
        }
        None
    }

    fn put(&self, mut conn: Conn) {
        conn.used = self.sweeps.load(Ordering::Relaxed);
        let mut kept = self.lock();
        if kept.len() < MAX_KEPT {
            kept.push(conn);
        }
    }

    /// Writes `request` on `conn` and reads the answer's head.
    async fn exchange(
        self: &Arc<Self>,
        mut conn: Conn,
        method: &Method,
        request: &[u8],
        reused: bool,
    ) -> Result<Response<UpBody>, Failed> {
        if let Err(e) = conn.io.write_all(request).await {
            let e = PoolError::Http(e);
            return Err(if reused {
                Failed::Retry(e)
            } else {
                Failed::Fatal(e)
            });
        }
        loop {
            if let Some((response, head)) =
                parse_head(&mut conn.buf, method).map_err(Failed::Fatal)?
            {
                let mut body = UpBody {
                    conn: Some(conn),
                    framing: head.framing,
                    keep: head.keep,
                    pool: Arc::downgrade(self),
                };
                body.finish_if_done();
                return Ok(response.map(|()| body));
            }
            if conn.buf.len() > READ_BUFFER {
                return Err(Failed::Fatal(malformed("answer head too large")));
            }
            let got_before = !conn.buf.is_empty();
            let e = match conn.fill().await {
                Ok(n) if n > 0 => continue,
                Ok(_) => closed_early(),
                Err(e) => PoolError::Http(e),
            };
            // Closed or reset before the first byte of an answer: a kept connection the
            // upstream gave up on while the request was on its way.
            return Err(if reused && !got_before && idempotent(method) {
                Failed::Retry(e)
            } else {
                Failed::Fatal(e)
            });
        }
    }

    async fn connect(&self) -> Result<Conn, PoolError> {
        let io = tokio::time::timeout(self.connect_timeout, self.tcp())
            .await
            .map_err(|_| {
                PoolError::Connect(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection within {:?}", self.connect_timeout),
                ))
            })?
            .map_err(PoolError::Connect)?;
        let _ = io.set_nodelay(true);
        Ok(Conn {
            io,
            buf: BytesMut::new(),
            used: self.sweeps.load(Ordering::Relaxed),
        })
    }

    /// A TCP connection to the first of the host's addresses that accepts one.
    async fn tcp(&self) -> io::Result<TcpStream> {
        let mut last = None;
        for addr in tokio::net::lookup_host((self.host.as_str(), self.port)).await? {
            match TcpStream::connect(addr).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some((addr, e)),
            }
        }
        Err(match last {
            Some((addr, e)) => io::Error::new(e.kind(), format!("{addr}: {e}")),
            None => io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} has no address", self.host),
            ),
        })
    }

    /// Counts a sweep and closes the connections unused for [`IDLE_SWEEPS`] of them.
    fn sweep_once(&self) {
        let sweeps = self.sweeps.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        self.lock().retain(|c| fresh(sweeps, c.used));
    }
}

/// Methods a client may repeat without a different effect (RFC 9110 §9.2.2).
fn idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE
    )
}

/// Whether a connection put back at sweep `used` may still be used at sweep `now`.
fn fresh(now: u32, used: u32) -> bool {
    now.wrapping_sub(used) < IDLE_SWEEPS
}

/// Sweeps the pool every [`SWEEP`], for as long as it lives.
async fn sweep(pool: Weak<Pool>) {
    loop {
        tokio::time::sleep(SWEEP).await;
        let Some(pool) = pool.upgrade() else { return };
        pool.sweep_once();
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

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Chunk {
    /// Before a chunk-size line.
    Size,
    /// Inside a chunk: this many data bytes are left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    End,
    /// After the last chunk: trailer lines up to an empty one.
    Trailers,
}

/// Parses an answer head at the start of `buf`. `Ok(None)`: not complete yet. On success
/// the head's bytes are taken off `buf`; interim (1xx) heads are skipped.
fn parse_head(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<(Response<()>, Head)>, PoolError> {
    loop {
        // Slots httparse fills; left uninitialised, as zeroing them costs more than parsing.
        let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
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
        let mut chunked = false;
        let mut encoded = false;
        let mut keep = !http10;
        // Whether a `Connection` field names other fields to remove.
        let mut names_fields = false;
        for &span in spans {
            let name = crate::http::headval::name(&bytes[span.name()])
                .map_err(|_| malformed("header name"))?;
            let value = HeaderValue::from_maybe_shared(bytes.slice(span.value()))
                .map_err(|_| malformed("header value"))?;
            if name == header::CONTENT_LENGTH {
                let n = std::str::from_utf8(value.as_bytes())
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .ok_or_else(|| malformed("Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(malformed("conflicting Content-Length"));
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
            if name != header::CONNECTION && crate::pipeline::forward::is_hop_by_hop(&name) {
                continue;
            }
            headers.append(name, value);
        }
        // An answer head leaves the pool without hop-by-hop fields (RFC 9110 §7.6.1).
        if names_fields {
            crate::pipeline::forward::strip_hop_by_hop(&mut headers);
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

/// Where a header's name and value sit in the buffer it was parsed from. Offsets are
/// `u32`: heads are bounded far below that (16 MiB for a request, the read buffer for an
/// answer), and a smaller span keeps [`Spans`] cheap to make and to return.
#[derive(Clone, Copy, Default)]
pub(crate) struct Span {
    pub(crate) name: (u32, u32),
    pub(crate) value: (u32, u32),
}

impl Span {
    pub(crate) fn name(self) -> std::ops::Range<usize> {
        self.name.0 as usize..self.name.1 as usize
    }

    pub(crate) fn value(self) -> std::ops::Range<usize> {
        self.value.0 as usize..self.value.1 as usize
    }
}

/// The spans of `headers`, parsed by httparse from `buf`, so a header map can share the
/// buffer's bytes (once frozen) rather than copy them. Up to [`INLINE_SPANS`] of them (any
/// ordinary head) are kept on the stack, more on the heap.
pub(crate) fn header_spans(buf: &[u8], headers: &[httparse::Header<'_>]) -> Spans {
    debug_assert!(buf.len() <= u32::MAX as usize || headers.is_empty());
    let base = buf.as_ptr() as usize;
    let span = |h: &httparse::Header<'_>| {
        let (n, v) = (
            h.name.as_ptr() as usize - base,
            h.value.as_ptr() as usize - base,
        );
        Span {
            name: (n as u32, (n + h.name.len()) as u32),
            value: (v as u32, (v + h.value.len()) as u32),
        }
    };
    Spans(headers.iter().map(span).collect())
}

const INLINE_SPANS: usize = 16;

/// See [`header_spans`]. Its inline slots are not written until used, so a head with a
/// few fields costs no clearing of sixteen.
pub(crate) struct Spans(smallvec::SmallVec<[Span; INLINE_SPANS]>);

impl Spans {
    pub(crate) fn as_slice(&self) -> &[Span] {
        &self.0
    }
}

/// How an answer's body is read, and whether its connection may be used again after it.
#[derive(Debug, PartialEq)]
struct Head {
    framing: Framing,
    keep: bool,
}

/// The body of an upstream's answer, read from its connection as it is polled.
pub struct UpBody {
    /// Until the end: then back to the pool, or closed.
    conn: Option<Conn>,
    framing: Framing,
    /// Whether the connection may take another request once the body has been read.
    keep: bool,
    pool: Weak<Pool>,
}

/// The upstream broke off its answer, or sent one this client cannot read.
#[derive(Debug, thiserror::Error)]
#[error("upstream answer body: {0}")]
pub struct BodyError(&'static str);

impl UpBody {
    /// At the end of the body, the connection goes back to the pool if it may be kept.
    fn finish_if_done(&mut self) {
        if self.framing == Framing::Done
            && let Some(conn) = self.conn.take()
            && self.keep
            && let Some(pool) = self.pool.upgrade()
        {
            pool.put(conn);
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
                Framing::Chunked(state) => match step_chunk(&mut conn.buf, state)? {
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
                },
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

/// Up to `left` bytes off the front of `buf`, and how many are left after them.
fn take_up_to(buf: &mut BytesMut, left: u64) -> (Bytes, u64) {
    let n = (buf.len() as u64).min(left) as usize;
    (buf.split_to(n).freeze(), left - n as u64)
}

pub(crate) enum ChunkStep {
    Data(Bytes, Chunk),
    /// Framing bytes taken; go on.
    Moved(Chunk),
    Ended,
    NeedMore,
}

/// One step of chunked decoding over what `buf` holds.
pub(crate) fn step_chunk(buf: &mut BytesMut, state: Chunk) -> Result<ChunkStep, BodyError> {
    Ok(match state {
        Chunk::Size => match httparse::parse_chunk_size(buf) {
            Ok(httparse::Status::Complete((len, 0))) => {
                buf.advance(len);
                ChunkStep::Moved(Chunk::Trailers)
            }
            Ok(httparse::Status::Complete((len, size))) => {
                buf.advance(len);
                ChunkStep::Moved(Chunk::Data(size))
            }
            Ok(httparse::Status::Partial) => ChunkStep::NeedMore,
            Err(_) => return Err(BodyError("bad chunk size")),
        },
        Chunk::Data(left) if !buf.is_empty() => {
            let (data, left) = take_up_to(buf, left);
            let next = if left == 0 {
                Chunk::End
            } else {
                Chunk::Data(left)
            };
            ChunkStep::Data(data, next)
        }
        Chunk::Data(_) => ChunkStep::NeedMore,
        Chunk::End => match buf.get(..2) {
            Some(b"\r\n") => {
                buf.advance(2);
                ChunkStep::Moved(Chunk::Size)
            }
            Some(_) => return Err(BodyError("chunk without its CRLF")),
            None => ChunkStep::NeedMore,
        },
        Chunk::Trailers => match buf.iter().position(|&b| b == b'\n') {
            // An empty line ends the trailers (and the body); other lines are dropped.
            Some(end) => {
                let empty = buf[..end].iter().all(|&b| b == b'\r');
                buf.advance(end + 1);
                if empty {
                    ChunkStep::Ended
                } else {
                    ChunkStep::Moved(Chunk::Trailers)
                }
            }
            None => ChunkStep::NeedMore,
        },
    })
}

impl Body for UpBody {
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

    fn head(text: &str, method: Method) -> Result<Option<(Response<()>, Head)>, PoolError> {
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
        assert!(head(&format!("{ok}content-length: x\r\n\r\n"), Method::POST).is_err());
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

    /// Decodes all of `wire` in the given pieces, as reads would deliver them.
    fn dechunk(pieces: &[&[u8]]) -> Result<(Vec<u8>, bool), BodyError> {
        let mut buf = BytesMut::new();
        let mut state = Chunk::Size;
        let mut out = Vec::new();
        for piece in pieces {
            buf.extend_from_slice(piece);
            loop {
                match step_chunk(&mut buf, state)? {
                    ChunkStep::Data(d, next) => {
                        out.extend_from_slice(&d);
                        state = next;
                    }
                    ChunkStep::Moved(next) => state = next,
                    ChunkStep::Ended => return Ok((out, buf.is_empty())),
                    ChunkStep::NeedMore => break,
                }
            }
        }
        Err(BodyError("not ended"))
    }

    #[test]
    fn chunked_bodies_decode_however_they_are_split() {
        let wire = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-trailer: t\r\n\r\n";
        for cut in 0..wire.len() {
            let (a, b) = wire.split_at(cut);
            let (out, clean) = dechunk(&[a, b]).unwrap();
            assert_eq!(out, b"hello world", "cut at {cut}");
            assert!(clean);
        }
        let bytewise: Vec<&[u8]> = wire.chunks(1).collect();
        assert_eq!(dechunk(&bytewise).unwrap().0, b"hello world");
        assert!(dechunk(&[b"zz\r\n"]).is_err());
        assert!(dechunk(&[b"2\r\nabXY"]).is_err());
    }

    /// A kept connection is closed once it has gone unused for `IDLE_SWEEPS` sweeps, and
    /// each use starts its count again. The upstream is a real socket on loopback that
    /// answers every request on a connection and counts the connections it accepted.
    #[tokio::test]
    async fn unused_connections_close_after_three_sweeps() {
        use std::sync::atomic::AtomicUsize;
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await
                        && n > 0
                    {
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                            .await;
                    }
                });
            }
        });
        let pool = Pool::new("127.0.0.1", port, Duration::from_secs(5));
        let request = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
        let call = || async {
            use http_body_util::BodyExt;
            let answer = pool.send(&Method::GET, request).await.unwrap();
            assert_eq!(answer.status(), StatusCode::OK);
            // Read to its end, the body puts the connection back in the pool.
            let body = answer.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
        };
        call().await;
        assert_eq!(pool.lock().len(), 1);
        pool.sweep_once();
        pool.sweep_once();
        // Used again after two sweeps: its count starts over, and no new connection.
        call().await;
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
        pool.sweep_once();
        pool.sweep_once();
        assert_eq!(pool.lock().len(), 1, "two sweeps since its last use");
        pool.sweep_once();
        assert_eq!(pool.lock().len(), 0, "three sweeps since its last use");
        call().await;
        assert_eq!(
            accepted.load(Ordering::Relaxed),
            2,
            "a new connection after"
        );
        // A connection left in the list past its age is not used either (the sweep may
        // come after the request that finds it).
        pool.sweeps.fetch_add(IDLE_SWEEPS, Ordering::Relaxed);
        call().await;
        assert_eq!(accepted.load(Ordering::Relaxed), 3);
    }
}
