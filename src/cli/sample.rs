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

fn answer(state: &State, id: Value, method: &str, params: &Value) -> Value {
    match method {
        "initialize" => {
            let version = params["protocolVersion"].as_str().unwrap_or("2025-06-18");
            ok(
                id,
                json!({
                    "protocolVersion": version,
                    "capabilities": {"tools": {"listChanged": false}},
                    "serverInfo": {"name": "mcpgate-sample", "version": env!("CARGO_PKG_VERSION")}
                }),
            )
        }
        "ping" => ok(id, json!({})),
        "tools/list" if state.opts.generated_tools.is_some() => {
            let tools: Vec<Value> = (0..state.opts.generated_tools.unwrap_or(0))
                .map(|i| json!({"name": format!("tool_{i:03}"), "description": "A generated tool for benchmarks.", "inputSchema": {"type": "object"}}))
                .collect();
            ok(id, json!({"tools": tools}))
        }
        "tools/list" => ok(id, tools_page(&state.opts, params["cursor"].as_str())),
        "tools/call" if state.opts.result_bytes.is_some() => {
            let text = "x".repeat(state.opts.result_bytes.unwrap_or(0));
            ok(
                id,
                json!({"content": [{"type": "text", "text": text}], "isError": false}),
            )
        }
        "tools/call" if state.opts.generated_tools.is_some() => {
            let name = params["name"].as_str().unwrap_or("");
            // Exactly a name the list gives (`tool_007`, not `tool_7`).
            let listed = name
                .strip_prefix("tool_")
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|i| {
                    i < state.opts.generated_tools.unwrap_or(0) && format!("tool_{i:03}") == name
                });
            if listed {
                let text = format!("{name} called with {}", params["arguments"]);
                ok(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "isError": false}),
                )
            } else {
                error(id, -32602, &format!("Unknown tool: {name}"))
            }
        }
        "tools/call" => {
            let name = params["name"].as_str().unwrap_or("");
            match call(state, name, &params["arguments"]) {
                Some(Ok(text)) => ok(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "isError": false}),
                ),
                Some(Err(text)) => ok(
                    id,
                    json!({"content": [{"type": "text", "text": text}], "isError": true}),
                ),
                None => error(id, -32602, &format!("Unknown tool: {name}")),
            }
        }
        _ => error(id, -32601, &format!("Method not found: {method}")),
    }
}

