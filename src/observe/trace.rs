//! Traces (SPEC §14): W3C trace context continued or started, one span per request,
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
//! queue without waiting; a full queue drops it, counted. A task on the control thread
//! takes batches off the queue, turns them into the SDK's `SpanData` and hands them to
//! `opentelemetry-otlp`'s exporter (protobuf over HTTP, on hyper). The request path does
//! not go through the SDK's tracer and span processor: those keep a span's attributes in
//! a shared structure behind locks while it is open and count drops nowhere we can read.
//!
//! Off (no `otlp`), none of this runs: the client's trace headers pass as any header.

use crate::config::TelemetrySettings;
pub use crate::http::traceparent::Context;
use crate::http::traceparent::{header, parse};
use crate::observe::metrics::ResultLabels;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;

/// Spans sent in one export at most.
const BATCH: usize = 512;
/// How long a span waits for its batch to fill before it is sent anyway.
const LINGER: Duration = Duration::from_secs(1);
/// An export that takes longer is given up (its spans counted as failed).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a request's span says, taken when it ends.
pub struct Record {
    pub context: Context,
    pub start: SystemTime,
    pub end: SystemTime,
    pub method: &'static str,
    pub route: Option<Arc<str>>,
    pub profile: Option<Arc<str>>,
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
    pub listener: Box<str>,
    pub peer: std::net::IpAddr,
    pub total_ms: f64,
    pub upstream_ms: Option<f64>,
}

/// The request side of tracing: sampling and the queue to the exporter.
pub struct Tracer {
    queue: mpsc::Sender<Record>,
    /// `sampling` as a bound on a trace id's low 63 bits.
    bound: u64,
    dropped: Counter,
}

impl Tracer {
    /// Starts the exporter task on the current runtime (the control thread's).
    pub fn start(settings: &TelemetrySettings, spans: Family<ResultLabels, Counter>) -> Tracer {
        let (queue, rx) = mpsc::channel(settings.queue);
        let dropped = spans
            .get_or_create(&ResultLabels { result: "dropped" })
            .clone();
        let exported = spans
            .get_or_create(&ResultLabels { result: "exported" })
            .clone();
        let failed = spans
            .get_or_create(&ResultLabels { result: "failed" })
            .clone();
        match exporter(settings) {
            Ok(e) => {
                tokio::spawn(export(e, rx, exported, failed));
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
        if self.queue.try_send(record).is_err() {
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

/// The exporter task: a batch when [`BATCH`] spans wait or the first has waited
/// [`LINGER`], one export at a time. Ends when the tracer is gone and the queue empty.
async fn export(
    exporter: opentelemetry_otlp::SpanExporter,
    mut rx: mpsc::Receiver<Record>,
    exported: Counter,
    failed: Counter,
) {
    let scope = InstrumentationScope::builder("mcpgate")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let mut batch = Vec::with_capacity(BATCH);
    let mut last_warning: Option<Instant> = None;
    let mut failures = 0u64;
    loop {
        if rx.recv_many(&mut batch, BATCH).await == 0 {
            return;
        }
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < BATCH {
            let room = BATCH - batch.len();
            tokio::select! {
                n = rx.recv_many(&mut batch, room) => if n == 0 { break },
                () = &mut linger => break,
            }
        }
        let n = batch.len() as u64;
        let spans: Vec<SpanData> = batch.drain(..).map(|r| span_data(r, &scope)).collect();
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

fn span_data(r: Record, scope: &InstrumentationScope) -> SpanData {
    let c = &r.context;
    let mut attributes = Vec::with_capacity(18);
    let mut text = |key: &'static str, value: Option<String>| {
        if let Some(v) = value {
            attributes.push(KeyValue::new(key, v));
        }
    };
    text("http.request.method", Some(r.method.to_string()));
    text("http.route", r.route.as_deref().map(str::to_string));
    text("mcp.method.name", r.rpc.as_deref().map(str::to_string));
    text("gen_ai.tool.name", r.tool.as_deref().map(str::to_string));
    text("mcpgate.profile", r.profile.as_deref().map(str::to_string));
    text(
        "mcpgate.token_id",
        r.token_id.as_deref().map(str::to_string),
    );
    text("mcpgate.sub", r.sub.as_deref().map(str::to_string));
    text(
        "mcpgate.client_id",
        r.client_id.as_deref().map(str::to_string),
    );
    text("mcpgate.outcome", Some(r.outcome.to_string()));
    text("mcpgate.request_id", Some(r.request_id.to_string()));
    text("mcpgate.listener", Some(r.listener.to_string()));
    text("client.address", Some(r.peer.to_string()));
    attributes.push(KeyValue::new(
        "http.response.status_code",
        i64::from(r.status),
    ));
    attributes.push(KeyValue::new("mcpgate.total_ms", r.total_ms));
    if let Some(up) = r.upstream_ms {
        attributes.push(KeyValue::new("mcpgate.upstream_ms", up));
        attributes.push(KeyValue::new(
            "mcpgate.gateway_ms",
            (r.total_ms - up).max(0.0),
        ));
    }
    let name = match &r.route {
        Some(route) => format!("{} {route}", r.method),
        None => r.method.to_string(),
    };
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
