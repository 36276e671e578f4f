//! stdio upstreams (docs/stdio.md): mcpgate runs a local MCP server process and is its
//! Streamable HTTP server. The rest of the request path (routes, tokens, policy, limits,
//! audit, JSON↔SSE shaping) is the same as for an HTTP upstream: this bridge answers the
//! forward stage with what an HTTP server would, an event stream per call.
//!
//! - `initialize` (without a session) starts a process (`per_client`) or uses the one
//!   (`shared`), and the answer carries a new `Mcp-Session-Id`. In shared mode the process
//!   is initialized once, with the first client's `initialize`; later clients get its
//!   answer with their own id, and only the first `notifications/initialized` reaches it.
//! - Every other legacy request needs a session: none is a 400, an unknown or ended one a
//!   404, and so is one another caller opened.
//! - A modern request (MCP 2026-07-28: no session, no `initialize`) goes to a process
//!   started without `initialize`: the one modern process (`shared`), or the caller's own
//!   (`per_client`: one per token, OAuth caller, or route without auth). A process serves
//!   one generation for its life (the SDKs' stdio servers settle it with the first
//!   message), so modern and legacy clients never share one. A caller idle for
//!   `idle_timeout` lets its process go (`per_client`). A `tools/call`'s `Mcp-Param-*`
//!   headers are checked first (`params`): a mismatch is 400 -32020 and reaches no child.
//! - A POST holding requests is answered 200 with an event stream: the answers and what
//!   the process says about them, each as an event, ending with the last answer. One
//!   holding only notifications or answers (to the process's own requests) is a 202.
//! - GET opens the session's stream for the process's messages about no call (one at a
//!   time: a second is a 409). DELETE ends the session.
//! - A start failure, a process that exits before its first answer, or one that does not
//!   read its input: 502 -32006. More sessions than `max_processes`: 503 -32003.
//! - A session ends with DELETE, after `idle_timeout` without a request, when its process
//!   dies, when a reload removes or changes the upstream, and at shutdown; its process
//!   (per_client) is then closed: stdin, SIGTERM, SIGKILL (`child`).
//! - A process that exits by itself within [`QUICK_EXIT`] of its start makes the next one
//!   wait: 100 ms, doubling to [`MAX_BACKOFF`]; the wait is only ever paid by an `initialize`.

mod answers;
pub mod child;
pub mod identity;
pub mod lines;
pub mod params;
mod sessions;

use answers::*;
use sessions::*;

use crate::config::generation::Era;
use crate::config::{Sharing, StdioCommand};
use crate::error::GateError;
use crate::http::body::UpstreamBody;
use crate::http::h1::client::BodyError;
use bytes::Bytes;
use child::{Child, SendError};
use http::{HeaderValue, Method, Response, StatusCode};
use params::ParamHeaders;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use wire::fields::FieldKind;

use crate::upstream::identity::{Tokens, Who};

/// A process that exits by itself sooner than this after its start counts as a crash.
const QUICK_EXIT: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

const SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// Who calls as a modern client, for its own process (`per_client`).
pub use crate::upstream::session::CallerKey;

/// A legacy session, or a modern caller.
struct Session {
    child: Arc<Child>,
    /// The number its calls carry in the child's routing.
    owner: u64,
    /// Milliseconds since the upstream's start at its last request.
    used: AtomicU64,
    /// Its GET stream, while one is open.
    stream: Mutex<Option<mpsc::Sender<Result<Bytes, BodyError>>>>,
    /// Who opened it (a legacy session): another caller is told it does not exist.
    opener: Option<CallerKey>,
}

/// One stdio upstream as run: its sessions and processes. Kept across reloads that keep
/// its settings (`registry`).
pub struct StdioUpstream {
    name: Arc<str>,
    command: Arc<StdioCommand>,
    started: Instant,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The sessions mcpgate opened for 2026-07-28 clients of a legacy child (the bridge).
    pub bridged: crate::upstream::bridged::Sessions,
    /// Shared mode: the process, and the answer to its `initialize` (the `result`).
    shared: tokio::sync::Mutex<Option<(Arc<Child>, Option<Value>)>>,
    /// Modern callers, each with its process (`per_client`) or the modern one (`shared`).
    callers: Mutex<HashMap<CallerKey, Arc<Session>>>,
    /// Shared mode: the process modern callers share.
    modern: tokio::sync::Mutex<Option<Arc<Child>>>,
    /// The next session's or caller's number.
    owners: AtomicU64,
    /// The `x-mcp-header` marks of its tools, learnt from its lists.
    params: Arc<ParamHeaders>,
    /// Processes running (counted from spawn to reaping).
    processes: Arc<AtomicUsize>,
    /// The same, as `/metrics` shows it.
    gauge: prometheus_client::metrics::gauge::Gauge,
    /// Quick exits in a row, and when the last was.
    crashes: Arc<Mutex<(u32, Option<Instant>)>>,
    /// With `identity`: the tokens that tell its processes who they serve.
    identity: identity::Current,
    /// `protocol = "auto"`: a process refused a legacy `initialize` as a server of
    /// 2026-07-28 only does; its legacy clients are bridged from then on (the command is
    /// the same program in every process).
    modern_only: std::sync::atomic::AtomicBool,
}

