//! The shared counters of `[limits.store]` (docs/scaling.md): every rate rule of a request is
//! counted in Redis by one Lua script (GCRA, one round trip for all the request's keys),
//! so replicas draw from the same cells and the retry hint is exact.
//!
//! Each worker thread has a lane of its own (as it has its own upstream pools): one
//! multiplexed connection, made and driven on that worker, and a batching task. Requests
//! hand their keys to their worker's batching task: what queued while the connection was
//! busy goes in the next script call, each request judged in arrival order with every key
//! of its own (all or none), so Redis parses one command and runs the script once for
//! many requests, and mcpgate writes and reads once for them. Nothing waits to fill a
//! batch: before a call the task only lets the thread finish what it has at hand (a
//! yield, no timer), so a lone request goes at once. No request wakes another thread.
//!
//! A lane starts with the first request on its worker, which waits for that first
//! connection (within its timeout). The control thread's lane starts with the store: it
//! is the one `mcpgate_limit_store_up` follows, and it pings every few seconds. A request
//! never connects and never waits longer than the configured timeout. A connection that
//! fails or times out is dropped at once and made anew in the background; until it is
//! back, the lane's requests go straight to `on_error` (the caller's choice) without
//! waiting. Failures are counted, and warned about at most once a minute.

use crate::config::compile::StoreSettings;
use crate::runtime::workers;
use arc_swap::ArcSwapOption;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, IntoConnectionInfo, RedisError};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, mpsc, oneshot};

mod connection;
mod script;

pub(crate) use connection::client;
use connection::*;
use script::*;

/// At most this many requests in one script call.
const MOST_PER_BATCH: usize = 128;
/// At most this many yields to the thread's other tasks before a call.
const MOST_YIELDS: usize = 4;

/// How long making a connection (and loading the script on it) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// First and longest wait between failed connection attempts.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MOST: Duration = Duration::from_secs(5);
/// How often idle connections are pinged, so a dead one is found before a request needs it.
const PING_EVERY: Duration = Duration::from_secs(5);
/// At most one warning per this long.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The store's series.
#[derive(Clone)]
pub struct StoreMetrics {
    /// 1 while the control thread's connection to Redis is up.
    pub up: Gauge,
    pub timeouts: Counter,
    pub errors: Counter,
    /// Requests that found no connection up.
    pub unavailable: Counter,
    /// Round trips that answered, in seconds.
    pub latency: Histogram,
}

/// The reason label of `mcpgate_limit_store_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

impl StoreMetrics {
    pub fn register(registry: &mut prometheus_client::registry::Registry) -> StoreMetrics {
        let up = Gauge::default();
        registry.register(
            "limit_store_up",
            "1 while a connection to the rate-limit store ([limits.store]) is up",
            up.clone(),
        );
        let errors = prometheus_client::metrics::family::Family::<ReasonLabels, Counter>::default();
        registry.register(
            "limit_store_errors",
            "Requests whose rate rules the store did not answer (they took on_error), by reason",
            errors.clone(),
        );
        // 100 µs to about 0.8 s, doubling.
        let latency = Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
            0.0001, 2.0, 14,
        ));
        registry.register(
            "limit_store_duration_seconds",
            "Round trips to the rate-limit store that answered",
            latency.clone(),
        );
        // One handle per statement: a family's read guard lives as long as the expression
        // that took it, and a second `get_or_create` inside it would wait forever.
        let timeouts = errors
            .get_or_create(&ReasonLabels { reason: "timeout" })
            .clone();
        let failed = errors
            .get_or_create(&ReasonLabels { reason: "error" })
            .clone();
        let unavailable = errors
            .get_or_create(&ReasonLabels {
                reason: "unavailable",
            })
            .clone();
        StoreMetrics {
            up,
            timeouts,
            errors: failed,
            unavailable,
            latency,
        }
    }
}

/// One key of a request: a rule's key and the cells it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cells {
    pub key: String,
    pub interval_us: u64,
    pub burst: u32,
    pub count: u32,
}

/// A request's keys on their way to its lane's batching task, and where its answer goes.
struct Pending {
    cells: Keys,
    /// When the request asked: its answer is due a timeout after.
    since: tokio::time::Instant,
    answer: oneshot::Sender<Result<u64, Failure>>,
}

/// A request's keys (rarely more than four rules).
pub type Keys = smallvec::SmallVec<[Cells; 4]>;

/// Why the store gave no answer; the request takes `on_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The lane had no connection: nothing was asked.
    Unavailable,
    Timeout,
    Error,
}

impl Failure {
    fn name(self) -> &'static str {
        match self {
            Failure::Unavailable => "unavailable",
            Failure::Timeout => "timeout",
            Failure::Error => "error",
        }
    }
}

