//! Listeners: bind every `[[listen]]` address (and the admin address), accept connections,
//! terminate TLS where configured, and serve HTTP/1.1 (our own `h1`) and HTTP/2 (hyper's;
//! by ALPN, or prior knowledge seen by `h1`), handing every request to a [`Service`] (the
//! gateway's pipeline). Owns sockets, connection limits and timeouts, and the graceful
//! drain; knows nothing of MCP.

use crate::config::{Listener, ServerSettings};
use crate::http::body::GateBody;
use crate::http::h1::server as h1;
use crate::http::request::{ClientRequest, Peer};
use crate::http::tls::{self, CertStore};
use crate::runtime::workers::Workers;
use http::Response;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// What the listeners' requests are served by.
pub trait Service: Send + Sync + 'static {
    /// The connection limits and timeouts in force, read as a connection opens.
    fn settings(&self) -> ServerSettings;
    /// The request body limit in force, read per request.
    fn max_body(&self) -> u64;
    /// Answers one request that arrived on listener number `listener` (in the order the
    /// listeners were bound).
    fn handle(
        &self,
        listener: usize,
        peer: Peer,
        req: ClientRequest,
    ) -> impl Future<Output = Response<GateBody>> + Send;
    /// Runs once the connections have drained (or the grace is over), while the workers
    /// still run: what lives on them and must end in order ends here.
    fn drained(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A listener bound to its socket, ready to serve.
pub struct Bound {
    pub name: String,
    /// The address actually bound (resolves a configured port 0).
    pub addr: SocketAddr,
    index: usize,
    socket: TcpListener,
    tls: Option<TlsAcceptor>,
}

/// Every socket of a gateway, bound before serving so that a port in use fails at start.
pub struct Sockets {
    pub listeners: Vec<Bound>,
    pub admin: Option<(SocketAddr, TcpListener)>,
    /// The worker threads that will serve the listeners' connections.
    workers: Workers,
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("listener {name:?} cannot listen on {addr}: {cause}")]
    Listen {
        name: String,
        addr: SocketAddr,
        cause: io::Error,
    },
    #[error("listener {name:?}: {cause}")]
    Tls { name: String, cause: String },
    #[error("cannot start the worker threads: {0}")]
    Workers(io::Error),
}

/// Binds `listeners` (TLS ones serve the certificate of their store in `certs`) and the
/// `admin` address, and starts the worker threads.
pub async fn bind(
    listeners_of: &[Listener],
    certs: &HashMap<String, Arc<CertStore>>,
    admin: Option<SocketAddr>,
) -> Result<Sockets, BindError> {
    let mut listeners = Vec::with_capacity(listeners_of.len());
    for (index, l) in listeners_of.iter().enumerate() {
        let fail = |cause| BindError::Listen {
            name: l.name.to_string(),
            addr: l.addr,
            cause,
        };
        let tls = match (&l.tls, certs.get(&*l.name)) {
            (Some(material), Some(store)) => {
                let config = tls::server_config(material, store.clone()).map_err(|cause| {
                    BindError::Tls {
                        name: l.name.to_string(),
                        cause,
                    }
                })?;
                Some(TlsAcceptor::from(Arc::new(config)))
            }
            _ => None,
        };
        let socket = TcpListener::bind(l.addr).await.map_err(fail)?;
        let addr = socket.local_addr().map_err(fail)?;
        listeners.push(Bound {
            name: l.name.to_string(),
            addr,
            index,
            socket,
            tls,
        });
    }
    let admin = match admin {
        Some(addr) => {
            let fail = |cause| BindError::Listen {
                name: "admin".into(),
                addr,
                cause,
            };
            let socket = TcpListener::bind(addr).await.map_err(fail)?;
            Some((socket.local_addr().map_err(fail)?, socket))
        }
        None => None,
    };
    let workers = Workers::start().map_err(BindError::Workers)?;
    tracing::debug!(
        workers = crate::runtime::workers::count(),
        "worker threads started"
    );
    Ok(Sockets {
        listeners,
        admin,
        workers,
    })
}

