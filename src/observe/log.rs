//! The JSON form of the operational log: one line per event, written with one `write(2)`.
//!
//! The lines are those of `tracing_subscriber`'s JSON formatter with flattened events and
//! the current span (`{"timestamp", "level", "message", fields…, "target", "span":
//! {fields…, "name"}}`), but built straight into a reused buffer. The stock formatter
//! stores a span's fields as JSON text and parses that text back into a value tree for
//! every event in the span, which on a path that logs one line per request costs more than
//! the line is worth.
//!
//! A request's lines carry its id as the stock formatter would show a span named
//! `request` with a `request_id` field, but without a `tracing` span: the id is the
//! thread's current request while the request is polled ([`in_request`]). A span costs a
//! registry slot and the filter's bookkeeping on every poll of the request.
//! The human format is tracing's own formatter, which knows only spans, so with it
//! requests get a real span ([`use_spans`]).

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context as TaskContext, Poll};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use wire::json::text::{push_f64, push_i64, push_plain, push_rfc3339, push_str, push_u64};

/// Where the lines go; stderr in `mcpgate run`, a buffer in tests. `urgent` is set for
/// warnings and errors, which a sink that gathers lines writes out at once.
pub trait Sink: Send + Sync + 'static {
    fn write_line(&self, line: &[u8], urgent: bool);
}

/// Standard error, written by every worker thread without a lock between them.
///
/// A worker thread gathers its lines and writes them together, in one `write(2)`:
/// [`GATHER`] after the first of them, when the next line would not fit in one write
/// ([`write_limit`]), with a warning or an error, and when the thread ends. Under load
/// that is one write for many requests instead of one per request (nginx's `access_log
/// … buffer= flush=` does the same); an info line reaches the file at most [`GATHER`]
/// late. Other threads write each line at once.
#[derive(Clone, Copy)]
pub struct Stderr;

/// How long a worker holds its first unwritten line before writing what it gathered.
pub const GATHER: std::time::Duration = std::time::Duration::from_millis(10);

/// A duplicate of fd 2 (the same open file), written to directly.
static STDERR: OnceLock<Option<std::fs::File>> = OnceLock::new();

thread_local! {
    /// Lines a worker thread has formatted and not yet written; flushed at thread exit too.
    static GATHERED: RefCell<Gathered> = const {
        RefCell::new(Gathered { lines: Vec::new(), timer: false })
    };
}

struct Gathered {
    lines: Vec<u8>,
    /// Whether a task to write them after [`GATHER`] is pending.
    timer: bool,
}

impl Gathered {
    fn write(&mut self) {
        write_whole(&self.lines);
        self.lines.clear();
    }
}

impl Drop for Gathered {
    fn drop(&mut self) {
        self.write();
    }
}

impl Stderr {
    pub fn new() -> Self {
        let file = STDERR.get_or_init(|| {
            use std::os::fd::AsFd;
            std::io::stderr()
                .as_fd()
                .try_clone_to_owned()
                .ok()
                .map(std::fs::File::from)
        });
        IS_FILE.get_or_init(|| {
            file.as_ref()
                .and_then(|f| f.metadata().ok())
                .is_some_and(|m| m.file_type().is_file())
        });
        Stderr
    }
}

impl Default for Stderr {
    fn default() -> Self {
        Self::new()
    }
}

/// Up to this size one `write(2)` is atomic on a pipe, so lines from several threads
/// cannot interleave; terminals take each write whole as well.
const ATOMIC_WRITE: usize = 4096;

/// A regular file takes any one write whole (the kernel holds the file's lock for it),
/// and larger writes cost the page cache less per byte as the file grows. When stderr is
/// a file, lines are gathered up to this size.
const FILE_WRITE: usize = 64 << 10;

/// Whether the duplicate of fd 2 is a regular file; learnt once, with it.
static IS_FILE: OnceLock<bool> = OnceLock::new();

/// The most bytes written in one `write(2)`: [`FILE_WRITE`] when stderr is a regular
/// file, [`ATOMIC_WRITE`] otherwise (a pipe, a terminal, or not known).
fn write_limit() -> usize {
    match IS_FILE.get() {
        Some(true) => FILE_WRITE,
        _ => ATOMIC_WRITE,
    }
}

