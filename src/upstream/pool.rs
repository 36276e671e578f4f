//! A worker's keep-alive connections to one upstream, and the sending of a request on
//! one of them (the exchange itself is `http::h1::client`).
//!
//! Each worker has its own `Pool` per upstream (`gateway`'s registry hands out the
//! thread's), so a connection is only ever driven by the thread whose requests use it.
//! The request task drives its connection itself: no task per connection and no channel
//! between a request and its connection.
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
//! - A request that fails on a new connection before the upstream can have acted on it
//!   (no connection, or the write failed) says so (`PoolError::Connect`, `Unsent`): the
//!   caller may send it to another endpoint.
//! - Each pool counts its requests in flight (`busy`) until their answers are done with,
//!   for `least_requests` balancing.
//! - A new connection goes to the upstream's `Address`: TCP, with the TLS handshake
//!   first for https (a failed handshake is a failed connect), or a unix socket.

use crate::config::Address;
use crate::config::tls::UpstreamTls;
use crate::http::h1::client::{self, Conn, Failure, Home, Stage};
use crate::http::h1::stream::Stream;
use http::{Method, Response};
use std::io;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::net::{TcpStream, UnixStream};

/// The body of an upstream's answer, as this pool's connections read it.
pub type UpBody = client::UpBody<Stream>;

/// How often a pool counts a sweep and closes the connections unused for [`IDLE_SWEEPS`].
const SWEEP: Duration = Duration::from_secs(30);
/// Sweeps after which an unused connection is closed: it has then been unused for more
/// than 60 s and at most 90 s (hyper-util's pool kept them 90 s, nginx's upstream
/// `keepalive_timeout` is 60 s).
pub const IDLE_SWEEPS: u32 = 3;
/// Connections kept per worker and upstream.
pub const MAX_KEPT: usize = 256;

/// A kept connection and the pool's sweep count when it was put back (or made).
struct Kept {
    conn: Conn<Stream>,
    used: u32,
}

pub struct Pool {
    address: Address,
    /// For an https upstream: the handshake every new connection makes first.
    tls: Option<Arc<UpstreamTls>>,
    connect_timeout: Duration,
    kept: Mutex<Vec<Kept>>,
    /// Sweeps so far: the clock kept connections' ages are counted by.
    sweeps: AtomicU32,
    /// Requests sent on this pool whose answers are not done with: what `least_requests`
    /// compares. Only this pool's worker writes it.
    busy: AtomicUsize,
}

#[derive(Debug)]
pub enum PoolError {
    /// No connection could be made within the connect timeout.
    Connect(io::Error),
    /// A new connection failed while the request was being written: the upstream cannot
    /// have had all of it, so it cannot have acted on it.
    Unsent(io::Error),
    /// The connection failed or closed before a complete answer head, or the head was
    /// not HTTP/1.1 this client can read.
    Http(io::Error),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::Connect(e) => write!(f, "connect: {e}"),
            PoolError::Unsent(e) => write!(f, "writing the request: {e}"),
            PoolError::Http(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PoolError::Connect(e) | PoolError::Unsent(e) | PoolError::Http(e) => Some(e),
        }
    }
}

impl Home<Stream> for Pool {
    fn put(&self, conn: Conn<Stream>) {
        let used = self.sweeps.load(Ordering::Relaxed);
        let mut kept = self.lock();
        if kept.len() < MAX_KEPT {
            kept.push(Kept { conn, used });
        }
    }

    fn finished(&self) {
        self.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pool {
    /// A pool for `address`, over TLS when `tls` is given. When made inside a runtime, it sweeps idle connections on
    /// that runtime until the pool is dropped.
    pub fn new(
        address: Address,
        tls: Option<Arc<UpstreamTls>>,
        connect_timeout: Duration,
    ) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            address,
            tls,
            connect_timeout,
            kept: Mutex::new(Vec::new()),
            sweeps: AtomicU32::new(0),
            busy: AtomicUsize::new(0),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(sweep(Arc::downgrade(&pool)));
        }
        pool
    }

