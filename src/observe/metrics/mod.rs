//! Prometheus metrics (docs/operations.md), served by the admin listener at `/metrics`: the registry,
//! the per-thread shards of the series every request touches ([`shards`]), the status
//! page's rows ([`rows`]) and the renderers. The families other components count (an
//! endpoint's health, the verifier's key fetches, the rate-limit store, reloads, spans,
//! approvals, pins, a federated profile's members,
//! the audit queue, open streams, certificate expiry) are registered by those components
//! into [`Metrics::registry`] when the gateway is built; this module holds the request
//! path's own.
//!
//! Labels carry route templates, profile, upstream and token-free names only; a tool name
//! from a client becomes a label only while fewer than `MAX_TOOL_LABELS` distinct names
//! were seen, so a client sending random names cannot blow up the series count.

mod rows;
mod shards;
mod text;

pub use rows::{Decision, Ending, RECENT, ROW_BUCKETS, Row, RowLabels, RowNote, row_bound};
pub use shards::RequestKey;
pub use text::to_text_format;

use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, text::encode,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use shards::{OneKey, PerRequest, Shards, Tally, ToolKey};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
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
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeprecatedLabels {
    pub tool: Label,
    pub caller: Label,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamErrorLabels {
    pub upstream: Label,
    pub kind: &'static str,
}

/// The registry, and the request path's series: requests, tool calls and latencies
/// (sharded per thread), refusals, upstream errors, SSE messages dropped, deprecated
/// calls.
pub struct Metrics {
    registry: Registry,
    per_request: Arc<Shards>,
    refusals: Family<ReasonLabels, Counter>,
    upstream_errors: Family<UpstreamErrorLabels, Counter>,
    pub sse_dropped: Counter,
    deprecated_calls: Family<DeprecatedLabels, Counter>,
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
        let per_request = Arc::new(Shards::new());
        registry.register_collector(Box::new(PerRequest(per_request.clone())));
        let refusals = Family::default();
        registry.register(
            "refusals",
            "Requests mcpgate answered itself with an error, by reason",
            refusals.clone(),
        );
        let upstream_errors = Family::default();
        registry.register(
            "upstream_errors",
            "Upstream failures by upstream and kind",
            upstream_errors.clone(),
        );
        let sse_dropped = Counter::default();
        registry.register(
            "sse_dropped_messages",
            "Messages dropped converting an SSE answer to JSON",
            sse_dropped.clone(),
        );
        let deprecated_calls = Family::default();
        registry.register(
            "deprecated_calls",
            "Calls of deprecated tools before their sunset, by tool and caller (token id or OAuth client)",
            deprecated_calls.clone(),
        );
        Metrics {
            registry,
            per_request,
            refusals,
            upstream_errors,
            sse_dropped,
            deprecated_calls,
            tool_names: Mutex::new(HashSet::new()),
            caller_names: Mutex::new(HashSet::new()),
        }
    }

    /// Where the other components register their families, while the gateway is built.
    pub fn registry(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Counts a request mcpgate refused itself, by reason.
    pub fn count_refusal(&self, reason: &'static str) {
        self.refusals.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Counts an upstream failure of `upstream`, by kind.
    pub fn count_upstream_error(&self, upstream: Label, kind: &'static str) {
        self.upstream_errors
            .get_or_create(&UpstreamErrorLabels { upstream, kind })
            .inc();
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

#[cfg(test)]
mod tests;
