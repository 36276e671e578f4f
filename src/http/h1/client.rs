//! The HTTP/1.1 client side: one request written whole on a connection, the answer's
//! head read with httparse, and a body ([`UpBody`]) that reads the rest from the same
//! connection as it is polled. It is generic over the stream (`stream::Stream`: TCP, TLS
//! over TCP, a unix socket) and knows nothing of pools: a finished connection goes
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

use bytes::{Bytes, BytesMut};
use http::{Method, Response};
use http_body::{Body, Frame, SizeHint};
use std::io;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll, Waker, ready};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use wire::h1::framing::{self, ChunkStep, Overhead, step_chunk, take_up_to};
use wire::h1::head::{AnswerFraming as Framing, parse_answer};

/// The largest answer head read, and the most read from a connection at a time. nginx's
/// `proxy_buffer_size` is 4 or 8 KiB; hyper's default grows to about 400 KiB.
pub const READ_BUFFER: usize = 64 << 10;
/// Room made for reading an answer head when the buffer has less.
const READ_CHUNK: usize = 8 << 10;

/// Where a connection goes once its answer has been read to the end and it may be used
/// again (a pool).
pub trait Home<IO>: Send + Sync {
    fn put(&self, conn: Conn<IO>);
    /// An answer's body is done with: read to its end (before `put`), broken off, or
    /// dropped. Called once per answer an exchange returned.
    fn finished(&self) {}
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

    /// Writes `request` (a whole HTTP/1.1 request, head and body) in one write, calls
    /// `written` once it is, and reads the answer's head; the body reads the rest and, at
    /// its end, hands the connection to `home` if it may be kept.
    pub async fn exchange(
        mut self,
        method: &Method,
        request: &[u8],
        home: Weak<dyn Home<IO>>,
        written: &mut (dyn FnMut() + Send),
    ) -> Result<Response<UpBody<IO>>, Failure> {
        if let Err(error) = self.io.write_all(request).await {
            return Err(Failure {
                stage: Stage::Write,
                error,
            });
        }
        written();
        loop {
            if let Some((response, head)) =
                parse_answer(&mut self.buf, method).map_err(|error| Failure {
                    stage: Stage::Answer,
                    error,
                })?
            {
                let mut body = UpBody {
                    conn: Some(self),
                    framing: head.framing,
                    overhead: Overhead::new(framing::DEFAULT_CHUNK_OVERHEAD),
                    keep: head.keep,
                    home,
                    open: true,
                    unknown_want: READ_CHUNK,
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

/// The body of an upstream's answer, read from its connection as it is polled.
pub struct UpBody<IO> {
    /// Until the end: then back to the pool, or closed.
    conn: Option<Conn<IO>>,
    framing: Framing,
    /// The chunk extensions and trailers read so far, bounded.
    overhead: Overhead,
    /// Whether the connection may take another request once the body has been read.
    keep: bool,
    home: Weak<dyn Home<IO>>,
    /// Until its home has been told it is done with (`Home::finished`).
    open: bool,
    /// How much the next read of a body of unknown length asks room for: from
    /// [`READ_CHUNK`], doubled up to [`READ_BUFFER`] each time a read fills it, so a large
    /// answer soon takes few reads and a stream that waits (an SSE call held for its
    /// client's answer, a GET stream) keeps a small buffer.
    unknown_want: usize,
}

/// The upstream broke off its answer, or sent one this client cannot read.
#[derive(Debug, thiserror::Error)]
#[error("upstream answer body: {0}")]
pub struct BodyError(&'static str);

impl BodyError {
    /// An answer broken off for the reason given (a stdio upstream's process that exited).
    pub fn new(why: &'static str) -> BodyError {
        BodyError(why)
    }
}

impl From<framing::ChunkError> for BodyError {
    fn from(e: framing::ChunkError) -> BodyError {
        BodyError(e.0)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static> UpBody<IO> {
    /// At the end of the body, the connection goes back to the pool if it may be kept.
    fn finish_if_done(&mut self) {
        if self.framing != Framing::Done {
            return;
        }
        let conn = self.conn.take();
        if let Some(home) = self.home.upgrade() {
            if std::mem::take(&mut self.open) {
                home.finished();
            }
            if let Some(conn) = conn
                && self.keep
            {
                home.put(conn);
            }
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
                    match step_chunk(&mut conn.buf, state, &mut self.overhead)
                        .map_err(BodyError::from)?
                    {
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
            // to READ_BUFFER (a large answer then takes few reads); of a body of unknown
            // length, as large as the last reads showed it needs.
            let want = match self.framing {
                Framing::Length(left) => (left as usize).min(READ_BUFFER),
                _ => self.unknown_want,
            };
            let conn = self.conn.as_mut().expect("checked above");
            match ready!(conn.poll_fill(cx, want)) {
                Ok(n) if n > 0 => {
                    if n >= self.unknown_want {
                        self.unknown_want = (self.unknown_want * 2).min(READ_BUFFER);
                    }
                }
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

impl<IO> Drop for UpBody<IO> {
    fn drop(&mut self) {
        if self.open
            && let Some(home) = self.home.upgrade()
        {
            home.finished();
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
