//! Test support: starts the real `mcpgate` binary on 127.0.0.1 with a config written for
//! the test, the sample MCP server in-process (so a test can read what it received), and
//! offers a small HTTP client over real sockets.
#![allow(dead_code)]

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mcpgate::cli::sample::{self, SampleServer};
use mcpgate::config::token::{Secret, to_hex};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

pub const GPT: &str = "tok-gpt-5Qd8xJv2LmN4pR7sT9uW1yZ3aB6cE0fH";
pub const READONLY: &str = "tok-readonly-Hk2Jm4Np6Qr8St0Uv2Wx4Yz6Ab8Cd0Ef";
pub const EXPIRED: &str = "tok-expired-Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp";
pub const FUTURE: &str = "tok-future-Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8Ii9Jj0Kk";
pub const LIMITED: &str = "tok-limited-Mm1Nn2Oo3Pp4Qq5Rr6Ss7Tt8Uu9Vv0Ww";
pub const API_KEY: &str = "upstream-api-key-from-env";
pub const ALL_TOKENS: [&str; 5] = [GPT, READONLY, EXPIRED, FUTURE, LIMITED];

pub const GPT_TOOLS: [&str; 9] = [
    "search_knowledge",
    "list_documents",
    "get_document",
    "get_document_for_rewrite",
    "batch_read",
    "upload_document",
    "update_document",
    "patch_document",
    "delete_document",
];
pub const READONLY_TOOLS: [&str; 4] = [
    "search_knowledge",
    "list_documents",
    "get_document",
    "batch_read",
];

/// The installed MCP peers (`scripts/test.sh` installs them).
pub fn peers() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers");
    assert!(
        dir.join("node_modules/node/bin/node").exists() && dir.join(".venv/bin/python").exists(),
        "the MCP peers are not installed: run scripts/test.sh (it installs them into tests/peers/)"
    );
    dir
}

pub fn node22() -> std::path::PathBuf {
    peers().join("node_modules/node/bin/node")
}

pub fn python() -> std::path::PathBuf {
    peers().join(".venv/bin/python")
}