/// Writes `bytes` (whole lines) to stderr: one unlocked write when it is atomic, else
/// through the standard lock so it is written whole.
fn write_whole(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    match STDERR.get() {
        Some(Some(file)) if bytes.len() <= write_limit() => match (&*file).write(bytes) {
            Ok(n) if n == bytes.len() => {}
            Ok(n) => {
                let _ = std::io::stderr().lock().write_all(&bytes[n..]);
            }
            Err(_) => {}
        },
        _ => {
            let _ = std::io::stderr().lock().write_all(bytes);
        }
    }
}

/// Writes the lines this thread has gathered.
fn flush_gathered() {
    let _ = GATHERED.try_with(|g| {
        if let Ok(mut g) = g.try_borrow_mut() {
            g.timer = false;
            g.write();
        }
    });
}

impl Sink for Stderr {
    fn write_line(&self, line: &[u8], urgent: bool) {
        if crate::runtime::workers::slot() == 0 {
            return write_whole(line);
        }
        let gathered = GATHERED.try_with(|g| {
            let Ok(mut g) = g.try_borrow_mut() else {
                return false;
            };
            let limit = write_limit();
            if g.lines.len() + line.len() > limit {
                g.write();
            }
            if line.len() > limit {
                return false;
            }
            g.lines.extend_from_slice(line);
            if urgent {
                g.write();
            } else if !g.timer {
                // The worker's runtime runs the task, on this thread, with these lines.
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    g.write();
                    return true;
                };
                g.timer = true;
                runtime.spawn(async {
                    tokio::time::sleep(GATHER).await;
                    flush_gathered();
                });
            }
            true
        });
        if gathered != Ok(true) {
            write_whole(line);
        }
    }
}

pub struct JsonLayer<S: Sink> {
    sink: S,
}

impl<S: Sink> JsonLayer<S> {
    pub fn new(sink: S) -> Self {
        JsonLayer { sink }
    }
}

impl<S: Sink + Clone> JsonLayer<S> {
    /// The layer of the process's own subscriber: its sink also takes the lines written
    /// without tracing's dispatch ([`request`]).
    pub fn installed(sink: S) -> Self {
        let _ = DIRECT.set(Box::new(sink.clone()));
        JsonLayer { sink }
    }
}

/// The sink of the JSON layer the process logs through, once installed.
static DIRECT: OnceLock<Box<dyn Sink>> = OnceLock::new();

/// The fields of the line every request ends with (the access log).
pub struct RequestLine<'a> {
    pub method: &'a str,
    /// The client's address (behind a trusted proxy, the one it names).
    pub client: std::net::IpAddr,
    pub route: &'a str,
    pub profile: &'a str,
    pub token: &'a str,
    /// An OAuth caller's `sub` and client (`-` on other routes).
    pub sub: &'a str,
    pub client_id: &'a str,
    pub rpc: &'a str,
    pub tool: &'a str,
    pub status: u16,
    pub reason: &'a str,
    /// Rounded to the microsecond ([`wire::json::text::to_microsecond`]).
    pub ms: f64,
}

/// A request's event with the fields of its [`RequestLine`], in their order, then `rest`.
macro_rules! request_event {
    ($level:expr, $f:expr, $($rest:tt)*) => {
        tracing::event!(
            target: "mcpgate::pipeline",
            $level,
            method = $f.method,
            client = %$f.client,
            route = $f.route,
            profile = $f.profile,
            token = $f.token,
            sub = $f.sub,
            client_id = $f.client_id,
            rpc = $f.rpc,
            tool = $f.tool,
            status = $f.status,
            reason = $f.reason,
            ms = $f.ms,
            $($rest)*
        )
    };
}

/// Logs the `request` line every request ends with (the access log), at info, with the
/// target `mcpgate::pipeline`. With the process's JSON layer installed it is written
/// straight to that layer's sink, exactly as the event would reach it but without the
/// dispatch and the field visitor; otherwise (the human format, tests) it is the event.
/// With the combined access log on, that log has the line instead.
pub fn request(fields: &RequestLine<'_>, now: std::time::SystemTime) {
    if super::combined::on()
        || !tracing::enabled!(target: "mcpgate::pipeline", tracing::Level::INFO)
    {
        return;
    }
    let Some(sink) = DIRECT.get() else {
        request_event!(tracing::Level::INFO, fields, "request");
        return;
    };
    with_line(|out| {
        format_request_line(out, fields, now);
        sink.write_line(out.as_bytes(), false);
    });
}

