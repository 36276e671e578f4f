//! What crosses the gateway: headers in both directions, sessions, notifications, GET and
//! DELETE, and the answers when the upstream is down or too slow.

mod support;

use http::Method;
use mcpgate::cli::sample;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_hygiene_towards_the_upstream() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let auth = bearer(READONLY);
    let r = send(
        Method::POST,
        &gw.url("/mcp-readonly?trace=1"),
        &[
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("authorization", &auth),
            ("cookie", "session=secret-cookie"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "must-not-pass"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-api-key", "client-tries-its-own"),
            ("mcp-session-id", "sess-1"),
            ("mcp-protocol-version", "2025-06-18"),
            ("mcp-custom-thing", "kept"),
            ("user-agent", "test-client/1"),
            ("accept-encoding", "gzip"),
        ],
        list(1),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = &up.received()[0];
    let h = &got.headers;
    assert_eq!(got.uri, "/mcp?trace=1");
    assert_eq!(h.get("authorization"), None);
    assert_eq!(h.get("cookie"), None);
    assert_eq!(h.get("x-hop"), None);
    assert_eq!(h.get("accept-encoding"), None);
    assert_eq!(
        h["x-api-key"], API_KEY,
        "configured header wins and its secret is resolved"
    );
    assert_eq!(h["accept"], "application/json, text/event-stream");
    assert_eq!(h["x-forwarded-for"], "127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], gw.listeners["main"].to_string());
    assert_eq!(h["x-request-id"], r.header("x-request-id"));
    assert_eq!(h["mcp-session-id"], "sess-1");
    assert_eq!(h["mcp-protocol-version"], "2025-06-18");
    assert_eq!(h["mcp-custom-thing"], "kept");
    assert_eq!(h["user-agent"], "test-client/1");
    // The body is forwarded as sent.
    assert_eq!(got.body, list(1).as_bytes());
    // The upstream API key never shows in the log.
    assert!(!gw.log().contains(API_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_notifications_and_responses_pass() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let r = post(&url, &[], init).await;
    assert_eq!(r.status, 200);
    let session = r.header("mcp-session-id").to_string();
    assert!(
        session.starts_with("sample-"),
        "session id passes back: {:?}",
        r.headers
    );
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");

    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let r = post(&url, &[("mcp-session-id", &session)], note).await;
    assert_eq!(r.status, 202, "the upstream's status");
    assert!(r.body.is_empty());

    let reply = r#"{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept"}}"#;
    assert_eq!(
        post(&url, &[("mcp-session-id", &session)], reply)
            .await
            .status,
        202
    );
    let unknown = r#"{"jsonrpc":"2.0","id":9,"method":"server/discover"}"#;
    let r = post(&url, &[], unknown).await;
    assert_eq!(
        r.json()["error"]["code"],
        -32601,
        "unknown methods are the upstream's business"
    );

    let got = up.received();
    assert_eq!(got.len(), 4);
    assert_eq!(got[1].headers["mcp-session-id"], session.as_str());
    assert_eq!(got[2].body, reply.as_bytes());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_delete_are_authenticated_then_forwarded() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url(&format!("/gpt-mcp/{GPT}/mcp"));
    let r = send(Method::GET, &url, &[("accept", "text/event-stream")], "").await;
    assert_eq!(r.status, 405, "the upstream's own answer");
    assert_eq!(r.header("allow"), "POST, DELETE");
    let r = send(Method::DELETE, &url, &[("mcp-session-id", "sample-1")], "").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        send(Method::GET, &gw.url("/gpt-mcp/bad/mcp"), &[], "")
            .await
            .status,
        404
    );
    assert_eq!(
        send(Method::DELETE, &gw.url("/mcp-readonly"), &[], "")
            .await
            .status,
        401
    );
    let got = up.received();
    assert_eq!(
        got.iter().map(|r| r.method.clone()).collect::<Vec<_>>(),
        [Method::GET, Method::DELETE]
    );
    assert_eq!(got[1].headers["mcp-session-id"], "sample-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_is_502() {
    // Bind and drop a socket to get a port where nothing listens.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = Gateway::start(&config(&format!("http://127.0.0.1:{port}/mcp"), "10s"));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(11, "get_document")).await;
    assert_eq!(r.status, 502);
    let v = r.json();
    assert_eq!(v["error"]["code"], -32006);
    assert_eq!(v["id"], 11);
    assert!(
        !r.body.contains(&port.to_string()),
        "no internal address in the answer"
    );
    // The test reads the gateway's stderr through a pipe: wait for the line to arrive.
    gw.log_with("upstream_unreachable", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_past_its_deadline_is_504() {
    let up = upstream(sample::Options {
        call_delay: Some(Duration::from_secs(5)),
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&config(&up.url(), "300ms"));
    let started = Instant::now();
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(12, "get_document")).await;
    assert_eq!(r.status, 504);
    assert_eq!(r.json()["error"]["code"], -32004);
    assert_eq!(r.json()["id"], 12);
    // Not a timing assertion on speed: only that the gateway did not wait for the upstream.
    assert!(started.elapsed() < Duration::from_secs(5));
    // Requests that are not slow still pass on the same upstream.
    assert_eq!(
        post(&gw.url("/mcp-gpt-full"), &[], &list(13)).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_kept_or_made() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let url = gw.url("/mcp-gpt-full");
    let r = post(&url, &[("x-request-id", "client-chosen-1")], &list(1)).await;
    assert_eq!(r.header("x-request-id"), "client-chosen-1");
    assert_eq!(up.received()[0].headers["x-request-id"], "client-chosen-1");
    let r = post(
        &url,
        &[("x-request-id", "has spaces and \"quotes\"")],
        &list(2),
    )
    .await;
    let made = r.header("x-request-id");
    assert_eq!(made.len(), 32);
    // The request id is in the log line.
    gw.log_with(made, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_is_served() {
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    use http_body_util::{BodyExt, Full};
    let client: hyper_util::client::legacy::Client<_, Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http();
    let req = http::Request::post(gw.url(&format!("/gpt-mcp/{GPT}/mcp")))
        .header("content-type", "application/json")
        .header("accept", SDK_ACCEPT)
        .body(Full::new(bytes::Bytes::from(list(1))))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["result"]["tools"].as_array().unwrap().len(), 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_answers_leave_whole_or_stream_when_large() {
    // Small: read whole, sent with its length.
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(1, "get_document")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), r.body.len().to_string());
    assert_eq!(r.json()["id"], 1);
    drop(gw);

    // Large: past 64 KiB the answer streams on (chunked), complete and unchanged.
    let up = upstream(sample::Options {
        result_bytes: Some(300_000),
        ..Default::default()
    })
    .await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(2, "get_document")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), "chunked");
    let text = r.json()["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .len();
    assert_eq!(text, 300_000);
    drop(gw);

    // Cut off mid-body: a JSON-RPC error for the call, not half a JSON text.
    let cut = raw_upstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 200\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":3,\"res",
    );
    let gw = Gateway::start(&config(&cut, "10s"));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(3, "get_document")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32006);
    assert_eq!(r.json()["id"], 3);
}

/// Reads the next request from `conn` (`got` holds bytes read past the previous one):
/// its head and the body its `Content-Length` announces. `None` once the client closes.
fn next_request(conn: &mut impl std::io::Read, got: &mut Vec<u8>) -> Option<(String, String)> {
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .to_ascii_lowercase()
                .lines()
                .find_map(|l| l.strip_prefix("content-length:").map(str::to_string))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                let request = (
                    text[..end].to_string(),
                    text[end + 4..end + 4 + len].to_string(),
                );
                got.drain(..end + 4 + len);
                return Some(request);
            }
        }
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A small JSON answer with its length, as a keep-alive upstream sends it.
fn small_answer() -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A keep-alive upstream that answers every request on a connection with a small JSON
/// result, counts the connections it accepted, keeps each request's head, and closes all
/// its connections when told to.
struct KeepAliveUpstream {
    url: String,
    connections: Arc<std::sync::atomic::AtomicUsize>,
    heads: Arc<std::sync::Mutex<Vec<String>>>,
    open: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl KeepAliveUpstream {
    fn start(path_and_query: &str) -> KeepAliveUpstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}{path_and_query}", listener.local_addr().unwrap());
        let up = KeepAliveUpstream {
            url,
            connections: Default::default(),
            heads: Default::default(),
            open: Default::default(),
        };
        let (connections, heads, open) =
            (up.connections.clone(), up.heads.clone(), up.open.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { break };
                connections.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                open.lock().unwrap().push(conn.try_clone().unwrap());
                let heads = heads.clone();
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    while let Some((head, _)) = next_request(&mut conn, &mut seen) {
                        heads.lock().unwrap().push(head);
                        if conn.write_all(small_answer().as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        up
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Closes every connection, as an upstream does when its keep-alive timeout passes.
    fn close_all(&self) {
        for c in self.open.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Upstream connections are kept and reused (at most one per worker for calls made one
/// after another), requests go out in origin form with the upstream's `Host`, and a kept
/// connection the upstream has closed is replaced without the client noticing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_kept_reused_and_replaced() {
    let up = KeepAliveUpstream::start("/mcp?k=v");
    let gw = Gateway::start(&config(&up.url, "10s"));
    let workers = std::thread::available_parallelism().unwrap().get();
    for _ in 0..20 {
        let r = post(&gw.url("/mcp-gpt-full?q=1"), &[], &list(1)).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(
        (1..=workers).contains(&up.connections()),
        "{} upstream connections for 20 calls on {workers} workers",
        up.connections()
    );
    let heads = up.heads.lock().unwrap().clone();
    assert_eq!(heads.len(), 20);
    let port = up.url.split(':').nth(2).unwrap().split('/').next().unwrap();
    for head in &heads {
        let mut lines = head.lines();
        assert_eq!(lines.next(), Some("POST /mcp?k=v&q=1 HTTP/1.1"), "{head}");
        let host: Vec<&str> = lines
            .filter(|l| l.to_ascii_lowercase().starts_with("host:"))
            .collect();
        assert_eq!(host, [format!("host: 127.0.0.1:{port}")], "{head}");
    }

    // The upstream drops its idle connections; the next calls open new ones and succeed.
    let before = up.connections();
    up.close_all();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..4 {
        let r = post(&gw.url("/mcp-gpt-full"), &[], &list(1)).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    assert!(up.connections() > before);
}

/// An upstream that answers one request per connection and closes it: every call still
/// gets its answer, on a fresh connection each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_closing_after_each_answer_is_served() {
    let url = raw_upstream(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 46\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[]}}",
    );
    let gw = Gateway::start(&config(&url, "10s"));
    for _ in 0..10 {
        let r = post(&gw.url("/mcp-gpt-full"), &[], &list(1)).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
}

/// An upstream's answer head is read up to about the connection's read buffer
/// (`pool::READ_BUFFER`, 64 KiB; hyper checks the limit between reads, so a head that
/// arrives in one read may pass it): a 40 KiB head passes, a 1 MiB one is a 502, not a
/// hang or a megabyte held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_answer_heads_are_bounded() {
    let reply = |header_bytes: usize| {
        let body = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
        let text = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-big: {}\r\ncontent-length: {}\r\n\r\n{body}",
            "a".repeat(header_bytes),
            body.len()
        );
        text.into_bytes()
    };
    let fits = Gateway::start(&config(&raw_upstream(reply(40 << 10)), "10s"));
    let r = post(&fits.url("/mcp-gpt-full"), &[], &list(1)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let too_big = Gateway::start(&config(&raw_upstream(reply(1 << 20)), "10s"));
    let r = post(&too_big.url("/mcp-gpt-full"), &[], &list(1)).await;
    assert_eq!(r.status, 502, "{}", r.body);
}

/// A JSON answer over the 64 KiB read whole, sent by the upstream with `Content-Length`,
/// streams on with its full length: the first 64 KiB and the rest make one body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_answer_with_its_length_streams_whole() {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[],"pad":"{}"}}}}"#,
        "x".repeat(100_000)
    );
    let reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let gw = Gateway::start(&config(&raw_upstream(reply), "10s"));
    for _ in 0..3 {
        let r = post(&gw.url("/mcp-gpt-full"), &[], &list(1)).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body, body);
    }
}

/// The upstream's hop-by-hop fields, and the fields its `Connection` names, stay between
/// it and mcpgate; its other fields reach the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_hop_by_hop_fields_do_not_reach_the_client() {
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
    let reply = format!(
        "HTTP/1.1 200 OK\r\nx-secret-hop: 1\r\nconnection: keep-alive, X-Secret-Hop\r\nkeep-alive: timeout=5\r\nupgrade: h2c\r\nx-kept: 2\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let gw = Gateway::start(&config(&raw_upstream(reply), "10s"));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &list(1)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, body);
    for gone in ["x-secret-hop", "keep-alive", "upgrade"] {
        assert!(r.headers.get(gone).is_none(), "{gone} passed");
    }
    assert_eq!(r.header("x-kept"), "2");
}

/// Answers the upstream may frame in any of HTTP/1.1's ways reach the client whole: a
/// body that ends when the upstream closes, and a chunked one with extensions and
/// trailers. One broken off or framed wrongly is a 502, not a hang or a cut answer
/// passed as whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_framed_every_way_arrive_whole_and_broken_ones_are_502() {
    let body = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#;
    let to_close = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{body}");
    let chunked = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n\
         5;x=y\r\n{}\r\n{:x}\r\n{}\r\n0\r\nx-trailer: t\r\n\r\n",
        &body[..5],
        body.len() - 5,
        &body[5..]
    );
    for reply in [to_close, chunked] {
        let gw = Gateway::start(&config(&raw_upstream(reply.clone()), "10s"));
        for _ in 0..3 {
            let r = post(&gw.url("/mcp-gpt-full"), &[], &list(1)).await;
            assert_eq!((r.status.as_u16(), r.body.as_str()), (200, body), "{reply}");
        }
    }
    let cut = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len() + 10
    );
    let bad_chunk = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n".to_string();
    let bad_head =
        "HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n{}".to_string();
    for reply in [cut, bad_chunk, bad_head] {
        let gw = Gateway::start(&config(&raw_upstream(reply.clone()), "10s"));
        let r = post(&gw.url("/mcp-gpt-full"), &[], &list(7)).await;
        assert_eq!(r.status, 502, "{reply}\n{}", r.body);
        assert_eq!(r.json()["id"], 7);
    }
}

/// An upstream that answers the first request on each connection and, on the next one,
/// reads it and closes without a word: what an upstream restarting, or timing out a kept
/// connection just as a request arrives, looks like. It keeps every request line and body.
fn one_answer_per_connection_upstream() -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let log = seen.clone();
    serve_requests(
        move || listener.accept().map(|(s, _)| s),
        move |_, answered, head, body, conn| {
            let line = head.lines().next().unwrap_or_default().to_string();
            log.lock().unwrap().push(format!("{line} {body}"));
            // The second request on a connection: closed without an answer.
            answered == 0 && conn.write_all(small_answer().as_bytes()).is_ok()
        },
    );
    (url, seen)
}

/// Serves every connection `accept` takes on a thread of its own, reading its requests
/// one after another. `answer` gets the connection's number, the request's number on it,
/// its head and body, and the connection to write to; `false` closes the connection.
fn serve_requests<S>(
    mut accept: impl FnMut() -> std::io::Result<S> + Send + 'static,
    answer: impl Fn(usize, usize, &str, &str, &mut S) -> bool + Send + Sync + 'static,
) where
    S: std::io::Read + std::io::Write + Send + 'static,
{
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for n in 0.. {
            let Ok(mut conn) = accept() else { break };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                for k in 0.. {
                    let Some((head, body)) = next_request(&mut conn, &mut got) else {
                        return;
                    };
                    if !answer(n, k, &head, &body, &mut conn) {
                        return;
                    }
                }
            });
        }
    });
}