    /// Sends `request` (a whole HTTP/1.1 request, head and body, see `upstream::encode`) on a kept
    /// connection or a new one, and returns the answer's head with a body that reads the
    /// rest. `written` is called once the request is written (not when a write fails and
    /// the request goes again on a fresh connection).
    pub async fn send(
        self: &Arc<Self>,
        method: &Method,
        request: &[u8],
        written: &mut (dyn FnMut() + Send),
    ) -> Result<Response<UpBody>, PoolError> {
        self.busy.fetch_add(1, Ordering::Relaxed);
        let sent = self.exchange(method, request, written).await;
        if sent.is_err() {
            self.busy.fetch_sub(1, Ordering::Relaxed);
        }
        sent
    }

    /// Requests in flight on this pool (sent, and their answers not done with).
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    async fn exchange(
        self: &Arc<Self>,
        method: &Method,
        request: &[u8],
        written: &mut (dyn FnMut() + Send),
    ) -> Result<Response<UpBody>, PoolError> {
        let home = || Arc::downgrade(self) as Weak<dyn Home<Stream>>;
        if let Some(conn) = self.take_alive() {
            match conn.exchange(method, request, home(), written).await {
                Ok(response) => return Ok(response),
                // Nothing of it can have been acted on, or doing it again does no harm.
                Err(Failure { stage, error })
                    if stage == Stage::Write
                        || (stage == Stage::NoAnswer && idempotent(method)) =>
                {
                    tracing::debug!(%error, "kept upstream connection failed; sending again");
                }
                Err(f) => return Err(PoolError::Http(f.error)),
            }
        }
        let conn = self.connect().await?;
        conn.exchange(method, request, home(), written)
            .await
            .map_err(|f| match f.stage {
                Stage::Write => PoolError::Unsent(f.error),
                _ => PoolError::Http(f.error),
            })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        // Nothing panics while holding the lock; recover the list if something ever did.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The most recently used connection that is still usable. Closed and long-unused
    /// connections met on the way are dropped.
    fn take_alive(&self) -> Option<Conn<Stream>> {
        let sweeps = self.sweeps.load(Ordering::Relaxed);
        let mut kept = self.lock();
        while let Some(Kept { mut conn, used }) = kept.pop() {
            if fresh(sweeps, used) && conn.alive() {
                return Some(conn);
            }
        }
        None
    }

    async fn connect(&self) -> Result<Conn<Stream>, PoolError> {
        let io = tokio::time::timeout(self.connect_timeout, self.open())
            .await
            .map_err(|_| {
                PoolError::Connect(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection within {:?}", self.connect_timeout),
                ))
            })?
            .map_err(PoolError::Connect)?;
        Ok(Conn::new(io))
    }

    async fn open(&self) -> io::Result<Stream> {
        match &self.address {
            Address::Tcp { host, port } => {
                let io = tcp(host, *port).await?;
                let _ = io.set_nodelay(true);
                let Some(tls) = &self.tls else {
                    return Ok(Stream::Tcp(io));
                };
                // A failed handshake (an unknown CA, a wrong name, an expired certificate,
                // a client certificate refused) is a failed connect: the error names the
                // cause for the log, and nothing is sent in the clear.
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let io = connector.connect(tls.server_name.clone(), io).await?;
                Ok(Stream::Tls(Box::new(io)))
            }
            Address::Unix(path) => UnixStream::connect(path)
                .await
                .map(Stream::Unix)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        }
    }

    /// Counts a sweep and closes the connections unused for [`IDLE_SWEEPS`] of them.
    fn sweep_once(&self) {
        let sweeps = self.sweeps.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        self.lock().retain(|c| fresh(sweeps, c.used));
    }
}

/// A TCP connection to the first of the host's addresses that accepts one.
async fn tcp(host: &str, port: u16) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        match TcpStream::connect(addr).await {
            Ok(s) => return Ok(s),
            Err(e) => last = Some((addr, e)),
        }
    }
    Err(match last {
        Some((addr, e)) => io::Error::new(e.kind(), format!("{addr}: {e}")),
        None => io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address")),
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;
    use tokio::io::AsyncWriteExt;

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
        let address = Address::Tcp {
            host: "127.0.0.1".into(),
            port,
        };
        let pool = Pool::new(address, None, Duration::from_secs(5));
        let request = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n";
        let call = || async {
            use http_body_util::BodyExt;
            let answer = pool.send(&Method::GET, request, &mut || {}).await.unwrap();
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
