//! The status page's rows: requests of one profile and method (and tool) with their
//! refusals and a latency histogram finer than Prometheus's, and the latest tools/call
//! decisions. Counted in the same per-thread shards as the request series.

use super::Label;
use std::sync::Arc;

/// A row of the status page: requests of one profile and method (and tool, for
/// tools/call). Not a Prometheus series: the page's own, with finer latency buckets.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct RowLabels {
    pub profile: Label,
    pub method: &'static str,
    /// The tool of a tools/call (bounded as tool labels are), else empty.
    pub tool: Label,
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
    pub(super) fn add(&mut self, other: &Row) {
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

    pub(super) fn refuse(&mut self, reason: &'static str, n: u64) {
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
    /// The client's address (behind a trusted proxy, the one it names).
    pub client: std::net::IpAddr,
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