/// Serves the listeners of `sockets` (not the admin socket: that is the caller's) until
/// `shutdown` completes, then drains: stops accepting, lets in-flight requests and
/// streams finish within `shutdown_grace`, and returns.
pub async fn serve<S: Service>(
    service: Arc<S>,
    sockets: Sockets,
    shutdown: impl Future<Output = ()>,
) {
    // `true` tells every connection to finish and close; each holds a receiver, so the
    // drain is over when the last one is dropped.
    let (drain, _) = watch::channel(false);
    let graceful = Arc::new(Graceful {
        tx: drain,
        signal: Arc::new(h1::DrainSignal::default()),
    });
    let limit = Arc::new(Semaphore::new(service.settings().max_connections));
    let workers = Arc::new(sockets.workers);
    let mut accepting = tokio::task::JoinSet::new();
    for b in sockets.listeners {
        let tls = if b.tls.is_some() { "https" } else { "http" };
        tracing::info!(listener = %b.name, addr = %b.addr, scheme = tls, "listening");
        accepting.spawn(accept_loop(
            service.clone(),
            b,
            graceful.clone(),
            limit.clone(),
            workers.clone(),
        ));
    }
    shutdown.await;
    accepting.abort_all();
    while accepting.join_next().await.is_some() {}
    let grace = service.settings().shutdown_grace;
    tracing::info!(grace = %humantime::format_duration(grace), "draining: no new connections, in-flight requests may finish");
    graceful.signal.give();
    graceful.tx.send_replace(true);
    match tokio::time::timeout(grace, graceful.tx.closed()).await {
        Ok(()) => tracing::info!("all connections finished"),
        Err(_) => {
            tracing::warn!("shutdown grace elapsed with connections still open; closing them")
        }
    }
    service.drained().await;
    // Whatever still runs on the workers (connections past the grace) is dropped here.
    if let Ok(workers) = Arc::try_unwrap(workers) {
        workers.stop().await;
    }
}

/// The drain, both ways a connection learns of it: HTTP/1.1 connections read `signal`,
/// HTTP/2 ones wait on `tx`; every connection holds a receiver of `tx`, so the drain is
/// over when `tx` has none left.
struct Graceful {
    tx: watch::Sender<bool>,
    signal: Arc<h1::DrainSignal>,
}

/// What a connection holds of [`Graceful`].
struct ConnDrain {
    rx: watch::Receiver<bool>,
    signal: Arc<h1::DrainSignal>,
}

async fn accept_loop<S: Service>(
    service: Arc<S>,
    bound: Bound,
    graceful: Arc<Graceful>,
    limit: Arc<Semaphore>,
    workers: Arc<Workers>,
) {
    loop {
        // Past max_connections, new connections wait in the kernel's accept queue.
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match bound.socket.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(listener = %bound.name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        // The socket moves to the worker's own event loop: detach it from this one.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "cannot hand the connection to a worker");
                continue;
            }
        };
        let service = service.clone();
        let graceful = ConnDrain {
            rx: graceful.tx.subscribe(),
            signal: graceful.signal.clone(),
        };
        let tls = bound.tls.clone();
        let index = bound.index;
        workers.spawn(async move {
            let Ok(stream) = TcpStream::from_std(stream) else {
                return;
            };
            let settings = service.settings();
            let watched = Arc::new(Watched::default());
            let io = IdleIo {
                inner: stream,
                watched: watched.clone(),
            };
            let limits = (settings.idle_timeout, settings.header_read_timeout);
            let heads = watched.clone();
            let connection = async move {
                let _permit = permit;
                let conn = Conn {
                    service,
                    index,
                    peer,
                    graceful,
                    settings: &settings,
                    heads: &heads.heads,
                };
                match tls {
                    Some(acceptor) => {
                        match tokio::time::timeout(
                            settings.header_read_timeout,
                            acceptor.accept(io),
                        )
                        .await
                        {
                            Ok(Ok(tls_stream)) => {
                                let h2 = tls_stream.get_ref().1.alpn_protocol() == Some(b"h2");
                                serve_connection(conn, tls_stream, h2).await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    }
                    None => serve_connection(conn, io, false).await,
                }
            };
            // The connection runs as a task of its own on this worker, and this task
            // watches it: woken only by its clock or the connection's end, never by a
            // request.
            if let Some(why) = watch_connection(tokio::spawn(connection), &watched, limits).await {
                tracing::debug!(%peer, "{why}; connection closed");
            }
        });
    }
}

/// What a connection is served with, besides its socket.
struct Conn<'a, S> {
    service: Arc<S>,
    index: usize,
    peer: SocketAddr,
    graceful: ConnDrain,
    settings: &'a ServerSettings,
    /// Where HTTP/1.1 marks its waits for a request head, for the watch.
    heads: &'a h1::HeadWaits,
}

