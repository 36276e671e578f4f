//! Traces (docs/operations.md): W3C trace context continued or started, one span per request,
//! exported over OTLP/HTTP when `[telemetry] otlp` is set.
//!
//! A request reads its `traceparent` ([`Tracer::begin`]): a valid one is continued (its
//! trace id, its span as our parent, its sampled flag decides), anything else starts a
//! trace, sampled at `sampling`. The upstream gets the child context: our span's id as
//! its parent. The client's `tracestate` goes with a continued trace, unchanged, and is
//! dropped with a new one.
//!
//! When the request ends its span is a [`Record`]: ids, times, and what the request
//! learned (route, profile, token id, tool, outcome, stage timings), put on a bounded
//! queue without waiting or waking anyone; a full queue drops it, counted. A task on the
//! control thread takes the queue every 100 ms, turns it into the SDK's `SpanData` and
//! hands it, in batches, to
//! `opentelemetry-otlp`'s exporter (protobuf over HTTP, on hyper). The request path does
//! not go through the SDK's tracer and span processor: those keep a span's attributes in
//! a shared structure behind locks while it is open and count drops nowhere we can read.
//!
//! Off (no `otlp`), none of this runs: the client's trace headers pass as any header.

use crate::config::TelemetrySettings;
pub use crate::http::traceparent::Context;
use crate::http::traceparent::{header, parse};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

/// Spans sent in one export at most (about 500 KB of protobuf).
const BATCH: usize = 1024;
/// How often the export task takes the queued spans.
const TICK: Duration = Duration::from_millis(100);
/// An export that takes longer is given up (its spans counted as failed).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request's span says, taken when it ends.
pub struct Record {
    pub context: Context,
    pub start: SystemTime,
    pub end: SystemTime,
    pub method: &'static str,
    /// Copies, not the configuration's shared `Arc`s (both workers would write their
    /// counts per request); moved into the span, not copied again.
    pub route: Option<Box<str>>,
    pub profile: Option<Box<str>>,
    pub token_id: Option<Box<str>>,
    pub sub: Option<Box<str>>,
    pub client_id: Option<Box<str>>,
    pub rpc: Option<Cow<'static, str>>,
    pub tool: Option<Arc<str>>,
    pub status: u16,
    /// `ok`, or why it was refused or failed (the log's `reason`).
    pub outcome: &'static str,
    /// A failure of the upstream's or the gateway's (not the client's).
    pub failed: bool,
    pub request_id: Arc<str>,
    pub peer: std::net::IpAddr,
    pub total_ms: f64,
    pub upstream_ms: Option<f64>,
}

/// The request side of tracing: sampling and the queue to the exporter.
pub struct Tracer {
    queue: Arc<Queue>,
    /// `sampling` as a bound on a trace id's low 63 bits.
    bound: u64,
    dropped: Counter,
}

/// Spans waiting for export. A request pushes under a lock and wakes nobody: the export
/// task looks every [`TICK`]. (A channel that woke the task per span cost a cross-thread
/// wake per request, about a third of tracing's cost.)
struct Queue {
    spans: Mutex<Vec<Record>>,
    limit: usize,
}

/// The label of `mcpgate_trace_spans_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpanLabels {
    result: &'static str,
}

/// Registers `mcpgate_trace_spans_total`, counted whether or not traces are exported.
pub fn register(registry: &mut Registry) -> Family<SpanLabels, Counter> {
    let spans = Family::default();
    registry.register(
        "trace_spans",
        "Spans by result: exported, dropped (the export queue was full) or failed (the collector did not take them)",
        spans.clone(),
    );
    spans
}

impl Tracer {
    /// Starts the exporter task on the current runtime (the control thread's).
    pub fn start(settings: &TelemetrySettings, spans: Family<SpanLabels, Counter>) -> Tracer {
        let queue = Arc::new(Queue {
            spans: Mutex::new(Vec::new()),
            limit: settings.queue,
        });
        let dropped = spans
            .get_or_create(&SpanLabels { result: "dropped" })
            .clone();
        let exported = spans
            .get_or_create(&SpanLabels { result: "exported" })
            .clone();
        let failed = spans
            .get_or_create(&SpanLabels { result: "failed" })
            .clone();
        match exporter(settings) {
            Ok(e) => {
                tokio::spawn(export(e, Arc::downgrade(&queue), exported, failed));
            }
            Err(error) => {
                // The URL was checked when the configuration was read; this is not expected.
                tracing::error!(%error, "cannot set the trace exporter up; spans are dropped");
            }
        }
        Tracer {
            queue,
            bound: (settings.sampling * (1u64 << 63) as f64) as u64,
            dropped,
        }
    }