impl StdioUpstream {
    /// Whether a process of it refused a legacy `initialize` as a 2026-07-28 server does.
    pub fn modern_only(&self) -> bool {
        self.modern_only.load(Ordering::Relaxed)
    }

    /// Notes that a process refused a legacy `initialize` for its revision.
    pub fn set_modern_only(&self) {
        self.modern_only.store(true, Ordering::Relaxed);
    }

    /// Made inside a runtime: it sweeps idle sessions on it.
    pub fn new(
        name: Arc<str>,
        command: Arc<StdioCommand>,
        gauge: prometheus_client::metrics::gauge::Gauge,
    ) -> Arc<StdioUpstream> {
        let up = Arc::new(StdioUpstream {
            name,
            command,
            started: Instant::now(),
            sessions: Mutex::new(HashMap::new()),
            bridged: Default::default(),
            shared: tokio::sync::Mutex::new(None),
            callers: Mutex::new(HashMap::new()),
            modern: tokio::sync::Mutex::new(None),
            owners: AtomicU64::new(1),
            params: Arc::new(ParamHeaders::default()),
            processes: Arc::new(AtomicUsize::new(0)),
            gauge,
            crashes: Arc::new(Mutex::new((0, None))),
            identity: Default::default(),
            modern_only: Default::default(),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(sweep(Arc::downgrade(&up)));
        }
        up
    }

    /// The tokens its processes are told from now on (each reload sets them).
    pub fn identify(&self, tokens: Option<Arc<Tokens>>) {
        self.identity.store(tokens);
    }

    /// Answers one request as the process's Streamable HTTP server would. A modern one
    /// comes with its caller; a bridged one with mcpgate's session (`in_session`). `who`
    /// (with `identity`) is whom a process it starts serves.
    pub async fn send(
        &self,
        out: &crate::upstream::encode::Outgoing<'_>,
    ) -> Result<Response<UpstreamBody>, GateError> {
        let (fields, body, caller, who) = (out.fields, &out.body, out.caller, out.who.as_ref());
        let bridged = out.bridged.is_some();
        // A 2026-07-28 client bridged to a legacy child is served in mcpgate's session.
        let (session, era) = match &out.in_session {
            Some(to) => (to.session, Era::Legacy),
            None => (fields.get(FieldKind::McpSessionId), out.era),
        };
        match out.method {
            Method::POST if era == Era::Modern => {
                self.post_modern(caller.unwrap_or_default(), fields, body, bridged, who)
                    .await
            }
            Method::POST => self.post(session, caller, body, who).await,
            Method::GET => self.open_stream(session, caller),
            Method::DELETE => self.delete(session, caller),
            _ => Err(GateError::MethodNotAllowed),
        }
    }

    async fn post(
        &self,
        session: Option<&[u8]>,
        caller: Option<CallerKey>,
        body: &Bytes,
        who: Option<&Who>,
    ) -> Result<Response<UpstreamBody>, GateError> {
        let messages = messages(body)?;
        let initialize = messages.iter().any(|m| m["method"] == "initialize");
        let claimed = messages
            .iter()
            .find_map(|m| m.pointer("/params/_meta/io.modelcontextprotocol~1protocolVersion"));
        if let (None, false, Some(v)) = (session, initialize, claimed) {
            // Shaped as a 2026-07-28 request, for a revision that is not one (the pipeline
            // took it for legacy): as its HTTP server, say which one is served.
            return Err(GateError::UnsupportedVersion {
                requested: v.as_str().map_or_else(|| v.to_string(), str::to_string),
                supported: &[crate::config::generation::MODERN],
            });
        }
        if initialize {
            if messages.len() > 1 {
                return Err(GateError::InvalidRequest(
                    "initialize must be sent alone".into(),
                ));
            }
            if session.is_some() {
                return Err(GateError::InvalidRequest(
                    "initialize starts a session; send it without Mcp-Session-Id".into(),
                ));
            }
            let Some(request) = messages.into_iter().next().filter(child::is_request) else {
                return Err(GateError::InvalidRequest(
                    "initialize is a request: it needs an id".into(),
                ));
            };
            return self.initialize(request, caller, who).await;
        }
        let Some(id) = session else {
            return Err(GateError::InvalidRequest(
                "Mcp-Session-Id is required (initialize first)".into(),
            ));
        };
        let session = self.session(id, caller)?;
        session.used.store(self.now_ms(), Ordering::Relaxed);
        let mut messages = messages;
        if self.command.sessions == Sharing::Shared {
            // The process was initialized once, by the first client.
            messages.retain(|m| {
                m["method"] != "notifications/initialized"
                    || !session.child.initialized.swap(true, Ordering::Relaxed)
            });
        }
        let rx = session
            .child
            .send(messages, session.owner)
            .await
            .map_err(send_error)?;
        match rx {
            Some(rx) => stream(rx).await,
            None => Ok(empty(StatusCode::ACCEPTED)),
        }
    }

    /// A modern request: no session, no `initialize`; the caller's process answers it.
    async fn post_modern(
        &self,
        caller: CallerKey,
        fields: &wire::fields::Fields,
        body: &Bytes,
        bridged: bool,
        who: Option<&Who>,
    ) -> Result<Response<UpstreamBody>, GateError> {
        let messages = messages(body)?;
        // A bridged request is mcpgate's own (its client mirrors nothing): not checked.
        for m in messages.iter().filter(|_| !bridged) {
            if m["method"] == "tools/call"
                && let Some(tool) = m["params"]["name"].as_str()
            {
                self.params
                    .check(fields, tool, m["params"].get("arguments"))
                    .map_err(GateError::HeaderMismatch)?;
            }
        }
        let session = self.caller(caller, who).await?;
        session.used.store(self.now_ms(), Ordering::Relaxed);
        let rx = session
            .child
            .send(messages, session.owner)
            .await
            .map_err(send_error)?;
        let Some(rx) = rx else {
            return Ok(empty(StatusCode::ACCEPTED));
        };
        let answer = stream(rx).await?;
        // An error that is the whole answer gets the HTTP status the transport gives it.
        if let UpstreamBody::Messages {
            first: Some(first), ..
        } = answer.body()
            && let Some((status, json)) = error_status(first)
        {
            return Ok(whole(status, json));
        }
        Ok(answer)
    }

    /// A modern caller's session: its process, started (without `initialize`) if it has
    /// none running.
    async fn caller(
        &self,
        caller: CallerKey,
        who: Option<&Who>,
    ) -> Result<Arc<Session>, GateError> {
        let known = self
            .callers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&caller)
            .filter(|s| !s.child.is_gone())
            .cloned();
        if let Some(session) = known {
            return Ok(session);
        }
        let child = match self.command.sessions {
            Sharing::Shared => {
                let mut modern = self.modern.lock().await;
                match &*modern {
                    Some(c) if !c.is_gone() => c.clone(),
                    _ => {
                        let c = self.start(None).await?;
                        *modern = Some(c.clone());
                        c
                    }
                }
            }
            Sharing::PerClient => self.start(who).await?,
        };
        let session = Arc::new(Session {
            child,
            owner: self.owners.fetch_add(1, Ordering::Relaxed),
            used: AtomicU64::new(self.now_ms()),
            stream: Mutex::new(None),
            opener: Some(caller),
        });
        let mut callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        match callers.get(&caller) {
            // Another request of the same caller started one first: that one serves.
            Some(first) if !first.child.is_gone() => {
                let first = first.clone();
                drop(callers);
                if self.command.sessions == Sharing::PerClient {
                    background(async move { session.child.close().await });
                }
                Ok(first)
            }
            _ => {
                callers.insert(caller, session.clone());
                Ok(session)
            }
        }
    }

