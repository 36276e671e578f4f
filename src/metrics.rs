//! Prometheus metrics (SPEC §8), served by the admin listener at `/metrics`. Labels carry
//! route templates, profile, upstream and token-free names only; a tool name from a client
//! becomes a label only while fewer than `MAX_TOOL_LABELS` distinct names were seen, so a
//! client sending random names cannot blow up the series count.

use prometheus_client::encoding::{
    EncodeLabelSet, EncodeLabelValue, LabelValueEncoder, text::encode,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
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
pub struct ResultLabels {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpstreamErrorLabels {
    pub upstream: Label,
    pub kind: &'static str,
}

fn latency_histogram() -> Histogram {
    // 1 ms … ~16 s, doubling.
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.001, 2.0, 15,
    ))
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub tool_calls: Family<ToolLabels, Counter>,
    pub request_seconds: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pub upstream_seconds: Family<UpstreamLabels, Histogram, fn() -> Histogram>,
    pub refusals: Family<ReasonLabels, Counter>,
    pub open_streams: Gauge,
    pub reloads: Family<ResultLabels, Counter>,
    pub last_reload_success: Gauge,
    pub upstream_errors: Family<UpstreamErrorLabels, Counter>,
    pub sse_dropped: Counter,
    pub audit_dropped: Counter,
    tool_names: Mutex<HashSet<Arc<str>>>,
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
            requests: Family::default(),
            tool_calls: Family::default(),
            request_seconds: Family::new_with_constructor(latency_histogram),
            upstream_seconds: Family::new_with_constructor(latency_histogram),
            refusals: Family::default(),
            open_streams: Gauge::default(),
            reloads: Family::default(),
            last_reload_success: Gauge::default(),
            upstream_errors: Family::default(),
            sse_dropped: Counter::default(),
            audit_dropped: Counter::default(),
            tool_names: Mutex::new(HashSet::new()),
            registry: Registry::default(),
        };
        registry.register(
            "requests",
            "HTTP requests answered, by route, profile, JSON-RPC method and status",
            m.requests.clone(),
        );
        registry.register(
            "tool_calls",
            "tools/call requests by profile, tool and outcome",
            m.tool_calls.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request to the answer's head (streams go on after it)",
            m.request_seconds.clone(),
        );
        registry.register(
            "upstream_duration_seconds",
            "Time the upstream took to send its answer's head",
            m.upstream_seconds.clone(),
        );
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
        m.last_reload_success.set(1);
        Metrics { registry, ..m }
    }

    /// The tool label for `name`: the name itself while the set of seen names is small.
    pub fn tool_label(&self, name: &str) -> Label {
        let mut seen = self.tool_names.lock().expect("metrics lock");
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

    pub fn observe_upstream(&self, upstream: &Arc<str>, took: Duration) {
        self.upstream_seconds
            .get_or_create(&UpstreamLabels {
                upstream: Label(upstream.clone()),
            })
            .observe(took.as_secs_f64());
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
