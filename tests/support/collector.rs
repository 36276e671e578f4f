//! An OTLP/HTTP trace receiver running in the test: what the gateway exports, decoded with
//! the OTLP protobuf types.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An OTLP/HTTP receiver: decodes each export, keeps its spans, answers 200 after
/// `delay` (or never, with `None`).
pub struct Collector {
    pub addr: std::net::SocketAddr,
    pub spans: Arc<Mutex<Vec<Span>>>,
    pub exports: Arc<Mutex<Vec<(String, String)>>>,
}

impl Collector {
    pub async fn start(delay: Option<Duration>) -> Collector {
        let socket = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let exports = Arc::new(Mutex::new(Vec::new()));
        let (s, e) = (spans.clone(), exports.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = socket.accept().await else {
                    continue;
                };
                let (s, e) = (s.clone(), e.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (s, e) = (s.clone(), e.clone());
                        async move {
                            let path = req.uri().path().to_string();
                            let kind = req
                                .headers()
                                .get("content-type")
                                .map(|v| v.to_str().unwrap_or("").to_string())
                                .unwrap_or_default();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let export = ExportTraceServiceRequest::decode(body).unwrap();
                            e.lock().unwrap().push((path, kind));
                            for r in export.resource_spans {
                                let service = r.resource.unwrap().attributes;
                                assert!(service.iter().any(|a| a.key == "service.name"));
                                for scope in r.scope_spans {
                                    s.lock().unwrap().extend(scope.spans);
                                }
                            }
                            match delay {
                                Some(d) => tokio::time::sleep(d).await,
                                None => std::future::pending::<()>().await,
                            }
                            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new())))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Collector {
            addr,
            spans,
            exports,
        }
    }

    pub async fn wait_spans(&self, n: usize) -> Vec<Span> {
        for _ in 0..100 {
            if self.spans.lock().unwrap().len() >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.spans.lock().unwrap().clone()
    }
}
