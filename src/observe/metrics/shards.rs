//! The per-thread shards of the series every request touches: each worker counts in a
//! shard of its own, and a scrape (or the status page) sums them. No lock, atomic or hash
//! of a label's text is shared between the worker threads on the request path.

use super::rows::{Decision, Ending, ROW_BUCKETS, Row, RowLabels, RowNote};
use super::{Label, Metrics, RequestLabels, RouteLabels, ToolLabels, UpstreamLabels};
use hashbrown::{Equivalent, HashMap as FastMap};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The latency buckets' upper bounds, in seconds: 1 ms … ~16 s, doubling, then +Inf.
fn latency_bounds() -> Vec<f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 15)
        .chain([f64::MAX])
        .collect()
}

/// One histogram series as a thread counts it: the sum, the count, and the count in
/// each bucket (not cumulative; the text encoder adds them up).
#[derive(Clone, Debug, Default)]
pub(super) struct Tally {
    pub(super) sum: f64,
    pub(super) count: u64,
    pub(super) buckets: Vec<u64>,
}

impl Tally {
    pub(super) fn observe(&mut self, bounds: &[f64], v: f64) {
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
pub(super) struct ToolKey<'a> {
    pub(super) profile: &'a str,
    pub(super) tool: &'a str,
    pub(super) outcome: &'static str,
}

impl Equivalent<ToolLabels> for ToolKey<'_> {
    fn equivalent(&self, k: &ToolLabels) -> bool {
        self.outcome == k.outcome && *self.profile == *k.profile.0 && *self.tool == *k.tool.0
    }
}

/// One label's text, borrowed: hashes as a one-label set ([`RouteLabels`],
/// [`UpstreamLabels`]) does.
#[derive(Hash)]
pub(super) struct OneKey<'a>(pub(super) &'a str);

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

#[derive(Hash)]
pub(super) struct RowKey<'a> {
    pub(super) profile: &'a str,
    pub(super) method: &'static str,
    pub(super) tool: &'a str,
}

impl Equivalent<RowLabels> for RowKey<'_> {
    fn equivalent(&self, k: &RowLabels) -> bool {
        self.method == k.method && *self.profile == *k.profile.0 && *self.tool == *k.tool.0
    }
}

/// What one thread counted of the per-request series.
#[derive(Default)]
pub(super) struct Shard {
    pub(super) requests: FastMap<RequestLabels, u64>,
    pub(super) tool_calls: FastMap<ToolLabels, u64>,
    pub(super) request_seconds: FastMap<RouteLabels, Tally>,
    pub(super) upstream_seconds: FastMap<UpstreamLabels, Tally>,
    /// Tool labels this thread has used: the shared set is asked only for a new name.
    pub(super) tools: FastMap<Box<str>, Label>,
    pub(super) rows: FastMap<RowLabels, Row>,
    pub(super) recent: std::collections::VecDeque<Decision>,
}

impl Shard {
    /// The bounded label of `tool`, through this thread's cache of them.
    pub(super) fn tool(&mut self, metrics: &Metrics, tool: &str) -> Label {
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
    pub(super) fn count_row(
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
    pub(super) bounds: Vec<f64>,
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
    pub(super) fn new() -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Shards {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            bounds: latency_bounds(),
            all: Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` on this thread's shard.
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Shard, &[f64]) -> R) -> R {
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
    pub(super) fn merged(&self) -> Shard {
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
pub(super) struct PerRequest(pub(super) Arc<Shards>);

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
