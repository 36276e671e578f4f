//! The admin listener (docs/operations.md, §14, §18): `GET /` (the status page), `GET /status` (its
//! data), `GET /healthz`, `GET /readyz`, `GET /metrics`, `POST /reload`, and
//! `POST /approvals/{id}` (an operator's answer to a call waiting for approval). Plain HTTP/1.1 on its own address (loopback by default), never on a
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
    /// An operator's answer to the call waiting for approval `id`, given by `by`: `false`
    /// when no call waits under that id (answered already, gone, never asked).
    fn decide(&self, id: &str, approve: bool, by: String) -> bool;
    /// The public keys of the upstreams' identity tokens (docs/oauth.md) as a JWKS; `None`
    /// when no upstream has identity.
    fn jwks(&self) -> Option<Bytes>;
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

async fn route<A: Admin>(
    gw: &A,
    peer: std::net::SocketAddr,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if let Some(id) = req.uri().path().strip_prefix("/approvals/") {
        if req.method() != Method::POST {
            return text(
                StatusCode::METHOD_NOT_ALLOWED,
                PLAIN,
                "method not allowed\n",
            );
        }
        let id = id.to_string();
        return decide(gw, peer, &id, req).await;
    }
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
        (&Method::GET, "/.well-known/jwks.json") => match gw.jwks() {
            Some(json) => {
                let mut r = text(StatusCode::OK, "application/jwk-set+json", json);
                r.headers_mut().insert(
                    header::CACHE_CONTROL,
                    header::HeaderValue::from_static("public, max-age=60"),
                );
                r
            }
            None => text(StatusCode::NOT_FOUND, PLAIN, "no upstream has identity\n"),
        },
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

/// The most bytes of an operator's answer read.
const MOST_ANSWER: usize = 1024;

/// `POST /approvals/{id}`: `approve` or `decline`, as the body's text, as the form field
/// `decision` (the status page's buttons) or as JSON `{"decision": …}`. A browser's form
/// from another origin is refused (the page's own forms are same-origin), and the page's
/// form (a browser's: it carries `Origin`) is answered with a redirect back to it. The
/// answer says `approved` or `declined`.
async fn decide<A: Admin>(
    gw: &A,
    peer: std::net::SocketAddr,
    id: &str,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    use http_body_util::BodyExt;
    const PLAIN: &str = "text/plain; charset=utf-8";
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.as_bytes().to_vec());
    // A browser says where its form came from; curl and scripts do not.
    let browser = req.headers().contains_key(header::ORIGIN);
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let same = host.as_ref().is_some_and(|h| {
            let mut own = b"http://".to_vec();
            own.extend_from_slice(h);
            origin.as_bytes() == own
        });
        if !same {
            return text(
                StatusCode::FORBIDDEN,
                PLAIN,
                "forbidden: an answer from another origin\n",
            );
        }
    }
    let form = req.headers().get(header::CONTENT_TYPE).is_some_and(|t| {
        t.as_bytes()
            .starts_with(b"application/x-www-form-urlencoded")
    });
    let limited = http_body_util::Limited::new(req.into_body(), MOST_ANSWER);
    let Ok(body) = limited.collect().await.map(|b| b.to_bytes()) else {
        return text(StatusCode::PAYLOAD_TOO_LARGE, PLAIN, "answer too large\n");
    };
    let said = String::from_utf8_lossy(&body);
    let said = said.trim();
    let decision = serde_json::from_str::<serde_json::Value>(said)
        .ok()
        .and_then(|v| v.get("decision")?.as_str().map(str::to_string))
        .or_else(|| said.strip_prefix("decision=").map(str::to_string))
        .unwrap_or_else(|| said.to_string());
    let approve = match decision.as_str() {
        "approve" => true,
        "decline" => false,
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                PLAIN,
                "say approve or decline (the body, decision=…, or {\"decision\":…})\n",
            );
        }
    };
    if !gw.decide(id, approve, format!("admin@{}", peer.ip())) {
        return text(
            StatusCode::NOT_FOUND,
            PLAIN,
            "no call waits for that approval (answered already, gone, or past its time)\n",
        );
    }
    let said = if approve { "approved\n" } else { "declined\n" };
    // The status page's own form goes back to the page; `curl -d approve` (a form too, by
    // its type) gets the answer docs/approvals.md shows.
    if form && browser {
        let mut r = text(StatusCode::SEE_OTHER, PLAIN, said);
        r.headers_mut()
            .insert(header::LOCATION, header::HeaderValue::from_static("/"));
        return r;
    }
    text(StatusCode::OK, PLAIN, said)
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
        let Ok((stream, peer)) = socket.accept().await else {
            continue;
        };
        let gw = gw.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let gw = gw.clone();
                async move { Ok::<_, Infallible>(route(&*gw, peer, req).await) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
