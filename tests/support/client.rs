//! A small HTTP client over real sockets: whole answers, streams, raw bytes.
use super::*;

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The JSON-RPC messages of the body, whether it is JSON or SSE.
    pub fn messages(&self) -> Vec<serde_json::Value> {
        if self.header("content-type").starts_with("text/event-stream") {
            let mut d = mcpgate::mcp::transport::sse::Decoder::new();
            d.feed(self.body.as_bytes());
            std::iter::from_fn(|| d.next_event())
                .filter_map(|e| e.data)
                .filter(|d| !d.is_empty())
                .map(|d| serde_json::from_str(&d).unwrap())
                .collect()
        } else {
            match self.json() {
                serde_json::Value::Array(v) => v,
                v => vec![v],
            }
        }
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }

    pub fn tool_names(&self) -> Vec<String> {
        let m = self
            .messages()
            .into_iter()
            .find(|m| m.get("result").is_some())
            .expect("a result");
        m["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }
}

pub const SDK_ACCEPT: &str = "application/json, text/event-stream";

/// Sends one request on a fresh client and returns the answer's head and body stream.
pub async fn request(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> http::Response<hyper::body::Incoming> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = method;
    *req.uri_mut() = url.parse().unwrap();
    for (k, v) in headers {
        req.headers_mut().append(
            HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    client.request(req).await.unwrap()
}

pub async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    let resp = request(method, url, headers, body.into()).await;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// POST as an SDK client would: JSON content, both types accepted.
pub async fn post(url: &str, extra: &[(&str, &str)], body: &str) -> Reply {
    let mut headers = vec![("content-type", "application/json"), ("accept", SDK_ACCEPT)];
    headers.extend_from_slice(extra);
    send(Method::POST, url, &headers, body.to_string()).await
}

/// Sends a JSON POST the way an SDK client does, over a connection of its own, waits
/// `stay` without reading the answer, and hangs up: a client that leaves mid-call.
/// `headers` are extra header lines, each ending in `\r\n`.
pub async fn post_and_hang_up(
    addr: SocketAddr,
    path: &str,
    headers: &str,
    body: &str,
    stay: Duration,
) {
    use tokio::io::AsyncWriteExt;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: {SDK_ACCEPT}\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(stay).await;
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

pub fn call(id: u64, tool: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"id":"welcome"}}}}}}"#
    )
}

pub fn list(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#)
}

/// Sends raw bytes on a fresh connection and returns everything read until the server
/// closes or goes quiet: for requests an HTTP library would refuse to build.
pub async fn raw(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_millis(1500), s.read(&mut buf)).await {
            Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends a request and reads the answer's body until it ends or `limit` passes, whichever
/// is first: for streams. Returns the reply and whether the body ended by itself.
pub async fn send_stream(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
    limit: Duration,
) -> (Reply, bool) {
    let resp = request(method, url, headers, body.into()).await;
    let (parts, mut body) = resp.into_parts();
    let mut bytes = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    let ended = loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => break false,
            Ok(None) => break true,
            Ok(Some(Err(_))) => break true,
            Ok(Some(Ok(f))) => {
                if let Ok(d) = f.into_data() {
                    bytes.extend_from_slice(&d);
                }
            }
        }
    };
    (
        Reply {
            status: parts.status,
            headers: parts.headers,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        },
        ended,
    )
}

/// Reads from a raw connection until the server closes it; how long that took, and what came.
pub async fn until_closed(s: &mut tokio::net::TcpStream, limit: Duration) -> (Duration, String) {
    use tokio::io::AsyncReadExt;
    let started = std::time::Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(
            tokio::time::Instant::from_std(started + limit),
            s.read(&mut buf),
        )
        .await
        {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    (
        started.elapsed(),
        String::from_utf8_lossy(&out).into_owned(),
    )
}

/// Reads one answer with a `Content-Length` from a raw connection: its head and body.
pub async fn read_answer(s: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .expect("an answer with Content-Length");
            if got.len() >= end + 4 + length {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("an answer within 5 s")
            .unwrap();
        assert!(n > 0, "closed before a whole answer: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}

/// Reads events from an event-stream `body` until one holds a JSON-RPC message, and returns
/// it; `None` when the stream ends first. Events already read wait in `seen`.
pub async fn next_message(
    body: &mut hyper::body::Incoming,
    seen: &mut String,
) -> Option<serde_json::Value> {
    loop {
        if let Some(end) = seen.find("\n\n") {
            let event: String = seen.drain(..end + 2).collect();
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if !data.is_empty() {
                return Some(serde_json::from_str(&data).unwrap());
            }
            continue;
        }
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame())
            .await
            .expect("an event or the end within 10 s")?;
        if let Ok(d) = frame.unwrap().into_data() {
            seen.push_str(&String::from_utf8_lossy(&d));
        }
    }
}
