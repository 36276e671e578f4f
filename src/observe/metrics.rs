//! Prometheus metrics (SPEC §8), served by the admin listener at `/metrics`. Labels carry
//! route templates, profile, upstream and token-free names only; a tool name from a client
//! becomes a label only while fewer than `MAX_TOOL_LABELS` distinct names were seen, so a
//! client sending random names cannot blow up the series count.
//!
//! The series every request touches (requests, tool calls, the two latency histograms)
//! are counted by each thread in a shard of its own and summed when `/metrics` is read:
//! no lock, atomic or hash of a label's text is shared between the worker threads on the
//! request path (see [`Shards`]). The rest are prometheus_client metrics as registered.

use hashbrown::{Equivalent, HashMap as FastMap};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, NoLabelSet,
    text::encode,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

pub const MAX_TOOL_LABELS: usize = 256;

/// A label value shared with the configuration (a route template, a profile or upstream
/// name) or with the set of seen tool names: looking a series up clones a pointer, not
/// the text.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Label(pub Arc<str>);

impl From<&str> for Label {
    fn from(s: &str) -> Label {
        Label(Arc::from(s))
    }
}

impl EncodeLabelValue for Label {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> std::fmt::Result {
        EncodeLabelValue::encode(&&*self.0, encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: Label,
    pub profile: Label,
    pub method: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    pub profile: Label,
    pub tool: Label,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamLabels {
    pub upstream: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub upstream: Label,
    /// The endpoint's url as configured.
    pub endpoint: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    pub listener: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeprecatedLabels {
    pub tool: Label,
    pub caller: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamErrorLabels {
    pub upstream: Label,
    pub kind: &'static str,
}

/// The latency buckets' upper bounds, in seconds: 1 ms … ~16 s, doubling, then +Inf.
fn latency_bounds() -> Vec<f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 15)
        .chain([f64::MAX])
        .collect()
}

/// One histogram series as a thread counts it: the sum, the count, and the count in
/// each bucket (not cumulative; the text encoder adds them up).
#[derive(Clone, Debug, Default)]
struct Tally {
    sum: f64,
    count: u64,
    buckets: Vec<u64>,
}

impl Tally {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; bounds.len()];
        }
        self.sum += v;
        self.count += 1;
        let at = bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(bounds.len() - 1);
        self.buckets[at] += 1;
    }

    fn add(&mut self, other: &Tally) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; other.buckets.len()];
        }
        self.sum += other.sum;
        self.count += other.count;
        for (mine, theirs) in self.buckets.iter_mut().zip(&other.buckets) {
            *mine += theirs;
        }
    }
}

/// A request's labels, borrowed, for looking its series up. It hashes exactly as
/// [`RequestLabels`] does (the derived `Hash` writes each field's text in order), so a
/// hit clones nothing; only a thread's first request of a series makes owned labels.
#[derive(Hash)]
pub struct RequestKey<'a> {
    pub route: &'a str,
    pub profile: &'a str,
    pub method: &'static str,
    pub status: u16,
}

impl Equivalent<RequestLabels> for RequestKey<'_> {
    fn equivalent(&self, k: &RequestLabels) -> bool {
        self.status == k.status
            && self.method == k.method
            && *self.route == *k.route.0
            && *self.profile == *k.profile.0
    }
}

/// A tool call's labels, borrowed (see [`RequestKey`]).
#[derive(Hash)]
struct ToolKey<'a> {
    profile: &'a str,
    tool: &'a str,
    outcome: &'static str,
}

impl Equivalent<ToolLabels> for ToolKey<'_> {
    fn equivalent(&self, k: &ToolLabels) -> bool {
        self.outcome == k.outcome && *self.profile == *k.profile.0 && *self.tool == *k.tool.0
    }
}

/// One label's text, borrowed: hashes as a one-label set ([`RouteLabels`],
/// [`UpstreamLabels`]) does.
#[derive(Hash)]
struct OneKey<'a>(&'a str);

