//! The shared counters of `[limits.store]` (SPEC §13): every rate rule of a request is
//! counted in Redis by one Lua script (GCRA, one round trip for all the request's keys),
//! so replicas draw from the same cells and the retry hint is exact.
//!
//! Connections are multiplexed (requests pipelined on each) and kept by a task of their
//! own: a request never connects and never waits longer than the configured timeout. A
//! connection that fails or times out is dropped at once and made anew in the background;
//! until one is back, requests go straight to `on_error` (the caller's choice) without
//! waiting. Failures are counted, and warned about at most once a minute.

use crate::config::compile::StoreSettings;
use arc_swap::ArcSwapOption;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, IntoConnectionInfo, RedisError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// GCRA over every key of one request. `KEYS[i]` holds a rule key's theoretical arrival
/// time (µs of the Redis clock); `ARGV` has, per key, the emission interval (µs), the
/// burst and the cells to take. Either every key takes its cells or none does. The answer
/// is 0, or how many µs until the request would pass. A key expires when its cells are
/// all back, so idle keys cost Redis nothing. Times are written with `%d`: Lua's default
/// number format keeps 14 digits, and µs since 1970 have 16.
const GCRA: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local wait = 0
local tats = {}
for i = 1, #KEYS do
  local interval = tonumber(ARGV[3 * i - 2])
  local burst = tonumber(ARGV[3 * i - 1])
  local cells = tonumber(ARGV[3 * i])
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local next_tat = tat + interval * cells
  local over = next_tat - interval * burst - now
  if over > wait then wait = over end
  tats[i] = next_tat
end
if wait > 0 then return wait end
for i = 1, #KEYS do
  local ttl = math.ceil((tats[i] - now) / 1000)
  redis.call('SET', KEYS[i], string.format('%d', tats[i]), 'PX', ttl)
end
return 0
";

/// How long making a connection (and loading the script on it) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// First and longest wait between failed connection attempts.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MOST: Duration = Duration::from_secs(5);
/// How often idle connections are pinged, so a dead one is found before a request needs it.
const PING_EVERY: Duration = Duration::from_secs(5);
/// At most one warning per this long.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The store's series, taken by the gateway from its metrics.
#[derive(Clone)]
pub struct StoreMetrics {
    /// 1 while at least one connection to Redis is up.
    pub up: Gauge,
    pub timeouts: Counter,
    pub errors: Counter,
    /// Requests that found no connection up.
    pub unavailable: Counter,
    /// Round trips that answered, in seconds.
    pub latency: Histogram,
}

/// One key of a request: a rule's key and the cells it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cells {
    pub key: String,
    pub interval_us: u64,
    pub burst: u32,
    pub count: u32,
}

/// Why the store gave no answer; the request takes `on_error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No connection was up: nothing was asked.
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

pub struct RateStore {
    pub settings: Arc<StoreSettings>,
    slots: Box<[ArcSwapOption<Connection>]>,
    /// Wakes the connection task when a slot empties.
    wake: Arc<Notify>,
    script: redis::Script,
    metrics: StoreMetrics,
    started: Instant,
    /// When the last warning went out (ms since `started`, +1; 0: never).
    warned_at: AtomicU64,
    /// Failures since that warning.
    failures: AtomicU64,
}

