//! One stdio MCP server process and the traffic on its pipes.
//!
//! - It runs in a process group of its own, with only PATH, HOME, LANG and the configured
//!   `env`. If the gateway is killed outright, its stdin reaches its end, which is how an
//!   MCP stdio server is told to exit (the SDKs' servers do).
//! - Requests are written one message per line by a writer task. What waits to be written
//!   is bounded ([`STDIN_BYTES`]): a call that finds no room waits at most [`STALL`] for
//!   the child to read, then fails, so a child that does not read fails calls quickly and
//!   holds a bounded amount of memory.
//! - Each request's id is replaced by a number of the child's own counter on the way in,
//!   and put back on the answer: two clients' equal ids (shared mode) never meet. A
//!   client's `notifications/cancelled` is renumbered the same way, and only among its own
//!   calls (its session's, or a modern caller's: the call's `owner`); one that names none
//!   of them is dropped. A client that leaves before its call is answered (its stream is
//!   let go) has the child told with a `notifications/cancelled` of its own.
//! - A notification that names a `subscriptions/listen` call by its
//!   `io.modelcontextprotocol/subscriptionId` goes to that call, with the client's id.
//! - The marks of `tools/list` answers' schemas are learnt for `Mcp-Param-*` checks
//!   (`params`).
//! - What the child writes is read line by line, bounded (`lines`). A line that is not a
//!   JSON-RPC message is logged (truncated) and dropped. An answer goes to the call that
//!   asked; a request or notification of the child's goes to the call it concerns (a
//!   progress token it was given), else to the newest call in flight, else to the GET
//!   streams of the sessions it serves; with none of those it is dropped (logged at debug).
//! - stderr lines go to the log with the upstream's name, at most
//!   [`STDERR_LINES_PER_SECOND`] a second; the rest are counted in one line.
//! - When it exits, every call still waiting gets an error and its sessions end.
//! - `close`: stdin closed, SIGTERM to its group after [`GRACE`], SIGKILL after as long
//!   again, and the process reaped.

use super::lines::{Line, Lines};
use super::params::ParamHeaders;
use crate::config::StdioCommand;
use crate::http::h1::client::BodyError;
use bytes::Bytes;
use nix::sys::signal::Signal;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};

mod pipes;
mod routing;

use pipes::*;
use routing::*;
pub use routing::{event, is_request};

/// The longest line read from a child's stdout: a larger message is dropped.
pub const MAX_LINE: usize = 16 << 20;
/// The longest stderr line logged; longer ones are cut.
const MAX_STDERR_LINE: usize = 4 << 10;
const STDERR_LINES_PER_SECOND: u32 = 50;
/// Bytes waiting for a child's stdin at most.
const STDIN_BYTES: usize = 4 << 20;
/// How long a call waits for room in that queue before it fails.
const STALL: Duration = Duration::from_secs(1);
/// Events queued for one call's client before the reader waits for it.
pub const CALL_QUEUE: usize = 64;
/// How long a closed child has to exit by itself, then after SIGTERM.
pub const GRACE: Duration = Duration::from_secs(5);

/// A line for stdin, and (with the last line of a call) the room it holds in the queue.
type Queued = (Bytes, Option<OwnedSemaphorePermit>);

/// Why a message could not be handed to the child.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// It exited (or is being closed).
    Gone,
    /// Its stdin queue is full: it is not reading.
    NotReading,
}

/// The `_meta` key that names the `subscriptions/listen` call a notification belongs to.
const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The stream a call's events go to, and what is left of it.
pub struct Call {
    tx: mpsc::Sender<Result<Bytes, BodyError>>,
    /// Answers it still waits for; the call ends (its sender is let go) at 0.
    left: AtomicUsize,
    /// Whose call it is (a session or a modern caller), so a cancel names only its own.
    owner: u64,
    /// Told when the call is over (answered, or the child gone), so its watcher lets go.
    over: Notify,
}

struct Pending {
    /// The client's own id, as it wrote it.
    id: Box<RawValue>,
    call: Arc<Call>,
    /// A `tools/list`: its answer's schemas are read for `Mcp-Param-*` marks.
    lists_tools: bool,
}

#[derive(Default)]
struct Routing {
    next_id: u64,
    pending: HashMap<u64, Pending>,
    /// Calls in flight, oldest first.
    calls: Vec<Arc<Call>>,
    /// Progress tokens the calls in flight gave, and their call.
    progress: HashMap<String, Arc<Call>>,
    /// GET streams of the sessions this child serves.
    listeners: Vec<mpsc::Sender<Result<Bytes, BodyError>>>,
}

