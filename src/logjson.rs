//! The JSON form of the operational log: one line per event, written with one `write(2)`.
//!
//! The lines are those of `tracing_subscriber`'s JSON formatter with flattened events and
//! the current span (`{"timestamp", "level", "message", fields…, "target", "span":
//! {fields…, "name"}}`), but built straight into a reused buffer. The stock formatter
//! stores a span's fields as JSON text and parses that text back into a value tree for
//! every event in the span; with one line per request that was a sixth of the CPU a
//! proxied call cost (see docs/benchmarks.md).

use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::io::Write as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Where the lines go; stderr in `mcpgate run`, a buffer in tests.
pub trait Sink: Send + Sync + 'static {
    fn write_line(&self, line: &[u8]);
}

/// Standard error, written by every worker thread without a lock between them.
pub struct Stderr {
    /// A duplicate of fd 2 (the same open file), written to directly.
    fd: Option<std::fs::File>,
}

impl Stderr {
    pub fn new() -> Self {
        use std::os::fd::AsFd;
        let fd = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .ok()
            .map(std::fs::File::from);
        Stderr { fd }
    }
}

impl Default for Stderr {
    fn default() -> Self {
        Self::new()
    }
}

/// Up to this size one `write(2)` is atomic on a pipe, so lines from several threads
/// cannot interleave; files, and terminals, take each write whole as well.
const ATOMIC_WRITE: usize = 4096;

impl Sink for Stderr {
    fn write_line(&self, line: &[u8]) {
        match &self.fd {
            // One write, no lock: the common case.
            Some(file) if line.len() <= ATOMIC_WRITE => match (&*file).write(line) {
                Ok(n) if n == line.len() => {}
                Ok(n) => {
                    let _ = std::io::stderr().lock().write_all(&line[n..]);
                }
                Err(_) => {}
            },
            // A longer line goes through the standard lock so it is written whole.
            _ => {
                let _ = std::io::stderr().lock().write_all(line);
            }
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
        push_json_str(self.out, name);
        self.out.push(':');
    }
}

impl Visit for FieldWriter<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field.name());
        push_json_str(self.out, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field.name());
        self.out.push_str(if value { "true" } else { "false" });
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field.name());
        let _ = write!(self.out, "{value}");
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field.name());
        let _ = write!(self.out, "{value}");
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field.name());
        // The same digits serde_json writes; JSON has no NaN or infinity.
        if value.is_finite() {
            let _ = serde_json::to_writer(StringWriter(self.out), &value);
        } else {
            self.out.push_str("null");
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field.name());
        self.scratch.clear();
        let _ = write!(self.scratch, "{value:?}");
        push_json_str(self.out, &self.scratch);
    }
}

/// Lets serde_json write into a `String` (it only ever writes UTF-8).
struct StringWriter<'a>(&'a mut String);

impl std::io::Write for StringWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let s = std::str::from_utf8(buf).map_err(std::io::Error::other)?;
        self.0.push_str(s);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it.
fn push_json_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[plain..i]);
        if escape.is_empty() {
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('"');
}

thread_local! {
    static LINE: RefCell<String> = RefCell::new(String::with_capacity(512));
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
        LINE.with(|line| {
            // A log call made while formatting (a Debug impl that logs) gets a fresh buffer.
            let mut fresh = String::new();
            let mut guard = line.try_borrow_mut();
            let out: &mut String = match guard.as_deref_mut() {
                Ok(buf) => buf,
                Err(_) => &mut fresh,
            };
            out.clear();
            let meta = event.metadata();
            out.push_str("{\"timestamp\":\"");
            let _ = write!(
                out,
                "{}",
                humantime::format_rfc3339_micros(std::time::SystemTime::now())
            );
            out.push_str("\",\"level\":\"");
            out.push_str(meta.level().as_str());
            out.push('"');
            event.record(&mut FieldWriter {
                out,
                first: false,
                scratch: String::new(),
            });
            out.push_str(",\"target\":");
            push_json_str(out, meta.target());
            if let Some(span) = ctx.event_span(event) {
                out.push_str(",\"span\":{");
                if let Some(SpanFields(fields)) = span.extensions().get::<SpanFields>() {
                    if !fields.is_empty() {
                        out.push_str(fields);
                        out.push(',');
                    }
                }
                out.push_str("\"name\":");
                push_json_str(out, span.name());
                out.push('}');
            }
            out.push_str("}\n");
            self.sink.write_line(out.as_bytes());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Sink for Buffer {
        fn write_line(&self, line: &[u8]) {
            self.0.lock().unwrap().extend_from_slice(line);
        }
    }

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn emit() {
        tracing::info!(listener = "main", addr = %"127.0.0.1:1", "listening");
        let span = tracing::info_span!("request", request_id = %"r-1");
        let _e = span.enter();
        tracing::info!(
            method = %http::Method::POST, route = "/gpt-mcp/{token}/mcp", status = 200u16,
            ms = 0.25f64, big = u64::MAX, neg = -3i64, ok = true, odd = "quote \" and \\ and \n",
            nan = f64::NAN, "request"
        );
        tracing::warn!(error = ?std::io::Error::other("boom"), "upstream request failed");
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        for text in [
            every_ascii.as_str(),
            "",
            "plain",
            "é ü 日本 🦀",
            "a\u{2028}b\\\"\u{7f}",
        ] {
            let mut ours = String::new();
            push_json_str(&mut ours, text);
            assert_eq!(ours, serde_json::to_string(text).unwrap());
        }
    }

    fn lines(bytes: &[u8]) -> Vec<serde_json::Value> {
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Our lines are the stock JSON formatter's, field for field (timestamps aside).
    #[test]
    fn lines_match_the_stock_json_formatter() {
        let ours = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(JsonLayer::new(ours.clone()));
        tracing::subscriber::with_default(subscriber, emit);

        let stock = Buffer::default();
        let writer = stock.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, emit);

        let mut ours = lines(&ours.0.lock().unwrap());
        let mut stock = lines(&stock.0.lock().unwrap());
        assert_eq!(ours.len(), 3);
        for (a, b) in ours.iter_mut().zip(stock.iter_mut()) {
            let (ta, tb) = (a["timestamp"].take(), b["timestamp"].take());
            assert_eq!(ta.as_str().unwrap().len(), tb.as_str().unwrap().len());
            assert_eq!(a, b);
        }
        // Key order too: what a person reading the raw line sees first.
        let raw = String::from_utf8(ours_raw()).unwrap();
        assert!(raw.starts_with("{\"timestamp\":\""), "{raw}");
        assert!(
            raw.contains("\",\"level\":\"INFO\",\"message\":\"listening\",\"listener\":\"main\""),
            "{raw}"
        );
    }

    fn ours_raw() -> Vec<u8> {
        let ours = Buffer::default();
        let subscriber = tracing_subscriber::registry().with(JsonLayer::new(ours.clone()));
        tracing::subscriber::with_default(subscriber, emit);
        ours.0.lock().unwrap().clone()
    }
}