struct Connection {
    /// Numbers connections, so a failure drops the one it happened on and not its successor.
    id: u64,
    redis: MultiplexedConnection,
}

/// One thread's connection and batching task.
#[derive(Default)]
struct Lane {
    connection: ArcSwapOption<Connection>,
    /// To the lane's batching task, once it runs (on this lane's thread).
    queue: OnceLock<mpsc::UnboundedSender<Pending>>,
    /// Set once the lane's first connection attempt is over, whatever its outcome.
    tried: AtomicBool,
    /// Told when `tried` is set, and when the connection should be made anew.
    tried_once: Notify,
    broken: Arc<Notify>,
}

pub struct RateStore {
    pub settings: Arc<StoreSettings>,
    /// By `workers::slot()`: the control thread's, then each worker's.
    lanes: Box<[Lane]>,
    /// `None` when the address cannot be used (logged once; every request fails over).
    client: Option<redis::Client>,
    script: redis::Script,
    metrics: StoreMetrics,
    started: Instant,
    /// Numbers connections across lanes.
    next_id: AtomicU64,
    /// When the last warning went out (ms since `started`, +1; 0: never).
    warned_at: AtomicU64,
    /// Failures since that warning.
    failures: AtomicU64,
    /// What Redis or the connection said last when it failed, for the warning.
    last_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for RateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RateStore {
    /// A store for `settings`. Inside a runtime the control lane connects at once and
    /// keeps its connection for as long as the store lives; the workers' lanes start with
    /// their first request. A store that cannot connect still answers every request (with
    /// a [`Failure`]).
    pub fn start(settings: Arc<StoreSettings>, metrics: StoreMetrics) -> Arc<RateStore> {
        let client = match client(&settings) {
            Ok(c) => Some(c),
            Err(error) => {
                tracing::error!(store = %settings.url, %error, "the rate-limit store's address cannot be used; rate rules follow on_error");
                None
            }
        };
        let store = Arc::new(RateStore {
            lanes: (0..=workers::count()).map(|_| Lane::default()).collect(),
            client,
            settings,
            script: redis::Script::new(GCRA),
            metrics,
            started: Instant::now(),
            next_id: AtomicU64::new(0),
            warned_at: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_error: Mutex::new(None),
        });
        store.metrics.up.set(0);
        if tokio::runtime::Handle::try_current().is_ok() {
            store.lane_queue(0);
        }
        store
    }

    /// Takes every key's cells, or none: `Ok(None)` when the request passes,
    /// `Ok(Some(wait))` when it would pass after `wait`. Never waits longer than the
    /// store's timeout; on failure the request is the caller's to decide (`on_error`,
    /// named in the warning).
    ///
    /// The request holds no timer of its own: its lane answers it by its deadline (see
    /// [`send_batches`]).
    pub async fn take(
        self: &Arc<Self>,
        cells: Keys,
        on_error: &str,
    ) -> Result<Option<Duration>, Failure> {
        let at = workers::slot() % self.lanes.len();
        let Some(own) = self.lane_queue(at) else {
            return Err(self.failed(Failure::Unavailable, on_error));
        };
        let lane = &self.lanes[at];
        let since = tokio::time::Instant::now();
        let deadline = since + self.settings.timeout;
        if lane.connection.load().is_none() && !lane.tried.load(Ordering::Acquire) {
            // A lane's first requests wait for its first connection.
            let first = async {
                loop {
                    // Registered before the check, so a notice between the two is not lost.
                    let told = lane.tried_once.notified();
                    tokio::pin!(told);
                    told.as_mut().enable();
                    if lane.tried.load(Ordering::Acquire) {
                        break;
                    }
                    told.await;
                }
            };
            let _ = tokio::time::timeout_at(deadline, first).await;
        }
        // A worker whose connection is being made anew borrows the control thread's (a
        // hop between threads, for the few moments until its own is back).
        let queue = if lane.connection.load().is_some() {
            own
        } else if at != 0
            && self.lanes[0].connection.load().is_some()
            && let Some(q) = self.lanes[0].queue.get()
        {
            q
        } else {
            return Err(self.failed(Failure::Unavailable, on_error));
        };
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            cells,
            since,
            answer,
        };
        if queue.send(pending).is_err() {
            return Err(self.failed(Failure::Unavailable, on_error));
        }
        match answered.await {
            Ok(Ok(wait)) => Ok((wait > 0).then(|| Duration::from_micros(wait))),
            Ok(Err(why)) => Err(self.failed(why, on_error)),
            // The lane's task is gone (its worker is stopping).
            Err(_) => Err(self.failed(Failure::Unavailable, on_error)),
        }
    }