pub struct Child {
    upstream: Arc<str>,
    pid: u32,
    stdin: Mutex<Option<mpsc::UnboundedSender<Queued>>>,
    /// Room in the stdin queue, in bytes.
    room: Arc<Semaphore>,
    routing: Mutex<Routing>,
    exited: watch::Receiver<bool>,
    /// Set by `close`: its exit is then not a crash.
    closing: AtomicBool,
    /// Shared mode: whether a client's `notifications/initialized` was passed on yet.
    pub initialized: AtomicBool,
    /// The `x-mcp-header` marks of the upstream's tools, learnt from the lists.
    params: Arc<ParamHeaders>,
}

/// What the spawner is told when a child exits: whether it was asked to, and how long it ran.
pub type OnExit = Box<dyn FnOnce(bool, Duration) + Send>;

impl Child {
    /// Starts `command`; `on_exit` runs once it has exited and been reaped.
    pub fn spawn(
        upstream: Arc<str>,
        command: &StdioCommand,
        identity: Option<&super::identity::Given>,
        params: Arc<ParamHeaders>,
        on_exit: OnExit,
    ) -> std::io::Result<Arc<Child>> {
        let mut process = command_of(command, identity).spawn()?;
        let pid = process.id();
        let pipes = pipes(&mut process);
        let (stdin, stdout, stderr) = match pipes {
            Ok(p) => p,
            Err(e) => {
                let _ = process.kill();
                let _ = process.wait();
                return Err(e);
            }
        };
        let (to_stdin, queue) = mpsc::unbounded_channel();
        let (exited_tx, exited) = watch::channel(false);
        let child = Arc::new(Child {
            upstream: upstream.clone(),
            pid,
            stdin: Mutex::new(Some(to_stdin)),
            room: Arc::new(Semaphore::new(STDIN_BYTES)),
            routing: Mutex::new(Routing::default()),
            exited,
            closing: AtomicBool::new(false),
            initialized: AtomicBool::new(false),
            params,
        });
        // On this worker, where the session's first requests come from: no other thread is
        // woken per message. Shutdown closes the processes before the workers stop
        // (`Service::drained`).
        let rt = tokio::runtime::Handle::current();
        rt.spawn(write_stdin(stdin, queue));
        rt.spawn(read_stdout(Arc::downgrade(&child), stdout));
        rt.spawn(read_stderr(upstream.clone(), pid, stderr));
        let weak = Arc::downgrade(&child);
        let started = Instant::now();
        let waiter = std::thread::Builder::new()
            .name("mcpgate-stdio".into())
            .spawn(move || {
            let status = process.wait();
            let asked = weak
                .upgrade()
                .is_none_or(|c| c.closing.load(Ordering::Relaxed));
            match &status {
                Ok(s) if asked => {
                    tracing::info!(upstream = %upstream, pid, status = %s, "stdio server exited")
                }
                Ok(s) => {
                    tracing::warn!(upstream = %upstream, pid, status = %s, "stdio server exited by itself")
                }
                Err(e) => {
                    tracing::warn!(upstream = %upstream, pid, error = %e, "stdio server could not be waited for")
                }
            }
            let _ = exited_tx.send(true);
            if let Some(c) = weak.upgrade() {
                c.fail_all();
            }
            on_exit(asked, started.elapsed());
        });
        if let Err(e) = waiter {
            // Without a thread to wait for it, it could not be reaped: do not run it.
            tracing::error!(upstream = %child.upstream, pid, error = %e, "no thread to wait for a stdio server; stopping it");
            child.closing.store(true, Ordering::Relaxed);
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
                Signal::SIGKILL,
            );
            return Err(e);
        }
        tracing::info!(upstream = %child.upstream, pid, program = %command.program, "stdio server started");
        Ok(child)
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Turns true once it has exited and been reaped.
    pub fn exits(&self) -> watch::Receiver<bool> {
        self.exited.clone()
    }

    pub fn is_gone(&self) -> bool {
        *self.exited.borrow() || self.closing.load(Ordering::Relaxed)
    }