/// Logs a request that failed for a reason other than the client's, at warn, instead of
/// its `request` line.
pub fn request_failed(fields: &RequestLine<'_>, error: &impl std::fmt::Display) {
    request_event!(tracing::Level::WARN, fields, error = %error, "request failed");
}

/// Runs `f` on this thread's line buffer, emptied. A log call made while formatting (a
/// `Debug` impl that logs) gets a fresh buffer instead.
fn with_line(f: impl FnOnce(&mut String)) {
    LINE.with(|line| {
        let mut fresh = String::new();
        let mut guard = line.try_borrow_mut();
        let out: &mut String = match guard.as_deref_mut() {
            Ok(buf) => buf,
            Err(_) => &mut fresh,
        };
        out.clear();
        f(out);
    });
}

fn format_request_line(out: &mut String, f: &RequestLine<'_>, now: std::time::SystemTime) {
    out.push_str("{\"timestamp\":\"");
    push_rfc3339(out, now, 6);
    out.push_str("\",\"level\":\"INFO\",\"message\":\"request\"");
    // In the order the event lists them; each `,"key":` is written as one piece.
    out.push_str(",\"method\":");
    push_str(out, f.method);
    out.push_str(",\"client\":\"");
    wire::json::text::push_ip(out, f.client);
    out.push('"');
    let text = [
        (",\"route\":", f.route),
        (",\"profile\":", f.profile),
        (",\"token\":", f.token),
        (",\"sub\":", f.sub),
        (",\"client_id\":", f.client_id),
        (",\"rpc\":", f.rpc),
        (",\"tool\":", f.tool),
    ];
    for (key, value) in text {
        out.push_str(key);
        push_str(out, value);
    }
    out.push_str(",\"status\":");
    push_u64(out, f.status.into());
    out.push_str(",\"reason\":");
    push_str(out, f.reason);
    out.push_str(",\"ms\":");
    wire::json::text::push_ms(out, f.ms);
    out.push_str(",\"target\":\"mcpgate::pipeline\"");
    push_request(out);
    out.push_str("}\n");
}

/// A span's fields as a JSON fragment (`"k":v,"k2":v2`), kept in the span's extensions.
struct SpanFields(String);

/// Appends fields as `,"name":value` (or without the first comma when `first`).
struct FieldWriter<'a> {
    out: &'a mut String,
    first: bool,
    scratch: String,
}

impl FieldWriter<'_> {
    fn key(&mut self, name: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        // Field names are Rust identifiers, unless a macro call spelled one as a string.
        if name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            push_plain(self.out, name);
        } else {
            push_str(self.out, name);
        }
        self.out.push(':');
    }
}

impl Visit for FieldWriter<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field.name());
        push_str(self.out, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field.name());
        self.out.push_str(if value { "true" } else { "false" });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field.name());
        push_i64(self.out, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field.name());
        push_u64(self.out, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field.name());
        push_f64(self.out, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field.name());
        self.scratch.clear();
        let _ = write!(self.scratch, "{value:?}");
        push_str(self.out, &self.scratch);
    }
}

thread_local! {
    static LINE: RefCell<String> = RefCell::new(String::with_capacity(512));
    /// The id of the request this thread is polling, if any.
    static REQUEST_ID: RefCell<Option<Arc<str>>> = const { RefCell::new(None) };
}

/// Set when the log is not written by [`JsonLayer`]: requests then need a real span.
static SPANS: AtomicBool = AtomicBool::new(false);

/// Makes [`request_span`] return real spans, for a log formatter that shows only spans.
pub fn use_spans() {
    SPANS.store(true, Ordering::Relaxed);
}