/// A request lost on a kept connection (the upstream read it and closed) goes out again
/// on a fresh connection only when that cannot act twice: a DELETE does, and gets its
/// answer; a POST, which the upstream may have acted on, is a 502 and reaches the
/// upstream exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_lost_on_a_kept_connection_is_sent_again_only_if_idempotent() {
    // More calls than workers: some worker takes two in a row, the second on the
    // connection its first one left.
    let calls = std::thread::available_parallelism().unwrap().get() as u64 * 2 + 1;
    let (url, seen) = one_answer_per_connection_upstream();
    let gw = Gateway::start(&config(&url, "10s"));
    let mut failed = 0;
    for id in 0..calls {
        let r = post(&gw.url("/mcp-gpt-full"), &[], &list(100 + id)).await;
        match r.status.as_u16() {
            200 => {}
            502 => failed += 1,
            other => panic!("{other}: {}", r.body),
        }
    }
    assert!(
        failed > 0,
        "no call met a connection the upstream had dropped"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len() as u64,
        calls,
        "every call reached the upstream once: {seen:#?}"
    );
    for id in 0..calls {
        let id = format!("\"id\":{}", 100 + id);
        assert_eq!(
            seen.iter().filter(|r| r.contains(&id)).count(),
            1,
            "{id}: {seen:#?}"
        );
    }

    let (url, seen) = one_answer_per_connection_upstream();
    let gw = Gateway::start(&config(&url, "10s"));
    for _ in 0..calls {
        let r = send(
            Method::DELETE,
            &gw.url("/mcp-gpt-full"),
            &[("mcp-session-id", "s")],
            "",
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let sent = seen.lock().unwrap().len() as u64;
    assert!(sent > calls, "no DELETE was sent again: {sent} for {calls}");
}

/// Our HTTP/1.1 server side, over raw sockets: pipelined requests are answered in order,
/// a chunked request body arrives joined, `Expect: 100-continue` is answered before the
/// body is sent, HEAD gets a head only (the next answer on the connection still frames),
/// and HTTP/1.0 closes unless it asks for keep-alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_connections_follow_rfc_9112() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = json_upstream().await;
    let gw = Gateway::start(&config(&up.url(), "10s"));
    let addr = gw.listeners["main"];
    let post_head = |version: &str, extra: &str, len: usize| {
        format!(
            "POST /mcp-gpt-full {version}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}Content-Length: {len}\r\n\r\n"
        )
    };
    let statuses = |text: &str| -> Vec<String> {
        text.match_indices("HTTP/1.1 ")
            .map(|(i, _)| text[i + 9..i + 12].to_string())
            .collect()
    };

    // Two requests in one write, the second closing: two answers, in order.
    let (a, b) = (list(71), list(72));
    let both = format!(
        "{}{a}{}{b}",
        post_head("HTTP/1.1", "", a.len()),
        post_head("HTTP/1.1", "Connection: close\r\n", b.len())
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(both.as_bytes()).await.unwrap();
    let (_, text) = until_closed(&mut s, Duration::from_secs(5)).await;
    assert_eq!(statuses(&text), ["200", "200"], "{text}");
    let (first, second) = (
        text.find("\"id\":71").unwrap(),
        text.find("\"id\":72").unwrap(),
    );
    assert!(first < second, "answered in order: {text}");

    // A chunked body in two chunks, with an extension and a trailer, arrives joined.
    let body = call(73, "get_document");
    let (x, y) = body.split_at(10);
    let chunked = format!(
        "POST /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x};ext=1\r\n{x}\r\n{:x}\r\n{y}\r\n0\r\nX-Trailer: t\r\n\r\n",
        x.len(),
        y.len()
    );
    let answer = raw(addr, chunked.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got = up.received();
    assert_eq!(
        got.last().unwrap().body,
        body.as_bytes(),
        "joined body forwarded"
    );

    // 100-continue: the interim answer comes before the body is sent.
    let body = list(74);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        post_head(
            "HTTP/1.1",
            "Expect: 100-continue\r\nConnection: close\r\n",
            body.len(),
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut interim = [0u8; 25];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut interim))
        .await
        .expect("100 Continue before the body")
        .unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(body.as_bytes()).await.unwrap();
    let (_, text) = until_closed(&mut s, Duration::from_secs(5)).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");

    // HEAD: a head without its body, so the next answer on the connection still parses.
    let body = list(75);
    let head_then_post = format!(
        "HEAD /mcp-gpt-full HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n{}{body}",
        post_head("HTTP/1.1", "Connection: close\r\n", body.len())
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head_then_post.as_bytes()).await.unwrap();
    let (_, text) = until_closed(&mut s, Duration::from_secs(5)).await;
    assert_eq!(statuses(&text), ["405", "200"], "{text}");
    let second = text.rfind("HTTP/1.1 200").unwrap();
    assert!(
        !text[..second].contains("jsonrpc"),
        "no body after HEAD: {text}"
    );

    // HTTP/1.0: closed after the answer, unless it asks to keep the connection.
    let body = list(76);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("{}{body}", post_head("HTTP/1.0", "", body.len())).as_bytes())
        .await
        .unwrap();
    let (took, text) = until_closed(&mut s, Duration::from_secs(5)).await;
    assert!(
        text.starts_with("HTTP/1.1 200") && text.contains("connection: close"),
        "{text}"
    );
    assert!(took < Duration::from_secs(5), "closed after the answer");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let kept = post_head("HTTP/1.0", "Connection: keep-alive\r\n", body.len());
    s.write_all(format!("{kept}{body}").as_bytes())
        .await
        .unwrap();
    let text = read_answer(&mut s).await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("connection: keep-alive"), "{text}");
    s.write_all(format!("{kept}{body}").as_bytes())
        .await
        .unwrap();
    assert!(read_answer(&mut s).await.starts_with("HTTP/1.1 200"));
}

