//! The admin listener (SPEC §8): `GET /healthz`, `GET /readyz`, `GET /metrics`,
//! `POST /reload`. Plain HTTP/1.1 on its own address (loopback by default), never on a
//! public route; it shares nothing with the MCP listeners but the gateway state, which it
//! reads through [`Admin`].

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// What the admin endpoints read and do; the gateway implements it.
pub trait Admin: Send + Sync + 'static {
    /// Why a reload was not applied.
    type Error: std::fmt::Display;
    /// Whether the gateway is draining (`/readyz` then answers 503).
    fn draining(&self) -> bool;
    /// The metrics in the Prometheus text format.
    fn metrics(&self) -> String;
    /// Reloads the configuration; `Err` says why the running one stays.
    fn reload(&self, trigger: &'static str)
    -> impl Future<Output = Result<(), Self::Error>> + Send;
}

fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

async fn route<A: Admin>(gw: &A, req: Request<Incoming>) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, PLAIN, "ok\n"),
        (&Method::GET, "/readyz") if gw.draining() => {
            text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, "draining\n")
        }
        (&Method::GET, "/readyz") => text(StatusCode::OK, PLAIN, "ready\n"),
        (&Method::GET, "/metrics") => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            gw.metrics(),
        ),
        // Answers only after the new configuration is in place, or with why it is not.
        (&Method::POST, "/reload") => match gw.reload("admin").await {
            Ok(()) => text(StatusCode::OK, PLAIN, "reloaded\n"),
            Err(e) => text(StatusCode::UNPROCESSABLE_ENTITY, PLAIN, format!("{e}\n")),
        },
        (_, "/healthz" | "/readyz" | "/metrics" | "/reload") => text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "method not allowed\n",
        ),
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found\n"),
    }
}

/// Serves the admin endpoints on `socket` until the task is dropped.
pub async fn serve<A: Admin>(gw: Arc<A>, socket: TcpListener) {
    loop {
        let Ok((stream, _)) = socket.accept().await else {
            continue;
        };
        let gw = gw.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let gw = gw.clone();
                async move { Ok::<_, Infallible>(route(&*gw, req).await) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