impl Equivalent<RouteLabels> for OneKey<'_> {
    fn equivalent(&self, k: &RouteLabels) -> bool {
        *self.0 == *k.route.0
    }
}

impl Equivalent<UpstreamLabels> for OneKey<'_> {
    fn equivalent(&self, k: &UpstreamLabels) -> bool {
        *self.0 == *k.upstream.0
    }
}

/// A row of the status page: requests of one profile and method (and tool, for
/// tools/call). Not a Prometheus series: the page's own, with finer latency buckets.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct RowLabels {
    pub profile: Label,
    pub method: &'static str,
    /// The tool of a tools/call (bounded as tool labels are), else empty.
    pub tool: Label,
}

#[derive(Hash)]
struct RowKey<'a> {
    profile: &'a str,
    method: &'static str,
    tool: &'a str,
}

impl Equivalent<RowLabels> for RowKey<'_> {
    fn equivalent(&self, k: &RowLabels) -> bool {
        self.method == k.method && *self.profile == *k.profile.0 && *self.tool == *k.tool.0
    }
}

/// The latency buckets of a status row: four per doubling from 10 µs, the last open.
pub const ROW_BUCKETS: usize = 96;

/// The upper bound of row bucket `i`, in seconds.
pub fn row_bound(i: usize) -> f64 {
    10e-6 * (i as f64 / 4.0).exp2()
}

/// What the status page shows of one row.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub requests: u64,
    /// Refused by mcpgate (the client's doing or the gateway's), by reason.
    pub refusals: Vec<(&'static str, u64)>,
    /// Failed upstream (unreachable, timed out, a bad answer).
    pub upstream_errors: u64,
    pub latency: Vec<u64>,
}

impl Row {
    fn add(&mut self, other: &Row) {
        self.requests += other.requests;
        self.upstream_errors += other.upstream_errors;
        for (reason, n) in &other.refusals {
            self.refuse(reason, *n);
        }
        if self.latency.is_empty() {
            self.latency = vec![0; ROW_BUCKETS];
        }
        for (mine, theirs) in self.latency.iter_mut().zip(&other.latency) {
            *mine += theirs;
        }
    }

    fn refuse(&mut self, reason: &'static str, n: u64) {
        match self.refusals.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, count)) => *count += n,
            None => self.refusals.push((reason, n)),
        }
    }

    /// The `q` quantile (0 to 1) of the latency, as the upper bound of its bucket (at
    /// most 19% over the true value); `None` before any request.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.latency.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.latency.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(row_bound(i));
            }
        }
        Some(row_bound(ROW_BUCKETS - 1))
    }
}

/// How a request ended, for its status row.
#[derive(Clone, Copy, Debug)]
pub enum Ending {
    Answered,
    Refused(&'static str),
    UpstreamError,
}

/// What a request's status row needs beyond its [`RequestKey`]: the tool of a tools/call
/// (bounded as [`Metrics::tool_label`] says) and how it ended.
pub struct RowNote<'a> {
    pub tool: Option<&'a str>,
    pub ending: Ending,
}

/// A tools/call decision, for the status page's latest ones: who (a token id or an OAuth
/// subject, never a token), what, and how it ended.
#[derive(Clone, Debug)]
pub struct Decision {
    pub at: std::time::SystemTime,
    pub request_id: Arc<str>,
    pub caller: Box<str>,
    /// A copy, not the configuration's shared `Arc`: its count would be written by both
    /// workers per call.
    pub profile: Box<str>,
    pub tool: Arc<str>,
    pub outcome: &'static str,
    pub reason: &'static str,
    pub status: u16,
}

/// How many decisions each thread keeps, and the page shows.
pub const RECENT: usize = 25;

/// What one thread counted of the per-request series.
#[derive(Default)]
struct Shard {
    requests: FastMap<RequestLabels, u64>,
    tool_calls: FastMap<ToolLabels, u64>,
    request_seconds: FastMap<RouteLabels, Tally>,
    upstream_seconds: FastMap<UpstreamLabels, Tally>,
    /// Tool labels this thread has used: the shared set is asked only for a new name.
    tools: FastMap<Box<str>, Label>,
    rows: FastMap<RowLabels, Row>,
    recent: std::collections::VecDeque<Decision>,
}

