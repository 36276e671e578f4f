//! The HTTP/1.1 server and client as state machines, driven by scripted I/O (tokio-test's
//! `io::Builder`): each test says which bytes arrive in which reads and which bytes must
//! be written, in order, so a write too many, too few or out of turn fails the test.

use super::client::{Conn, Home};
use super::server::{self, Drain, DrainSignal, HeadWaits, Settings};
use crate::http::request::{ClientBody, ClientRequest};
use bytes::Bytes;
use http::{Method, Response};
use http_body_util::{BodyExt, Full};
use std::sync::{Arc, Mutex, Weak};
use tokio_test::io::{Builder, Mock};

const SETTINGS: Settings = Settings {
    max_head: 64 << 10,
    max_chunk_overhead: 16 << 10,
};

/// Serves `io` with a service that answers each request with its body, and returns what
/// the requests were (method, target, body).
async fn serve(io: Mock) -> Vec<(String, String, Bytes)> {
    let seen = Mutex::new(Vec::new());
    let waits = HeadWaits::default();
    let drain = Drain::new(Arc::new(DrainSignal::default()));
    server::serve(
        io,
        SETTINGS,
        &waits,
        drain,
        || 1 << 20,
        |req: ClientRequest| {
            let body = match req.body {
                ClientBody::Read(b) => b,
                _ => Bytes::new(),
            };
            seen.lock().unwrap().push((
                req.method.to_string(),
                req.target.path().to_string(),
                body.clone(),
            ));
            async move {
                // A fixed date, so the bytes written are known.
                Response::builder()
                    .header("date", "x")
                    .body(Full::new(body))
                    .unwrap()
            }
        },
    )
    .await;
    seen.into_inner().unwrap()
}

fn answer(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ndate: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Pipelined requests, read in one piece and across reads cut anywhere, are answered in
/// order, one write each.
#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let one = "POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}";
    let two =
        "POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n";
    let io = Builder::new()
        .read(format!("{one}{two}").as_bytes())
        .write(answer("{}").as_bytes())
        .write(answer("x").as_bytes())
        .build();
    let seen = serve(io).await;
    assert_eq!(seen.len(), 2);
    assert_eq!((seen[0].1.as_str(), &seen[0].2[..]), ("/a", &b"{}"[..]));
    assert_eq!((seen[1].1.as_str(), &seen[1].2[..]), ("/b", &b"x"[..]));

    let both = format!("{one}{two}");
    for cut in [
        1,
        20,
        one.len() - 1,
        one.len(),
        one.len() + 30,
        both.len() - 3,
    ] {
        let (a, b) = both.split_at(cut);
        let io = Builder::new()
            .read(a.as_bytes())
            .read(b.as_bytes())
            .write(answer("{}").as_bytes())
            .write(answer("x").as_bytes())
            .build();
        assert_eq!(serve(io).await.len(), 2, "cut at {cut}");
    }
}

/// Where the client's finished connections go in these tests: kept count only.
#[derive(Default)]
struct Kept(Mutex<usize>);

impl Home<Mock> for Kept {
    fn put(&self, _conn: Conn<Mock>) {
        *self.0.lock().unwrap() += 1;
    }
}

async fn exchange(io: Mock, request: &[u8], method: Method) -> (Result<Bytes, String>, usize) {
    let kept = Arc::new(Kept::default());
    let home = Arc::downgrade(&kept) as Weak<dyn Home<Mock>>;
    let body = match Conn::new(io)
        .exchange(&method, request, home, &mut || {})
        .await
    {
        Ok(response) => response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| e.to_string()),
        Err(f) => Err(format!("{:?}: {}", f.stage, f.error)),
    };
    let n = *kept.0.lock().unwrap();
    (body, n)
}

/// The client writes the request in one write, skips an interim answer, reads a body
/// that comes in pieces, and hands the connection back once the body has ended.
#[tokio::test]
async fn the_client_reads_an_answer_in_pieces_and_keeps_the_connection() {
    let request = b"POST /mcp HTTP/1.1\r\nhost: u\r\ncontent-length: 2\r\n\r\n{}";
    let io = Builder::new()
        .write(request)
        .read(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ntransfer-")
        .read(b"encoding: chunked\r\n\r\n3\r\nabc")
        .read(b"\r\n2;x=y\r\nde\r\n0\r\n")
        .read(b"\r\n")
        .build();
    let (body, kept) = exchange(io, request, Method::POST).await;
    assert_eq!(body.unwrap(), "abcde");
    assert_eq!(kept, 1, "read to its end: the connection goes back");
}

/// An answer cut off mid-body is an error, and its connection is not kept.
#[tokio::test]
async fn a_cut_answer_is_an_error_and_its_connection_is_dropped() {
    let request = b"GET /mcp HTTP/1.1\r\nhost: u\r\n\r\n";
    let io = Builder::new()
        .write(request)
        .read(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
        .build();
    let (body, kept) = exchange(io, request, Method::GET).await;
    assert!(body.unwrap_err().contains("closed mid-answer"));
    assert_eq!(kept, 0);
    // Closed before any answer: the stage says so, which is what a retry decision reads.
    let io = Builder::new().write(request).build();
    let (body, _) = exchange(io, request, Method::GET).await;
    assert!(
        body.unwrap_err().starts_with("NoAnswer"),
        "closed before an answer"
    );
}