impl std::fmt::Debug for RateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RateStore {
    /// A store for `settings`. Inside a runtime its connections are made at once and then
    /// kept for as long as the store lives; a store that cannot connect yet still answers
    /// every request (with `Failure::Unavailable`).
    pub fn start(settings: Arc<StoreSettings>, metrics: StoreMetrics) -> Arc<RateStore> {
        let store = Arc::new(RateStore {
            slots: (0..settings.connections)
                .map(|_| ArcSwapOption::empty())
                .collect(),
            settings,
            wake: Arc::new(Notify::new()),
            script: redis::Script::new(GCRA),
            metrics,
            started: Instant::now(),
            warned_at: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        });
        store.metrics.up.set(0);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(keep_connected(Arc::downgrade(&store), store.wake.clone()));
        }
        store
    }

    /// Whether a connection is up now.
    pub fn is_up(&self) -> bool {
        self.slots.iter().any(|s| s.load().is_some())
    }

    /// Takes every key's cells, or none: `Ok(None)` when the request passes,
    /// `Ok(Some(wait))` when it would pass after `wait`. Never waits longer than `timeout`;
    /// on failure the request is the caller's to decide (`on_error`, named in the warning).
    pub async fn take(
        &self,
        cells: &[Cells],
        timeout: Duration,
        on_error: &str,
    ) -> Result<Option<Duration>, Failure> {
        let Some((slot, conn)) = self.connection() else {
            return Err(self.failed(Failure::Unavailable, None, on_error));
        };
        let mut call = self.script.prepare_invoke();
        for c in cells {
            call.key(c.key.as_str())
                .arg(c.interval_us)
                .arg(c.burst)
                .arg(c.count);
        }
        let mut redis = conn.redis.clone();
        let started = Instant::now();
        match tokio::time::timeout(timeout, call.invoke_async::<u64>(&mut redis)).await {
            Ok(Ok(wait)) => {
                self.metrics
                    .latency
                    .observe(started.elapsed().as_secs_f64());
                Ok((wait > 0).then(|| Duration::from_micros(wait)))
            }
            Ok(Err(e)) => {
                self.drop_connection(slot, conn.id);
                Err(self.failed(Failure::Error, Some(&e), on_error))
            }
            Err(_) => {
                // A Redis that stopped answering would hold every request for the whole
                // timeout: the connection goes, and requests skip it until a new one is up.
                self.drop_connection(slot, conn.id);
                Err(self.failed(Failure::Timeout, None, on_error))
            }
        }
    }

    /// An up connection, taking them in turn per thread.
    fn connection(&self) -> Option<(usize, Arc<Connection>)> {
        thread_local! {
            static TURN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
        }
        let n = self.slots.len();
        let first = TURN.with(|t| {
            let v = t.get().wrapping_add(1);
            t.set(v);
            v
        });
        (0..n).find_map(|i| {
            let slot = (first + i) % n;
            self.slots[slot].load_full().map(|c| (slot, c))
        })
    }

    fn drop_connection(&self, slot: usize, id: u64) {
        let current = self.slots[slot].load();
        if current.as_ref().is_some_and(|c| c.id == id) {
            drop(current);
            self.slots[slot].store(None);
            self.metrics.up.set(i64::from(self.is_up()));
            self.wake.notify_one();
        }
    }

    /// Counts a failure and warns, at most once a minute, with how many there were.
    fn failed(&self, why: Failure, error: Option<&RedisError>, on_error: &str) -> Failure {
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
                error = error.map(|e| e.to_string()),
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
}

/// Makes one connection and loads the script on it, so requests need one round trip.
async fn connect(
    client: &redis::Client,
    script: &redis::Script,
) -> Result<MultiplexedConnection, RedisError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(CONNECT_TIMEOUT));
    let mut redis = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    script.prepare_invoke().load_async(&mut redis).await?;
    Ok(redis)
}

fn client(settings: &StoreSettings) -> Result<redis::Client, RedisError> {
    let info = settings.url.as_str().into_connection_info()?;
    let mut redis = info.redis_settings().clone();
    if let Some(u) = &settings.username {
        redis = redis.set_username(u);
    }
    if let Some(p) = &settings.password {
        redis = redis.set_password(p);
    }
    redis::Client::open(info.set_redis_settings(redis))
}

/// Keeps every slot connected while the store lives: fills empty slots (waiting longer
/// after each failed attempt, up to [`RETRY_MOST`]), and pings the others every
/// [`PING_EVERY`].
async fn keep_connected(store: Weak<RateStore>, wake: Arc<Notify>) {
    let client = match store.upgrade().map(|s| client(&s.settings)) {
        Some(Ok(c)) => c,
        Some(Err(error)) => {
            tracing::error!(%error, "the rate-limit store's address cannot be used; rate rules follow on_error");
            return;
        }
        None => return,
    };
    let mut ids = 0u64;
    let mut retry = RETRY_FIRST;
    let mut was_up = false;
    loop {
        let Some(s) = store.upgrade() else { return };
        let mut missing = false;
        for slot in s.slots.iter() {
            if let Some(c) = slot.load_full() {
                let mut redis = c.redis.clone();
                let ping = redis::cmd("PING");
                let answer =
                    tokio::time::timeout(CONNECT_TIMEOUT, ping.query_async::<()>(&mut redis));
                if matches!(answer.await, Ok(Ok(()))) {
                    continue;
                }
                slot.store(None);
            }
            match tokio::time::timeout(CONNECT_TIMEOUT * 2, connect(&client, &s.script)).await {
                Ok(Ok(redis)) => {
                    ids += 1;
                    slot.store(Some(Arc::new(Connection { id: ids, redis })));
                }
                Ok(Err(error)) => {
                    missing = true;
                    if s.may_warn() {
                        tracing::warn!(store = %s.settings.url, %error, "cannot connect to the rate-limit store; retrying");
                    }
                    break;
                }
                Err(_) => {
                    missing = true;
                    if s.may_warn() {
                        tracing::warn!(store = %s.settings.url, "connecting to the rate-limit store timed out; retrying");
                    }
                    break;
                }
            }
        }
        let up = s.is_up();
        s.metrics.up.set(i64::from(up));
        if up != was_up {
            if up {
                tracing::info!(store = %s.settings.url, "rate-limit store connected; rate rules are shared");
            } else if s.may_warn() {
                tracing::warn!(store = %s.settings.url, "rate-limit store lost; rate rules follow on_error");
            }
            was_up = up;
        }
        drop(s);
        if missing {
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(RETRY_MOST);
            continue;
        }
        retry = RETRY_FIRST;
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(PING_EVERY) => {}
        }
    }
}