/// A `request` span with the id when the formatter needs one ([`use_spans`]); otherwise
/// no span, and [`in_request`] and [`enter_request`] give the lines their id.
pub fn request_span(id: &str) -> tracing::Span {
    if SPANS.load(Ordering::Relaxed) {
        tracing::info_span!("request", request_id = id)
    } else {
        tracing::Span::none()
    }
}

/// While alive, lines logged on this thread outside any span carry `id` as their
/// request's. Dropping it restores the request that was current before.
#[must_use]
pub struct InRequest {
    before: Option<Arc<str>>,
}

pub fn enter_request(id: &Arc<str>) -> InRequest {
    let before = REQUEST_ID
        .try_with(|r| r.replace(Some(id.clone())))
        .ok()
        .flatten();
    InRequest { before }
}

impl Drop for InRequest {
    fn drop(&mut self) {
        let before = self.before.take();
        let _ = REQUEST_ID.try_with(|r| *r.borrow_mut() = before);
    }
}

/// Polls `inner` with `id` as this thread's current request, and inside `span`, during
/// each poll (what `Instrument` does for a span alone). One wrapper rather than two, so the
/// request's future is moved once less on its way in.
pub fn in_request<F: Future>(id: Arc<str>, span: tracing::Span, inner: F) -> InRequestFuture<F> {
    InRequestFuture {
        id: Some(id),
        span,
        inner,
    }
}

pin_project_lite::pin_project! {
    /// See [`in_request`].
    pub struct InRequestFuture<F> {
        // Lent to the thread while `inner` is polled (no count moved per poll).
        id: Option<Arc<str>>,
        span: tracing::Span,
        #[pin]
        inner: F,
    }
}

/// Gives the lent id back to its future, and the thread its previous request, when the
/// poll ends (or unwinds).
struct Lent<'a> {
    id: &'a mut Option<Arc<str>>,
    before: Option<Arc<str>>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let before = self.before.take();
        let _ = REQUEST_ID.try_with(|r| *self.id = r.replace(before));
    }
}

impl<F: Future> Future for InRequestFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _span = this.span.enter();
        let mine = this.id.take();
        let before = REQUEST_ID.try_with(|r| r.replace(mine)).ok().flatten();
        let _lent = Lent {
            id: this.id,
            before,
        };
        this.inner.poll(cx)
    }
}

/// Appends the current request as the stock formatter writes a `request` span.
fn push_request(out: &mut String) {
    let _ = REQUEST_ID.try_with(|r| {
        if let Some(id) = r.try_borrow().ok().as_deref().and_then(Option::as_deref) {
            out.push_str(",\"span\":{\"request_id\":");
            push_str(out, id);
            out.push_str(",\"name\":\"request\"}");
        }
    });
}

impl<S, K> Layer<K> for JsonLayer<S>
where
    S: Sink,
    K: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, K>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = String::new();
        attrs.record(&mut FieldWriter {
            out: &mut fields,
            first: true,
            scratch: String::new(),
        });
        span.extensions_mut().insert(SpanFields(fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, K>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(SpanFields(fields)) = ext.get_mut::<SpanFields>() {
            let first = fields.is_empty();
            values.record(&mut FieldWriter {
                out: fields,
                first,
                scratch: String::new(),
            });
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, K>) {
        with_line(|out| {
            let meta = event.metadata();
            out.push_str("{\"timestamp\":\"");
            push_rfc3339(out, std::time::SystemTime::now(), 6);
            out.push_str("\",\"level\":\"");
            out.push_str(meta.level().as_str());
            out.push('"');
            event.record(&mut FieldWriter {
                out,
                first: false,
                scratch: String::new(),
            });
            out.push_str(",\"target\":");
            push_str(out, meta.target());
            if let Some(span) = ctx.event_span(event) {
                out.push_str(",\"span\":{");
                if let Some(SpanFields(fields)) = span.extensions().get::<SpanFields>() {
                    if !fields.is_empty() {
                        out.push_str(fields);
                        out.push(',');
                    }
                }
                out.push_str("\"name\":");
                push_str(out, span.name());
                out.push('}');
            } else {
                push_request(out);
            }
            out.push_str("}\n");
            self.sink
                .write_line(out.as_bytes(), *meta.level() <= tracing::Level::WARN);
        });
    }
}

#[cfg(test)]
mod tests;