async fn serve_connection<S: Service, I>(conn: Conn<'_, S>, io: I, h2: bool)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Conn {
        service,
        index,
        peer,
        graceful,
        settings,
        heads,
    } = conn;
    let client = Peer::new(peer);
    if h2 {
        return serve_h2(service, index, client, io, graceful.rx, settings).await;
    }
    let h1_settings = h1::Settings {
        max_head: settings.max_header_size,
        max_chunk_overhead: settings.max_chunk_overhead,
    };
    // Requests borrow the service: a clone of its `Arc` per request would be a count
    // both worker threads write.
    let shared: &S = &service;
    let ended = h1::serve(
        io,
        h1_settings,
        heads,
        h1::Drain::new(graceful.signal.clone()),
        || shared.max_body(),
        |req| shared.handle(index, client.clone(), req),
    )
    .await;
    if let h1::Ended::H2(io, read) = ended {
        let io = Rewind {
            read: Some(read),
            inner: io,
        };
        serve_h2(service, index, client, io, graceful.rx, settings).await;
    }
}

/// Serves an HTTP/2 connection with hyper until it ends or, once the drain starts, has
/// finished its streams.
async fn serve_h2<S: Service, I>(
    service: Arc<S>,
    index: usize,
    client: Peer,
    io: I,
    mut graceful: watch::Receiver<bool>,
    settings: &ServerSettings,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let service = service.clone();
        let client = client.clone();
        async move {
            let req = ClientRequest::from_h2(req);
            Ok::<_, Infallible>(service.handle(index, client, req).await)
        }
    });
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_header_list_size(settings.max_header_size as u32)
        .serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let drained = async move {
        // A sender gone counts as the signal too.
        let _ = graceful.wait_for(|&draining| draining).await;
    };
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = drained => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "HTTP/2 connection ended with an error");
    }
}

/// A connection whose first bytes were already read: they are read again first.
struct Rewind<I> {
    read: Option<bytes::Bytes>,
    inner: I,
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(mut read) = self.read.take() {
            let n = read.len().min(buf.remaining());
            buf.put_slice(&read.split_to(n));
            if !read.is_empty() {
                self.read = Some(read);
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a connection's watch looks at: set by the connection, read only at the watch's
/// checks, so the connection itself reads no clock and keeps no timer for these limits.
#[derive(Default)]
struct Watched {
    /// Raised by the socket whenever bytes move either way.
    moved: AtomicBool,
    /// The HTTP/1.1 server's waits for a request head.
    heads: h1::HeadWaits,
}

/// Waits for the connection to end, or ends it when no byte has moved either way for the
/// idle timeout, or a wait for a request head has lasted longer than the header-read
/// timeout (`limits`: both, in that order); says which when it ended it. Both are noticed
/// at checks 1/16 of the smaller timeout apart. Each is counted from the latest its cause
/// can have happened (the check that first saw it), so a connection closes between its
/// timeout and the timeout plus two checks (at most 1/8 of it), never before.
async fn watch_connection(
    connection: tokio::task::JoinHandle<()>,
    watched: &Watched,
    (idle, header): (Duration, Duration),
) -> Option<&'static str> {
    let step = (idle.min(header) / 16).max(Duration::from_millis(1));
    let mut connection = std::pin::pin!(connection);
    let mut moved_at = Instant::now();
    // The head wait seen at the last check (0: none) and when it was first seen.
    let mut head = (0, moved_at);
    let mut tick = std::pin::pin!(tokio::time::sleep_until(moved_at + step));
    loop {
        tokio::select! {
            biased;
            _ = &mut connection => return None,
            () = &mut tick => {}
        }
        let now = Instant::now();
        let why = if watched.moved.swap(false, Ordering::Relaxed) {
            moved_at = now;
            None
        } else if now.duration_since(moved_at) >= idle {
            Some("idle too long")
        } else {
            None
        };
        let why = why.or_else(|| match watched.heads.current() {
            0 => {
                head.0 = 0;
                None
            }
            wait if wait != head.0 => {
                head = (wait, now);
                None
            }
            _ if now.duration_since(head.1) >= header => Some("request head too slow"),
            _ => None,
        });
        if why.is_some() {
            connection.abort();
            return why;
        }
        tick.as_mut().reset(now + step);
    }
}

/// A socket that raises a flag when bytes move, for the idle timeout.
struct IdleIo {
    inner: TcpStream,
    watched: Arc<Watched>,
}

impl IdleIo {
    fn touch(&self) {
        self.watched.moved.store(true, Ordering::Relaxed);
    }
}

impl AsyncRead for IdleIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl AsyncWrite for IdleIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
