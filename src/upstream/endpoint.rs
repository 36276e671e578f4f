//! One endpoint of an upstream as the gateway runs it: its per-worker pools, the order of
//! its sessions' requests, whether it takes requests (active health, passive ejection),
//! and its metrics. Kept across reloads that keep its settings (`registry`).
//!
//! - An endpoint takes new requests while it is healthy (the last `unhealthy_after` pings
//!   did not all fail, see `health`) and not ejected.
//! - `consecutive_failures` failures in a row (a connect error, a broken answer, a 5xx,
//!   a deadline passed) eject it for `eject_for`. Then it is back on probation: the next
//!   failure ejects it again, a success clears the count.
//! - The state is atomics read on every request and written only when it changes; the
//!   clock is read only while an ejection runs.

use super::order::Order;
use super::pool::Pool;
use super::session::{EndpointId, endpoint_id};
use crate::config::tls::UpstreamTls;
use crate::config::{Address, Endpoint, HealthCheck, Outlier};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The families of every endpoint's series, by upstream and endpoint, and of the stdio
/// upstreams' processes, by upstream.
#[derive(Clone, Default)]
pub struct EndpointFamilies {
    healthy: Family<EndpointLabels, Gauge>,
    ejections: Family<EndpointLabels, Counter>,
    requests: Family<EndpointLabels, Counter>,
    open_sessions: Family<EndpointLabels, Gauge>,
    processes: Family<UpstreamLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    upstream: String,
    /// The endpoint's url as configured.
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    upstream: String,
}

impl EndpointFamilies {
    pub fn register(registry: &mut Registry) -> EndpointFamilies {
        let f = EndpointFamilies::default();
        registry.register(
            "endpoint_healthy",
            "1 while an upstream endpoint takes requests (healthy and not ejected)",
            f.healthy.clone(),
        );
        registry.register(
            "endpoint_ejections",
            "Times an endpoint was ejected for failing too often in a row",
            f.ejections.clone(),
        );
        registry.register(
            "endpoint_requests",
            "Requests sent to an endpoint (each try counts)",
            f.requests.clone(),
        );
        registry.register(
            "endpoint_open_sessions",
            "Sessions this process sealed for an endpoint and has not seen end",
            f.open_sessions.clone(),
        );
        registry.register(
            "stdio_processes",
            "Processes a stdio upstream runs now",
            f.processes.clone(),
        );
        f
    }

    /// The series of one endpoint, made or found.
    pub fn series(&self, upstream: &str, endpoint: &str) -> EndpointMetrics {
        let labels = EndpointLabels {
            upstream: upstream.into(),
            endpoint: endpoint.into(),
        };
        EndpointMetrics {
            healthy: self.healthy.get_or_create(&labels).clone(),
            ejections: self.ejections.get_or_create(&labels).clone(),
            requests: self.requests.get_or_create(&labels).clone(),
            open_sessions: self.open_sessions.get_or_create(&labels).clone(),
        }
    }

    /// Removes the series of an endpoint that left the configuration.
    pub fn forget(&self, upstream: &str, endpoint: &str) {
        let labels = EndpointLabels {
            upstream: upstream.into(),
            endpoint: endpoint.into(),
        };
        self.healthy.remove(&labels);
        self.ejections.remove(&labels);
        self.requests.remove(&labels);
        self.open_sessions.remove(&labels);
    }

    /// The count of a stdio upstream's running processes.
    pub fn processes(&self, upstream: &str) -> Gauge {
        let labels = UpstreamLabels {
            upstream: upstream.into(),
        };
        self.processes.get_or_create(&labels).clone()
    }
}

/// The series one endpoint counts into ([`EndpointFamilies::series`]).
#[derive(Clone, Default)]
pub struct EndpointMetrics {
    /// 1 while it takes requests.
    pub healthy: Gauge,
    pub ejections: Counter,
    pub requests: Counter,
    /// Sessions this process sealed for it and has not seen end.
    pub open_sessions: Gauge,
}