    async fn initialize(
        &self,
        request: Value,
        caller: Option<CallerKey>,
        who: Option<&Who>,
    ) -> Result<Response<UpstreamBody>, GateError> {
        if self.command.sessions == Sharing::PerClient {
            let child = self.start(who).await?;
            return match first_answer(&child, request).await {
                Ok(r) => match refusal(&r) {
                    // An initialize the process refused opens no session: answered as its
                    // HTTP server would (400, the error), and the process goes.
                    Some(error) => {
                        background(async move { child.close().await });
                        Ok(whole(StatusCode::BAD_REQUEST, error))
                    }
                    None => self.with_session(child, caller, r),
                },
                Err(e) => {
                    background(async move { child.close().await });
                    Err(e)
                }
            };
        }
        // Shared: the lock is held until the process's own initialize is answered, so the
        // process is initialized once however many clients come at first.
        let mut shared = self.shared.lock().await;
        if let Some((child, Some(result))) = &*shared
            && !child.is_gone()
        {
            let answer =
                serde_json::json!({"jsonrpc": "2.0", "id": request["id"], "result": result});
            let r = whole(StatusCode::OK, Bytes::from(answer.to_string()));
            return self.with_session(child.clone(), caller, r);
        }
        let child = match &*shared {
            Some((c, None)) if !c.is_gone() => c.clone(),
            _ => self.start(None).await?,
        };
        *shared = Some((child.clone(), None));
        let r = first_answer(&child, request).await?;
        if let Some(error) = refusal(&r) {
            return Ok(whole(StatusCode::BAD_REQUEST, error));
        }
        *shared = Some((child.clone(), initialize_result(&r)));
        drop(shared);
        self.with_session(child, caller, r)
    }

