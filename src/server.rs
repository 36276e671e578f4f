//! Listeners: bind every `[[listen]]` address, accept connections and serve HTTP/1.1 and
//! HTTP/2 (prior knowledge) on each with hyper's auto builder, handing every request to
//! `pipeline::handle`. Owns sockets and connection tasks; knows nothing of MCP.

use crate::config::Snapshot;
use crate::pipeline;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A listener bound to its socket, ready to serve.
pub struct Bound {
    pub name: String,
    /// The address actually bound (resolves a configured port 0).
    pub addr: SocketAddr,
    index: usize,
    socket: TcpListener,
}

#[derive(Debug, thiserror::Error)]
#[error("listener {name:?} cannot listen on {addr}: {cause}")]
pub struct BindError {
    name: String,
    addr: SocketAddr,
    cause: std::io::Error,
}

pub async fn bind(snapshot: &Snapshot) -> Result<Vec<Bound>, BindError> {
    let mut out = Vec::with_capacity(snapshot.listeners.len());
    for (index, l) in snapshot.listeners.iter().enumerate() {
        let fail = |cause| BindError {
            name: l.name.clone(),
            addr: l.addr,
            cause,
        };
        let socket = TcpListener::bind(l.addr).await.map_err(fail)?;
        let addr = socket.local_addr().map_err(fail)?;
        out.push(Bound {
            name: l.name.clone(),
            addr,
            index,
            socket,
        });
    }
    Ok(out)
}

/// Serves every bound listener until `shutdown` completes; then stops accepting.
pub async fn serve(snapshot: Arc<Snapshot>, bound: Vec<Bound>, shutdown: impl Future<Output = ()>) {
    let mut tasks = tokio::task::JoinSet::new();
    for b in bound {
        tracing::info!(listener = %b.name, addr = %b.addr, "listening");
        tasks.spawn(accept_loop(snapshot.clone(), b));
    }
    shutdown.await;
    tasks.abort_all();
}

async fn accept_loop(snapshot: Arc<Snapshot>, bound: Bound) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let builder = Arc::new(builder);
    loop {
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
        let snapshot = snapshot.clone();
        let builder = builder.clone();
        let index = bound.index;
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let snapshot = snapshot.clone();
                async move { Ok::<_, Infallible>(pipeline::handle(snapshot, index, peer, req).await) }
            });
            if let Err(e) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