impl Shard {
    /// The bounded label of `tool`, through this thread's cache of them.
    fn tool(&mut self, metrics: &Metrics, tool: &str) -> Label {
        if let Some(label) = self.tools.get(tool) {
            return label.clone();
        }
        // A copy of the text: the thread's own, so using it touches no count another
        // thread shares.
        let fresh = Label::from(&*metrics.tool_label(tool).0);
        if *fresh.0 != *"(other)" {
            self.tools.insert(tool.into(), fresh.clone());
        }
        fresh
    }

    /// Counts a request of `profile` in its status row (see [`RowNote`]).
    fn count_row(
        &mut self,
        metrics: &Metrics,
        profile: &str,
        method: &'static str,
        note: &RowNote<'_>,
        took: Duration,
    ) {
        let label = note.tool.map(|t| self.tool(metrics, t));
        let key = RowKey {
            profile,
            method,
            tool: label.as_ref().map_or("", |l| &l.0),
        };
        let row = match self.rows.get_mut(&key) {
            Some(row) => row,
            None => {
                let labels = RowLabels {
                    profile: Label::from(profile),
                    method,
                    tool: label.unwrap_or_else(|| Label::from("")),
                };
                self.rows.entry(labels).or_default()
            }
        };
        row.requests += 1;
        match note.ending {
            Ending::Answered => {}
            Ending::Refused(reason) => row.refuse(reason, 1),
            Ending::UpstreamError => row.upstream_errors += 1,
        }
        if row.latency.is_empty() {
            row.latency = vec![0; ROW_BUCKETS];
        }
        let us = took.as_secs_f64() / 10e-6;
        let at = if us <= 1.0 {
            0
        } else {
            ((us.log2() * 4.0).ceil() as usize).min(ROW_BUCKETS - 1)
        };
        row.latency[at] += 1;
    }

    fn merge_into(&self, all: &mut Shard) {
        for (k, v) in &self.rows {
            all.rows.entry(k.clone()).or_default().add(v);
        }
        all.recent.extend(self.recent.iter().cloned());
        for (k, v) in &self.requests {
            *all.requests.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &self.tool_calls {
            *all.tool_calls.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &self.request_seconds {
            all.request_seconds.entry(k.clone()).or_default().add(v);
        }
        for (k, v) in &self.upstream_seconds {
            all.upstream_seconds.entry(k.clone()).or_default().add(v);
        }
    }
}

/// Every thread's shard of one [`Metrics`]. A thread finds its own through a thread-local
/// list keyed by `id` (tests run several gateways in one process), registering it here on
/// first use; a shard outlives its thread, so counts never go back.
#[derive(Debug)]
pub struct Shards {
    id: u64,
    bounds: Vec<f64>,
    all: Mutex<Vec<Arc<Mutex<ShardCell>>>>,
}

/// A shard behind the lock only the scrape ever contends for.
#[derive(Default)]
struct ShardCell(Shard);

impl std::fmt::Debug for ShardCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shard")
    }
}