    /// The queue of lane `at`, starting its tasks on this thread's runtime the first time.
    /// `None` outside a runtime, or when the address cannot be used.
    fn lane_queue(self: &Arc<Self>, at: usize) -> Option<&mpsc::UnboundedSender<Pending>> {
        if let Some(q) = self.lanes[at].queue.get() {
            return Some(q);
        }
        let client = self.client.clone()?;
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let mut started = None;
        let queue = self.lanes[at].queue.get_or_init(|| {
            let (queue, pending) = mpsc::unbounded_channel();
            started = Some(pending);
            queue
        });
        if let Some(pending) = started {
            let broken = self.lanes[at].broken.clone();
            rt.spawn(keep_connected(Arc::downgrade(self), at, client, broken));
            rt.spawn(send_batches(Arc::downgrade(self), at, pending));
        }
        Some(queue)
    }

    fn drop_connection(&self, at: usize, id: u64) {
        let lane = &self.lanes[at];
        let current = lane.connection.load();
        if current.as_ref().is_some_and(|c| c.id == id) {
            drop(current);
            lane.connection.store(None);
            if at == 0 {
                self.metrics.up.set(0);
            }
            lane.broken.notify_one();
        }
    }

    /// Counts a failure and warns, at most once a minute, with how many there were.
    fn failed(&self, why: Failure, on_error: &str) -> Failure {
        match why {
            Failure::Unavailable => self.metrics.unavailable.inc(),
            Failure::Timeout => self.metrics.timeouts.inc(),
            Failure::Error => self.metrics.errors.inc(),
        };
        self.failures.fetch_add(1, Ordering::Relaxed);
        if self.may_warn() {
            let failures = self.failures.swap(0, Ordering::Relaxed);
            tracing::warn!(
                store = %self.settings.url,
                reason = why.name(),
                error = self.last_error.lock().unwrap_or_else(|p| p.into_inner()).as_deref(),
                failures,
                on_error,
                "the rate-limit store did not answer; rate rules follow on_error until it does (warned at most once a minute)"
            );
        }
        why
    }

    /// True at most once per [`WARN_EVERY`].
    fn may_warn(&self) -> bool {
        let now = self.started.elapsed().as_millis() as u64 + 1;
        let last = self.warned_at.load(Ordering::Relaxed);
        if last != 0 && now - last < WARN_EVERY.as_millis() as u64 {
            return false;
        }
        self.warned_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    fn note_error(&self, error: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
    }

    /// One script call for `batch` on lane `at`: each request's answer, in order, by the
    /// deadline of the batch's first request, kept by the lane's `timer`.
    async fn call(
        &self,
        at: usize,
        batch: &[Pending],
        mut timer: Pin<&mut tokio::time::Sleep>,
    ) -> Vec<Result<u64, Failure>> {
        let all = |why| vec![Err(why); batch.len()];
        let Some(conn) = self.lanes[at].connection.load_full() else {
            return all(Failure::Unavailable);
        };
        let cmd = script_call(self.script.get_hash(), batch.iter().map(|p| &p.cells[..]));
        let mut redis = conn.redis.clone();
        let started = Instant::now();
        let script = &self.script;
        let answer = async {
            match cmd.query_async::<redis::Value>(&mut redis).await {
                // Redis restarted (or flushed its scripts) since this connection loaded it.
                Err(e)
                    if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    script.prepare_invoke().load_async(&mut redis).await?;
                    cmd.query_async::<redis::Value>(&mut redis).await
                }
                other => other,
            }
        };
        timer.as_mut().reset(batch[0].since + self.settings.timeout);
        let answer = tokio::select! {
            biased;
            answer = answer => Ok(answer),
            () = timer => Err(()),
        };
        match answer {
            Ok(Ok(reply)) => match waits(&reply, batch.len()) {
                Some(waits) => {
                    self.metrics
                        .latency
                        .observe(started.elapsed().as_secs_f64());
                    waits.into_iter().map(Ok).collect()
                }
                None => {
                    self.note_error(format!(
                        "the script's reply does not fit {} requests",
                        batch.len()
                    ));
                    all(Failure::Error)
                }
            },
            Ok(Err(e)) => {
                self.note_error(e.to_string());
                self.drop_connection(at, conn.id);
                all(Failure::Error)
            }
            Err(_) => {
                // A Redis that stopped answering would hold every request for the whole
                // timeout: the connection goes, and requests skip it until a new one is up.
                self.drop_connection(at, conn.id);
                all(Failure::Timeout)
            }
        }
    }
}

#[cfg(test)]
mod tests;