    /// The trace context of a request whose `traceparent` fields are `fields` (several
    /// are as bad as a malformed one).
    pub fn begin<'a>(&self, mut fields: impl Iterator<Item = &'a [u8]>) -> Context {
        let parent = match (fields.next(), fields.next()) {
            (Some(one), None) => parse(one),
            _ => None,
        };
        let span_id = loop {
            let id = fastrand::u64(..).to_be_bytes();
            if id != [0; 8] {
                break id;
            }
        };
        let (trace_id, parent, sampled) = match parent {
            Some((trace, span, sampled)) => (trace, Some(span), sampled),
            None => {
                let trace = loop {
                    let id = fastrand::u128(..).to_be_bytes();
                    if id != [0; 16] {
                        break id;
                    }
                };
                let low = u64::from_be_bytes(trace[8..].try_into().unwrap_or_default()) >> 1;
                (trace, None, low < self.bound)
            }
        };
        Context {
            header: header(&trace_id, &span_id, sampled),
            trace_id,
            span_id,
            parent,
            sampled,
        }
    }

    /// Queues a sampled request's span; a full queue drops it (counted).
    pub fn end(&self, record: Record) {
        let mut spans = self.queue.spans.lock().unwrap_or_else(|p| p.into_inner());
        if spans.len() < self.queue.limit {
            spans.push(record);
        } else {
            drop(spans);
            self.dropped.inc();
        }
    }
}

fn exporter(
    settings: &TelemetrySettings,
) -> Result<opentelemetry_otlp::SpanExporter, opentelemetry_otlp::ExporterBuildError> {
    let client =
        opentelemetry_http::hyper::HyperClient::with_default_connector(EXPORT_TIMEOUT, None);
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(settings.otlp.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(client)
        .build()?;
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    exporter.set_resource(&resource);
    Ok(exporter)
}

/// The exporter task: every [`TICK`] it takes what the queue holds and sends it in
/// batches of up to [`BATCH`], one export at a time. Ends when the tracer is gone.
async fn export(
    exporter: opentelemetry_otlp::SpanExporter,
    queue: Weak<Queue>,
    exported: Counter,
    failed: Counter,
) {
    let scope = InstrumentationScope::builder("mcpgate")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let mut taken = Vec::new();
    let mut last_warning: Option<Instant> = None;
    let mut failures = 0u64;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(queue) = queue.upgrade() else { return };
        std::mem::swap(
            &mut taken,
            &mut *queue.spans.lock().unwrap_or_else(|p| p.into_inner()),
        );
        drop(queue);
        while !taken.is_empty() {
            let rest = taken.split_off(taken.len().min(BATCH));
            let batch = std::mem::replace(&mut taken, rest);
            let n = batch.len() as u64;
            let spans: Vec<SpanData> = batch.into_iter().map(|r| span_data(r, &scope)).collect();
            match exporter.export(spans).await {
                Ok(()) => {
                    exported.inc_by(n);
                }
                Err(error) => {
                    failed.inc_by(n);
                    failures += n;
                    if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                        tracing::warn!(%error, spans = failures, "the trace collector did not take spans (at most one warning a minute)");
                        last_warning = Some(Instant::now());
                        failures = 0;
                    }
                }
            }
        }
    }
}

fn span_data(r: Record, scope: &InstrumentationScope) -> SpanData {
    use opentelemetry::Value;
    let c = &r.context;
    let mut attributes = Vec::with_capacity(14);
    // Every attribute is paid for in export time: the method is in the span's name and the
    // total in its duration, so neither is repeated here. Shared and static texts go in as
    // they are: no copy per span.
    let mut put = |key: &'static str, value: Option<Value>| {
        if let Some(v) = value {
            attributes.push(KeyValue::new(key, v));
        }
    };
    let cow = |c: Cow<'static, str>| match c {
        Cow::Borrowed(s) => Value::from(s),
        Cow::Owned(s) => Value::from(s),
    };
    let name = match &r.route {
        Some(route) => format!("{} {route}", r.method),
        None => r.method.to_string(),
    };
    put("http.route", r.route.map(|t| Value::from(String::from(t))));
    put("mcp.method.name", r.rpc.map(cow));
    put("gen_ai.tool.name", r.tool.map(Value::from));
    put(
        "mcpgate.profile",
        r.profile.map(|t| Value::from(String::from(t))),
    );
    put(
        "mcpgate.token_id",
        r.token_id.map(|t| Value::from(String::from(t))),
    );
    put("mcpgate.sub", r.sub.map(|t| Value::from(String::from(t))));
    put(
        "mcpgate.client_id",
        r.client_id.map(|t| Value::from(String::from(t))),
    );
    put("mcpgate.outcome", Some(Value::from(r.outcome)));
    put("mcpgate.request_id", Some(Value::from(r.request_id)));
    put("client.address", Some(Value::from(r.peer.to_string())));
    put(
        "http.response.status_code",
        Some(Value::from(i64::from(r.status))),
    );
    if let Some(up) = r.upstream_ms {
        put("mcpgate.upstream_ms", Some(Value::from(up)));
        put(
            "mcpgate.gateway_ms",
            Some(Value::from((r.total_ms - up).max(0.0))),
        );
    }
    let flags = if c.sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(c.trace_id),
            SpanId::from_bytes(c.span_id),
            flags,
            false,
            TraceState::default(),
        ),
        parent_span_id: c.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: c.parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(name),
        start_time: r.start,
        end_time: r.end,
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: if r.failed {
            Status::error(r.outcome)
        } else {
            Status::Unset
        },
        instrumentation_scope: scope.clone(),
    }
}