thread_local! {
    /// This thread's shard of each `Shards` it has counted into, by id.
    static MINE: RefCell<Vec<(u64, Arc<Mutex<ShardCell>>)>> = const { RefCell::new(Vec::new()) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks; recover the data if something ever did.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shards {
    fn new() -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Shards {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            bounds: latency_bounds(),
            all: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on this thread's shard.
    fn with<R>(&self, f: impl FnOnce(&mut Shard, &[f64]) -> R) -> R {
        let mut f = Some(f);
        let mut run = |cell: &Mutex<ShardCell>| {
            let f = f.take()?;
            Some(f(&mut lock(cell).0, &self.bounds))
        };
        // The shard is used where it is found: no clone of its `Arc` per call.
        let done = MINE.try_with(|mine| {
            let mut mine = mine.borrow_mut();
            if let Some((_, cell)) = mine.iter().find(|(id, _)| *id == self.id) {
                return run(cell);
            }
            let cell = Arc::new(Mutex::new(ShardCell::default()));
            lock(&self.all).push(cell.clone());
            let done = run(&cell);
            mine.push((self.id, cell));
            done
        });
        match done {
            Ok(Some(r)) => r,
            // A thread being torn down counts into a shard of its own, kept here.
            _ => {
                let cell = Arc::new(Mutex::new(ShardCell::default()));
                lock(&self.all).push(cell.clone());
                run(&cell).unwrap_or_else(|| unreachable!("`f` runs once"))
            }
        }
    }

    /// Every shard summed, for a scrape.
    fn merged(&self) -> Shard {
        let cells: Vec<_> = lock(&self.all).clone();
        let mut all = Shard::default();
        for cell in cells {
            lock(&cell).0.merge_into(&mut all);
        }
        all
    }
}

/// Writes the sharded series into a scrape.
#[derive(Debug)]
struct PerRequest(Arc<Shards>);

impl Collector for PerRequest {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let all = self.0.merged();
        let bounds = &self.0.bounds;
        counters(
            &mut encoder,
            "requests",
            "HTTP requests answered, by route, profile, JSON-RPC method and status.",
            &all.requests,
        )?;
        counters(
            &mut encoder,
            "tool_calls",
            "tools/call requests by profile, tool and outcome.",
            &all.tool_calls,
        )?;
        histograms(
            &mut encoder,
            "request_duration_seconds",
            "Time from request to the answer's head (streams go on after it).",
            &all.request_seconds,
            bounds,
        )?;
        histograms(
            &mut encoder,
            "upstream_duration_seconds",
            "Time the upstream took to send its answer's head.",
            &all.upstream_seconds,
            bounds,
        )
    }
}

/// Writes one counter family of the summed shards.
fn counters<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &FastMap<L, u64>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, n) in series {
        family
            .encode_family(labels)?
            .encode_counter::<NoLabelSet, u64, u64>(n, None)?;
    }
    Ok(())
}

/// Writes one histogram family of the summed shards; `bounds` are the buckets' upper bounds.
fn histograms<L: EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &FastMap<L, Tally>,
    bounds: &[f64],
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, t) in series {
        let buckets: Vec<(f64, u64)> = bounds
            .iter()
            .copied()
            .zip(t.buckets.iter().copied().chain(std::iter::repeat(0)))
            .collect();
        family
            .encode_family(labels)?
            .encode_histogram::<NoLabelSet>(t.sum, t.count, &buckets, None)?;
    }
    Ok(())
}