    /// A new session on `child`; the answer carries its id.
    fn with_session(
        &self,
        child: Arc<Child>,
        opener: Option<CallerKey>,
        mut response: Response<UpstreamBody>,
    ) -> Result<Response<UpstreamBody>, GateError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| {
            GateError::UpstreamUnreachable(format!("no randomness for a session id: {e}"))
        })?;
        let id = crate::config::token::to_hex(&bytes);
        let session = Arc::new(Session {
            child,
            owner: self.owners.fetch_add(1, Ordering::Relaxed),
            used: AtomicU64::new(self.now_ms()),
            stream: Mutex::new(None),
            opener,
        });
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), session);
        response.headers_mut().insert(
            http::HeaderName::from_static("mcp-session-id"),
            HeaderValue::try_from(id).expect("hex is a valid header value"),
        );
        Ok(response)
    }

    /// A process for a new session, within `max_processes`, after any backoff. With
    /// `identity` it is told it serves `who` (`None`: anyone, `sub: mcpgate`).
    async fn start(&self, who: Option<&Who>) -> Result<Arc<Child>, GateError> {
        if self.processes.fetch_add(1, Ordering::Relaxed) >= self.command.max_processes {
            self.processes.fetch_sub(1, Ordering::Relaxed);
            return Err(GateError::TooManyProcesses {
                max: self.command.max_processes,
            });
        }
        let wait = {
            let crashes = self.crashes.lock().unwrap_or_else(|p| p.into_inner());
            match *crashes {
                (n, Some(at)) if n > 0 => {
                    let backoff =
                        (Duration::from_millis(100) * 2u32.saturating_pow(n - 1)).min(MAX_BACKOFF);
                    backoff.saturating_sub(at.elapsed())
                }
                _ => Duration::ZERO,
            }
        };
        if !wait.is_zero() {
            tracing::info!(upstream = %self.name, wait_ms = wait.as_millis() as u64, "stdio server crashed lately; waiting before starting it again");
            tokio::time::sleep(wait).await;
        }
        let who = who.cloned().unwrap_or_else(Who::gateway);
        let given = match self.identity.load_full() {
            Some(tokens) => match identity::give(&tokens, &who, &self.name) {
                Ok(given) => Some(given),
                Err(e) => {
                    self.processes.fetch_sub(1, Ordering::Relaxed);
                    tracing::error!(upstream = %self.name, error = %e, "the stdio server's identity token could not be made");
                    return Err(GateError::UpstreamUnreachable(
                        "the stdio server's identity token could not be made".into(),
                    ));
                }
            },
            None => None,
        };
        let processes = self.processes.clone();
        let gauge = self.gauge.clone();
        let crashes = self.crashes.clone();
        let on_exit: child::OnExit = Box::new(move |asked, ran| {
            processes.fetch_sub(1, Ordering::Relaxed);
            gauge.dec();
            let mut crashes = crashes.lock().unwrap_or_else(|p| p.into_inner());
            if !asked && ran < QUICK_EXIT {
                *crashes = (crashes.0.saturating_add(1), Some(Instant::now()));
            } else if !asked {
                *crashes = (0, None);
            }
        });
        self.gauge.inc();
        let spawned = Child::spawn(
            self.name.clone(),
            &self.command,
            given.as_ref(),
            self.params.clone(),
            on_exit,
        );
        let child = spawned.map_err(|e| {
            self.gauge.dec();
            self.processes.fetch_sub(1, Ordering::Relaxed);
            if let Some(given) = &given {
                let _ = std::fs::remove_file(&given.file);
            }
            tracing::error!(upstream = %self.name, program = %self.command.program, error = %e, "stdio server could not be started");
            GateError::UpstreamUnreachable("the stdio server could not be started".into())
        })?;
        if let Some(given) = given {
            background(identity::keep_fresh(
                self.identity.clone(),
                who,
                given.file,
                child.exits(),
                self.name.clone(),
            ));
        }
        Ok(child)
    }
}

/// Runs `task` on the control thread's runtime (see `runtime::workers::control`), where
/// it outlives the workers: closing a process must finish even during shutdown.
pub fn background(task: impl std::future::Future<Output = ()> + Send + 'static) {
    match crate::runtime::workers::control() {
        Some(rt) => {
            rt.spawn(task);
        }
        None => {
            tokio::spawn(task);
        }
    }
}