/// mcpgate never asks for compression. An upstream that compresses anyway gets its answer
/// passed on as it is when nothing needs reading it, and a 502 when the answer must be
/// read (a tools/list to filter, JSON to convert to SSE): never an unread body let through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_answers_pass_only_when_not_read() {
    let gz: &[u8] =
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xab\xae\x05\x00\x43\xbf\xa6\xa3\x02\x00\x00\x00";
    let mut reply = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: {}\r\n\r\n",
        gz.len()
    )
    .into_bytes();
    reply.extend_from_slice(gz);
    let gw = Gateway::start(&config(&raw_upstream(reply), "10s"));
    let url = gw.url("/mcp-gpt-full");
    let r = post(&url, &[], &list(3)).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["id"], 3);
    let sse_only = [
        ("content-type", "application/json"),
        ("accept", "text/event-stream"),
    ];
    let r = send(Method::POST, &url, &sse_only, call(4, "get_document")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    let r = post(&url, &[], &call(5, "get_document")).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("content-encoding"), "gzip");
}

/// Upstream answers are framed by the same rules as client requests, and leave with one
/// normalised length or none: a length that is not digits, or a transfer coding mcpgate
/// does not undo, is a 502; both framings at once lose the length; two equal lengths are
/// passed on once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_framing_is_read_strictly_and_passed_on_once() {
    let json = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#;
    let chunked = format!("{:x}\r\n{json}\r\n0\r\n\r\n", json.len());
    for head in [
        "content-length: +49\r\n".to_string(),
        "content-length: 4 9\r\n".to_string(),
        "transfer-encoding: gzip, chunked\r\n".to_string(),
        "transfer-encoding: chunked, gzip\r\n".to_string(),
    ] {
        let body = if head.contains("chunked") {
            chunked.clone()
        } else {
            json.to_string()
        };
        let url = raw_upstream(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{head}\r\n{body}"
        ));
        let gw = Gateway::start(&config(&url, "10s"));
        let r = post(&gw.url("/mcp-gpt-full"), &[], &call(3, "get_document")).await;
        assert_eq!(r.status, 502, "{head:?}: {}", r.body);
        assert_eq!(r.json()["error"]["code"], -32006);
    }
    for head in [
        format!("content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n{chunked}"),
        format!(
            "content-length: {0}\r\ncontent-length: {0}\r\n\r\n{json}",
            json.len()
        ),
    ] {
        let url = raw_upstream(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{head}"
        ));
        let gw = Gateway::start(&config(&url, "10s"));
        let r = post(&gw.url("/mcp-gpt-full"), &[], &call(3, "get_document")).await;
        assert_eq!(r.status, 200, "{head:?}: {}", r.body);
        assert_eq!(r.body, json);
        let lengths: Vec<_> = r.headers.get_all("content-length").iter().collect();
        assert_eq!(lengths, [json.len().to_string().as_str()], "{head:?}");
    }
}

