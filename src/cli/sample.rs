//! A small MCP server (Streamable HTTP) holding a document store: the upstream of
//! `mcpgate demo` and of the test suite. It answers in JSON or, like the TypeScript SDK,
//! in SSE with a priming event; pages tools/list when asked; refuses POSTs whose Accept
//! lacks either type (as SDK servers do); and records every request it receives so tests
//! can assert what actually reached the upstream.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

mod methods;
mod replies;

use methods::*;
pub use replies::SampleBody;
use replies::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Json,
    Sse,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    /// Tools per tools/list page; `None` returns all at once.
    pub page_size: Option<usize>,
    /// Adds `"cacheScope":"public"` to tools/list results (MCP 2026-07-28).
    pub cache_scope: bool,
    /// Delay before each tools/call result (after the priming event in SSE mode).
    pub call_delay: Option<Duration>,
    /// Serve a GET stream (and `subscriptions/listen`): this many notifications at this
    /// interval, then silence with the stream held open. `None`: GET answers 405.
    pub stream: Option<(usize, Duration)>,
    /// Benchmarks: list this many generated tools (`tool_000`…) instead of the store's.
    pub generated_tools: Option<usize>,
    /// Benchmarks: every tools/call result carries a text of this many bytes.
    pub result_bytes: Option<usize>,
    /// Keep every request for `received()` (tests). Off by default: a server that runs
    /// for long (the demo, `sample-upstream`, benchmarks) would grow without bound.
    pub record: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: Mode::Json,
            page_size: None,
            cache_scope: false,
            call_delay: None,
            stream: None,
            generated_tools: None,
            result_bytes: None,
            record: false,
        }
    }
}

/// One request as the sample server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: Method,
    pub uri: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

pub struct SampleServer {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    cancelled: Arc<AtomicU64>,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl SampleServer {
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("lock").clone()
    }