fn tools_page(opts: &Options, cursor: Option<&str>) -> Value {
    let start: usize = cursor
        .and_then(|c| c.strip_prefix("page-"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let size = opts.page_size.unwrap_or(TOOLS.len());
    let tools: Vec<Value> = TOOLS
        .iter()
        .skip(start)
        .take(size)
        .map(|(name, description)| {
            json!({
                "name": name,
                "description": description,
                "inputSchema": {"type": "object", "properties": {"id": {"type": "string"}}},
                "annotations": {"readOnlyHint": name.starts_with("get") || name.starts_with("list") || name.starts_with("search") || *name == "batch_read"}
            })
        })
        .collect();
    let mut result = json!({"tools": tools, "_meta": {"sample/page": start / size.max(1)}});
    if start + size < TOOLS.len() {
        result["nextCursor"] = json!(format!("page-{}", start + size));
    }
    if opts.cache_scope {
        result["cacheScope"] = json!("public");
    }
    result
}

/// `None`: no such tool. `Some(Err)`: a tool error (`isError: true`).
fn call(state: &State, name: &str, args: &Value) -> Option<Result<String, String>> {
    let mut docs = state.docs.lock().expect("lock");
    let id = args["id"].as_str().unwrap_or("").to_string();
    let missing = || Err(format!("no document {id:?}"));
    Some(match name {
        "search_knowledge" => {
            let q = args["query"].as_str().unwrap_or("").to_lowercase();
            let hits: Vec<&String> = docs
                .iter()
                .filter(|(_, (t, c))| {
                    t.to_lowercase().contains(&q) || c.to_lowercase().contains(&q)
                })
                .map(|(id, _)| id)
                .collect();
            Ok(format!("matches: {hits:?}"))
        }
        "list_documents" => Ok(docs
            .iter()
            .map(|(id, (t, _))| format!("{id}: {t}"))
            .collect::<Vec<_>>()
            .join("\n")),
        "get_document" | "get_document_for_rewrite" => match docs.get(&id) {
            Some((t, c)) => Ok(format!("# {t}\n{c}")),
            None => missing(),
        },
        "batch_read" => {
            let ids: Vec<&str> = args["ids"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            Ok(ids
                .iter()
                .map(|i| {
                    docs.get(*i)
                        .map_or(format!("{i}: (none)"), |(t, c)| format!("{i}: {t}: {c}"))
                })
                .collect::<Vec<_>>()
                .join("\n"))
        }
        "upload_document" => {
            let id = if id.is_empty() {
                format!("doc-{}", docs.len() + 1)
            } else {
                id
            };
            let title = args["title"].as_str().unwrap_or(&id).to_string();
            docs.insert(
                id.clone(),
                (title, args["content"].as_str().unwrap_or("").to_string()),
            );
            Ok(format!("created {id}"))
        }
        "update_document" => match docs.get_mut(&id) {
            Some(d) => {
                d.1 = args["content"].as_str().unwrap_or("").to_string();
                Ok(format!("updated {id}"))
            }
            None => missing(),
        },
        "patch_document" => match docs.get_mut(&id) {
            Some(d) => {
                let (find, replace) = (
                    args["find"].as_str().unwrap_or(""),
                    args["replace"].as_str().unwrap_or(""),
                );
                d.1 = d.1.replacen(find, replace, 1);
                Ok(format!("patched {id}"))
            }
            None => missing(),
        },
        "delete_document" => match docs.remove(&id) {
            Some(_) => Ok(format!("deleted {id}")),
            None => missing(),
        },
        "move_document" => match docs.remove(&id) {
            Some(d) => {
                let to = args["new_id"].as_str().unwrap_or("moved").to_string();
                docs.insert(to.clone(), d);
                Ok(format!("moved {id} to {to}"))
            }
            None => missing(),
        },
        _ => return None,
    })
}

fn ok(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn plain(status: StatusCode, text: &'static str) -> Reply {
    let mut r = Response::new(SampleBody::Full(Some(Bytes::from_static(text.as_bytes()))));
    *r.status_mut() = status;
    r
}

fn json_reply(status: StatusCode, v: &Value, session: Option<String>) -> Reply {
    let mut r = Response::new(SampleBody::Full(Some(Bytes::from(v.to_string()))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    add_session(&mut r, session);
    r
}

fn add_session(r: &mut Reply, session: Option<String>) {
    if let Some(v) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        r.headers_mut().insert("mcp-session-id", v);
    }
}

/// SSE like the TypeScript SDK: a priming event (an id and empty data), a log
/// notification before a tool result, then one `event: message` per response, each its own
/// write so a client sees them arrive one by one.
fn sse_reply(
    state: &Arc<State>,
    answers: Vec<Value>,
    has_call: bool,
    delay: Option<Duration>,
    session: Option<String>,
) -> Reply {
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let base = state.counter.fetch_add(1, Ordering::Relaxed) * 100;
    let cancelled = state.cancelled.clone();
    tokio::spawn(async move {
        let mut n = base;
        let mut event = |data: String| {
            n += 1;
            Bytes::from(format!("event: message\nid: {n}\ndata: {data}\n\n"))
        };
        let _ = tx
            .send(Bytes::from(format!("id: {base}\ndata: \n\n")))
            .await;
        if has_call {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "working"}});
            let _ = tx.send(event(note.to_string())).await;
        }
        if let Some(d) = delay {
            // The client going away shows as the channel closing while the tool "runs".
            tokio::select! {
                _ = tokio::time::sleep(d) => {}
                _ = tx.closed() => {
                    cancelled.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
        }
        for a in answers {
            if tx.send(event(a.to_string())).await.is_err() {
                return;
            }
        }
    });
    let mut r = Response::new(SampleBody::Channel(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    add_session(&mut r, session);
    r
}

/// A long-lived stream: `count` notifications `interval` apart, then silence, held open
/// until the client leaves. For GET (server-initiated messages) and
/// `subscriptions/listen` (2026-07-28), whose id `listen` is.
fn notification_stream(state: &Arc<State>, listen: Option<Value>) -> Reply {
    let (count, interval) = state.opts.stream.expect("checked by the caller");
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        if let Some(id) = &listen {
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {"id": id}});
            let _ = tx
                .send(Bytes::from(format!("event: message\ndata: {ack}\n\n")))
                .await;
        }
        for n in 0..count {
            tokio::time::sleep(interval).await;
            let note = json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": format!("tick {n}")}});
            if tx
                .send(Bytes::from(format!(
                    "event: message\nid: t{n}\ndata: {note}\n\n"
                )))
                .await
                .is_err()
            {
                return;
            }
        }
        tx.closed().await;
    });
    let mut r = Response::new(SampleBody::Channel(rx));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r
}

pub enum SampleBody {
    Full(Option<Bytes>),
    Channel(mpsc::Receiver<Bytes>),
}

impl Body for SampleBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            SampleBody::Full(b) => Poll::Ready(
                b.take()
                    .filter(|b| !b.is_empty())
                    .map(|b| Ok(Frame::data(b))),
            ),
            SampleBody::Channel(rx) => rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }
}