/// A 202 (a notification's answer) stays bodiless whatever the client's Accept prefers,
/// even when the upstream labels it JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_notification_stays_bodiless() {
    let url = raw_upstream(
        "HTTP/1.1 202 Accepted\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n",
    );
    let gw = Gateway::start(&config(&url, "10s"));
    let note = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    for accept in [
        "text/event-stream",
        "application/json, text/event-stream;q=0.5",
    ] {
        let headers = [("content-type", "application/json"), ("accept", accept)];
        let r = send(Method::POST, &gw.url("/mcp-gpt-full"), &headers, note).await;
        assert_eq!(r.status, 202, "{accept}");
        assert_eq!(r.body, "", "{accept}");
        assert!(!r.header("content-type").starts_with("text/event-stream"));
    }
}

/// An upstream that takes a while to open a GET stream, as one that checks something per
/// stream would, and then answers its event-stream head and holds it open; a POST gets a
/// small JSON answer on a kept connection. It keeps, in order, each stream it opened and
/// each POST with whether its session's stream was open when the POST was read.
fn slow_streams_upstream(opening: Duration) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let log = seen.clone();
    serve_requests(
        move || listener.accept().map(|(s, _)| s),
        move |_, _, head, _, conn| {
            let lower = head.to_ascii_lowercase();
            let session = lower
                .lines()
                .find_map(|l| l.strip_prefix("mcp-session-id:"))
                .unwrap_or_default()
                .trim()
                .to_string();
            let answer = if lower.starts_with("get ") {
                std::thread::sleep(opening);
                log.lock().unwrap().push(format!("stream {session}"));
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n".to_string()
            } else {
                let mut log = log.lock().unwrap();
                let open = log.contains(&format!("stream {session}"));
                log.push(format!("POST {session} stream open: {open}"));
                small_answer()
            };
            conn.write_all(answer.as_bytes()).is_ok()
        },
    );
    (url, seen)
}