    /// How many tool calls ended because the client (the gateway) went away first.
    pub fn cancelled(&self) -> u64 {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// How many TCP connections it has accepted.
    pub fn connections(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    /// The tools/call names received so far.
    pub fn called_tools(&self) -> Vec<String> {
        self.received()
            .iter()
            .flat_map(|r| match r.json() {
                Value::Array(items) => items,
                v => vec![v],
            })
            .filter(|m| m["method"] == "tools/call")
            .filter_map(|m| m["params"]["name"].as_str().map(str::to_string))
            .collect()
    }
}

impl Drop for SampleServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The tools of the sample store. `move_document` is the deprecated one a gateway hides.
pub const TOOLS: [(&str, &str); 10] = [
    (
        "search_knowledge",
        "Search documents by a word in their title or text.",
    ),
    (
        "list_documents",
        "List the ids and titles of all documents.",
    ),
    ("get_document", "Read one document."),
    (
        "get_document_for_rewrite",
        "Read one document with its revision, before an update.",
    ),
    ("batch_read", "Read several documents at once."),
    ("upload_document", "Create a document."),
    ("update_document", "Replace a document's text."),
    ("patch_document", "Replace one string in a document's text."),
    ("delete_document", "Delete a document."),
    ("move_document", "Deprecated: rename a document."),
];

struct State {
    opts: Options,
    docs: Mutex<BTreeMap<String, (String, String)>>,
    received: Arc<Mutex<Vec<Received>>>,
    counter: AtomicU64,
    cancelled: Arc<AtomicU64>,
}

/// Counts a tool call as cancelled if it is dropped before it finished.
struct CallGuard {
    cancelled: Arc<AtomicU64>,
    finished: bool,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The documents the sample server starts with.
fn store() -> BTreeMap<String, (String, String)> {
    BTreeMap::from([
        (
            "welcome".to_string(),
            (
                "Welcome".to_string(),
                "This store holds the team's notes.".to_string(),
            ),
        ),
        (
            "onboarding".to_string(),
            (
                "Onboarding".to_string(),
                "Read the welcome note, then ask for access.".to_string(),
            ),
        ),
        (
            "old-plan".to_string(),
            (
                "Old plan".to_string(),
                "Superseded; kept for history.".to_string(),
            ),
        ),
    ])
}

/// The sample server over stdio: one JSON-RPC message per line on stdin, each answer one
/// line on stdout, until stdin ends (what `mcpgate sample-upstream --stdio` runs). Tools
/// are the same as over HTTP.
pub fn serve_stdio(opts: Options) -> std::io::Result<()> {
    use std::io::{BufRead, Write};
    let state = State {
        opts,
        docs: Mutex::new(store()),
        received: Arc::new(Mutex::new(Vec::new())),
        counter: AtomicU64::new(0),
        cancelled: Arc::new(AtomicU64::new(0)),
    };
    // Plain blocking reads and writes: nothing else runs here, and a runtime would hand
    // every read to a thread of its own.
    let stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    for line in stdin.lines() {
        let line = line?;
        let Ok(m) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let (Some(id), Some(method)) = (m.get("id"), m["method"].as_str()) else {
            continue;
        };
        let mut text = answer(&state, id.clone(), method, &m["params"]).to_string();
        text.push('\n');
        out.write_all(text.as_bytes())?;
        out.flush()?;
    }
    Ok(())
}

pub async fn start(addr: SocketAddr, opts: Options) -> std::io::Result<SampleServer> {
    let socket = TcpListener::bind(addr).await?;
    let addr = socket.local_addr()?;
    let received = Arc::new(Mutex::new(Vec::new()));
    let cancelled = Arc::new(AtomicU64::new(0));
    let state = Arc::new(State {
        opts,
        docs: Mutex::new(store()),
        received: received.clone(),
        counter: AtomicU64::new(0),
        cancelled: cancelled.clone(),
    });
    let accepted = Arc::new(AtomicU64::new(0));
    let counted = accepted.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = socket.accept().await else {
                continue;
            };
            counted.fetch_add(1, Ordering::SeqCst);
            let state = state.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(serve(&state, req).await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(SampleServer {
        addr,
        received,
        cancelled,
        accepted,
        task,
    })
}

type Reply = Response<SampleBody>;

async fn serve(state: &Arc<State>, req: Request<Incoming>) -> Reply {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if state.opts.record {
        state.received.lock().expect("lock").push(Received {
            method: parts.method.clone(),
            uri: parts.uri.to_string(),
            headers: parts.headers.clone(),
            body: body.clone(),
        });
    }
    match parts.method {
        Method::POST => {}
        Method::DELETE => return plain(StatusCode::OK, ""),
        Method::GET if state.opts.stream.is_some() => return notification_stream(state, None),
        _ => {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "");
            r.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
            return r;
        }
    }
    let accept = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !(accept.contains("application/json") && accept.contains("text/event-stream")) {
        return plain(
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: accept both application/json and text/event-stream",
        );
    }
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return json_reply(
            StatusCode::BAD_REQUEST,
            &error(Value::Null, -32700, "Parse error"),
            None,
        );
    };
    let (batch, messages) = match message {
        Value::Array(items) => (true, items),
        one => (false, vec![one]),
    };
    if let [m] = messages.as_slice() {
        if m["method"] == "subscriptions/listen" && state.opts.stream.is_some() {
            return notification_stream(state, Some(m["id"].clone()));
        }
    }
    let mut answers = Vec::new();
    let mut session = None;
    let mut has_call = false;
    for m in &messages {
        let (Some(id), Some(method)) = (m.get("id"), m["method"].as_str()) else {
            continue;
        };
        if method == "initialize" {
            session = Some(format!(
                "sample-{}",
                state.counter.fetch_add(1, Ordering::Relaxed)
            ));
        }
        has_call |= method == "tools/call";
        answers.push(answer(state, id.clone(), method, &m["params"]));
    }
    if answers.is_empty() {
        return plain(StatusCode::ACCEPTED, "");
    }
    let delay = state.opts.call_delay.filter(|_| has_call);
    match state.opts.mode {
        Mode::Json => {
            if let Some(d) = delay {
                let mut guard = CallGuard {
                    cancelled: state.cancelled.clone(),
                    finished: false,
                };
                tokio::time::sleep(d).await;
                guard.finished = true;
            }
            let v = if batch {
                Value::Array(answers)
            } else {
                answers.pop().expect("one answer")
            };
            json_reply(StatusCode::OK, &v, session)
        }
        Mode::Sse => sse_reply(state, answers, has_call, delay, session),
    }
}
