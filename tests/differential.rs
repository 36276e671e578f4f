//! The HTTP/1.1 server's framing decisions against hyper's: the same bytes go to both
//! over `tokio::io::duplex`, and the requests each hands on whole (method, target, body)
//! are compared. How each refuses differs (mcpgate answers 400, hyper may just close), so
//! only what is handed on counts: that is what could reach an upstream. Where mcpgate is
//! deliberately stricter (it hands on fewer of them than hyper), the case says so, and
//! docs/behaviour.md lists the class; every other case must come out the same.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use mcpgate::http::h1::server::{self as h1, Drain, DrainSignal, HeadWaits, Settings};
use mcpgate::http::request::ClientBody;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A request as a server handed it on.
type Seen = (String, String, Vec<u8>);

#[derive(Debug, PartialEq)]
struct Outcome {
    requests: Vec<Seen>,
    refused: bool,
}

/// Writes `input` and the end of the stream, and reads what the server answers.
async fn exchange(mut client: tokio::io::DuplexStream, input: &[u8]) -> Vec<u8> {
    let _ = client.write_all(input).await;
    let _ = client.shutdown().await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), client.read_to_end(&mut out)).await;
    out
}

fn refused(out: &[u8]) -> bool {
    let text = String::from_utf8_lossy(out);
    text.contains("HTTP/1.1 4") || text.contains("HTTP/1.1 5")
}

async fn ours(input: &[u8]) -> Outcome {
    let (client, server) = tokio::io::duplex(4 << 20);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = seen.clone();
    let serving = tokio::spawn(async move {
        let waits = HeadWaits::default();
        let settings = Settings {
            max_head: 64 << 10,
            max_chunk_overhead: 16 << 10,
        };
        let drain = Drain::new(Arc::new(DrainSignal::default()));
        h1::serve(
            server,
            settings,
            &waits,
            drain,
            || 1 << 20,
            |req| {
                let body = match &req.body {
                    ClientBody::Read(b) => b.to_vec(),
                    _ => b"(not read)".to_vec(),
                };
                let target = match req.target.query() {
                    Some(q) => format!("{}?{q}", req.target.path()),
                    None => req.target.path().to_string(),
                };
                record
                    .lock()
                    .unwrap()
                    .push((req.method.to_string(), target, body));
                async { http::Response::new(Full::new(Bytes::new())) }
            },
        )
        .await;
    });
    let out = exchange(client, input).await;
    serving.abort();
    let requests = seen.lock().unwrap().clone();
    Outcome {
        requests,
        refused: refused(&out),
    }
}

async fn hyper_s(input: &[u8]) -> Outcome {
    let (client, server) = tokio::io::duplex(4 << 20);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = seen.clone();
    let serving = tokio::spawn(async move {
        let service =
            hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                let record = record.clone();
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body.collect().await?.to_bytes().to_vec();
                    let target = parts
                        .uri
                        .path_and_query()
                        .map_or_else(|| parts.uri.to_string(), |p| p.to_string());
                    record
                        .lock()
                        .unwrap()
                        .push((parts.method.to_string(), target, body));
                    Ok::<_, hyper::Error>(http::Response::new(Full::new(Bytes::new())))
                }
            });
        // The client half-closes after its bytes; requests already sent are still served.
        let _ = hyper::server::conn::http1::Builder::new()
            .half_close(true)
            .serve_connection(hyper_util::rt::TokioIo::new(server), service)
            .await;
    });
    let out = exchange(client, input).await;
    serving.abort();
    let requests = seen.lock().unwrap().clone();
    Outcome {
        requests,
        refused: refused(&out),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Same,
    /// mcpgate refuses where hyper hands a request on (docs/behaviour.md).
    Stricter,
}

const OK_HEAD: &str = "POST /m HTTP/1.1\r\nHost: a\r\n";