pub struct Metrics {
    registry: Registry,
    per_request: Arc<Shards>,
    pub refusals: Family<ReasonLabels, Counter>,
    pub open_streams: Gauge,
    pub reloads: Family<ResultLabels, Counter>,
    pub last_reload_success: Gauge,
    pub upstream_errors: Family<UpstreamErrorLabels, Counter>,
    pub sse_dropped: Counter,
    pub audit_dropped: Counter,
    pub endpoint_healthy: Family<EndpointLabels, Gauge>,
    pub endpoint_ejections: Family<EndpointLabels, Counter>,
    pub endpoint_requests: Family<EndpointLabels, Counter>,
    pub endpoint_open_sessions: Family<EndpointLabels, Gauge>,
    pub stdio_processes: Family<UpstreamLabels, Gauge>,
    pub oauth_failures: Family<ReasonLabels, Counter>,
    pub deprecated_calls: Family<DeprecatedLabels, Counter>,
    pub oauth_key_fetches: Family<ResultLabels, Counter>,
    pub oauth_signing_keys: Gauge,
    pub limit_store_up: Gauge,
    pub limit_store_errors: Family<ReasonLabels, Counter>,
    pub limit_store_seconds: Histogram,
    pub cert_expiry: Family<ListenerLabels, Gauge>,
    pub trace_spans: Family<ResultLabels, Counter>,
    tool_names: Mutex<HashSet<Arc<str>>>,
    caller_names: Mutex<HashSet<Arc<str>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("mcpgate");
        let m = Metrics {
            per_request: Arc::new(Shards::new()),
            refusals: Family::default(),
            open_streams: Gauge::default(),
            reloads: Family::default(),
            last_reload_success: Gauge::default(),
            upstream_errors: Family::default(),
            sse_dropped: Counter::default(),
            audit_dropped: Counter::default(),
            endpoint_healthy: Family::default(),
            endpoint_ejections: Family::default(),
            endpoint_requests: Family::default(),
            endpoint_open_sessions: Family::default(),
            stdio_processes: Family::default(),
            oauth_failures: Family::default(),
            deprecated_calls: Family::default(),
            oauth_key_fetches: Family::default(),
            oauth_signing_keys: Gauge::default(),
            limit_store_up: Gauge::default(),
            limit_store_errors: Family::default(),
            // 100 µs to about 0.8 s, doubling.
            limit_store_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 14)),
            cert_expiry: Family::default(),
            trace_spans: Family::default(),
            tool_names: Mutex::new(HashSet::new()),
            caller_names: Mutex::new(HashSet::new()),
            registry: Registry::default(),
        };
        registry.register_collector(Box::new(PerRequest(m.per_request.clone())));
        registry.register(
            "refusals",
            "Requests mcpgate answered itself with an error, by reason",
            m.refusals.clone(),
        );
        registry.register(
            "open_streams",
            "SSE streams being relayed now",
            m.open_streams.clone(),
        );
        registry.register(
            "config_reload",
            "Configuration reloads by result",
            m.reloads.clone(),
        );
        registry.register(
            "config_last_reload_success",
            "1 if the last reload succeeded, 0 if it failed",
            m.last_reload_success.clone(),
        );
        registry.register(
            "upstream_errors",
            "Upstream failures by upstream and kind",
            m.upstream_errors.clone(),
        );
        registry.register(
            "sse_dropped_messages",
            "Messages dropped converting an SSE answer to JSON",
            m.sse_dropped.clone(),
        );
        registry.register(
            "audit_dropped",
            "Audit records lost (queue full or write failed)",
            m.audit_dropped.clone(),
        );
        registry.register(
            "endpoint_healthy",
            "1 while an upstream endpoint takes requests (healthy and not ejected)",
            m.endpoint_healthy.clone(),
        );
        registry.register(
            "endpoint_ejections",
            "Times an endpoint was ejected for failing too often in a row",
            m.endpoint_ejections.clone(),
        );
        registry.register(
            "endpoint_requests",
            "Requests sent to an endpoint (each try counts)",
            m.endpoint_requests.clone(),
        );
        registry.register(
            "endpoint_open_sessions",
            "Sessions this process sealed for an endpoint and has not seen end",
            m.endpoint_open_sessions.clone(),
        );
        registry.register(
            "stdio_processes",
            "Processes a stdio upstream runs now",
            m.stdio_processes.clone(),
        );
        registry.register(
            "oauth_failures",
            "Requests on oauth routes refused, by reason",
            m.oauth_failures.clone(),
        );
        registry.register(
            "oauth_key_fetches",
            "Fetches of the issuer's signing keys (JWKS), by result",
            m.oauth_key_fetches.clone(),
        );
        registry.register(
            "oauth_signing_keys",
            "Signing keys of the issuer in hand (0: oauth routes answer 503)",
            m.oauth_signing_keys.clone(),
        );
        registry.register(
            "deprecated_calls",
            "Calls of deprecated tools before their sunset, by tool and caller (token id or OAuth client)",
            m.deprecated_calls.clone(),
        );
        registry.register(
            "limit_store_up",
            "1 while a connection to the rate-limit store ([limits.store]) is up",
            m.limit_store_up.clone(),
        );
        registry.register(
            "limit_store_errors",
            "Requests whose rate rules the store did not answer (they took on_error), by reason",
            m.limit_store_errors.clone(),
        );
        registry.register(
            "limit_store_duration_seconds",
            "Round trips to the rate-limit store that answered",
            m.limit_store_seconds.clone(),
        );
        registry.register(
            "tls_certificate_expiry_timestamp_seconds",
            "When the certificate a TLS listener serves expires (notAfter), in Unix seconds",
            m.cert_expiry.clone(),
        );
        registry.register(
            "trace_spans",
            "Spans by result: exported, dropped (the export queue was full) or failed (the collector did not take them)",
            m.trace_spans.clone(),
        );
        m.last_reload_success.set(1);
        Metrics { registry, ..m }
    }

    /// Counts a call of the deprecated `tool` by `caller` (a token id or an OAuth client),
    /// so operators see who still uses it before its sunset.
    pub fn count_deprecated(&self, tool: &str, caller: &str) {
        let labels = DeprecatedLabels {
            tool: self.tool_label(tool),
            caller: bounded(&self.caller_names, caller),
        };
        self.deprecated_calls.get_or_create(&labels).inc();
    }

    /// The tool label for `name`: the name itself while the set of seen names is small.
    pub fn tool_label(&self, name: &str) -> Label {
        bounded(&self.tool_names, name)
    }
}