pub struct EndpointState {
    pub label: Arc<str>,
    pub id: EndpointId,
    address: Address,
    tls: Option<Arc<UpstreamTls>>,
    connect_timeout: Duration,
    pools: Box<[OnceLock<Arc<Pool>>]>,
    pub order: Order,
    /// Active health: false once `unhealthy_after` pings in a row failed.
    healthy: AtomicBool,
    /// Passive: failures in a row.
    failures: AtomicU32,
    /// Milliseconds since [`epoch`] until which it is ejected; 0 when it is not.
    ejected_until: AtomicU64,
    pub metrics: EndpointMetrics,
    /// The running health check, if one is configured (`health` starts it).
    pub(super) checker: Mutex<Option<Checker>>,
    /// Which generation of MCP it answered in: 0 not known yet, 1 legacy, 2 modern, 3
    /// modern and it refused a legacy `initialize` (so its legacy clients are bridged).
    era: std::sync::atomic::AtomicU8,
    /// Whether the second half of its era probe (a legacy `initialize`) was sent.
    legacy_probed: AtomicBool,
    /// The sessions mcpgate holds here for 2026-07-28 clients of a legacy server.
    pub bridged: super::bridged::Sessions,
}

impl EndpointState {
    /// Which generation of MCP the endpoint speaks, once it has answered a probe.
    pub fn era(&self) -> Option<crate::config::generation::Era> {
        match self.era.load(Ordering::Relaxed) {
            1 => Some(crate::config::generation::Era::Legacy),
            2 | 3 => Some(crate::config::generation::Era::Modern),
            _ => None,
        }
    }

    /// Whether it refused a legacy `initialize` for its revision: a server of 2026-07-28
    /// only, to which legacy clients are bridged (docs/protocol.md).
    pub fn modern_only(&self) -> bool {
        self.era.load(Ordering::Relaxed) == 3
    }

    pub fn set_era(&self, era: crate::config::generation::Era) {
        let v = match era {
            crate::config::generation::Era::Legacy => 1,
            // What a probe shows does not undo a refusal seen.
            crate::config::generation::Era::Modern if self.modern_only() => 3,
            crate::config::generation::Era::Modern => 2,
        };
        self.era.store(v, Ordering::Relaxed);
    }

    /// `true` the first time only: who gets it sends the endpoint's legacy probe.
    pub fn claim_legacy_probe(&self) -> bool {
        !self.legacy_probed.swap(true, Ordering::Relaxed)
    }

    /// Notes that it refused a legacy `initialize` as a 2026-07-28 server does.
    pub fn set_modern_only(&self) {
        self.era.store(3, Ordering::Relaxed);
    }

    pub(super) fn new(
        endpoint: &Endpoint,
        connect_timeout: Duration,
        metrics: EndpointMetrics,
    ) -> EndpointState {
        metrics.healthy.set(1);
        EndpointState {
            label: endpoint.label.clone(),
            id: endpoint_id(&endpoint.label),
            address: endpoint.address.clone(),
            tls: endpoint.tls.clone(),
            connect_timeout,
            pools: (0..=crate::runtime::workers::count())
                .map(|_| OnceLock::new())
                .collect(),
            order: Order::default(),
            healthy: AtomicBool::new(true),
            era: std::sync::atomic::AtomicU8::new(0),
            legacy_probed: AtomicBool::new(false),
            bridged: Default::default(),
            failures: AtomicU32::new(0),
            ejected_until: AtomicU64::new(0),
            metrics,
            checker: Mutex::new(None),
        }
    }

    /// This thread's pool.
    pub fn here(&self) -> &Arc<Pool> {
        let slot = crate::runtime::workers::slot() % self.pools.len();
        self.pools[slot].get_or_init(|| self.new_pool())
    }

    /// A pool of its own (the health check's, the tool-hints fetch's).
    pub fn new_pool(&self) -> Arc<Pool> {
        Pool::new(self.address.clone(), self.tls.clone(), self.connect_timeout)
    }