fn cases() -> Vec<(String, Expect)> {
    use Expect::*;
    let post = |fields: &str, body: &str| format!("{OK_HEAD}{fields}\r\n{body}");
    let chunked = |body: &str| post("Transfer-Encoding: chunked\r\n", body);
    vec![
        (post("Content-Length: 2\r\n", "{}"), Same),
        (
            format!(
                "{}{}",
                post("Content-Length: 2\r\n", "{}"),
                post("Content-Length: 1\r\n", "x")
            ),
            Same,
        ),
        (post("Content-Length: 0\r\n", ""), Same),
        ("GET /m?q=1 HTTP/1.1\r\nHost: a\r\n\r\n".into(), Same),
        ("GET /m HTTP/1.0\r\n\r\n".into(), Same),
        (chunked("2\r\n{}\r\n0\r\n\r\n"), Same),
        (chunked("2;a=b\r\n{}\r\n0\r\n\r\n"), Same),
        (chunked("2\r\n{}\r\n0\r\nx-t: 1\r\n\r\n"), Same),
        (chunked("zz\r\n{}\r\n0\r\n\r\n"), Same),
        (chunked("2\r\n{}XY0\r\n\r\n"), Same),
        (post("Content-Length: +2\r\n", "{}"), Same),
        (post("Content-Length: -2\r\n", "{}"), Same),
        (
            post("Content-Length: 2\r\nContent-Length: 3\r\n", "{}x"),
            Same,
        ),
        (post("Transfer-Encoding: gzip\r\n", "{}"), Same),
        ("GET /m HTTP/9.9\r\nHost: a\r\n\r\n".into(), Same),
        (post("Content-Length: 2, 2\r\n", "{}"), Same),
        (
            post("Transfer-Encoding: Chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"),
            Same,
        ),
        // chunked applied twice, which RFC 9112 §6.1 forbids a sender: hyper reads it once.
        (
            post(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                "2\r\n{}\r\n0\r\n\r\n",
            ),
            Stricter,
        ),
        (
            post(
                "Transfer-Encoding: chunked, chunked\r\n",
                "2\r\n{}\r\n0\r\n\r\n",
            ),
            Stricter,
        ),
        (
            post("Transfer-Encoding:\tchunked\r\n", "2\r\n{}\r\n0\r\n\r\n"),
            Same,
        ),
        (
            post(
                "Transfer-Encoding: chunked\r\n folded\r\n",
                "2\r\n{}\r\n0\r\n\r\n",
            ),
            Same,
        ),
        (chunked("fffffffffffffffffff\r\n{}\r\n0\r\n\r\n"), Same),
        (
            chunked("2\r\n{}\r\n0\r\n\r\nGET /n HTTP/1.1\r\nHost: a\r\n\r\n"),
            Same,
        ),
        (
            "POST /m HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n{}"
                .into(),
            Same,
        ),
        ("\x00garbage\r\n\r\n".into(), Same),
        // Stricter by choice: both framings at once, repeated lengths kept apart.
        (
            post(
                "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
                "2\r\n{}\r\n0\r\n\r\n",
            ),
            Stricter,
        ),
        // HTTP/1.1 without Host, or with two (RFC 9112 §3.2 says a server MUST refuse).
        ("GET /m HTTP/1.1\r\n\r\n".into(), Stricter),
        (
            "GET /m HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".into(),
            Stricter,
        ),
        // Chunk-size lines and trailers outside the grammar: hyper refuses these too (the
        // lenient reading was mcpgate's own, with httparse's chunk-size parser), but for a
        // control byte inside an extension, which it passes over.
        (chunked("2;\nxx\r\nff\r\n0\r\n\r\n"), Same),
        (chunked("2\r\n{}\r\n0\r\nno colon\r\n\r\n"), Same),
        (chunked("2;a\x01b\r\n{}\r\n0\r\n\r\n"), Stricter),
        // A transfer coding on HTTP/1.0: both refuse.
        (
            "POST /m HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n".into(),
            Same,
        ),
    ]
}

#[tokio::test]
async fn framing_decisions_match_hyper_or_are_stricter_on_purpose() {
    let mut report = Vec::new();
    for (input, expect) in cases() {
        let (a, b) = (
            ours(input.as_bytes()).await,
            hyper_s(input.as_bytes()).await,
        );
        let shown = format!("{input:?}");
        let outcome = if a.requests == b.requests {
            Expect::Same
        } else if a.refused && b.requests.starts_with(&a.requests) {
            Expect::Stricter
        } else {
            report.push(format!(
                "{shown}: differs unexpectedly\n  ours:  {a:?}\n  hyper: {b:?}"
            ));
            continue;
        };
        if outcome != expect {
            report.push(format!(
                "{shown}: expected {expect:?}, was {outcome:?}\n  ours:  {a:?}\n  hyper: {b:?}"
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}