    /// Writes `messages` (each one line) for `owner`, the requests among them (those with a
    /// method and an id) renumbered; returns the stream their answers and the child's
    /// messages about them arrive on, or `None` when there is no request among them.
    pub async fn send(
        self: &Arc<Self>,
        messages: Vec<Value>,
        owner: u64,
    ) -> Result<Option<mpsc::Receiver<Result<Bytes, BodyError>>>, SendError> {
        if self.is_gone() {
            return Err(SendError::Gone);
        }
        let requests = messages.iter().filter(|m| is_request(m)).count();
        let mut receiver = None;
        let call = (requests > 0).then(|| {
            let (tx, rx) = mpsc::channel(CALL_QUEUE);
            receiver = Some(rx);
            Arc::new(Call {
                tx,
                left: AtomicUsize::new(requests),
                owner,
                over: Notify::new(),
            })
        });
        let (lines, numbered) = self.numbered(messages, owner, call.as_ref());
        let forget = |numbered: &[u64]| {
            let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
            for n in numbered {
                routing.pending.remove(n);
            }
            if let Some(call) = &call {
                routing.calls.retain(|c| !Arc::ptr_eq(c, call));
                routing.progress.retain(|_, c| !Arc::ptr_eq(c, call));
                call.over.notify_one();
            }
        };
        // Room for all of it, or none is written.
        let bytes: usize = lines.iter().map(Bytes::len).sum();
        let want = u32::try_from(bytes.min(STDIN_BYTES)).expect("4 MiB fits");
        let permit = match tokio::time::timeout(STALL, self.room.clone().acquire_many_owned(want))
            .await
        {
            Ok(Ok(p)) => p,
            _ => {
                forget(&numbered);
                tracing::warn!(upstream = %self.upstream, pid = self.pid, "the stdio server is not reading its input; call refused");
                return Err(SendError::NotReading);
            }
        };
        let stdin = self.stdin.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(stdin) = stdin else {
            forget(&numbered);
            return Err(SendError::Gone);
        };
        let last = lines.len().saturating_sub(1);
        let mut permit = Some(permit);
        for (i, line) in lines.into_iter().enumerate() {
            // The room is given back once the last line is written.
            let held = if i == last { permit.take() } else { None };
            if stdin.send((line, held)).is_err() {
                forget(&numbered);
                return Err(SendError::Gone);
            }
        }
        if let Some(call) = call {
            self.watch(call);
        }
        Ok(receiver)
    }

    /// `messages` as the child's input lines, the requests (of `call`) numbered as the
    /// child's and noted for their answers; a client's cancel of none of its calls dropped.
    /// The numbers given, so that a call that is not sent can be forgotten.
    fn numbered(
        &self,
        messages: Vec<Value>,
        owner: u64,
        call: Option<&Arc<Call>>,
    ) -> (Vec<Bytes>, Vec<u64>) {
        let mut lines = Vec::with_capacity(messages.len());
        let mut numbered = Vec::new();
        let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
        for mut m in messages {
            if m["method"] == "notifications/cancelled" && !routing.renumber_cancel(&mut m, owner) {
                tracing::debug!(upstream = %self.upstream, "a client's cancel names none of its calls; dropped");
                continue;
            }
            if let (true, Some(call)) = (is_request(&m), call) {
                routing.next_id += 1;
                let ours = routing.next_id;
                let theirs = serde_json::value::to_raw_value(&m["id"]).expect("a JSON value");
                m["id"] = Value::from(ours);
                if let Some(token) = progress_token(&m) {
                    routing.progress.insert(token, call.clone());
                }
                let lists_tools = m["method"] == "tools/list";
                routing.pending.insert(
                    ours,
                    Pending {
                        id: theirs,
                        call: call.clone(),
                        lists_tools,
                    },
                );
                numbered.push(ours);
            }
            let mut line = serde_json::to_vec(&m).expect("a JSON value");
            line.push(b'\n');
            lines.push(Bytes::from(line));
        }
        if let Some(call) = call {
            routing.calls.push(call.clone());
        }
        (lines, numbered)
    }