/// A client opens its session's GET stream and, without waiting for it, sends a call on
/// another connection. The call goes upstream once the upstream has answered the GET,
/// so a server that asks the client something during the call (elicitation, sampling)
/// has the stream to ask on, as it would if the client talked to it directly. Requests
/// of other sessions do not wait. (Without the wait, every call here reaches the
/// upstream while its session's stream is still opening.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_s_call_waits_for_the_stream_it_opened_before() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let opening = Duration::from_millis(100);
    let (url, seen) = slow_streams_upstream(opening);
    let gw = Gateway::start(&config(&url, "10s"));
    let addr = gw.listeners["main"];
    let request = |method: &str, session: &str| {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        match method {
            "GET" => format!(
                "GET /mcp-gpt-full HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\nmcp-session-id: {session}\r\n\r\n"
            ),
            _ => format!(
                "POST /mcp-gpt-full HTTP/1.1\r\nhost: {addr}\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\nmcp-session-id: {session}\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            ),
        }
    };
    let answered = |mut conn: tokio::net::TcpStream| async move {
        // Read until the JSON-RPC answer is in.
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&answer).contains("\"result\"") {
            let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
                .await
                .expect("the call is answered")
                .unwrap();
            assert!(n > 0, "{}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
    };
    let trials = 10;
    let mut streams = Vec::new();
    for i in 0..trials {
        let session = format!("s{i}");
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut call = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(request("GET", &session).as_bytes())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        call.write_all(request("POST", &session).as_bytes())
            .await
            .unwrap();
        // Meanwhile a call of another session, with no stream, is not held up.
        let mut other = tokio::net::TcpStream::connect(addr).await.unwrap();
        other
            .write_all(request("POST", &format!("other{i}")).as_bytes())
            .await
            .unwrap();
        answered(other).await;
        answered(call).await;
        streams.push(stream);
    }
    let seen = seen.lock().unwrap();
    for i in 0..trials {
        let at = |what: &str| seen.iter().position(|l| l.starts_with(what));
        assert!(
            at(&format!("POST other{i} ")) < at(&format!("stream s{i}")),
            "another session's call went while s{i}'s stream was opening: {seen:?}"
        );
    }
    let early: Vec<_> = seen
        .iter()
        .filter(|l| l.ends_with("false") && l.starts_with("POST s"))
        .collect();
    assert!(
        early.is_empty(),
        "{} of {trials} calls reached the upstream before their session's stream was open: {seen:?}",
        early.len()
    );
    assert_eq!(seen.len(), 3 * trials, "{seen:?}");
}

/// A `unix:/socket:/path` upstream: requests reach the socket with the configured path and
/// query and `Host: localhost` (as nginx sends them there), its connections are kept and
/// reused like TCP ones, and a socket nobody listens on is a 502 naming no path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_upstream_is_served_and_its_connections_kept() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("up.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
    let log = seen.clone();
    serve_requests(
        move || listener.accept().map(|(s, _)| s),
        move |n, _, head, _, conn| {
            let host = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("host:")
                        .map(|h| h.trim().to_string())
                })
                .unwrap_or_default();
            let line = head.lines().next().unwrap_or_default();
            log.lock()
                .unwrap()
                .push(format!("conn {n}: {line} host={host}"));
            conn.write_all(small_answer().as_bytes()).is_ok()
        },
    );
    let url = format!("unix:{}:/mcp?via=socket", socket.display());
    let gw = Gateway::start(&config(&url, "10s"));
    for id in 1..=3 {
        let r = post(&gw.url("/mcp-gpt-full"), &[], &list(id)).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for line in &seen {
        assert!(
            line.ends_with("POST /mcp?via=socket HTTP/1.1 host=localhost"),
            "{seen:?}"
        );
    }
    assert!(
        seen.iter()
            .all(|l| l.starts_with("conn 0:") || l.starts_with("conn 1:")),
        "kept connections reused (one per worker at most): {seen:?}"
    );

    let missing = dir.path().join("nobody.sock");
    let gw = Gateway::start(&config(&format!("unix:{}:/mcp", missing.display()), "10s"));
    let r = post(&gw.url("/mcp-gpt-full"), &[], &call(7, "get_document")).await;
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(r.json()["error"]["code"], -32006);
    assert!(!r.body.contains("nobody.sock"), "{}", r.body);
    // The log names the socket (its line may be written just after the answer).
    gw.log_with("nobody.sock", 1).await;
}