/// Runs a client to completion (bounded) and returns its stdout.
pub fn run_client(cmd: &mut Command) -> String {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

pub fn hash(token: &str) -> String {
    to_hex(&Secret(token).hash())
}

/// The test deployment: SPEC §2's profiles plus one with a `methods` list.
pub fn config(upstream_url: &str, timeout: &str) -> String {
    format!(
        r#"
[[listen]]
name = "main"
addr = "127.0.0.1:0"

[upstreams.docs]
url = "{upstream_url}"
connect_timeout = "1s"
timeout = "{timeout}"
headers = {{ "X-API-Key" = "${{env:MCPGATE_TEST_API_KEY}}" }}

[tools]
hidden = ["move_document"]
deny_code = -32602

[profiles.gpt]
upstream = "docs"
allow = ["search_knowledge", "list_documents", "get_document", "get_document_for_rewrite",
         "batch_read", "upload_document", "update_document", "patch_document", "delete_document"]

[profiles.gpt-full]
upstream = "docs"
allow = ["*"]

[profiles.readonly]
upstream = "docs"
allow = ["search_knowledge", "list_documents", "get_*", "batch_read"]
deny = ["get_document_for_rewrite"]

[profiles.limited]
upstream = "docs"
allow = ["*"]
methods = ["initialize", "ping", "notifications/*", "tools/list"]

[[routes]]
listen = "main"
path = "/gpt-mcp/{{token}}/mcp"
profile = "gpt"

[[routes]]
listen = "main"
path = "/mcp-readonly"
profile = "readonly"

[[routes]]
listen = "main"
path = "/mcp-gpt-full"
profile = "gpt-full"
auth = "none"

[[routes]]
listen = "main"
path = "/mcp-limited"
profile = "limited"

[[tokens]]
id = "chatgpt-app"
sha256 = "{gpt}"
profiles = ["gpt"]
not_after = "2999-01-01T00:00:00Z"

[[tokens]]
id = "reader"
sha256 = "{readonly}"
profiles = ["readonly"]

[[tokens]]
id = "old-token"
sha256 = "{expired}"
profiles = ["gpt"]
not_after = "2020-01-01T00:00:00Z"

[[tokens]]
id = "next-token"
sha256 = "{future}"
profiles = ["gpt"]
not_before = "2999-01-01T00:00:00Z"

[[tokens]]
id = "limited"
sha256 = "{limited}"
profiles = ["limited"]

[limits]
max_body = "64KiB"
"#,
        gpt = hash(GPT),
        readonly = hash(READONLY),
        expired = hash(EXPIRED),
        future = hash(FUTURE),
        limited = hash(LIMITED),
    )
}

/// The config with an admin listener on a free loopback port.
pub fn with_admin(text: String) -> String {
    format!("{text}\n[admin]\naddr = \"127.0.0.1:0\"\n")
}

/// A running `mcpgate run` process. Killed on drop.
pub struct Gateway {
    child: Child,
    pub listeners: HashMap<String, SocketAddr>,
    log: Arc<Mutex<String>>,
    out: Arc<Mutex<String>>,
    path: std::path::PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Gateway {
    pub fn start(config_text: &str) -> Gateway {
        Self::try_start(config_text)
            .unwrap_or_else(|(code, log)| panic!("mcpgate exited ({code:?}):\n{log}"))
    }

    /// Starts the gateway; on early exit returns its exit code and stderr.
    pub fn try_start(config_text: &str) -> Result<Gateway, (Option<i32>, String)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mcpgate.toml");
        std::fs::write(&path, config_text).unwrap();
        let mut gw = Self::try_start_at(&path)?;
        gw._dir = Some(dir);
        Ok(gw)
    }

    /// Starts the gateway on a config file the caller placed (and may change later).
    pub fn start_at(path: &std::path::Path) -> Gateway {
        Self::try_start_at(path)
            .unwrap_or_else(|(code, log)| panic!("mcpgate exited ({code:?}):\n{log}"))
    }

    fn try_start_at(path: &std::path::Path) -> Result<Gateway, (Option<i32>, String)> {
        let config_text = std::fs::read_to_string(path).unwrap();
        let expected = config_text.matches("[[listen]]").count()
            + usize::from(config_text.contains("[admin]"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_mcpgate"))
            .args(["run", "-c"])
            .arg(path)
            .env("MCPGATE_TEST_API_KEY", API_KEY)
            .env("RUST_LOG", "debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let out_sink = out.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let mut o = out_sink.lock().unwrap();
                o.push_str(&line);
                o.push('\n');
            }
        });
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(found) = parse_listening(&line) {
                    let _ = tx.send(found);
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let mut listeners = HashMap::new();
        while listeners.len() < expected {
            match rx.recv_timeout(Duration::from_secs(20)) {
                Ok((name, addr)) => {
                    listeners.insert(name, addr);
                }
                Err(_) => {
                    let code = child.wait().ok().and_then(|s| s.code());
                    std::thread::sleep(Duration::from_millis(100));
                    return Err((code, log.lock().unwrap().clone()));
                }
            }
        }
        Ok(Gateway {
            child,
            listeners,
            log,
            out,
            path: path.to_path_buf(),
            _dir: None,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listeners["main"])
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// What the gateway wrote to stdout (the combined access log).
    pub fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// The log once `what` is in it `times` times. A worker writes the info lines it
    /// gathered 10 ms after the first of them; this waits (up to 5 s) for that write.
    pub async fn log_with(&self, what: &str, times: usize) -> String {
        for _ in 0..500 {
            let log = self.log();
            if log.matches(what).count() >= times {
                return log;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the log never showed {what:?}:\n{}", self.log());
    }

    pub fn config_path(&self) -> &std::path::Path {
        &self.path
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.listeners["admin"])
    }

    /// Sends a signal (`HUP`, `TERM`, …) to the gateway process.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits up to `limit` for the process to exit; its exit code, if it did.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The gateway logs JSON lines when stderr is not a terminal; a `listening` line names the
/// listener and the address it bound.
pub fn parse_listening(line: &str) -> Option<(String, SocketAddr)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["message"] != "listening" {
        return None;
    }
    Some((
        v["listener"].as_str()?.to_string(),
        v["addr"].as_str()?.parse().ok()?,
    ))
}

/// A sample upstream that records what it receives, for the tests to look at.
pub async fn upstream(opts: sample::Options) -> SampleServer {
    let opts = sample::Options {
        record: true,
        ..opts
    };
    sample::start(SocketAddr::from(([127, 0, 0, 1], 0)), opts)
        .await
        .unwrap()
}

pub async fn json_upstream() -> SampleServer {
    upstream(sample::Options::default()).await
}

pub async fn sse_upstream() -> SampleServer {
    upstream(sample::Options {
        mode: sample::Mode::Sse,
        ..Default::default()
    })
    .await
}

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

/// An upstream that answers every request with `reply` and closes the connection.
pub fn raw_upstream(reply: impl Into<Vec<u8>>) -> String {
    let reply = reply.into();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { break };
            use std::io::{Read, Write};
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the head and the body its Content-Length announces, then answer.
            while let Ok(n) = conn.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if seen.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let _ = conn.write_all(&reply);
        }
    });
    format!("http://{addr}/mcp")
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

/// A test CA in a temporary folder, issuing server and client certificates (rcgen).
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca_cert: rcgen::Certificate,
    pub ca: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Pki {
    pub fn new() -> Pki {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "mcpgate test CA");
        let key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        Pki {
            dir,
            ca_cert,
            ca: rcgen::Issuer::new(params, key),
        }
    }

    /// Issues a certificate; writes `NAME.pem` and `NAME.key`; returns its DER.
    pub fn issue(&self, name: &str, sans: &[&str], client: bool) -> Vec<u8> {
        self.issue_valid(name, sans, client, true)
    }

    /// A server certificate whose validity ended in 2021.
    pub fn issue_expired(&self, name: &str, sans: &[&str]) -> Vec<u8> {
        self.issue_valid(name, sans, false, false)
    }

    fn issue_valid(&self, name: &str, sans: &[&str], client: bool, valid: bool) -> Vec<u8> {
        let mut params =
            rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.extended_key_usages = vec![if client {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        }];
        if !valid {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        // Write the key first and the cert by rename, so a watcher never sees a half pair.
        std::fs::write(
            self.dir.path().join(format!("{name}.key")),
            key.serialize_pem(),
        )
        .unwrap();
        let tmp = self.dir.path().join(format!(".{name}.pem"));
        std::fs::write(&tmp, cert.pem()).unwrap();
        std::fs::rename(&tmp, self.dir.path().join(format!("{name}.pem"))).unwrap();
        cert.der().to_vec()
    }

    pub fn path(&self, file: &str) -> String {
        self.dir.path().join(file).display().to_string()
    }

    pub fn client_config(&self, client_cert: Option<&str>) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let mut config = match client_cert {
            Some(name) => {
                use rustls_pki_types::pem::PemObject;
                let certs = rustls_pki_types::CertificateDer::pem_file_iter(
                    self.dir.path().join(format!("{name}.pem")),
                )
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
                let key = rustls_pki_types::PrivateKeyDer::from_pem_file(
                    self.dir.path().join(format!("{name}.key")),
                )
                .unwrap();
                builder.with_client_auth_cert(certs, key).unwrap()
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config
    }
}

/// A real `redis-server` (Debian's package; `scripts/test.sh` installs it) on a loopback
/// port, with no persistence: a restart starts empty, as a replaced pod would. Killed on
/// drop.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    args: Vec<String>,
    dir: tempfile::TempDir,
}

impl Redis {
    pub fn start() -> Redis {
        Self::start_with(&[])
    }

    /// With extra `redis-server` arguments (`--requirepass`, …).
    pub fn start_with(args: &[&str]) -> Redis {
        let port = free_port();
        let mut redis = Redis {
            child: None,
            port,
            args: args.iter().map(|a| a.to_string()).collect(),
            dir: tempfile::tempdir().unwrap(),
        };
        redis.restart();
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts it (again) on the same port and waits until it answers.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (scripts/test.sh installs Debian's redis-server)");
        self.child = Some(child);
        for _ in 0..200 {
            if self
                .try_cli(&["PING"])
                .is_some_and(|o| o.contains("PONG") || o.contains("NOAUTH"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("redis-server did not start on port {}", self.port);
    }

    /// SIGKILL, as a crashed node.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends a signal (`STOP`, `CONT`) to the server: a stopped server keeps its socket
    /// open and answers nothing.
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        assert!(
            Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(pid.to_string())
                .status()
                .unwrap()
                .success()
        );
    }

    fn try_cli(&self, args: &[&str]) -> Option<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(at) = self.args.iter().position(|a| a == "--requirepass") {
            cmd.args(["--no-auth-warning", "-a", &self.args[at + 1]]);
        }
        let o = cmd.args(args).output().ok()?;
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// `redis-cli` against it; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|| panic!("redis-cli {args:?} failed"))
    }

    /// How many times Redis ran `command` (from INFO commandstats), e.g. `evalsha`.
    pub fn calls(&self, command: &str) -> u64 {
        let stats = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port free now, for a peer that must be told its port before it starts (an
/// external server, a gateway whose `[oauth] resource` names its own URL). Everything
/// that can bind port 0 and report the port it got does that instead.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` every 20 ms until it gives `Some`, and returns that; panics with `what`
/// once `limit` has passed. Tests wait for a condition with this, never for a fixed time.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`eventually`] for tests without a runtime.
pub fn eventually_blocking<T>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within {limit:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to 15 s: the store's reconnect backoff is at most 5 s) until the gateway's
/// `mcpgate_limit_store_up` is `up`.
pub async fn wait_store_up(gw: &Gateway, up: bool) {
    let want = format!("mcpgate_limit_store_up {}", u8::from(up));
    for _ in 0..150 {
        let m = send(Method::GET, &gw.admin_url("/metrics"), &[], "")
            .await
            .body;
        if m.lines().any(|l| l == want) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the store never became up={up}:\n{}", gw.log());
}
