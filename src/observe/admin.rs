//! The admin listener (SPEC §8, §14): `GET /` (the status page), `GET /status` (its data),
//! `GET /healthz`, `GET /readyz`, `GET /metrics`, `POST /reload`. Plain HTTP/1.1 on its own address (loopback by default), never on a
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
    /// The status page's data (`GET /status`; `super::page` renders it).
    fn status(&self) -> super::status::Status;
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
        (&Method::GET, "/") => super::page::response(&gw.status()),
        (&Method::GET, "/status") => {
            let mut r = text(
                StatusCode::OK,
                "application/json",
                serde_json::to_vec(&gw.status()).unwrap_or_default(),
            );
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                header::HeaderValue::from_static("no-store"),
            );
            r
        }
        (&Method::GET, "/status/fragment") => super::page::fragment_response(&gw.status()),
        (&Method::GET, "/healthz") => text(StatusCode::OK, PLAIN, "ok\n"),
        (&Method::GET, "/readyz") if gw.draining() => {
            text(StatusCode::SERVICE_UNAVAILABLE, PLAIN, "draining\n")
        }
        (&Method::GET, "/readyz") => text(StatusCode::OK, PLAIN, "ready\n"),
        // OpenMetrics for the scrapers that ask for it (Prometheus does), else the older
        // text format that every other reader (and `promtool check metrics`) takes.
        (&Method::GET, "/metrics") if wants_openmetrics(&req) => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            gw.metrics(),
        ),
        (&Method::GET, "/metrics") => text(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            super::metrics::to_text_format(&gw.metrics()),
        ),
        // Answers only after the new configuration is in place, or with why it is not.
        (&Method::POST, "/reload") => match gw.reload("admin").await {
            Ok(()) => text(StatusCode::OK, PLAIN, "reloaded\n"),
            Err(e) => text(StatusCode::UNPROCESSABLE_ENTITY, PLAIN, format!("{e}\n")),
        },
        (
            _,
            "/" | "/status" | "/status/fragment" | "/healthz" | "/readyz" | "/metrics" | "/reload",
        ) => text(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            "method not allowed\n",
        ),
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found\n"),
    }
}

/// Whether the scraper lists OpenMetrics among the types it accepts.
fn wants_openmetrics(req: &Request<Incoming>) -> bool {
    const TYPE: &[u8] = b"application/openmetrics-text";
    req.headers().get_all(header::ACCEPT).iter().any(|v| {
        v.as_bytes()
            .windows(TYPE.len())
            .any(|w| w.eq_ignore_ascii_case(TYPE))
    })
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