    /// Whether it takes requests now. An ejection that has run its time ends here, with
    /// one failure short of the next.
    pub fn available(&self, outlier: Option<&Outlier>) -> bool {
        if !self.healthy.load(Ordering::Relaxed) {
            return false;
        }
        let until = self.ejected_until.load(Ordering::Relaxed);
        if until == 0 {
            return true;
        }
        if now_ms() < until {
            return false;
        }
        if self
            .ejected_until
            .compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            let probation = outlier.map_or(0, |o| o.consecutive_failures.saturating_sub(1));
            self.failures.store(probation, Ordering::Relaxed);
            self.publish_health();
            tracing::info!(endpoint = %self.label, "ejection over; the endpoint takes requests again");
        }
        true
    }

    /// An answer came (with a status below 500).
    pub fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// A request failed in a way that counts against the endpoint; with `outlier` set,
    /// enough of them in a row eject it.
    pub fn failed(&self, outlier: Option<&Outlier>) {
        let Some(o) = outlier else { return };
        let n = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        if n < o.consecutive_failures {
            return;
        }
        let until = now_ms() + o.eject_for.as_millis() as u64;
        if self
            .ejected_until
            .compare_exchange(0, until, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.metrics.ejections.inc();
            self.publish_health();
            tracing::warn!(
                endpoint = %self.label,
                failures = n,
                eject_for = %humantime::format_duration(o.eject_for),
                "endpoint ejected: it failed too often in a row"
            );
        }
    }

    /// The active check's verdict.
    pub(super) fn set_healthy(&self, healthy: bool) {
        if self.healthy.swap(healthy, Ordering::Relaxed) != healthy {
            self.publish_health();
            if healthy {
                tracing::info!(endpoint = %self.label, "endpoint healthy: it answers pings again");
            } else {
                tracing::warn!(endpoint = %self.label, "endpoint unhealthy: pings failed");
            }
        }
    }

    /// Sets the gauge from the state.
    /// What the status page says of it: `up`, `down` (its health check fails) or
    /// `ejected` (failing requests took it out for a while).
    pub fn health(&self) -> &'static str {
        if !self.healthy.load(Ordering::Relaxed) {
            "down"
        } else if self.ejected_until.load(Ordering::Relaxed) > now_ms() {
            "ejected"
        } else {
            "up"
        }
    }

    /// Sets the `healthy` gauge from the state: 1 while the endpoint takes requests.
    fn publish_health(&self) {
        let in_ =
            self.healthy.load(Ordering::Relaxed) && self.ejected_until.load(Ordering::Relaxed) == 0;
        self.metrics.healthy.set(i64::from(in_));
    }
}

/// A running health check and what it was started with.
pub struct Checker {
    pub settings: HealthCheck,
    /// The ping, as sent.
    pub request: Arc<[u8]>,
    /// Whether its answers set the endpoint's era (`protocol = "auto"`).
    pub learns_era: bool,
    /// Its upstream's settings: with `identity`, each check is signed.
    pub upstream: Arc<crate::config::Upstream>,
    pub task: tokio::task::AbortHandle,
}

impl EndpointState {
    /// Stops its health check, if one runs.
    pub(super) fn stop_checking(&self) {
        let running = self
            .checker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(c) = running {
            c.task.abort();
        }
    }
}

impl Drop for EndpointState {
    fn drop(&mut self) {
        self.stop_checking();
    }
}

/// Milliseconds since the first call (never 0 after it: ejection times are above 0).
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| Instant::now() - Duration::from_millis(1));
    epoch.elapsed().as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> EndpointState {
        let e = Endpoint {
            address: Address::Tcp {
                host: "127.0.0.1".into(),
                port: 9,
            },
            tls: None,
            url: "http://127.0.0.1:9/mcp".parse().unwrap(),
            host: http::HeaderValue::from_static("127.0.0.1:9"),
            label: "http://127.0.0.1:9/mcp".into(),
        };
        EndpointState::new(&e, Duration::from_secs(1), EndpointMetrics::default())
    }

    /// Failures in a row eject; a success between them starts the count again; after
    /// the ejection one failure is enough to eject again.
    #[test]
    fn failures_in_a_row_eject_for_a_while() {
        let e = endpoint();
        let o = Outlier {
            consecutive_failures: 3,
            eject_for: Duration::from_millis(200),
        };
        e.failed(Some(&o));
        e.failed(Some(&o));
        e.succeeded();
        e.failed(Some(&o));
        e.failed(Some(&o));
        assert!(e.available(Some(&o)));
        e.failed(Some(&o));
        assert!(!e.available(Some(&o)));
        assert_eq!(e.metrics.ejections.get(), 1);
        assert_eq!(e.metrics.healthy.get(), 0);
        std::thread::sleep(Duration::from_millis(250));
        assert!(e.available(Some(&o)));
        assert_eq!(e.metrics.healthy.get(), 1);
        e.failed(Some(&o));
        assert!(!e.available(Some(&o)), "on probation, one failure ejects");
        assert_eq!(e.metrics.ejections.get(), 2);
        // Without outlier settings (one endpoint), nothing ejects.
        let single = endpoint();
        for _ in 0..10 {
            single.failed(None);
        }
        assert!(single.available(None));
        // The active check's verdict is the other half.
        single.set_healthy(false);
        assert!(!single.available(None));
        assert_eq!(single.metrics.healthy.get(), 0);
    }
}
