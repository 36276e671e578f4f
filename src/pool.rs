//! Keep-alive HTTP/1.1 connections to one upstream, held by one worker thread.
//!
//! Each worker has its own `Pool` per upstream (see `Upstream::pool`), so a connection is
//! only ever driven by the thread whose requests use it. A pool is a short list of
//! connections: a request takes the most recently used one that is ready, sends on it,
//! and puts it straight back; the connection is ready again once hyper has read the whole
//! answer. This replaces hyper-util's general client, whose pool keys every checkout by
//! scheme and authority and hands connections back through extra tasks and channels.
//!
//! - A connection found closed when a request wants it is dropped. If it closes after it
//!   was taken but before the request was written, the request goes out once more on a
//!   fresh connection (hyper hands the unsent request back).
//! - A connection unused for [`IDLE`] is closed, by the next request that looks or by a
//!   sweep every [`SWEEP`].
//! - At most [`MAX_KEPT`] connections are kept per worker; beyond that a connection
//!   serves its one request and closes.
//! - A connection reads at most [`READ_BUFFER`] bytes at a time, so a large streamed
//!   answer passes through in small pieces instead of growing a buffer per connection.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::TrySendError;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// How long an unused connection is kept open (what hyper-util's pool used before).
pub const IDLE: Duration = Duration::from_secs(90);
/// How often a pool closes connections unused for [`IDLE`] when no request looks.
const SWEEP: Duration = Duration::from_secs(30);
/// Connections kept per worker and upstream.
pub const MAX_KEPT: usize = 256;
/// About the most a connection buffers of an answer: a body passes through in reads of
/// up to this size, and a head still incomplete past it is refused (hyper checks between
/// reads, so one read can take a little more). nginx's `proxy_buffer_size` is 4 or 8 KiB;
/// hyper's default grows to about 400 KiB per connection, held while a large answer
/// streams.
pub const READ_BUFFER: usize = 64 << 10;

type Sender = SendRequest<Full<Bytes>>;

struct Kept {
    sender: Sender,
    /// When a request last went out on it.
    used: Instant,
}

impl Kept {
    /// Closed by the upstream, or idle for longer than [`IDLE`]: to be dropped.
    fn stale(&self, now: Instant) -> bool {
        self.sender.is_closed() || (self.sender.is_ready() && now - self.used > IDLE)
    }
}

pub struct Pool {
    host: String,
    port: u16,
    connect_timeout: Duration,
    kept: Mutex<Vec<Kept>>,
}

#[derive(Debug)]
pub enum PoolError {
    /// No connection could be made within the connect timeout.
    Connect(std::io::Error),
    /// The connection failed or closed before a complete answer head.
    Http(hyper::Error),
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
            PoolError::Connect(e) => Some(e),
            PoolError::Http(e) => std::error::Error::source(e),
        }
    }
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
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(sweep(Arc::downgrade(&pool)));
        }
        pool
    }

    /// Sends `request` (its URI in origin form, its `Host` set) on a kept connection or a
    /// new one, and returns the answer's head.
    pub async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, PoolError> {
        if let Some(sender) = self.take_ready() {
            match self.dispatch(sender, request).await {
                Ok(response) => return Ok(response),
                Err(e) => request = unsent(e)?,
            }
        }
        let sender = self.connect().await?;
        self.dispatch(sender, request)
            .await
            .map_err(|e| PoolError::Http(e.into_error()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        // Nothing panics while holding the lock; recover the list if something ever did.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently used connection that can take a request now. Closed and
    /// long-unused connections met on the way are dropped.
    fn take_ready(&self) -> Option<Sender> {
        let now = Instant::now();
        let mut kept = self.lock();
        let mut i = kept.len();
        while i > 0 {
            i -= 1;
            let k = &kept[i];
            if k.stale(now) {
                kept.swap_remove(i);
            } else if k.sender.is_ready() {
                return Some(kept.swap_remove(i).sender);
            }
        }
        None
    }

    /// Starts `request` on `sender` and keeps the connection for the next request, which
    /// can have it once this answer has been read.
    fn dispatch(
        &self,
        mut sender: Sender,
        request: Request<Full<Bytes>>,
    ) -> impl Future<Output = Result<Response<Incoming>, TrySendError<Request<Full<Bytes>>>>> + use<>
    {
        let sent = sender.try_send_request(request);
        let mut kept = self.lock();
        if kept.len() < MAX_KEPT {
            kept.push(Kept {
                sender,
                used: Instant::now(),
            });
        }
        sent
    }

    async fn connect(&self) -> Result<Sender, PoolError> {
        let stream = tokio::time::timeout(self.connect_timeout, self.tcp())
            .await
            .map_err(|_| {
                PoolError::Connect(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {:?}", self.connect_timeout),
                ))
            })?
            .map_err(PoolError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::Builder::new()
            .max_buf_size(READ_BUFFER)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(PoolError::Http)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    /// A TCP connection to the first of the host's addresses that accepts one.
    async fn tcp(&self) -> std::io::Result<TcpStream> {
        let mut last = None;
        for addr in tokio::net::lookup_host((self.host.as_str(), self.port)).await? {
            match TcpStream::connect(addr).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some((addr, e)),
            }
        }
        Err(match last {
            Some((addr, e)) => std::io::Error::new(e.kind(), format!("{addr}: {e}")),
            None => std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} has no address", self.host),
            ),
        })
    }
}

/// The request back from a connection that closed before it was written, or the error.
fn unsent(mut e: TrySendError<Request<Full<Bytes>>>) -> Result<Request<Full<Bytes>>, PoolError> {
    e.take_message()
        .ok_or_else(|| PoolError::Http(e.into_error()))
}

/// Closes connections unused for [`IDLE`] every [`SWEEP`], for as long as the pool lives.
async fn sweep(pool: Weak<Pool>) {
    loop {
        tokio::time::sleep(SWEEP).await;
        let Some(pool) = pool.upgrade() else { return };
        let now = Instant::now();
        pool.lock().retain(|k| !k.stale(now));
    }
}