/// `name` as a label while fewer than [`MAX_TOOL_LABELS`] distinct ones were seen in
/// `seen`, `(other)` after.
fn bounded(seen: &Mutex<HashSet<Arc<str>>>, name: &str) -> Label {
    let mut seen = seen.lock().expect("metrics lock");
    if let Some(known) = seen.get(name) {
        return Label(known.clone());
    }
    if seen.len() < MAX_TOOL_LABELS {
        let label: Arc<str> = Arc::from(name);
        seen.insert(label.clone());
        return Label(label);
    }
    Label::from("(other)")
}

impl Metrics {
    pub fn observe_upstream(&self, upstream: &Arc<str>, took: Duration) {
        self.per_request.with(|shard, bounds| {
            let key = OneKey(upstream);
            match shard.upstream_seconds.get_mut(&key) {
                Some(t) => t.observe(bounds, took.as_secs_f64()),
                None => {
                    let mut t = Tally::default();
                    t.observe(bounds, took.as_secs_f64());
                    let labels = UpstreamLabels {
                        upstream: Label(upstream.clone()),
                    };
                    shard.upstream_seconds.insert(labels, t);
                }
            }
        });
    }

    /// Counts an answered request and the time to its answer's head, in this thread's
    /// shard.
    /// With `row`, it counts in the status page's row too (under the same lock).
    pub fn count_request(&self, key: &RequestKey<'_>, took: Duration, row: Option<&RowNote<'_>>) {
        self.per_request.with(|shard, bounds| {
            if let Some(note) = row {
                shard.count_row(self, key.profile, key.method, note, took);
            }
            match shard.requests.get_mut(key) {
                Some(n) => *n += 1,
                None => {
                    let labels = RequestLabels {
                        route: Label::from(key.route),
                        profile: Label::from(key.profile),
                        method: key.method,
                        status: key.status,
                    };
                    shard.requests.insert(labels, 1);
                }
            }
            let route = OneKey(key.route);
            match shard.request_seconds.get_mut(&route) {
                Some(t) => t.observe(bounds, took.as_secs_f64()),
                None => {
                    let mut t = Tally::default();
                    t.observe(bounds, took.as_secs_f64());
                    let labels = RouteLabels {
                        route: Label::from(key.route),
                    };
                    shard.request_seconds.insert(labels, t);
                }
            }
        });
    }