    /// Waits, beside the call, for its client to leave before it is over: the child is
    /// then told to stop.
    fn watch(self: &Arc<Self>, call: Arc<Call>) {
        let child = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::select! {
                _ = call.over.notified() => {}
                _ = call.tx.closed() => {
                    if let Some(child) = child.upgrade() {
                        child.abandon(&call);
                    }
                }
            }
        });
    }

    /// A call's client left: its requests still unanswered are cancelled at the child.
    fn abandon(&self, call: &Arc<Call>) {
        let ours: Vec<u64> = {
            let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
            let ours: Vec<u64> = routing
                .pending
                .iter()
                .filter(|(_, p)| Arc::ptr_eq(&p.call, call))
                .map(|(n, _)| *n)
                .collect();
            for n in &ours {
                routing.pending.remove(n);
            }
            routing.calls.retain(|c| !Arc::ptr_eq(c, call));
            routing.progress.retain(|_, c| !Arc::ptr_eq(c, call));
            ours
        };
        let stdin = self.stdin.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(stdin) = stdin else { return };
        for n in ours {
            tracing::info!(upstream = %self.upstream, pid = self.pid, request = n, "a client left before its answer; cancelled at the stdio server");
            let cancel = serde_json::json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": n, "reason": "the client left"}
            });
            let mut line = serde_json::to_vec(&cancel).expect("a JSON value");
            line.push(b'\n');
            let _ = stdin.send((Bytes::from(line), None));
        }
    }

    /// Adds a session's GET stream to those that get the child's messages about no call.
    pub fn listen(&self, tx: mpsc::Sender<Result<Bytes, BodyError>>) {
        let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
        routing.listeners.retain(|l| !l.is_closed());
        routing.listeners.push(tx);
    }

    /// Takes a session's GET stream out of those this child writes to (its session ended).
    pub fn unlisten(&self, tx: &mpsc::Sender<Result<Bytes, BodyError>>) {
        let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
        routing
            .listeners
            .retain(|l| !l.same_channel(tx) && !l.is_closed());
    }

    /// Forgets calls whose clients left (their answers would go nowhere).
    pub fn sweep(&self) {
        let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
        routing.pending.retain(|_, p| !p.call.tx.is_closed());
        routing.calls.retain(|c| !c.tx.is_closed());
        routing.progress.retain(|_, c| !c.tx.is_closed());
        routing.listeners.retain(|l| !l.is_closed());
    }

    /// Closes stdin, then SIGTERM to the process group after [`GRACE`], then SIGKILL, and
    /// waits until it has exited.
    pub async fn close(&self) {
        self.closing.store(true, Ordering::Relaxed);
        self.stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut exited = self.exited.clone();
        for signal in [Signal::SIGTERM, Signal::SIGKILL] {
            // Without a reaper left to say (its runtime gone), signal regardless.
            if let Ok(Ok(_)) = tokio::time::timeout(GRACE, exited.wait_for(|e| *e)).await {
                return;
            }
            tracing::info!(upstream = %self.upstream, pid = self.pid, signal = %signal, "stdio server still running; signalling its process group");
            // Only while it has not been reaped (so the group id is still its own).
            if !*exited.borrow()
                && let Ok(pid) = i32::try_from(self.pid)
                && pid > 0
            {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal);
            }
        }
        let _ = tokio::time::timeout(GRACE, exited.wait_for(|e| *e)).await;
    }

    /// The child has exited: every call still waiting gets an error, and the streams end.
    fn fail_all(&self) {
        let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
        routing.pending.clear();
        routing.progress.clear();
        routing.listeners.clear();
        for call in routing.calls.drain(..) {
            let _ = call.tx.try_send(Err(BodyError::new(
                "the stdio server exited before answering",
            )));
            call.over.notify_one();
        }
    }
}

/// The command that starts a stdio server: its program, arguments and folder, no
/// environment but `PATH`, `HOME`, `LANG` and its own (and its identity's, when it has one),
/// its pipes, in a process group of its own.
fn command_of(
    command: &StdioCommand,
    identity: Option<&super::identity::Given>,
) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    // std's process, not tokio's: tokio's makes every runtime look for exited children
    // each time it parks, which the request path would pay for. Its pipes are made
    // non-blocking and driven by this runtime; a thread of its own waits for it.
    let mut cmd = std::process::Command::new(&command.program);
    cmd.args(&command.args)
        .current_dir(&command.cwd)
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0);
    for name in ["PATH", "HOME", "LANG"] {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    for (k, v) in &command.env {
        cmd.env(k, v);
    }
    if let Some(given) = identity {
        cmd.env(crate::config::IDENTITY_TOKEN_VAR, &given.token)
            .env(crate::config::IDENTITY_FILE_VAR, &given.file);
    }
    cmd
}

/// A started server's pipes, made non-blocking for this runtime.
fn pipes(
    process: &mut std::process::Child,
) -> std::io::Result<(
    tokio::net::unix::pipe::Sender,
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Receiver,
)> {
    use std::os::fd::OwnedFd;
    use tokio::net::unix::pipe;
    let stdin = pipe::Sender::from_owned_fd(OwnedFd::from(process.stdin.take().expect("piped")))?;
    let stdout =
        pipe::Receiver::from_owned_fd(OwnedFd::from(process.stdout.take().expect("piped")))?;
    let stderr =
        pipe::Receiver::from_owned_fd(OwnedFd::from(process.stderr.take().expect("piped")))?;
    Ok((stdin, stdout, stderr))
}