    /// Counts a tools/call of `tool` (bounded as [`Metrics::tool_label`] says), and keeps
    /// its decision among this thread's latest. A thread remembers the names that got a
    /// label of their own (at most `MAX_TOOL_LABELS`), so the shared set is locked only
    /// for a name it has not seen.
    pub fn count_tool_call(&self, profile: &str, tool: &str, decision: Decision) {
        self.per_request.with(|shard, _| {
            let label = shard.tool(self, tool);
            let key = ToolKey {
                profile,
                tool: &label.0,
                outcome: decision.outcome,
            };
            match shard.tool_calls.get_mut(&key) {
                Some(n) => *n += 1,
                None => {
                    let labels = ToolLabels {
                        profile: Label::from(profile),
                        tool: label,
                        outcome: decision.outcome,
                    };
                    shard.tool_calls.insert(labels, 1);
                }
            }
            if shard.recent.len() == RECENT {
                shard.recent.pop_front();
            }
            shard.recent.push_back(decision);
        });
    }

    /// The status page's rows (sorted by profile, method, tool) and the latest
    /// decisions (newest first), summed over every thread.
    pub fn status_rows(&self) -> (Vec<(RowLabels, Row)>, Vec<Decision>) {
        let all = self.per_request.merged();
        let mut rows: Vec<_> = all.rows.into_iter().collect();
        rows.sort_by(|(a, _), (b, _)| {
            (&*a.profile.0, a.method, &*a.tool.0).cmp(&(&*b.profile.0, b.method, &*b.tool.0))
        });
        let mut recent: Vec<_> = all.recent.into_iter().collect();
        recent.sort_by_key(|d| std::cmp::Reverse(d.at));
        recent.truncate(RECENT);
        (rows, recent)
    }

    /// The metrics in the OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

/// The OpenMetrics text of [`Metrics::render`] in Prometheus's older text format (0.0.4),
/// for scrapers that do not ask for OpenMetrics (and `promtool check metrics`): a
/// counter's `HELP` and `TYPE` name its `_total` samples, and there is no `# EOF`. The
/// samples themselves read the same in both.
pub fn to_text_format(openmetrics: &str) -> String {
    let counters: HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 1024);
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_older_text_format_names_counters_by_their_samples() {
        let om = "# HELP mcpgate_refusals Requests refused.\n# TYPE mcpgate_refusals counter\nmcpgate_refusals_total{reason=\"policy\"} 1\n# HELP mcpgate_open_streams Streams.\n# TYPE mcpgate_open_streams gauge\nmcpgate_open_streams 0\n# EOF\n";
        assert_eq!(
            to_text_format(om),
            "# HELP mcpgate_refusals_total Requests refused.\n# TYPE mcpgate_refusals_total counter\nmcpgate_refusals_total{reason=\"policy\"} 1\n# HELP mcpgate_open_streams Streams.\n# TYPE mcpgate_open_streams gauge\nmcpgate_open_streams 0\n"
        );
    }

    #[test]
    fn tool_labels_are_bounded() {
        let m = Metrics::new();
        for i in 0..MAX_TOOL_LABELS {
            assert_eq!(
                m.tool_label(&format!("t{i}")),
                Label::from(&*format!("t{i}"))
            );
        }
        assert_eq!(m.tool_label("one-more"), Label::from("(other)"));
        assert_eq!(m.tool_label("t0"), Label::from("t0"));
    }

    fn decision(outcome: &'static str) -> Decision {
        Decision {
            at: std::time::SystemTime::now(),
            request_id: Arc::from("r"),
            caller: "chatgpt-app".into(),
            profile: "gpt".into(),
            tool: Arc::from("get_document"),
            outcome,
            reason: "-",
            status: 200,
        }
    }

    /// Rows from several threads add up; quantiles are their bucket's bound, within 19%
    /// of the true value; each thread keeps its latest decisions.
    #[test]
    fn status_rows_are_summed_and_their_quantiles_near() {
        let m = Metrics::new();
        let key = |method| RequestKey {
            route: "/mcp",
            profile: "gpt",
            method,
            status: 200,
        };
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for ms in 1..=100u64 {
                        let ending = if ms % 10 == 0 {
                            Ending::Refused("rate_limited")
                        } else {
                            Ending::Answered
                        };
                        let took = Duration::from_millis(ms);
                        let note = RowNote {
                            tool: Some("get_document"),
                            ending,
                        };
                        m.count_request(&key("tools/call"), took, Some(&note));
                        m.count_tool_call("gpt", "get_document", decision("forwarded"));
                    }
                });
            }
        });
        let note = RowNote {
            tool: None,
            ending: Ending::UpstreamError,
        };
        m.count_request(&key("tools/list"), Duration::ZERO, Some(&note));
        let (rows, recent) = m.status_rows();
        assert_eq!(rows.len(), 2);
        let (labels, row) = &rows[0];
        assert_eq!(
            (&*labels.tool.0, labels.method),
            ("get_document", "tools/call")
        );
        assert_eq!(row.requests, 200);
        assert_eq!(row.refusals, vec![("rate_limited", 20)]);
        let p50 = row.quantile(0.5).unwrap();
        let p99 = row.quantile(0.99).unwrap();
        assert!((0.050..=0.050 * 1.19).contains(&p50), "{p50}");
        assert!((0.099..=0.099 * 1.19).contains(&p99), "{p99}");
        assert_eq!(rows[1].1.upstream_errors, 1);
        assert_eq!(rows[1].1.quantile(0.5), Some(row_bound(0)));
        assert_eq!(recent.len(), RECENT);
        assert!(recent.windows(2).all(|w| w[0].at >= w[1].at));
    }

    /// Counts made on several threads add up, and the histograms read exactly as
    /// prometheus_client's own would for the same observations.
    #[test]
    fn per_request_series_from_every_thread_are_summed() {
        use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
        let m = Metrics::new();
        let key = RequestKey {
            route: "/mcp/{token}",
            profile: "gpt",
            method: "tools/call",
            status: 200,
        };
        let upstream: Arc<str> = Arc::from("docs");
        let times = [0.0004, 0.003, 0.003, 2.5, 40.0];
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for t in times {
                        m.count_request(&key, Duration::from_secs_f64(t), None);
                        m.count_tool_call("gpt", "get_document", decision("forwarded"));
                        m.observe_upstream(&upstream, Duration::from_secs_f64(t));
                    }
                });
            }
        });
        m.count_request(&key, Duration::from_secs_f64(0.003), None);
        let text = m.render();
        assert!(
            text.contains("mcpgate_requests_total{route=\"/mcp/{token}\",profile=\"gpt\",method=\"tools/call\",status=\"200\"} 11\n"),
            "{text}"
        );
        assert!(
            text.contains("mcpgate_tool_calls_total{profile=\"gpt\",tool=\"get_document\",outcome=\"forwarded\"} 10\n"),
            "{text}"
        );

        let mut reference = Registry::with_prefix("mcpgate");
        let route: Family<RouteLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 15)));
        let up: Family<UpstreamLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 15)));
        reference.register(
            "request_duration_seconds",
            "Time from request to the answer's head (streams go on after it)",
            route.clone(),
        );
        reference.register(
            "upstream_duration_seconds",
            "Time the upstream took to send its answer's head",
            up.clone(),
        );
        for t in times.iter().chain(&times).chain(&[0.003]) {
            route
                .get_or_create(&RouteLabels {
                    route: Label::from("/mcp/{token}"),
                })
                .observe(*t);
        }
        for t in times.iter().chain(&times) {
            up.get_or_create(&UpstreamLabels {
                upstream: Label::from("docs"),
            })
            .observe(*t);
        }
        let mut expected = String::new();
        encode(&mut expected, &reference).unwrap();
        let expected = expected.trim_end_matches("# EOF\n");
        assert!(
            text.contains(expected),
            "{text}\n--- expected ---\n{expected}"
        );
    }

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new();
        m.reloads
            .get_or_create(&ResultLabels { result: "error" })
            .inc();
        let text = m.render();
        assert!(
            text.contains("mcpgate_config_reload_total{result=\"error\"} 1"),
            "{text}"
        );
        assert!(text.contains("mcpgate_config_last_reload_success 1"));
        assert!(text.ends_with("# EOF\n"));
    }
}
